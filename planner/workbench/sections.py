"""Titled sections made the first time they are opened: :class:`LazySections`.

A closed section costs the page nothing to draw, so a page with many charts (the
workbench's panels, the fencing notebook's steppers) makes only what a person opens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets

Maker = Callable[[], widgets.Widget]


class LazySections(widgets.Accordion):
    """An ``Accordion`` whose sections are made by their ``make()`` when first opened.

    ``guard`` wraps the handler that runs when a person opens a section (the workbench
    passes the one that shows errors as a message instead of a traceback).
    """

    # The widget's traits, typed for the checker (ipywidgets carries no types).
    children: tuple[Any, ...]
    titles: tuple[str, ...]

    def __init__(self, *, guard: Callable[[Callable[..., None]], Callable[..., None]]
                 | None = None) -> None:
        super().__init__(selected_index=None)
        self._makers: list[Maker] = []
        self._made: dict[int, widgets.Widget] = {}
        opened = self._opened if guard is None else guard(self._opened)
        self.observe(opened, names="selected_index")

    def add(self, title: str, make: Maker, *, css_class: str | None = None) -> int:
        """Add a closed section titled ``title``; its index."""
        self._makers.append(make)
        box = widgets.VBox()
        if css_class:
            box.add_class(css_class)
        self.children = (*self.children, box)
        self.titles = (*self.titles[:len(self._makers) - 1], title)
        return len(self._makers) - 1

    def open_section(self, index: int) -> widgets.Widget:
        """Open section ``index`` (making it the first time); its content."""
        self.selected_index = index
        return self.made(index)

    def section(self, index: int) -> widgets.Widget | None:
        """Section ``index``'s content, or ``None`` while it has not been made."""
        return self._made.get(index)

    def made(self, index: int) -> widgets.Widget:
        """Section ``index``'s content, made now if it was not yet."""
        if index not in self._made:
            content = self._makers[index]()
            self._made[index] = content
            self.children[index].children = (content,)
        return self._made[index]

    def _opened(self, change: Mapping[str, object]) -> None:
        index = change["new"]
        if isinstance(index, int):
            self.made(index)
