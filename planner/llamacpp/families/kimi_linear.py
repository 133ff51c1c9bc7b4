"""``kimi-linear.cpp``: Kimi delta attention (KDA) layers between latent-attention
layers whose rope part is not roped."""

from __future__ import annotations

from planner.llamacpp.graph import Family, ModelReader, RecurrentShape, register


def kda_shape(r: ModelReader, index: int) -> RecurrentShape | None:
    """A KDA layer where the block has ``ssm_conv1d_q`` and its decay gate (``ssm_f_a``):
    its Q width in heads of ``kda.head_dim`` (at least one), the decay and output gates'
    low ranks where they come in two projections."""
    w, n_embd = r.widths[index], r.n_embd
    if "ssm_conv1d_q" not in w or "ssm_f_a" not in w:
        return None
    width = (w["attn_q"] if "attn_q" in w else w.get("attn_qkv", 0) // 3) // n_embd
    head = r.meta.count("kda.head_dim", minimum=1)
    return RecurrentShape(width, head, 1, width // head, r.ssm("conv_kernel"), mixer="kda",
                          decay_rank=w["ssm_f_a"] // n_embd if "ssm_f_b" in w else 0,
                          gate_rank=w["ssm_g_a"] // n_embd if "ssm_g_b" in w else 0)


@register
class KimiLinear(Family):
    architectures = ("kimi-linear",)
    latent_rope = False

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        return kda_shape(r, index)
