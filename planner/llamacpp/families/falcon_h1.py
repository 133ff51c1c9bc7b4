"""``falcon-h1.cpp``: every block runs attention and a Mamba-2 mixer side by side on the
same input (normed twice) and adds them to the residual before its feed-forward network."""

from __future__ import annotations

from planner.llamacpp.families.mamba2 import Mamba2
from planner.llamacpp.graph import register


@register
class FalconH1(Mamba2):
    architectures = ("falcon-h1",)
    attention_beside_mixer = True
