"""``grok.cpp``: a dense feed-forward network runs beside the experts on the same normed
input and is added to their sum (the experts first, then the network while their sum is
held); llama.cpp runs Grok without flash attention whatever -fa says
(``llama_init_from_model``: "flash_attn is not compatible with Grok - forcing off")."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Grok(Family):
    architectures = ("grok",)
    dense_beside_experts = True
    flash_attention = False
