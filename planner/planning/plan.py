"""The plan the planner returns (docs/rules.md §7 field names)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: a node and the contiguous layers ``[layer_start, layer_end)``."""

    stage_id: str
    stage_index: int
    node_id: str
    layer_start: int
    layer_end: int
    parameter_bytes: int

    @property
    def layer_count(self) -> int:
        return self.layer_end - self.layer_start

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage_id": self.stage_id,
            "stage_index": self.stage_index,
            "node_id": self.node_id,
            "layer_start": self.layer_start,
            "layer_end": self.layer_end,
            "parameter_bytes": self.parameter_bytes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Stage:
        return cls(**{name: data[name] for name in _STAGE_FIELDS})


_STAGE_FIELDS = ("stage_id", "stage_index", "node_id", "layer_start", "layer_end",
                 "parameter_bytes")


@dataclass(frozen=True, slots=True)
class Plan:
    """The selected split topology."""

    context_length: int
    parallel_lanes: int
    stages: tuple[Stage, ...]
    estimated_decode_network_ms_per_token: int | float | None
    decode_tpot_target_met: bool | None

    @property
    def stage_count(self) -> int:
        return len(self.stages)

    @property
    def node_ids(self) -> tuple[str, ...]:
        """Node ids in stage order."""
        return tuple(stage.node_id for stage in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """Exactly the docs/rules.md §7 fields, JSON-ready."""
        return {
            "context_length": self.context_length,
            "parallel_lanes": self.parallel_lanes,
            "stages": [stage.to_dict() for stage in self.stages],
            "estimated_decode_network_ms_per_token": self.estimated_decode_network_ms_per_token,
            "decode_tpot_target_met": self.decode_tpot_target_met,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            context_length=data["context_length"],
            parallel_lanes=data["parallel_lanes"],
            stages=tuple(Stage.from_dict(stage) for stage in data["stages"]),
            estimated_decode_network_ms_per_token=data["estimated_decode_network_ms_per_token"],
            decode_tpot_target_met=data["decode_tpot_target_met"],
        )
