"""``olmo.cpp``: the blocks norm their input without weights, so the scheduler runs that
norm where the block before ran."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Olmo(Family):
    architectures = ("olmo",)
    weighted_input_norm = False
