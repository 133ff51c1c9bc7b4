"""Explicit-state model checker for the claim-fence rules.

The checker builds every state a small mesh can reach (a few stages, one or two
coordinators, a few terms, a bounded clock) and judges properties of the fence on
every step. It explores breadth first, so the first counterexample it finds for a
property is a shortest one.

What the model contains:

- The true clock counts ticks of :data:`TICK_MS` from 0 to ``clock_bound``.
  Coordinators read the true clock; each stage reads it plus a fixed offset, which
  is 0 without skew and one of ``-skew_ticks``, 0, ``+skew_ticks`` with skew (every
  combination is an initial state).
- A coordinator starts a campaign for any term above its own, sending
  ``ClaimCoordinator`` to each stage it plans for; it counts the accepts that reach
  it, sends ``LoadStage`` to its planned stages once it holds a quorum (and its lease
  has not run out on its own clock), and may later send ``StopStage`` for that term.
  A stop the stage accepts ends whatever the stage runs for the model, as the design's
  ``StopStage`` does, so the stop rule alone keeps a stale stop from newer work.
- A stage judges claims with ``decide_claim``, loads with ``decide_load`` and stops
  with ``decide_stop``: the real rules of :mod:`planner.fence`, unless replacements are
  passed in to show that the checker catches a broken rule. Accepting a newer term
  shuts down the stage's older running work, as the stage runtime does; an accepted
  load runs at once.
- Messages in flight are a multiset (a sorted tuple): any of them can be delivered
  next, which explores every reordering. Every state is judged whatever is still in
  flight, so a run in which a message is lost is judged as the run in which it is
  never delivered; with ``message_loss`` on, lost messages are also removed
  explicitly (more states, the same fence states). A rejection changes nothing a
  coordinator does here, so only accepts are answered, and replies to a campaign a
  coordinator has abandoned are discarded when it starts the next one (delivering
  them would change nothing).

Each stage also keeps, for the properties only, every claim it has ever accepted.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from planner._validate import Fail, integer, shown
from planner.errors import CodedError
from planner.fence.claims import (
    ClaimDecision,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
    quorum_requirement,
    same_claim_epoch,
)
from planner.fence.errors import FenceError
from planner.fence.runtime import StageWork, StopDecision, StopRequest, decide_stop

ClaimRule = Callable[[CoordinatorClaim | None, CoordinatorClaim, int], ClaimDecision]
LoadRule = Callable[[CoordinatorClaim | None, LoadClaimRef, int], LoadDecision]
StopRule = Callable[[CoordinatorClaim | None, StopRequest], StopDecision]

TICK_MS = 1_000
START_UNIX_MS = 1_700_000_000_000
MODEL_ID = "model"
PACKAGE_REF = "hf://model-package"
MANIFEST_SHA256 = "sha256-manifest"

MAX_STAGES = 3
MAX_COORDINATORS = 2
MAX_TERM = 3
MAX_CLOCK_BOUND = 6

MUST_HOLD = "must hold"
KNOWN_TO_FAIL = "known not to hold"

# Step kinds.
CAMPAIGN = "campaign"
DELIVER_CLAIM = "deliver_claim"
DELIVER_REPLY = "deliver_reply"
SEND_LOAD = "send_load"
DELIVER_LOAD = "deliver_load"
SEND_STOP = "send_stop"
DELIVER_STOP = "deliver_stop"
DROP = "drop"
TICK = "tick"
STEP_KINDS: tuple[str, ...] = (
    CAMPAIGN, DELIVER_CLAIM, DELIVER_REPLY, SEND_LOAD, DELIVER_LOAD, SEND_STOP, DELIVER_STOP,
    DROP, TICK,
)
_DELIVER = "deliver"

# Message kinds, numbered so that the in-flight multiset sorts canonically.
CLAIM_MESSAGE = 0
REPLY_MESSAGE = 1
LOAD_MESSAGE = 2
STOP_MESSAGE = 3
MESSAGE_NAMES: tuple[str, ...] = ("ClaimCoordinator", "ClaimReply", "LoadStage", "StopStage")


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


def _config_error(name: str) -> Fail:
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
            object.__setattr__(self, name, integer(getattr(self, name), _config_error(name),
                                                   minimum=low, maximum=high))
        for name in ("skew", "message_loss", "stops"):
            if not isinstance(getattr(self, name), bool):
                raise CheckConfigError(name, "must be true or false", getattr(self, name))
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
            indexes = tuple(integer(stage, _config_error(where), minimum=0,
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
        data = _mapping(data, "config")
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


# --- model state -------------------------------------------------------------------------
# Plain named tuples: hashing and comparing them runs in C, which is most of the work.


class Message(NamedTuple):
    """A message in flight; ``issued_tick`` is a claim's campaign start (0 otherwise)."""

    kind: int
    coordinator: int
    stage: int
    term: int
    issued_tick: int = 0

    def describe(self) -> str:
        who, where = coordinator_id(self.coordinator), stage_id(self.stage)
        if self.kind == CLAIM_MESSAGE:
            return f"{who}'s term-{self.term} ClaimCoordinator to {where}"
        if self.kind == REPLY_MESSAGE:
            return f"{where}'s accept of term {self.term} to {who}"
        if self.kind == LOAD_MESSAGE:
            return f"{who}'s term-{self.term} LoadStage to {where}"
        return f"{who}'s term-{self.term} StopStage to {where}"


class Grant(NamedTuple):
    """A claim a stage accepted, named by the campaign that sent it."""

    coordinator: int
    term: int
    issued_tick: int


class CoordinatorState(NamedTuple):
    """A coordinator's current campaign (term 0: it has not started one)."""

    term: int = 0
    issued_tick: int = 0
    accepts: frozenset[int] = frozenset()
    load_sent: bool = False
    stop_sent: bool = False


class StageState(NamedTuple):
    """A stage's stored claim, its running work (coordinator, term) and its history."""

    claim: Grant | None = None
    running: tuple[int, int] | None = None
    accepted: frozenset[Grant] = frozenset()


class ModelState(NamedTuple):
    now_tick: int
    clock_offsets: tuple[int, ...]
    coordinators: tuple[CoordinatorState, ...]
    stages: tuple[StageState, ...]
    in_flight: tuple[Message, ...]

    def stage_now_unix_ms(self, stage: int) -> int:
        return tick_unix_ms(self.now_tick + self.clock_offsets[stage])


