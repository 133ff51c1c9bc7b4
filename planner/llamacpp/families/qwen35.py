"""``qwen35.cpp``, ``qwen35moe.cpp`` and ``qwen3next.cpp``: gated delta-net layers (a joint
Q, K, V projection on ``llm_build_delta_net_base``) between full-attention layers, with a
next-token-prediction head (the output rows are kept after the output norm)."""

from __future__ import annotations

from planner.llamacpp.graph import Family, ModelReader, RecurrentShape, register


def delta_net_shape(r: ModelReader, index: int) -> RecurrentShape | None:
    """A gated delta-net layer where the block has ``ssm_conv1d`` and its beta
    (``ssm_beta`` or the joint ``ssm_ba``): ``ssm.*`` widths, each at least one."""
    w = r.widths[index]
    if "ssm_conv1d" not in w or not ("ssm_beta" in w or "ssm_ba" in w):
        return None
    return RecurrentShape(r.ssm("inner_size"), r.ssm("state_size"),
                          r.ssm_groups(), r.ssm("time_step_rank"),
                          r.ssm("conv_kernel"), mixer="delta_net")


@register
class Qwen35(Family):
    architectures = ("qwen35", "qwen35moe", "qwen3next")
    rows_after_output_norm = True

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        return delta_net_shape(r, index)
