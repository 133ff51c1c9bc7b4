"""``mamba2.cpp`` and ``granite-hybrid.cpp``: Mamba-2 mixers (``build_mamba2_layer``) on
their recurrent blocks (``ssm_in``, ``ssm_conv1d``), with the grouped norm where the file
has ``ssm_norm``; granitehybrid's other blocks are attention."""

from __future__ import annotations

from typing import ClassVar

from planner.llamacpp.graph import Family, ModelReader, RecurrentShape, register


@register
class Mamba2(Family):
    architectures: ClassVar[tuple[str, ...]] = ("mamba2", "granitehybrid")

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        w = r.widths[index]
        if "ssm_in" not in w or "ssm_conv1d" not in w:
            return None
        return RecurrentShape(r.ssm("inner_size"), r.ssm("state_size"),
                              r.ssm_groups(), r.ssm("time_step_rank"),
                              r.ssm("conv_kernel"), norm="ssm_norm" in w)
