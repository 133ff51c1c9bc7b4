"""The memory rule: what each layer and each node costs at one context and lane count.

A planning request carries one rule object (:class:`MemoryRule`). The planner asks it for
the bytes of every layer and for what each node gives up before any layer (llama.cpp's
backend overhead and compute buffers); the search, the candidates, the explanation and
the stage table all read the same answers, so they never mix rules.

Two rules exist: :class:`DesignRule` (docs/rules.md §3, the default) and llama.cpp's
(:class:`planner.llamacpp.LlamaCppCosts`, docs/rules.md §12).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from planner.planning.inputs import PlanningInput


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """The bytes each layer needs, by part: ``weights``, ``kv`` (the KV cache at the
    context), ``state`` (fixed state per sequence, times the lanes) and ``other``
    (anything else the rule charges to a layer, e.g. llama.cpp's output head and output
    compute buffer on the last layer). ``totals`` is their sum per layer."""

    weights: tuple[int, ...]
    kv: tuple[int, ...]
    state: tuple[int, ...]
    other: tuple[int, ...]
    totals: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "totals", tuple(map(
            lambda w, k, s, o: w + k + s + o, self.weights, self.kv, self.state, self.other)))

    def stage(self, layer_start: int, layer_end: int) -> dict[str, int]:
        """The parts of layers ``[layer_start, layer_end)`` added up, and their total."""
        parts = {name: sum(getattr(self, name)[layer_start:layer_end])
                 for name in ("weights", "kv", "state", "other")}
        return {**parts, "total": sum(parts.values())}


@runtime_checkable
class MemoryRule(Protocol):
    """What a layer and a node cost under one rule."""

    name: ClassVar[str]
    """``"design"`` or ``"llamacpp"``: how reports and the workbench name the rule."""

    def check(self, request: PlanningInput) -> None:
        """Refuse (``InvalidInput``) a request the rule cannot cost."""

    def layer_costs(self, request: PlanningInput, context_length: int,
                    lanes: int) -> LayerCosts:
        """Each layer's bytes at ``context_length`` with ``lanes`` parallel sequences."""

    def node_reserves(self, request: PlanningInput, context_length: int,
                      lanes: int) -> Mapping[str, int]:
        """Bytes each node gives up before any layer, by node id (absent: none)."""

    def lanes_matter(self, request: PlanningInput) -> bool:
        """Whether the lane count can change any layer's or node's bytes."""

    def for_stages(self, count: int) -> MemoryRule:
        """The rule a plan of ``count`` stages is costed with: itself, unless the costs
        depend on the stage count (llama.cpp runs one device without pipeline
        parallelism's copies)."""

    def to_dict(self) -> dict[str, Any]:
        """The rule as plain data, with its ``name``."""


@dataclass(frozen=True, slots=True)
class DesignRule:
    """docs/rules.md §3: layer ``j`` needs ``w_j + kv_j * c + state_j * B`` at context
    ``c`` with ``B`` lanes; nodes give up nothing beyond their headroom.

    ``w_j`` is ``layer_weight_bytes[j]`` when given, else the even ceil split of the
    model's weights; ``kv_j`` is ``layer_kv_bytes_per_token[j]`` when given, else
    ``ceil(kv_bytes_per_token / layer_count)``; ``state_j`` is
    ``layer_state_bytes_per_sequence[j]`` when given, else 0. Without the two per-layer
    lists this is the uniform rule of the design, and lanes never change memory.
    """

    name: ClassVar[str] = "design"

    def check(self, request: PlanningInput) -> None:
        """Every request the planning input accepts can be costed."""

    def layer_costs(self, request: PlanningInput, context_length: int,
                    lanes: int) -> LayerCosts:
        count = request.layer_count
        if request.layer_weight_bytes is not None:
            weights = request.layer_weight_bytes
        else:
            weights = (-(-request.model_weight_bytes // count),) * count
        per_token = request.layer_kv_bytes_per_token
        if per_token is None:
            per_token = (-(-request.kv_bytes_per_token // count),) * count
        state = request.layer_state_bytes_per_sequence or (0,) * count
        return LayerCosts(weights=weights, kv=tuple(k * context_length for k in per_token),
                          state=tuple(s * lanes for s in state), other=(0,) * count)

    def node_reserves(self, request: PlanningInput, context_length: int,
                      lanes: int) -> Mapping[str, int]:
        return {}

    def lanes_matter(self, request: PlanningInput) -> bool:
        return any(request.layer_state_bytes_per_sequence or ())

    def for_stages(self, count: int) -> DesignRule:
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}


DESIGN_RULE = DesignRule()
"""The default rule of every planning request."""

MEMORY_MODELS = ("design", "llamacpp")
"""The rules by name, as the command line and the workbench offer them."""
