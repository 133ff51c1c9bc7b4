"""``mamba.cpp`` and ``jamba.cpp``: Mamba-1 mixers (``build_mamba_layer``: ``ssm_in``,
``ssm_conv1d``, the time step, B and C from ``ssm_x``, RMS-normed where the file says so)
on their recurrent blocks; jamba's other blocks are attention."""

from __future__ import annotations

from planner.llamacpp.graph import Family, ModelReader, RecurrentShape, register


@register
class Mamba(Family):
    architectures = ("mamba", "jamba")

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        w = r.widths[index]
        if "ssm_in" not in w or "ssm_conv1d" not in w:
            return None
        norms = r.meta.flag("ssm.dt_b_c_rms") or all(
            f"ssm_{name}_norm" in w for name in ("dt", "b", "c"))
        return RecurrentShape(r.ssm("inner_size"), r.ssm("state_size"), 1,
                              r.ssm("time_step_rank"), r.ssm("conv_kernel"), norm=norms,
                              version=1)
