"""``maple.cpp``: its routed experts' limited SwiGLU (``swiglu_clamp_exp``) is one fused
operation, like the unlimited one."""

from __future__ import annotations

from planner.llamacpp.graph import Activation, Family, register


@register
class Maple(Family):
    architectures = ("maple",)
    activation = Activation(fused_experts=True)
