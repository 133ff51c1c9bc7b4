"""``dots3note.cpp``: DeepSeek-V3.2's latent attention with a lightning indexer (DSA),
some of its layers in the sliding window, without a next-token-prediction head."""

from __future__ import annotations

from planner.llamacpp.families.deepseek32 import DeepSeek32
from planner.llamacpp.graph import register


@register
class Dots3Note(DeepSeek32):
    architectures = ("dots3note",)
    rows_after_output_norm = False
