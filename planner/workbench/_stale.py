"""A panel's note that what it shows is out of date: the reason, and a button that brings
it up to date.

Panels that compute on request (Availability, Size a fleet) show their last answer until
asked again; when the workbench's fleet or model changes under them they say so with this
note instead of showing a stale answer as current.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

import ipywidgets as widgets

from planner.workbench.editor import button


class OutOfDateNote(widgets.HBox):
    """Hidden until :meth:`show`; ``action`` is the button's label, ``on_update`` what it
    does (the panel's own compute)."""

    def __init__(self, css_class: str, action: str, on_update: Callable[[], None]) -> None:
        self.message = widgets.HTML()
        self.button = button(action, f"{css_class}-update", style="warning",
                             tooltip="compute again from what the page shows now")
        self.button.on_click(lambda _b: on_update())
        super().__init__([self.message, self.button],
                         layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        self.add_class(css_class)
        self.layout.display = "none"

    @property
    def value(self) -> str:
        """The note's text as HTML; empty while the panel is up to date."""
        return self.message.value

    def show(self, reason: str, since: str) -> None:
        """Say the panel is out of date: ``reason`` (what changed) ``since`` (what)."""
        self.message.value = (f"<div class='wb-warning-box'>Out of date: {escape(reason)} "
                              f"since {escape(since)}.</div>")
        self.layout.display = None

    def clear(self) -> None:
        self.message.value = ""
        self.layout.display = "none"
