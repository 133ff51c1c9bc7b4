"""``nemotron-h.cpp`` and ``nemotron-h-moe.cpp``: Mamba-2 blocks, attention blocks and
feed-forward (or expert) blocks, whose output norm runs on every token before the
output rows are kept (llama.cpp's default ``embeddings_nextn_masked = false``)."""

from __future__ import annotations

from planner.llamacpp.families.mamba2 import Mamba2
from planner.llamacpp.graph import register


@register
class NemotronH(Mamba2):
    architectures = ("nemotron_h", "nemotron_h_moe")
    output_rows = "after_norm"