class Action(NamedTuple):
    """What happens next: ``kind`` with its coordinator and term, or its message."""

    kind: str
    coordinator: int = -1
    term: int = 0
    message: Message | None = None


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One step of a run, with everything needed to replay it through the fence.

    ``now_unix_ms`` is the true clock; ``stage_now_unix_ms`` the clock of the stage
    that judged the step (``None`` when no stage judged anything). ``accepted`` and
    ``reason`` are the stage's answer; ``ended`` is the running work that a newer
    claim shut down or a stop stopped; ``lease_until_unix_ms`` the lease of the claim a
    claim or load was judged with. ``message`` names the message delivered, sent or
    lost; ``targets`` the stages a coordinator sent it to.
    """

    kind: str
    now_unix_ms: int
    coordinator_id: str | None = None
    stage_id: str | None = None
    term: int | None = None
    message: str | None = None
    stage_now_unix_ms: int | None = None
    claim: CoordinatorClaim | None = None
    load: LoadClaimRef | None = None
    stop: StopRequest | None = None
    accepted: bool | None = None
    reason: str | None = None
    ended: StageWork | None = None
    lease_until_unix_ms: int | None = None
    targets: tuple[str, ...] = ()
    detail: str = ""

    @property
    def tick(self) -> int:
        return unix_ms_tick(self.now_unix_ms)

    @property
    def stage_index(self) -> int:
        if self.stage_id is None:
            raise CheckConfigError("stage_id", f"a {self.kind} step involves no stage")
        return int(self.stage_id.rsplit("-", 1)[1])

    @property
    def text(self) -> str:
        return f"t={self.tick}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "now_unix_ms": self.now_unix_ms,
            "coordinator_id": self.coordinator_id,
            "stage_id": self.stage_id,
            "term": self.term,
            "message": self.message,
            "stage_now_unix_ms": self.stage_now_unix_ms,
            "claim": None if self.claim is None else self.claim.to_dict(),
            "load": None if self.load is None else self.load.to_dict(),
            "stop": None if self.stop is None else self.stop.to_dict(),
            "accepted": self.accepted,
            "reason": self.reason,
            "ended": None if self.ended is None else self.ended.to_dict(),
            "lease_until_unix_ms": self.lease_until_unix_ms,
            "targets": list(self.targets),
            "detail": self.detail,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceStep:
        """The step :meth:`to_dict` wrote (``text`` is derived, so it is not read)."""
        values = _mapping(data, "step")
        known = [name for name in cls.__dataclass_fields__]
        unknown = [key for key in values if key not in (*known, "text")]
        if unknown:
            raise CheckConfigError(f"step.{unknown[0]}", "unknown field")
        kept = {name: values[name] for name in known if name in values}
        for name, kind in (("claim", CoordinatorClaim), ("load", LoadClaimRef),
                           ("stop", StopRequest), ("ended", StageWork)):
            if kept.get(name) is not None:
                kept[name] = kind.from_dict(kept[name])
        kept["targets"] = tuple(kept.get("targets", ()))
        return cls(**kept)


@dataclass(frozen=True)
class Rules:
    """The stage rules the model runs: the real fence unless replaced."""

    decide_claim: ClaimRule = decide_claim
    decide_load: LoadRule = decide_load
    decide_stop: StopRule = decide_stop


def _with_messages(
    messages: tuple[Message, ...], removed: Message | None, added: Sequence[Message]
) -> tuple[Message, ...]:
    remaining = list(messages)
    if removed is not None:
        remaining.remove(removed)
    remaining.extend(added)
    remaining.sort()
    return tuple(remaining)


def _replaced(items: tuple[Any, ...], index: int, item: Any) -> tuple[Any, ...]:
    return (*items[:index], item, *items[index + 1:])


class FenceModel:
    """The transition system of one configuration under one set of stage rules."""

    def __init__(self, config: CheckConfig, rules: Rules | None = None) -> None:
        self.config = config
        self.rules = rules if rules is not None else Rules()
        self.planned = tuple(config.planned_stages(c) for c in range(config.coordinators))
        self.quorum = tuple(config.quorum(c) for c in range(config.coordinators))
        self._claims: dict[Grant, CoordinatorClaim] = {}
        self._loads = {
            (c, t): LoadClaimRef.for_claim(config.claim_for(c, t, 0))
            for c in range(config.coordinators) for t in range(1, config.max_term + 1)
        }
        self._stops = {key: StopRequest(**load.to_dict()) for key, load in self._loads.items()}
        self._works = {key: StageWork.from_load(load) for key, load in self._loads.items()}

    # States name claims by the campaign that sent them; the rules judge real objects.
    def claim(self, grant: Grant) -> CoordinatorClaim:
        claim = self._claims.get(grant)
        if claim is None:
            claim = self.config.claim_for(*grant)
            self._claims[grant] = claim
        return claim

    def load(self, coordinator: int, term: int) -> LoadClaimRef:
        return self._loads[(coordinator, term)]

    def stop_request(self, coordinator: int, term: int) -> StopRequest:
        return self._stops[(coordinator, term)]

    def work(self, running: tuple[int, int]) -> StageWork:
        return self._works[running]

    def stage_claim(self, state: ModelState, stage: int) -> CoordinatorClaim | None:
        grant = state.stages[stage].claim
        return None if grant is None else self.claim(grant)

    def initial_states(self) -> list[ModelState]:
        idle = tuple(CoordinatorState() for _ in range(self.config.coordinators))
        empty = tuple(StageState() for _ in range(self.config.stages))
        return [ModelState(0, offsets, idle, empty, ()) for offsets in self.config.clock_offsets()]

    def actions(self, state: ModelState) -> list[Action]:
        config = self.config
        actions = []
        for index, coordinator in enumerate(state.coordinators):
            for term in range(coordinator.term + 1, config.max_term + 1):
                actions.append(Action(CAMPAIGN, index, term))
            if coordinator.term and not coordinator.load_sent:
                lease_end_tick = coordinator.issued_tick + config.lease_ticks
                if (state.now_tick <= lease_end_tick
                        and len(coordinator.accepts) >= self.quorum[index]):
                    actions.append(Action(SEND_LOAD, index, coordinator.term))
            if config.stops and coordinator.load_sent and not coordinator.stop_sent:
                actions.append(Action(SEND_STOP, index, coordinator.term))
        # A multiset may hold equal messages; delivering either one is the same step.
        distinct = sorted(set(state.in_flight))
        actions.extend(Action(_DELIVER, message=message) for message in distinct)
        if config.message_loss:
            actions.extend(Action(DROP, message=message) for message in distinct)
        if state.now_tick < config.clock_bound:
            actions.append(Action(TICK))
        return actions

    def apply(
        self, state: ModelState, action: Action, *, describe: bool = False
    ) -> tuple[ModelState, TraceStep]:
        """The state after ``action`` and the step that records it (with a readable
        ``detail`` when ``describe`` is set)."""
        now = tick_unix_ms(state.now_tick)
        kind = action.kind
        if kind == CAMPAIGN:
            return self._campaign(state, action, now, describe)
        if kind in (SEND_LOAD, SEND_STOP):
            return self._send_to_plan(state, action, now, describe)
        if kind == TICK:
            after = state._replace(now_tick=state.now_tick + 1)
            return after, TraceStep(
                TICK, tick_unix_ms(after.now_tick),
                detail="time passes: the true clock advances one tick" if describe else "")
        message = action.message
        if message is None:
            raise CheckConfigError("action", f"a {kind} action needs a message", action)
        if kind == DROP:
            after = state._replace(in_flight=_with_messages(state.in_flight, message, ()))
            return after, TraceStep(
                DROP, now, coordinator_id(message.coordinator), stage_id(message.stage),
                message.term, MESSAGE_NAMES[message.kind],
                detail=f"the network loses {message.describe()}" if describe else "")
        if message.kind == CLAIM_MESSAGE:
            return self._deliver_claim(state, message, now, describe)
        if message.kind == REPLY_MESSAGE:
            return self._deliver_reply(state, message, now, describe)
        if message.kind == LOAD_MESSAGE:
            return self._deliver_load(state, message, now, describe)
        return self._deliver_stop(state, message, now, describe)

    def _campaign(
        self, state: ModelState, action: Action, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index, term = action.coordinator, action.term
        claim = self.claim(Grant(index, term, state.now_tick))
        planned = self.planned[index]
        sent = [Message(CLAIM_MESSAGE, index, stage, term, state.now_tick) for stage in planned]
        kept = tuple(m for m in state.in_flight
                     if not (m.kind == REPLY_MESSAGE and m.coordinator == index))
        after = state._replace(
            coordinators=_replaced(state.coordinators, index,
                                   CoordinatorState(term=term, issued_tick=state.now_tick)),
            in_flight=_with_messages(kept, None, sent))
        detail = ""
        if describe:
            detail = (f"{coordinator_id(index)} starts term {term} and sends ClaimCoordinator "
                      f"to {', '.join(map(stage_id, planned))} (lease until "
                      f"t={unix_ms_tick(claim.lease_until_unix_ms)}; quorum "
                      f"{self.quorum[index]} of {len(planned)})")
        return after, TraceStep(CAMPAIGN, now, coordinator_id(index), term=term,
                                message=MESSAGE_NAMES[CLAIM_MESSAGE], claim=claim,
                                targets=tuple(map(stage_id, planned)), detail=detail)

    def _send_to_plan(
        self, state: ModelState, action: Action, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index = action.coordinator
        coordinator = state.coordinators[index]
        planned = self.planned[index]
        loading = action.kind == SEND_LOAD
        kind = LOAD_MESSAGE if loading else STOP_MESSAGE
        sent = [Message(kind, index, stage, coordinator.term) for stage in planned]
        updated = (coordinator._replace(load_sent=True) if loading
                   else coordinator._replace(stop_sent=True))
        after = state._replace(coordinators=_replaced(state.coordinators, index, updated),
                               in_flight=_with_messages(state.in_flight, None, sent))
        detail = ""
        if describe and loading:
            detail = (f"{coordinator_id(index)} holds {len(coordinator.accepts)} accept(s) for "
                      f"term {coordinator.term} (quorum {self.quorum[index]}) and sends "
                      f"LoadStage to {', '.join(map(stage_id, planned))}")
        elif describe:
            detail = (f"{coordinator_id(index)} sends StopStage for term {coordinator.term} to "
                      f"{', '.join(map(stage_id, planned))}")
        return after, TraceStep(
            action.kind, now, coordinator_id(index), term=coordinator.term,
            message=MESSAGE_NAMES[kind],
            load=self.load(index, coordinator.term) if loading else None,
            stop=None if loading else self.stop_request(index, coordinator.term),
            targets=tuple(map(stage_id, planned)), detail=detail)

    def _deliver_claim(
        self, state: ModelState, message: Message, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index, coordinator, term = message.stage, message.coordinator, message.term
        grant = Grant(coordinator, term, message.issued_tick)
        claim = self.claim(grant)
        stage = state.stages[index]
        stage_now = state.stage_now_unix_ms(index)
        decision = self.rules.decide_claim(self.stage_claim(state, index), claim, stage_now)
        replies: list[Message] = []
        ended: StageWork | None = None
        new_stage = stage
        if decision.accepted:
            running = stage.running
            # The stage runtime's superseding rule: older running work is shut down.
            if running is not None and running[1] < term:
                ended, running = self.work(running), None
            new_stage = StageState(grant, running, stage.accepted | {grant})
            replies.append(Message(REPLY_MESSAGE, coordinator, index, term))
        after = state._replace(
            stages=_replaced(state.stages, index, new_stage),
            in_flight=_with_messages(state.in_flight, message, replies))
        detail = ""
        if describe:
            who, where = coordinator_id(coordinator), stage_id(index)
            if decision.accepted:
                detail = f"{where} accepts {who}'s term-{term} claim"
                if decision.supersedes_term is not None:
                    detail += f", superseding term {decision.supersedes_term}"
                if ended is not None:
                    detail += f", and shuts down its running term-{ended.coordinator_term} stage"
                detail += f"; it answers {who}"
            else:
                detail = (f"{where} rejects {who}'s term-{term} claim: {decision.reason} "
                          f"({decision.message})")
            detail += f" [stage clock t={unix_ms_tick(stage_now)}]"
        return after, TraceStep(
            DELIVER_CLAIM, now, coordinator_id(coordinator), stage_id(index), term,
            MESSAGE_NAMES[CLAIM_MESSAGE], stage_now, claim=claim, accepted=decision.accepted,
            reason=decision.reason, ended=ended, lease_until_unix_ms=claim.lease_until_unix_ms,
            detail=detail)

    def _deliver_reply(
        self, state: ModelState, message: Message, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index = message.coordinator
        coordinator = state.coordinators[index]
        current = message.term == coordinator.term
        if current:
            coordinator = coordinator._replace(accepts=coordinator.accepts | {message.stage})
        after = state._replace(
            coordinators=_replaced(state.coordinators, index, coordinator),
            in_flight=_with_messages(state.in_flight, message, ()))
        detail = ""
        if describe:
            who, where = coordinator_id(index), stage_id(message.stage)
            detail = (f"{who} hears that {where} accepted term {message.term}: "
                      f"{len(coordinator.accepts)} of quorum {self.quorum[index]}")
        return after, TraceStep(DELIVER_REPLY, now, coordinator_id(index),
                                stage_id(message.stage), message.term,
                                MESSAGE_NAMES[REPLY_MESSAGE], accepted=True, detail=detail)

    def _deliver_load(
        self, state: ModelState, message: Message, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index, coordinator, term = message.stage, message.coordinator, message.term
        load = self.load(coordinator, term)
        stage = state.stages[index]
        stage_now = state.stage_now_unix_ms(index)
        held = self.stage_claim(state, index)
        decision = self.rules.decide_load(held, load, stage_now)
        new_stage = stage._replace(running=(coordinator, term)) if decision.accepted else stage
        after = state._replace(
            stages=_replaced(state.stages, index, new_stage),
            in_flight=_with_messages(state.in_flight, message, ()))
        detail = ""
        if describe:
            who, where = coordinator_id(coordinator), stage_id(index)
            if decision.accepted:
                detail = f"{where} accepts {who}'s term-{term} load and runs it"
            else:
                detail = (f"{where} rejects {who}'s term-{term} load: {decision.reason} "
                          f"({decision.message})")
            detail += f" [stage clock t={unix_ms_tick(stage_now)}]"
        return after, TraceStep(
            DELIVER_LOAD, now, coordinator_id(coordinator), stage_id(index), term,
            MESSAGE_NAMES[LOAD_MESSAGE], stage_now, load=load, accepted=decision.accepted,
            reason=decision.reason,
            lease_until_unix_ms=None if held is None else held.lease_until_unix_ms,
            detail=detail)

    def _deliver_stop(
        self, state: ModelState, message: Message, now: int, describe: bool
    ) -> tuple[ModelState, TraceStep]:
        index, coordinator, term = message.stage, message.coordinator, message.term
        request = self.stop_request(coordinator, term)
        stage = state.stages[index]
        held = self.stage_claim(state, index)
        decision = self.rules.decide_stop(held, request)
        ended: StageWork | None = None
        new_stage = stage
        # The design's StopStage stops the stage for the model artifact, whatever term it
        # runs: only the stop rule keeps a stale stop away from newer work. (The stage
        # runtime also requires the stop's generation to match; the model leaves that
        # second guard out so that the rule itself is what the checker judges.)
        if decision.accepted and stage.running is not None:
            ended, new_stage = self.work(stage.running), stage._replace(running=None)
        after = state._replace(
            stages=_replaced(state.stages, index, new_stage),
            in_flight=_with_messages(state.in_flight, message, ()))
        detail = ""
        if describe:
            who, where = coordinator_id(coordinator), stage_id(index)
            if not decision.accepted:
                detail = f"{where} rejects {who}'s term-{term} stop: {decision.message}"
            elif ended is not None:
                detail = (f"{where} stops its running term-{ended.coordinator_term} stage "
                          f"for {who}'s term-{term} stop")
            else:
                detail = f"{where} accepts {who}'s term-{term} stop but runs nothing of it"
        return after, TraceStep(
            DELIVER_STOP, now, coordinator_id(coordinator), stage_id(index), term,
            MESSAGE_NAMES[STOP_MESSAGE], state.stage_now_unix_ms(index), stop=request,
            accepted=decision.accepted, reason=decision.reason, ended=ended, detail=detail)


# --- properties --------------------------------------------------------------------------

Violation = Callable[[FenceModel, ModelState, TraceStep, ModelState], str | None]


@dataclass(frozen=True)
class Property:
    """A statement about every reachable step; ``violation`` explains a breach or is None.

    ``kinds`` are the only step kinds that can break it (the others are not judged).
    """

    name: str
    title: str
    expectation: str
    kinds: frozenset[str]
    violation: Violation = field(repr=False, compare=False)


def _term_never_decreases(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted:
        return None
    index = step.stage_index
    old, new = before.stages[index].claim, after.stages[index].claim
    if old is not None and new is not None and new.term < old.term:
        return f"{step.stage_id}'s accepted term fell from {old.term} to {new.term}"
    return None


def _same_term_same_claim(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted or step.claim is None:
        return None
    for grant in before.stages[step.stage_index].accepted:
        earlier = model.claim(grant)
        if (earlier.coordinator_term == step.claim.coordinator_term
                and not same_claim_epoch(earlier, step.claim)):
            return (f"{step.stage_id} accepted two different claims for term {grant.term}: "
                    f"{earlier.coordinator_id}'s {earlier.run_id} and "
                    f"{step.claim.coordinator_id}'s {step.claim.run_id}")
    return None


def _accepted_fenced_load(step: TraceStep) -> bool:
    return (step.kind == DELIVER_LOAD and bool(step.accepted) and step.load is not None
            and not step.load.is_unfenced)


_LOAD_FIELDS = ("model_id", "package_ref", "manifest_sha256", "topology_id", "run_id",
                "coordinator_id", "coordinator_term")


def _load_matches_claim_within_lease(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step):
        return None
    load, claim = step.load, model.stage_claim(before, step.stage_index)
    assert load is not None and step.stage_now_unix_ms is not None
    if claim is None:
        return f"{step.stage_id} accepted a term-{load.coordinator_term} load with no claim"
    mismatched = [name for name in _LOAD_FIELDS if getattr(load, name) != getattr(claim, name)]
    if mismatched:
        return (f"{step.stage_id} accepted a load whose {', '.join(mismatched)} differ(s) from "
                f"its term-{claim.coordinator_term} claim")
    if step.stage_now_unix_ms > claim.lease_until_unix_ms:
        return (f"{step.stage_id} accepted a load at stage clock "
                f"t={unix_ms_tick(step.stage_now_unix_ms)} after its lease ended at "
                f"t={unix_ms_tick(claim.lease_until_unix_ms)}")
    return None


def _no_load_below_accepted_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step) or step.load is None:
        return None
    accepted = before.stages[step.stage_index].accepted
    highest = max((grant.term for grant in accepted), default=0)
    if step.load.coordinator_term < highest:
        return (f"{step.stage_id} accepted a term-{step.load.coordinator_term} load after "
                f"accepting term {highest}")
    return None


def _stale_stop_stops_nothing(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_STOP or step.term is None:
        return None
    index = step.stage_index
    held = before.stages[index].claim
    if held is None or step.term >= held.term:
        return None
    if before.stages[index].running != after.stages[index].running:
        return (f"a stale term-{step.term} stop ended {step.stage_id}'s running work although "
                f"the stage holds term {held.term}")
    return None


def _stages_granting(model: FenceModel, state: ModelState, coordinator: int,
                     term: int) -> list[int]:
    """Planned stages that have ever accepted ``coordinator``'s claim for ``term``."""
    return [
        stage for stage in model.planned[coordinator]
        if any(g.coordinator == coordinator and g.term == term
               for g in state.stages[stage].accepted)
    ]


