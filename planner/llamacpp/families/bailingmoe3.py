"""``bailingmoe3.cpp``: Kimi delta attention layers between latent-attention layers
(roped), whose output norm runs on every token (its rows are a next-token head's input) before
the output rows are kept (``bailingmoe3.cpp``, llama.cpp's default
``embeddings_nextn_masked = false``)."""

from __future__ import annotations

from planner.llamacpp.families.kimi_linear import KimiLinear
from planner.llamacpp.graph import register


@register
class BailingMoe3(KimiLinear):
    architectures = ("bailingmoe3",)
    reserves_one_sequence = False
    latent_rope = True
    output_rows = "after_norm"
