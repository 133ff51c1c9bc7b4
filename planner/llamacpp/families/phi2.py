"""``phi2.cpp``: the feed-forward network runs beside the attention on the same normed
input, after the attention's output projection."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Phi2(Family):
    architectures = ("phi2",)
    parallel = "ffn_after"
