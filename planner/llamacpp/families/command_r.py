"""``command-r.cpp``: the feed-forward network runs beside the attention on the same
normed input, and the block adds the residual to the network's output before the
attention's (``(ffn + inpL) + attn_out``): the last block keeps the residual's output
rows, then projects the attention's output."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class CommandR(Family):
    architectures = ("command-r",)
    parallel = "ffn_residual_first"
