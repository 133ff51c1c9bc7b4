"""Builders with a next-token-prediction head (``glm4-moe.cpp`` and the others below):
the output norm's rows are the head's input (``h_nextn``), so the graph keeps the output
rows after the output norm, not in the last block (llama.cpp's default
``embeddings_nextn_masked = false``)."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Glm4Moe(Family):
    architectures = ("glm4moe", "deepseek2", "gemma4", "gpt-oss", "hy_v3", "mimo2",
                     "step35")
    rows_after_output_norm = True
