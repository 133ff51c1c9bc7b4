"""``refact.cpp``: its builder runs ``build_ffn`` without weights where the file has no
``ffn_down``: the activation alone."""

from __future__ import annotations

from planner.llamacpp.graph import Family, FeedForwardShape, ModelReader, register


@register
class Refact(Family):
    architectures = ("refact",)

    def feed_forward(self, r: ModelReader, index: int) -> FeedForwardShape | None:
        if "ffn_down" not in r.widths[index]:
            return FeedForwardShape(0, gated=False)
        return super().feed_forward(r, index)
