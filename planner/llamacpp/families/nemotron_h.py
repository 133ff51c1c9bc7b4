"""``nemotron-h.cpp`` and ``nemotron-h-moe.cpp``: Mamba-2 blocks, attention blocks and
feed-forward (or expert) blocks, with a next-token-prediction head (the output rows are
kept after the output norm)."""

from __future__ import annotations

from planner.llamacpp.families.mamba2 import Mamba2
from planner.llamacpp.graph import register


@register
class NemotronH(Mamba2):
    architectures = ("nemotron_h", "nemotron_h_moe")
    rows_after_output_norm = True
