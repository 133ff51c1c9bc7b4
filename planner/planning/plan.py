"""The plan the planner returns (docs/rules.md §7 field names).

A plan read back from plain data (``Plan.from_dict`` of a saved plan) is checked like any
input: whole numbers in range, stages in order over contiguous layers from layer 0;
anything else is refused with ``InvalidInput`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from planner._validate import Fail, flag, integer, number, text
from planner.errors import InvalidInput
from planner.limits import MAX_CONTEXT, MAX_LANES, MAX_LAYERS


def _bad(field_name: str) -> Fail:
    return lambda problem, value: InvalidInput(field_name, problem, value=value)


def _require(data: Any, fields: tuple[str, ...], where: str) -> None:
    """Refuse data that is not a table of ``fields`` (others are ignored)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(where.rstrip(".") or "plan", "must be a table of "
                           f"{', '.join(fields)}", value=data)
    for name in fields:
        if name not in data:
            raise InvalidInput(f"{where}{name}", "is required")


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: a node and the contiguous layers ``[layer_start, layer_end)``."""

    stage_id: str
    stage_index: int
    node_id: str
    layer_start: int
    layer_end: int
    parameter_bytes: int

    def __post_init__(self) -> None:
        for name in ("stage_id", "node_id"):
            object.__setattr__(self, name, text(getattr(self, name), _bad(name)))
        object.__setattr__(self, "stage_index", integer(
            self.stage_index, _bad("stage_index"), maximum=MAX_LAYERS - 1))
        start = integer(self.layer_start, _bad("layer_start"), maximum=MAX_LAYERS - 1)
        object.__setattr__(self, "layer_start", start)
        object.__setattr__(self, "layer_end", integer(
            self.layer_end, _bad("layer_end"), minimum=start + 1, maximum=MAX_LAYERS))
        object.__setattr__(self, "parameter_bytes",
                           integer(self.parameter_bytes, _bad("parameter_bytes")))

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
    def from_dict(cls, data: Mapping[str, Any], where: str = "") -> Stage:
        """A stage from its docs/rules.md §7 fields (``where`` prefixes the field names
        in errors, e.g. ``stages[1].``)."""
        _require(data, _STAGE_FIELDS, where)
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "context_length", integer(
            self.context_length, _bad("context_length"), minimum=1, maximum=MAX_CONTEXT))
        object.__setattr__(self, "parallel_lanes", integer(
            self.parallel_lanes, _bad("parallel_lanes"), minimum=1, maximum=MAX_LANES))
        if not isinstance(self.stages, tuple | list) or not self.stages:
            raise InvalidInput("stages", "must be a non-empty list of stages",
                               value=self.stages)
        stages = tuple(self.stages)
        end = 0
        for index, stage in enumerate(stages):
            if not isinstance(stage, Stage):
                raise InvalidInput(f"stages[{index}]", "must be a Stage", value=stage)
            if stage.stage_index != index or stage.layer_start != end:
                raise InvalidInput(
                    f"stages[{index}]", f"must be stage {index} starting at layer {end} "
                    "(stages in order over contiguous layers from layer 0)",
                    value=f"stage {stage.stage_index} at layer {stage.layer_start}")
            end = stage.layer_end
        object.__setattr__(self, "stages", stages)
        estimate = self.estimated_decode_network_ms_per_token
        if estimate is not None:
            estimate = number(estimate, _bad("estimated_decode_network_ms_per_token"))
            # Whole milliseconds are an int, as the planner writes them (5.0 is 5).
            if isinstance(estimate, float) and estimate.is_integer():
                estimate = int(estimate)
            object.__setattr__(self, "estimated_decode_network_ms_per_token", estimate)
        if self.decode_tpot_target_met is not None:
            object.__setattr__(self, "decode_tpot_target_met", flag(
                self.decode_tpot_target_met, _bad("decode_tpot_target_met")))

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
        """A plan from its docs/rules.md §7 fields, as :meth:`to_dict` writes them."""
        _require(data, _PLAN_FIELDS, "")
        stages = data["stages"]
        if not isinstance(stages, list | tuple):
            raise InvalidInput("stages", "must be a list of stages", value=stages)
        return cls(
            context_length=data["context_length"],
            parallel_lanes=data["parallel_lanes"],
            stages=tuple(Stage.from_dict(stage, f"stages[{index}].")
                         for index, stage in enumerate(stages)),
            estimated_decode_network_ms_per_token=data["estimated_decode_network_ms_per_token"],
            decode_tpot_target_met=data["decode_tpot_target_met"],
        )


_PLAN_FIELDS = ("context_length", "parallel_lanes", "stages",
                "estimated_decode_network_ms_per_token", "decode_tpot_target_met")
