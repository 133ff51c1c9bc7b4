"""A sweep progress bar for notebooks: pass it as ``sweep(..., progress=ProgressBar())``."""

from __future__ import annotations

import ipywidgets as widgets


class ProgressBar:
    """An ipywidgets bar and a "done of total" label, shown where it is created (or
    put ``.widget`` in a layout yourself)."""

    def __init__(self, description: str = "sweep", *, display_now: bool = True) -> None:
        self.bar = widgets.IntProgress(value=0, min=0, max=1, description=description)
        self.label = widgets.Label("")
        self.widget = widgets.HBox([self.bar, self.label])
        if display_now:
            from IPython.display import display

            display(self.widget)

    def __call__(self, done: int, total: int) -> None:
        self.bar.max = max(total, 1)
        self.bar.value = done
        self.label.value = f"{done:,} of {total:,} scenarios"
        self.bar.bar_style = "success" if done >= total else ""
