"""What one check explores: :class:`CheckConfig` (a small mesh: stages, coordinators,
terms, clock, lease, skew, loss, stops, plans), its validation (:class:`CheckConfigError`),
the ids and clock of the model, and the default configurations :data:`DEFAULT_CONFIGS`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner._validate import Fail, flag, integer, shown
from planner.fence.claims import CoordinatorClaim, quorum_requirement
from planner.fence.errors import FenceError

TICK_MS = 1_000
START_UNIX_MS = 1_700_000_000_000
MODEL_ID = "model"
PACKAGE_REF = "hf://model-package"
MANIFEST_SHA256 = "sha256-manifest"

MAX_STAGES = 3
MAX_COORDINATORS = 2
MAX_TERM = 3
MAX_CLOCK_BOUND = 6


class CheckConfigError(FenceError):
    """A checker configuration or request outside what the checker can explore.

    ``field`` names the offending field, ``value`` what was given.
    """

    codes = ("InvalidCheckConfig",)

    def __init__(self, field_name: str, problem: str, value: Any = None) -> None:
        got = f" (got {shown(value)})" if value is not None else ""
        super().__init__(f"{field_name}: {problem}{got}", field=field_name, value=value)
        self.field = field_name
        self.value = value


def stage_id(index: int) -> str:
    return f"stage-{index}"


def coordinator_id(index: int) -> str:
    return f"coord-{'ab'[index]}"


def tick_unix_ms(tick: int) -> int:
    return START_UNIX_MS + tick * TICK_MS


def unix_ms_tick(unix_ms: int) -> int:
    return (unix_ms - START_UNIX_MS) // TICK_MS


def config_error(name: str) -> Fail:
    return lambda problem, value: CheckConfigError(name, problem, value)


@dataclass(frozen=True, slots=True)
class CheckConfig:
    """One small mesh to explore.

    ``planned`` lists, per coordinator, the stage indexes it plans for; ``None``
    means every coordinator plans every stage. ``lease_ticks`` is how long a claim's
    lease lasts after its campaign starts; ``skew`` lets each stage's clock run up to
    ``skew_ticks`` ahead of or behind the true clock.
    """

    stages: int = 3
    coordinators: int = 2
    max_term: int = 2
    clock_bound: int = 1
    lease_ticks: int = 1
    skew: bool = False
    skew_ticks: int = 1
    message_loss: bool = False
    stops: bool = True
    planned: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        for name, low, high in (("stages", 1, MAX_STAGES),
                                ("coordinators", 1, MAX_COORDINATORS),
                                ("max_term", 1, MAX_TERM),
                                ("clock_bound", 0, MAX_CLOCK_BOUND),
                                ("lease_ticks", 1, MAX_CLOCK_BOUND + 1),
                                ("skew_ticks", 1, MAX_CLOCK_BOUND)):
            object.__setattr__(self, name, integer(getattr(self, name), config_error(name),
                                                   minimum=low, maximum=high))
        for name in ("skew", "message_loss", "stops"):
            object.__setattr__(self, name, flag(getattr(self, name), config_error(name)))
        if self.planned is None:
            return
        if not isinstance(self.planned, tuple) or len(self.planned) != self.coordinators:
            raise CheckConfigError(
                "planned", f"must be a tuple with one stage tuple per coordinator "
                f"({self.coordinators})", self.planned)
        planned = []
        for index, stages in enumerate(self.planned):
            where = f"planned[{index}]"
            if not isinstance(stages, tuple) or not stages:
                raise CheckConfigError(where, "must be a non-empty tuple of stage indexes",
                                       stages)
            indexes = tuple(integer(stage, config_error(where), minimum=0,
                                    maximum=self.stages - 1) for stage in stages)
            if len(set(indexes)) != len(indexes):
                raise CheckConfigError(where, "lists a stage twice", stages)
            planned.append(indexes)
        object.__setattr__(self, "planned", tuple(planned))

    def planned_stages(self, coordinator: int) -> tuple[int, ...]:
        if self.planned is None:
            return tuple(range(self.stages))
        return tuple(sorted(self.planned[coordinator]))

    def quorum(self, coordinator: int) -> int:
        return quorum_requirement(len(self.planned_stages(coordinator)))

    def clock_offsets(self) -> list[tuple[int, ...]]:
        """Every assignment of clock offsets (in ticks) to the stages, fewest skewed
        stages first (so a counterexample skews no more clocks than it needs)."""
        choices = (0, -self.skew_ticks, self.skew_ticks) if self.skew else (0,)
        return sorted(itertools.product(choices, repeat=self.stages),
                      key=lambda offsets: sum(1 for offset in offsets if offset))

    def claim_for(self, coordinator: int, term: int, issued_tick: int) -> CoordinatorClaim:
        """The claim ``coordinator`` sends when it starts ``term`` at ``issued_tick``."""
        plan = ".".join(str(stage) for stage in self.planned_stages(coordinator))
        return CoordinatorClaim(
            model_id=MODEL_ID,
            package_ref=PACKAGE_REF,
            manifest_sha256=MANIFEST_SHA256,
            topology_id=f"topology-{plan}",
            run_id=f"run-{coordinator_id(coordinator)}-term-{term}",
            coordinator_id=coordinator_id(coordinator),
            coordinator_term=term,
            participant_set_hash=f"participants-{plan}",
            topology_hash=f"layers-{plan}",
            lease_until_unix_ms=tick_unix_ms(issued_tick + self.lease_ticks),
        )

    def describe(self) -> str:
        plans = "; ".join(
            f"{coordinator_id(c)} plans {', '.join(stage_id(s) for s in self.planned_stages(c))}"
            for c in range(self.coordinators))
        skew = f"±{self.skew_ticks} tick(s)" if self.skew else "off"
        return (
            f"{self.stages} stage(s), {self.coordinators} coordinator(s), terms up to "
            f"{self.max_term}, clock 0..{self.clock_bound} ticks of {TICK_MS} ms, lease "
            f"{self.lease_ticks} tick(s), clock skew {skew}, explicit message loss "
            f"{'on' if self.message_loss else 'off'}, stops {'on' if self.stops else 'off'}; "
            f"{plans}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": self.stages,
            "coordinators": self.coordinators,
            "max_term": self.max_term,
            "clock_bound": self.clock_bound,
            "lease_ticks": self.lease_ticks,
            "skew": self.skew,
            "skew_ticks": self.skew_ticks,
            "message_loss": self.message_loss,
            "stops": self.stops,
            "planned": None if self.planned is None else [list(p) for p in self.planned],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckConfig:
        known = tuple(cls.__dataclass_fields__)
        data = as_mapping(data, "config")
        for key in data:
            if key not in known:
                raise CheckConfigError(str(key), f"unknown field; expected one of "
                                       f"{', '.join(known)}")
        values = dict(data)
        planned = values.get("planned")
        if planned is not None:
            if not isinstance(planned, list | tuple):
                raise CheckConfigError("planned", "must be a list of stage lists", planned)
            values["planned"] = tuple(
                tuple(stages) if isinstance(stages, list | tuple) else stages
                for stages in planned)
        return cls(**values)




def as_mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise CheckConfigError(what, "must be a mapping of field names", type(data).__name__)
    return data


def record(data: Any, what: str, required: Sequence[str],
           optional: Sequence[str] = ()) -> Mapping[str, Any]:
    """``data`` as a mapping that has every ``required`` key and nothing outside
    ``required`` and ``optional``; errors name the field as ``what.key``."""
    values = as_mapping(data, what)
    for key in values:
        if key not in required and key not in optional:
            raise CheckConfigError(f"{what}.{key}", "unknown field; expected one of "
                                   f"{', '.join((*required, *optional))}")
    for key in required:
        if key not in values:
            raise CheckConfigError(f"{what}.{key}", "is required")
    return values


def listed(data: Any, what: str) -> list[Any]:
    """``data`` when it is a list (or tuple) of items, as JSON arrays are read."""
    if not isinstance(data, list | tuple):
        raise CheckConfigError(what, "must be a list", type(data).__name__)
    return list(data)




# --- the default configurations ----------------------------------------------------------


@dataclass(frozen=True)
class NamedConfig:
    name: str
    purpose: str
    config: CheckConfig

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "purpose": self.purpose, "config": self.config.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NamedConfig:
        values = record(data, "configuration", ("name", "purpose", "config"))
        return cls(values["name"], values["purpose"], CheckConfig.from_dict(values["config"]))


DEFAULT_CONFIGS: tuple[NamedConfig, ...] = (
    NamedConfig(
        "same-term-race",
        "Two coordinators race for the same three planned stages with the same term; "
        "messages are lost and reordered.",
        CheckConfig(stages=3, coordinators=2, max_term=1, clock_bound=0, message_loss=True),
    ),
    NamedConfig(
        "two-terms",
        "Two coordinators and two planned stages, terms 1-2: a newer term supersedes an "
        "older one, loads and stops of both terms cross in flight.",
        CheckConfig(stages=2, coordinators=2, max_term=2, clock_bound=0),
    ),
    NamedConfig(
        "three-terms",
        "Two coordinators claim one stage with terms 1-3 in any order.",
        CheckConfig(stages=1, coordinators=2, max_term=3, clock_bound=0),
    ),
    NamedConfig(
        "lease-expiry",
        "Two coordinators and one stage over three ticks with one-tick leases: claims and "
        "loads arrive before, at and after the lease; messages are lost.",
        CheckConfig(stages=1, coordinators=2, max_term=2, clock_bound=2, message_loss=True),
    ),
    NamedConfig(
        "replacement-term",
        "One coordinator loads three stages with term 1, then retries with term 2 while "
        "term-1 messages are still in flight.",
        CheckConfig(stages=3, coordinators=1, max_term=2, clock_bound=0, stops=False),
    ),
    NamedConfig(
        "different-plans",
        "One coordinator plans all three stages, the other only stage-2 (a replanned split "
        "that believes stage-0 and stage-1 are gone).",
        CheckConfig(stages=3, coordinators=2, max_term=1, clock_bound=0,
                    planned=((0, 1, 2), (2,))),
    ),
    NamedConfig(
        "skewed-clocks",
        "One coordinator and two stages whose clocks run up to a tick ahead of or behind "
        "the true clock, over three ticks with one-tick leases; messages are lost.",
        CheckConfig(stages=2, coordinators=1, max_term=2, clock_bound=2, skew=True,
                    message_loss=True),
    ),
)
