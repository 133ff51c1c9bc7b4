"""``falcon.cpp`` and ``plamo.cpp``: the feed-forward network runs beside the attention
on the same normed input, before the attention's output projection, and the block adds
both to its input (the attention's first)."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Falcon(Family):
    architectures = ("falcon", "plamo")
    parallel = "ffn_first"