def _one_majority_per_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted or step.term is None:
        return None
    term = step.term
    for first, second in itertools.combinations(range(model.config.coordinators), 2):
        if model.planned[first] != model.planned[second]:
            continue
        won_first = _stages_granting(model, after, first, term)
        won_second = _stages_granting(model, after, second, term)
        if len(won_first) >= model.quorum[first] and len(won_second) >= model.quorum[second]:
            return (f"in term {term} both {coordinator_id(first)} "
                    f"({', '.join(map(stage_id, won_first))}) and {coordinator_id(second)} "
                    f"({', '.join(map(stage_id, won_second))}) won a majority of the same "
                    f"planned stages")
    return None


def _believes_majority(model: FenceModel, state: ModelState, coordinator: int) -> bool:
    held = state.coordinators[coordinator]
    return held.term > 0 and len(held.accepts) >= model.quorum[coordinator]


def _single_majority_belief(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_REPLY:
        return None
    believers = [c for c in range(model.config.coordinators) if _believes_majority(model, after, c)]
    for first, second in itertools.combinations(believers, 2):
        a, b = after.coordinators[first], after.coordinators[second]
        if a.term != b.term:
            return (f"{coordinator_id(first)} believes it holds a majority in term {a.term} "
                    f"while {coordinator_id(second)} believes it holds one in term {b.term}")
    return None


def _pipeline_runs_one_term(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_LOAD or not step.accepted:
        return None
    for index, planned in enumerate(model.planned):
        running = [after.stages[stage].running for stage in planned]
        if any(work is None for work in running):
            continue
        terms = {work[1] for work in running if work is not None}
        if len(terms) > 1:
            listed = ", ".join(
                f"{stage_id(stage)} runs term {work[1]}"
                for stage, work in zip(planned, running, strict=True) if work is not None)
            return (f"every stage of {coordinator_id(index)}'s plan is running, but not the "
                    f"same term: {listed}")
    return None


def _current_majority(model: FenceModel, state: ModelState, coordinator: int) -> list[int]:
    term = state.coordinators[coordinator].term
    return [
        stage for stage in model.planned[coordinator]
        if (grant := state.stages[stage].claim) is not None
        and grant.coordinator == coordinator and grant.term == term
    ]


def _majorities_overlap(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if step.kind != DELIVER_CLAIM or not step.accepted:
        return None
    for first, second in itertools.combinations(range(model.config.coordinators), 2):
        held_first = _current_majority(model, after, first)
        held_second = _current_majority(model, after, second)
        if (len(held_first) >= model.quorum[first]
                and len(held_second) >= model.quorum[second]
                and not set(held_first) & set(held_second)):
            return (f"{coordinator_id(first)} holds a majority of its plan "
                    f"({', '.join(map(stage_id, held_first))}) while {coordinator_id(second)} "
                    f"holds a majority of its own ({', '.join(map(stage_id, held_second))}); "
                    f"the two majorities share no stage")
    return None


def _load_within_lease_on_true_clock(
    model: FenceModel, before: ModelState, step: TraceStep, after: ModelState
) -> str | None:
    if not _accepted_fenced_load(step):
        return None
    claim = model.stage_claim(before, step.stage_index)
    if claim is not None and step.now_unix_ms > claim.lease_until_unix_ms:
        assert step.stage_now_unix_ms is not None
        return (f"{step.stage_id} accepted a load at true time t={step.tick}, after the lease "
                f"ended at t={unix_ms_tick(claim.lease_until_unix_ms)}; the stage's own clock "
                f"read t={unix_ms_tick(step.stage_now_unix_ms)}")
    return None


_CLAIMS = frozenset({DELIVER_CLAIM})
_LOADS = frozenset({DELIVER_LOAD})
PROPERTIES: tuple[Property, ...] = (
    Property("term_never_decreases", "a stage's accepted term never decreases", MUST_HOLD,
             _CLAIMS, _term_never_decreases),
    Property("same_term_same_claim",
             "two claims a stage accepted with the same term are the same claim", MUST_HOLD,
             _CLAIMS, _same_term_same_claim),
    Property("load_matches_claim_within_lease",
             "no accepted load mismatches the stage's claim or arrives after its lease on the "
             "stage's clock", MUST_HOLD, _LOADS, _load_matches_claim_within_lease),
    Property("no_load_below_accepted_term",
             "after a stage accepts term t it accepts no load below t", MUST_HOLD, _LOADS,
             _no_load_below_accepted_term),
    Property("stale_stop_stops_nothing", "a stale stop never stops anything", MUST_HOLD,
             frozenset({DELIVER_STOP}), _stale_stop_stops_nothing),
    Property("one_majority_per_term",
             "for one planned stage set, at most one coordinator wins a majority in a term",
             MUST_HOLD, _CLAIMS, _one_majority_per_term),
    Property("single_majority_belief",
             "no two coordinators believe they hold a majority at the same moment with "
             "different terms", KNOWN_TO_FAIL, frozenset({DELIVER_REPLY}),
             _single_majority_belief),
    Property("pipeline_runs_one_term",
             "the stages of a running pipeline all run the same term", KNOWN_TO_FAIL, _LOADS,
             _pipeline_runs_one_term),
    Property("majorities_overlap",
             "majorities of two different planned stage sets always overlap", KNOWN_TO_FAIL,
             _CLAIMS, _majorities_overlap),
    Property("load_within_lease_on_true_clock",
             "no load is accepted after its lease on the true clock, even with skewed clocks",
             KNOWN_TO_FAIL, _LOADS, _load_within_lease_on_true_clock),
)
PROPERTY_NAMES: tuple[str, ...] = tuple(p.name for p in PROPERTIES)
MUST_HOLD_NAMES: tuple[str, ...] = tuple(p.name for p in PROPERTIES if p.expectation == MUST_HOLD)
KNOWN_TO_FAIL_NAMES: tuple[str, ...] = tuple(
    p.name for p in PROPERTIES if p.expectation == KNOWN_TO_FAIL)


def property_named(name: str) -> Property:
    for prop in PROPERTIES:
        if prop.name == name:
            return prop
    raise CheckConfigError("property", f"unknown property; expected one of "
                           f"{', '.join(PROPERTY_NAMES)}", name)


# --- results -----------------------------------------------------------------------------

EVENT_COLUMNS: tuple[str, ...] = (
    "seq", "step", "time_ms", "node", "clock_ms", "kind", "message", "peer", "term",
    "accepted", "reason", "lease_until_ms", "detail",
)


def _event_rows(number: int, step: TraceStep) -> list[dict[str, Any]]:
    """One trace step as rows of an event log shaped like the simulator's."""
    time_ms = step.now_unix_ms - START_UNIX_MS
    stage_clock = (None if step.stage_now_unix_ms is None
                   else step.stage_now_unix_ms - START_UNIX_MS)
    lease = None if step.lease_until_unix_ms is None else (
        step.lease_until_unix_ms - START_UNIX_MS)

    def row(node: str | None, kind: str, clock: int | None = None, **values: Any) -> dict:
        base = {"step": number, "time_ms": time_ms, "node": node, "kind": kind,
                "clock_ms": time_ms if clock is None else clock, "message": None, "peer": None,
                "term": step.term, "accepted": None, "reason": None, "lease_until_ms": None,
                "detail": ""}
        base.update(values)
        return base

    kind = step.kind
    if kind in (CAMPAIGN, SEND_LOAD, SEND_STOP):
        return [row(step.coordinator_id, "send", message=step.message, peer=target,
                    detail=step.detail) for target in step.targets]
    if kind == TICK:
        return [row("clock", "tick", term=None, detail=step.detail)]
    if kind == DROP:
        reply = step.message == MESSAGE_NAMES[REPLY_MESSAGE]
        sender, receiver = ((step.stage_id, step.coordinator_id) if reply
                            else (step.coordinator_id, step.stage_id))
        return [row(sender, "drop", message=step.message, peer=receiver, reason="lost",
                    detail=step.detail)]
    if kind == DELIVER_REPLY:
        return [row(step.coordinator_id, "receive", message=step.message, peer=step.stage_id,
                    accepted=True, detail=step.detail)]
    judged = {DELIVER_CLAIM: "claim", DELIVER_LOAD: "load", DELIVER_STOP: "stop"}[kind]
    rows = [row(step.stage_id, judged, stage_clock, message=step.message,
                peer=step.coordinator_id, accepted=step.accepted, reason=step.reason,
                lease_until_ms=lease, detail=step.detail)]
    if step.ended is not None:
        rows.append(row(step.stage_id, "shutdown" if kind == DELIVER_CLAIM else "stopped",
                        stage_clock, term=step.ended.coordinator_term,
                        detail=f"ended {step.ended.describe()}"))
    if kind == DELIVER_CLAIM and step.accepted:
        rows.append(row(step.stage_id, "send", stage_clock,
                        message=MESSAGE_NAMES[REPLY_MESSAGE], peer=step.coordinator_id))
    return rows


@dataclass(frozen=True)
class Counterexample:
    """A shortest run that breaks a property, from an initial state."""

    property_name: str
    explanation: str
    clock_offsets_ms: tuple[int, ...]
    steps: tuple[TraceStep, ...]

    @property
    def lines(self) -> list[str]:
        offsets = ", ".join(
            f"{stage_id(i)} {offset:+d} ms" for i, offset in enumerate(self.clock_offsets_ms))
        return ([f"start: stage clock offsets {offsets}"]
                + [f"{n}. {step.text}" for n, step in enumerate(self.steps, 1)]
                + [f"violated: {self.explanation}"])

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "property_name": self.property_name,
            "explanation": self.explanation,
            "clock_offsets_ms": list(self.clock_offsets_ms),
            "steps": [step.to_dict() for step in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counterexample:
        values = _mapping(data, "counterexample")
        return cls(values["property_name"], values["explanation"],
                   tuple(values["clock_offsets_ms"]),
                   tuple(TraceStep.from_dict(step) for step in values["steps"]))

    def events_frame(self) -> pd.DataFrame:
        """The trace as an event log (columns :data:`EVENT_COLUMNS`), times in ms from 0."""
        rows = [r for n, step in enumerate(self.steps, 1) for r in _event_rows(n, step)]
        for seq, row in enumerate(rows):
            row["seq"] = seq
        return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))

    def steps_frame(self) -> pd.DataFrame:
        """One row per step: number, true tick, kind, who, answer and the readable line."""
        return pd.DataFrame(
            [
                {"step": n, "tick": step.tick, "kind": step.kind,
                 "coordinator_id": step.coordinator_id, "stage_id": step.stage_id,
                 "term": step.term, "accepted": step.accepted, "reason": step.reason,
                 "detail": step.detail}
                for n, step in enumerate(self.steps, 1)
            ],
            columns=["step", "tick", "kind", "coordinator_id", "stage_id", "term", "accepted",
                     "reason", "detail"],
        )


@dataclass(frozen=True)
class PropertyResult:
    name: str
    title: str
    expectation: str
    holds: bool
    counterexample: Counterexample | None = None

    @property
    def as_expected(self) -> bool:
        return self.holds == (self.expectation == MUST_HOLD)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "expectation": self.expectation,
            "holds": self.holds,
            "as_expected": self.as_expected,
            "counterexample": None if self.counterexample is None
            else self.counterexample.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PropertyResult:
        values = _mapping(data, "property result")
        example = values.get("counterexample")
        return cls(values["name"], values["title"], values["expectation"], values["holds"],
                   None if example is None else Counterexample.from_dict(example))


@dataclass(frozen=True)
class CheckResult:
    """What one exploration found.

    ``complete`` is False when the state budget cut a ``partial`` exploration short;
    "holds" then only means that no state explored breaks the property.
    """

    config: CheckConfig
    states_explored: int
    transitions: int
    max_depth: int
    complete: bool
    properties: tuple[PropertyResult, ...]

    def result(self, name: str) -> PropertyResult:
        for result in self.properties:
            if result.name == name:
                return result
        raise CheckConfigError("property", "was not judged in this check; judged: "
                               f"{', '.join(r.name for r in self.properties)}", name)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "property": r.name,
                    "statement": r.title,
                    "expected": r.expectation,
                    "holds": r.holds,
                    "as_expected": r.as_expected,
                    "counterexample_steps": None if r.counterexample is None
                    else len(r.counterexample.steps),
                }
                for r in self.properties
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "states_explored": self.states_explored,
            "transitions": self.transitions,
            "max_depth": self.max_depth,
            "complete": self.complete,
            "properties": [r.to_dict() for r in self.properties],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        values = _mapping(data, "check result")
        return cls(CheckConfig.from_dict(values["config"]), values["states_explored"],
                   values["transitions"], values["max_depth"], values["complete"],
                   tuple(PropertyResult.from_dict(r) for r in values["properties"]))


# --- exploration -------------------------------------------------------------------------


def reachable_states(
    config: CheckConfig,
    *,
    claim_rule: ClaimRule = decide_claim,
    load_rule: LoadRule = decide_load,
    stop_rule: StopRule = decide_stop,
) -> set[ModelState]:
    """Every state of ``config`` reachable from an initial state."""
    model = FenceModel(config, Rules(claim_rule, load_rule, stop_rule))
    seen = set(model.initial_states())
    frontier = list(seen)
    while frontier:
        state = frontier.pop()
        for action in model.actions(state):
            after, _ = model.apply(state, action)
            if after not in seen:
                seen.add(after)
                frontier.append(after)
    return seen


DEFAULT_MAX_STATES = 1_000_000
"""The states one check keeps before it gives up: at about half a kilobyte each (more for
larger meshes) this bounds a check to roughly a gigabyte. The default configurations
stay far below it; the largest configuration :class:`CheckConfig` accepts does not."""

PROGRESS_EVERY = 10_000
"""By default a progress report is made each time this many more states are known."""


class CheckProgress(NamedTuple):
    """Where an exploration is: states known so far, transitions taken, the depth of the
    breadth-first level being explored, the states waiting in the next level, and the
    budget."""

    states_explored: int
    transitions: int
    depth: int
    frontier: int
    max_states: int
    done: bool = False

    @property
    def budget_used(self) -> float:
        """The share of the state budget used, between 0 and 1."""
        return min(1.0, self.states_explored / self.max_states)


ProgressCallback = Callable[[CheckProgress], None]


class StateBudgetExceeded(FenceError):
    """The configuration has more states than the check may keep (``max_states``)."""

    codes = ("CheckStateBudgetExceeded",)

    def __init__(self, config: CheckConfig, progress: CheckProgress) -> None:
        super().__init__(
            f"the model of {config.describe()} has more than {progress.max_states:,} states "
            f"(stopped at depth {progress.depth} after {progress.transitions:,} "
            "transitions); check a smaller configuration (fewer stages, coordinators, terms "
            "or clock ticks; skew and message loss off), raise max_states, or pass "
            "partial=True to judge only the states explored",
            max_states=progress.max_states, states_explored=progress.states_explored,
            depth=progress.depth, config=config.to_dict())
        self.progress = progress


def check(
    config: CheckConfig | None = None,
    *,
    claim_rule: ClaimRule = decide_claim,
    load_rule: LoadRule = decide_load,
    stop_rule: StopRule = decide_stop,
    properties: Sequence[str] | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    partial: bool = False,
    progress: ProgressCallback | None = None,
    progress_every: int = PROGRESS_EVERY,
) -> CheckResult:
    """Explore every state of ``config`` breadth first and judge each property.

    ``claim_rule``, ``load_rule`` and ``stop_rule`` replace the stage's rules (to show
    that a broken rule is caught); ``properties`` limits which properties are judged.

    ``max_states`` is the state budget. When the model has more states,
    :class:`StateBudgetExceeded` is raised, or with ``partial`` the states explored so
    far are judged and the result says it is not complete. ``progress`` is called with
    a :class:`CheckProgress` every ``progress_every`` new states, after each
    breadth-first level, and once at the end (``done``).
    """
    config = config if config is not None else CheckConfig()
    model = FenceModel(config, Rules(claim_rule, load_rule, stop_rule))
    chosen = PROPERTIES if properties is None else tuple(property_named(n) for n in properties)
    max_states = integer(max_states, _config_error("max_states"), minimum=1, maximum=10**9)
    progress_every = integer(progress_every, _config_error("progress_every"), minimum=1,
                             maximum=10**9)
    if not isinstance(partial, bool):
        raise CheckConfigError("partial", "must be true or false", partial)
    if progress is not None and not callable(progress):
        raise CheckConfigError("progress", "must be a function of one CheckProgress",
                               progress)

    parents: dict[ModelState, tuple[ModelState, Action] | None] = {}
    frontier: list[ModelState] = []
    for state in model.initial_states():
        if state not in parents:
            parents[state] = None
            frontier.append(state)
    found: dict[str, tuple[ModelState, Action, str]] = {}
    judged_by_kind = {kind: [p for p in chosen if kind in p.kinds] for kind in STEP_KINDS}
    transitions = 0
    depth = 0
    complete = True
    next_report = progress_every

    def report(pending: int, done: bool = False) -> CheckProgress:
        where = CheckProgress(len(parents), transitions, depth, pending, max_states, done)
        if progress is not None:
            progress(where)
        return where

    while frontier:
        next_frontier: list[ModelState] = []
        for state in frontier:
            for action in model.actions(state):
                after, step = model.apply(state, action)
                transitions += 1
                for prop in judged_by_kind[step.kind]:
                    if prop.name in found:
                        continue
                    explanation = prop.violation(model, state, step, after)
                    if explanation is not None:
                        found[prop.name] = (state, action, explanation)
                if after in parents:
                    continue
                if len(parents) >= max_states:
                    if not partial:
                        raise StateBudgetExceeded(config, report(len(next_frontier)))
                    complete = False
                    continue
                parents[after] = (state, action)
                next_frontier.append(after)
                if len(parents) >= next_report:
                    next_report += progress_every
                    report(len(next_frontier))
        frontier = next_frontier
        if frontier:
            depth += 1
            report(len(frontier))
    report(0, done=True)

    results = []
    for prop in chosen:
        if prop.name in found:
            state, action, explanation = found[prop.name]
            example = _counterexample(model, parents, state, action, prop.name, explanation)
            results.append(PropertyResult(prop.name, prop.title, prop.expectation, False,
                                          example))
        else:
            results.append(PropertyResult(prop.name, prop.title, prop.expectation, True))
    return CheckResult(config, len(parents), transitions, depth, complete, tuple(results))


def _counterexample(
    model: FenceModel,
    parents: Mapping[ModelState, tuple[ModelState, Action] | None],
    last_state: ModelState,
    last_action: Action,
    name: str,
    explanation: str,
) -> Counterexample:
    actions = [last_action]
    state = last_state
    while (link := parents[state]) is not None:
        state, action = link
        actions.append(action)
    actions.reverse()
    steps = []
    for action in actions:
        state, step = model.apply(state, action, describe=True)
        steps.append(step)
    offsets_ms = tuple(offset * TICK_MS for offset in state.clock_offsets)
    return Counterexample(name, explanation, offsets_ms, tuple(steps))


def replay(
    config: CheckConfig,
    counterexample: Counterexample,
    *,
    claim_rule: ClaimRule = decide_claim,
    load_rule: LoadRule = decide_load,
    stop_rule: StopRule = decide_stop,
) -> list[ModelState]:
    """Re-run a counterexample through the model and return every state along the way.

    Each step must be one the model can take where it occurs and must reproduce the
    recorded answer; otherwise :class:`CheckConfigError` names the step that diverged.
    """
    model = FenceModel(config, Rules(claim_rule, load_rule, stop_rule))
    offsets = tuple(offset // TICK_MS for offset in counterexample.clock_offsets_ms)
    starts = [s for s in model.initial_states() if s.clock_offsets == offsets]
    if not starts:
        raise CheckConfigError("clock_offsets_ms", "no initial state of this configuration "
                               "has these stage clocks", counterexample.clock_offsets_ms)
    states = [starts[0]]
    for number, recorded in enumerate(counterexample.steps, 1):
        state = states[-1]
        for action in model.actions(state):
            after, step = model.apply(state, action, describe=True)
            if step == recorded:
                states.append(after)
                break
        else:
            raise CheckConfigError(f"steps[{number}]", "no step the model can take here "
                                   "reproduces this one", recorded.text)
    return states


def _mapping(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise CheckConfigError(what, "must be a mapping of field names", type(data).__name__)
    return data


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
        values = _mapping(data, "named configuration")
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


@dataclass(frozen=True)
class CheckReport:
    """Results over several configurations, property by property."""

    runs: tuple[tuple[NamedConfig, CheckResult], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"format": REPORT_FORMAT,
                "runs": [{**named.to_dict(), "result": result.to_dict()}
                         for named, result in self.runs]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckReport:
        values = _mapping(data, "check report")
        if values.get("format") != REPORT_FORMAT:
            raise CheckConfigError("format", f"a check report of format {REPORT_FORMAT} is "
                                   "expected", values.get("format"))
        return cls(tuple((NamedConfig.from_dict(run), CheckResult.from_dict(run["result"]))
                         for run in values["runs"]))

    @property
    def states_explored(self) -> int:
        return sum(result.states_explored for _, result in self.runs)

    def result(self, config_name: str) -> CheckResult:
        for named, result in self.runs:
            if named.name == config_name:
                return result
        raise CheckConfigError("config_name", "not one of the checked configurations "
                               f"({', '.join(n.name for n, _ in self.runs)})", config_name)

    def shortest_counterexample(self, property_name: str) -> tuple[str, Counterexample] | None:
        """The configuration name and the shortest counterexample over all of them."""
        property_named(property_name)
        found = [
            (named.name, example) for named, result in self.runs
            if (example := result.result(property_name).counterexample) is not None
        ]
        if not found:
            return None
        return min(found, key=lambda pair: len(pair[1].steps))

    def verdict(self, property_name: str) -> PropertyResult:
        """Broken when any configuration breaks it (with the shortest counterexample)."""
        shortest = self.shortest_counterexample(property_name)
        results = {named.name: result.result(property_name) for named, result in self.runs}
        if shortest is not None:
            return results[shortest[0]]
        return next(iter(results.values()))

    def broken_in(self, property_name: str) -> list[str]:
        return [named.name for named, result in self.runs
                if not result.result(property_name).holds]

    def summary_frame(self) -> pd.DataFrame:
        rows = []
        for prop in PROPERTIES:
            verdict = self.verdict(prop.name)
            rows.append({
                "property": prop.name,
                "statement": prop.title,
                "expected": prop.expectation,
                "holds": verdict.holds,
                "as_expected": verdict.as_expected,
                "broken_in": ", ".join(self.broken_in(prop.name)),
                "shortest_counterexample_steps": None if verdict.counterexample is None
                else len(verdict.counterexample.steps),
            })
        return pd.DataFrame(rows)

    def runs_frame(self) -> pd.DataFrame:
        return pd.DataFrame([
            {
                "configuration": named.name,
                "purpose": named.purpose,
                "model": named.config.describe(),
                "states_explored": result.states_explored,
                "transitions": result.transitions,
                "max_depth": result.max_depth,
                "complete": result.complete,
            }
            for named, result in self.runs
        ])


def _check_named(named: NamedConfig, max_states: int = DEFAULT_MAX_STATES) -> CheckResult:
    return check(named.config, max_states=max_states)


DefaultsProgress = Callable[[str, CheckProgress], None]
"""Told the configuration's name and where its exploration is."""


def check_defaults(
    configs: Sequence[NamedConfig] | None = None,
    *,
    workers: int = 1,
    max_states: int = DEFAULT_MAX_STATES,
    progress: DefaultsProgress | None = None,
) -> CheckReport:
    """Check every property on each configuration (the defaults unless given).

    ``workers`` above 1 checks configurations in that many processes at once; each
    configuration has the state budget ``max_states`` (see :func:`check`). ``progress``
    hears ``(name, CheckProgress)`` as each configuration is explored (with several
    workers, once per configuration when it is done).
    """
    chosen = DEFAULT_CONFIGS if configs is None else tuple(configs)
    workers = integer(workers, _config_error("workers"), minimum=1, maximum=64)
    max_states = integer(max_states, _config_error("max_states"), minimum=1, maximum=10**9)
    if progress is not None and not callable(progress):
        raise CheckConfigError("progress", "must be a function of (name, CheckProgress)",
                               progress)
    results: list[CheckResult] = []
    if workers == 1 or len(chosen) < 2:
        for named in chosen:
            hear = None if progress is None else functools.partial(progress, named.name)
            results.append(check(named.config, max_states=max_states, progress=hear))
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(chosen))) as pool:
            done = pool.map(functools.partial(_check_named, max_states=max_states), chosen)
            for named, result in zip(chosen, done, strict=True):
                results.append(result)
                if progress is not None:
                    progress(named.name, CheckProgress(
                        result.states_explored, result.transitions, result.max_depth, 0,
                        max_states, True))
    return CheckReport(tuple(zip(chosen, results, strict=True)))


# --- results computed once -----------------------------------------------------------------

REPORT_FORMAT = 1
REPORT_FILE = "fence_check.json"
"""The default configurations' report, in the data directory; ``make fence-check`` writes
it and a slow test recomputes it, so readers (the fencing notebook) need not wait."""


class StaleCheckResults(FenceError):
    """The saved checker report is missing, unreadable or not for today's configurations."""

    codes = ("StaleCheckResults",)

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}; regenerate it with `make fence-check`",
                         path=str(path))
        self.path = path


