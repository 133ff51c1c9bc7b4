"""``bailingmoe3.cpp``: Kimi delta attention layers between latent-attention layers
(roped), with a next-token-prediction head (the output rows are kept after the output
norm)."""

from __future__ import annotations

from planner.llamacpp.families.kimi_linear import KimiLinear
from planner.llamacpp.graph import register


@register
class BailingMoe3(KimiLinear):
    architectures = ("bailingmoe3",)
    latent_rope = True
    rows_after_output_norm = True
