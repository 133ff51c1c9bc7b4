"""Explore the fence's quorum: :class:`QuorumExplorer`, sliders for planned stages and
accepts, and whether the coordinator may load."""

from __future__ import annotations

import ipywidgets as widgets

from planner.fence.claims import quorum_requirement
from planner.figures.fence import quorum_figure
from planner.workbench._fence_widgets import (
    STYLE,
    ChartHolder,
    verdict_html,
)
from planner.workbench.chart import Chart

# --- quorum -----------------------------------------------------------------------------------


class QuorumExplorer(ChartHolder, widgets.VBox):
    """Sliders for planned stages and accepts; says whether the coordinator may load."""

    def __init__(self, planned_stages: int = 3, accepts: int = 2, max_planned: int = 9) -> None:
        self.max_planned = max_planned
        self.planned = widgets.IntSlider(value=planned_stages, min=1, max=max_planned,
                                         description="planned stages",
                                         style={"description_width": "120px"},
                                         layout=widgets.Layout(width="460px"))
        self.accepts = widgets.IntSlider(value=min(accepts, planned_stages), min=0,
                                         max=planned_stages, description="accepts",
                                         style={"description_width": "120px"},
                                         layout=widgets.Layout(width="460px"))
        self.verdict = widgets.HTML()
        self.chart = Chart()
        super().__init__([widgets.HTML(STYLE), self.planned, self.accepts, self.verdict,
                          self.chart])
        self.add_class("fx-root")
        self.planned.observe(lambda _c: self._planned_changed(), names="value")
        self.accepts.observe(lambda _c: self.refresh(), names="value")
        self.refresh()

    @property
    def quorum(self) -> int:
        return quorum_requirement(self.planned.value)

    @property
    def reached(self) -> bool:
        return self.accepts.value >= self.quorum

    def _planned_changed(self) -> None:
        # Lowering the maximum clamps the value, which refreshes by itself.
        clamps = self.accepts.value > self.planned.value
        self.accepts.max = self.planned.value
        if not clamps:
            self.refresh()

    def refresh(self) -> None:
        planned, accepts = self.planned.value, self.accepts.value
        headline = (f"{accepts} of {planned} planned stages accepted; quorum is "
                    f"{planned} // 2 + 1 = {self.quorum}: "
                    + ("the coordinator may load the split." if self.reached
                       else "the coordinator must not load the split."))
        note = (f"Any two sets of {self.quorum} stages out of {planned} share at least "
                f"{2 * self.quorum - planned} stage(s), so two coordinators cannot both "
                f"collect a quorum of the same planned stages with the same term.")
        self.verdict.value = verdict_html(self.reached, headline, [note])
        self.chart.show(quorum_figure(planned, accepts,
                                               max_planned=self.max_planned))

