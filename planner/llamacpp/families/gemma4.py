"""``gemma4.cpp`` and ``hy-v3.cpp``: llama's blocks, but the output norm runs on every
token (its rows are a next-token head's input, ``h_nextn``) before the output rows are
kept (llama.cpp's default ``embeddings_nextn_masked = false``)."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Gemma4(Family):
    architectures = ("gemma4", "hy_v3")
    output_rows = "after_norm"
