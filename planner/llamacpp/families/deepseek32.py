"""``deepseek32.cpp`` and ``glm-dsa.cpp``: latent attention with a lightning indexer
(DSA) that picks each token's top-k cells (its key cached, its query heads scored
against the cache, the rest masked), with a next-token-prediction head (the output rows
are kept after the output norm)."""

from __future__ import annotations

from typing import ClassVar

from planner.llamacpp.graph import Family, register


@register
class DeepSeek32(Family):
    architectures: ClassVar[tuple[str, ...]] = ("deepseek32", "glm-dsa")
    dsa_indexer = True
    rows_after_output_norm = True
