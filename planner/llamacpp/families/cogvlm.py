"""Builders without llama.cpp's mixed token/embedding input branch
(``llm_arch_supports_mixed_batch`` is false for them): ``cogvlm.cpp``, ``dflash.cpp``,
``eagle3.cpp``, ``gemma4-assistant.cpp``, ``granite-switch.cpp``."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class CogVlm(Family):
    architectures = ("cogvlm", "dflash", "eagle3", "gemma4-assistant", "graniteswitch")
    mixed_batch = False
