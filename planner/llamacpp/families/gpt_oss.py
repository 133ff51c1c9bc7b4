"""``openai-moe.cpp`` (gpt-oss) and ``step35.cpp``: llama's blocks, but the last block
runs on every token and its output rows are kept after it, before the output norm
(llama.cpp's default ``embeddings_nextn_masked = false``)."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class GptOss(Family):
    architectures = ("gpt-oss", "step35")
    output_rows = "before_norm"
