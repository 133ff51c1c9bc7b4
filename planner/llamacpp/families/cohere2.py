"""``cohere2.cpp`` and ``cohere2moe.cpp``: Command R's parallel blocks, whose
full-attention layers take no positions (only the sliding-window layers are roped;
cohere2moe ropes its leading dense layers too, and keeps the output rows after the
output norm)."""

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
    rows_after_output_norm = True

    def rope(self, r: ModelReader, index: int) -> bool:
        return super().rope(r, index) or index < r.meta.count("leading_dense_block_count", 0)
