"""``deepseek32.cpp``, ``glm-dsa.cpp`` and ``dots3note.cpp``: latent attention with a
lightning indexer (DSA) that picks each token's top-k cells (its key cached, its query
heads scored against the cache, the rest masked); dots3note has sliding-window layers
too."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class DeepSeek32(Family):
    architectures = ("deepseek32", "glm-dsa", "dots3note")
    dsa_indexer = True
