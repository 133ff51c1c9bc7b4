"""``cohere2.cpp`` and ``cohere2moe.cpp``: Command R's parallel blocks, whose
full-attention layers take no positions (only the sliding-window layers are roped;
cohere2moe ropes its leading dense layers too, and its output norm runs on every token
before the output rows are kept)."""

from __future__ import annotations

from planner.llamacpp.families.command_r import CommandR
from planner.llamacpp.graph import ModelReader, register


@register
class Cohere2(CommandR):
    architectures = ("cohere2",)

    def rope(self, r: ModelReader, index: int) -> bool:
        return r.layer(index).sliding


@register
class Cohere2Moe(Cohere2):
    architectures = ("cohere2moe",)
    output_rows = "after_norm"

    def rope(self, r: ModelReader, index: int) -> bool:
        return super().rope(r, index) or index < r.meta.count("leading_dense_block_count", 0)