def report_path() -> Path:
    """Where the default configurations' report is kept (the data directory)."""
    from planner.models.presets import data_dir  # the one place the data directory is found

    return data_dir() / REPORT_FILE


def write_report(report: CheckReport, path: Path | None = None) -> Path:
    """Save ``report`` as JSON (at :func:`report_path` unless given); returns the path."""
    target = report_path() if path is None else Path(path)
    text = json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n"
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(target)
    return target


def load_report(path: Path | None = None) -> CheckReport:
    """The saved report of the default configurations, refused when it is not for
    today's :data:`DEFAULT_CONFIGS` (names, purposes and configurations)."""
    source = report_path() if path is None else Path(path)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StaleCheckResults(source, "no saved checker report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StaleCheckResults(source, f"cannot be read ({error})") from None
    try:
        report = CheckReport.from_dict(data)
    except (CodedError, KeyError, TypeError) as error:
        raise StaleCheckResults(source, f"is not a checker report ({error})") from None
    if tuple(named for named, _ in report.runs) != DEFAULT_CONFIGS:
        raise StaleCheckResults(source, "was computed for other configurations than "
                                "today's defaults")
    if tuple(r.name for _, result in report.runs for r in result.properties) != (
            PROPERTY_NAMES * len(report.runs)):
        raise StaleCheckResults(source, "judges other properties than today's")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m planner.fence.checker [PATH]``: check the defaults and save the report."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m planner.fence.checker",
                                     description=main.__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=None,
                        help=f"where to write (default: the data directory's {REPORT_FILE})")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)

    def hear(name: str, where: CheckProgress) -> None:
        if where.done:
            print(f"{name}: {where.states_explored:,} states, depth {where.depth}",
                  flush=True)

    report = check_defaults(workers=args.workers, progress=hear)
    written = write_report(report, args.path)
    print(f"wrote {written} ({report.states_explored:,} states)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
