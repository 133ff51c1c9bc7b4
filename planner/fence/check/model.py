"""The transition system the checker explores, one :class:`FenceModel` per configuration
and set of stage rules.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from planner.fence.check.configuration import (
    CheckConfig,
    CheckConfigError,
    coordinator_id,
    listed,
    record,
    stage_id,
    tick_unix_ms,
    unix_ms_tick,
)
from planner.fence.claims import (
    ClaimDecision,
    CoordinatorClaim,
    LoadClaimRef,
    LoadDecision,
    decide_claim,
    decide_load,
)
from planner.fence.runtime import StageWork, StopDecision, StopRequest, decide_stop

ClaimRule = Callable[[CoordinatorClaim | None, CoordinatorClaim, int], ClaimDecision]
LoadRule = Callable[[CoordinatorClaim | None, LoadClaimRef, int], LoadDecision]
StopRule = Callable[[CoordinatorClaim | None, StopRequest], StopDecision]


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
        known = [name for name in cls.__dataclass_fields__]
        values = record(data, "step", ("kind", "now_unix_ms"), (*known[2:], "text"))
        kept = {name: values[name] for name in known if name in values}
        for name, kind in (("claim", CoordinatorClaim), ("load", LoadClaimRef),
                           ("stop", StopRequest), ("ended", StageWork)):
            if kept.get(name) is not None:
                kept[name] = kind.from_dict(kept[name])
        kept["targets"] = tuple(listed(kept.get("targets", ()), "step.targets"))
        return cls(**kept)


@dataclass(frozen=True)
class Rules:
    """The stage rules the model runs: the real fence unless replaced."""

    decide_claim: ClaimRule = decide_claim
    decide_load: LoadRule = decide_load
    decide_stop: StopRule = decide_stop

    def __post_init__(self) -> None:
        for name, argument in (("decide_claim", "claim_rule"), ("decide_load", "load_rule"),
                               ("decide_stop", "stop_rule")):
            if not callable(getattr(self, name)):
                raise CheckConfigError(argument, f"must be a function like {name}",
                                       getattr(self, name))


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
        if not isinstance(config, CheckConfig):
            raise CheckConfigError("config", f"must be a CheckConfig, not "
                                   f"{type(config).__name__}", config)
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
