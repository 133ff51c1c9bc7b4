"""A deterministic discrete-event simulation of coordinators and stages on a mesh.

The network delivers messages after a delay (``base_delay_ms`` plus seeded jitter),
may lose them (``drop_probability``, or a :class:`MessageRule`), and drops anything
crossing a partition or reaching a node that is down. Every node has its own wall
clock, ``time_ms + clock_offset_ms``: a stage judges leases on its own clock, a
coordinator computes leases on its own.

Same seed, same configuration, same run: all randomness comes from one
``random.Random(seed)`` and simultaneous events run in the order they were scheduled.
Every step is recorded as a :class:`SimEvent`; :meth:`Simulation.events_frame` gives
the log as a pandas DataFrame.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from planner._validate import flag, number
from planner.fence.claims import LoadClaimRef, fence_int, require_instance, require_str
from planner.fence.coordinator import (
    Action,
    Coordinator,
    CoordinatorPolicy,
    Note,
    Send,
    SetTimer,
    SplitPlan,
)
from planner.fence.errors import InvalidFenceInput, SimulationError, bad_input
from planner.fence.messages import (
    MESSAGE_NAMES,
    MESSAGE_TYPES,
    ClaimCoordinator,
    ClaimReply,
    LoadReply,
    LoadStage,
    Message,
    StageReady,
    StopReply,
    StopStage,
)
from planner.fence.runtime import StageRuntime, StageWork

EVENT_COLUMNS: tuple[str, ...] = (
    "seq", "time_ms", "node", "clock_ms", "kind", "message", "peer", "term", "accepted",
    "reason", "lease_until_ms", "detail",
)


@dataclass(frozen=True, slots=True)
class SimEvent:
    """One line of the log.

    ``node`` is where it happened and ``clock_ms`` that node's own clock; ``peer`` the
    other end of a message (sends, delays and drops are logged at the sender).
    ``accepted``/``reason`` carry a stage's decision; ``lease_until_ms`` the lease of the
    claim a claim or load was judged with.
    """

    seq: int
    time_ms: int
    node: str
    clock_ms: int
    kind: str
    message: str | None = None
    peer: str | None = None
    term: int | None = None
    accepted: bool | None = None
    reason: str | None = None
    lease_until_ms: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One readable line: ``t=45 ms coord-1 quorum: 2/3 stages accepted ...``."""
        parts = [f"t={self.time_ms} ms", self.node, self.kind]
        if self.message:
            arrow = "->" if self.kind in ("send", "delay", "drop") else "<-"
            parts.append(f"{self.message} {arrow} {self.peer}" if self.peer else self.message)
        if self.term is not None:
            parts.append(f"term {self.term}")
        text = " ".join(parts)
        if self.accepted is not None and self.kind in ("claim", "load", "stop", "receive"):
            text += ": accepted" if self.accepted else f": rejected ({self.reason})"
        elif self.reason:
            text += f" ({self.reason})"
        if self.detail:
            text += f" | {self.detail}"
        return text


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    base_delay_ms: int = 20
    jitter_ms: int = 10
    drop_probability: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_delay_ms",
                           fence_int(self.base_delay_ms, "base_delay_ms", "network", minimum=0))
        object.__setattr__(self, "jitter_ms",
                           fence_int(self.jitter_ms, "jitter_ms", "network", minimum=0))
        object.__setattr__(self, "drop_probability", float(number(
            self.drop_probability, bad_input("drop_probability", "network"), maximum=1)))


@dataclass(frozen=True, slots=True)
class MessageRule:
    """Delay or drop the messages that match (``None`` matches anything).

    ``times`` limits how many messages the rule applies to (``None``: all of them).
    """

    src: str | None = None
    dst: str | None = None
    message: str | None = None
    term: int | None = None
    extra_delay_ms: int = 0
    drop: bool = False
    times: int | None = 1
    label: str = ""

    def __post_init__(self) -> None:
        where = "rule"
        for name in ("src", "dst"):
            require_str(getattr(self, name), name, where, optional=True)
        if self.message is not None and self.message not in MESSAGE_NAMES:
            raise InvalidFenceInput("message", f"must be one of {', '.join(MESSAGE_NAMES)} "
                                    "or None", value=self.message, where=where)
        if self.term is not None:
            object.__setattr__(self, "term", fence_int(self.term, "term", where, minimum=0))
        object.__setattr__(self, "extra_delay_ms",
                           fence_int(self.extra_delay_ms, "extra_delay_ms", where, minimum=0))
        object.__setattr__(self, "drop", flag(self.drop, bad_input("drop", where)))
        if self.times is not None:
            # None means every message; a count below 1 would never apply (or, negative,
            # never run out).
            object.__setattr__(self, "times", fence_int(self.times, "times", where, minimum=1))
        require_str(self.label, "label", where)

    def matches(self, src: str, dst: str, message: Message) -> bool:
        return ((self.src is None or self.src == src)
                and (self.dst is None or self.dst == dst)
                and (self.message is None or self.message == message.name)
                and (self.term is None or self.term == message.term))


@dataclass
class _Rule:
    rule: MessageRule
    remaining: int | None


@dataclass
class _Node:
    node_id: str
    clock_offset_ms: int
    up: bool = True
    incarnation: int = 0


@dataclass
class _Stage(_Node):
    runtime: StageRuntime = field(default_factory=lambda: StageRuntime(""))


@dataclass
class _CoordinatorNode(_Node):
    coordinator: Coordinator | None = None


class Simulation:
    """Build a mesh, schedule what happens to it, :meth:`run` it, read :attr:`events`.

    Scheduling methods take the simulation time in ms at which the thing happens.
    ``durable_fence`` decides whether a restarted stage remembers its accepted
    claims; ``prepare_ms`` is how long an accepted load takes to start running.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        network: NetworkConfig | None = None,
        prepare_ms: int = 1_000,
        durable_fence: bool = False,
    ) -> None:
        seed = fence_int(seed, "seed", "simulation")
        prepare_ms = fence_int(prepare_ms, "prepare_ms", "simulation", minimum=0)
        require_instance(network, NetworkConfig, "simulation.network", optional=True)
        durable_fence = flag(durable_fence, bad_input("durable_fence", "simulation"))
        self.seed = seed
        self.network = network or NetworkConfig()
        self.prepare_ms = prepare_ms
        self.durable_fence = durable_fence
        self.now_ms = 0
        self.events: list[SimEvent] = []
        self._rng = random.Random(seed)
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._stages: dict[str, _Stage] = {}
        self._coordinators: dict[str, _CoordinatorNode] = {}
        self._rules: list[_Rule] = []
        self._groups: tuple[frozenset[str], ...] = ()

    # -- building ----------------------------------------------------------------------

    def _check_new_node(self, node_id: str) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise SimulationError(f"node ids must be non-empty strings (got {node_id!r})")
        if node_id in self._stages or node_id in self._coordinators:
            raise SimulationError(f"node {node_id!r} is already in the simulation")

    def add_stage(self, node_id: str, *, clock_offset_ms: int = 0) -> None:
        self._check_new_node(node_id)
        clock_offset_ms = fence_int(clock_offset_ms, "clock_offset_ms", node_id)
        self._stages[node_id] = _Stage(node_id, clock_offset_ms, runtime=StageRuntime(node_id))

    def add_coordinator(
        self,
        node_id: str,
        plan: SplitPlan,
        *,
        policy: CoordinatorPolicy | None = None,
        clock_offset_ms: int = 0,
    ) -> Coordinator:
        self._check_new_node(node_id)
        clock_offset_ms = fence_int(clock_offset_ms, "clock_offset_ms", node_id)
        require_instance(plan, SplitPlan, "coordinator.plan")
        unknown = [s for s in plan.stage_nodes if s not in self._stages]
        if unknown:
            raise SimulationError(
                f"plan of coordinator {node_id!r} names stages that are not in the simulation: "
                f"{', '.join(unknown)}; add them with add_stage first"
            )
        coordinator = Coordinator(node_id, plan, policy or CoordinatorPolicy())
        self._coordinators[node_id] = _CoordinatorNode(node_id, clock_offset_ms,
                                                       coordinator=coordinator)
        return coordinator

    def add_rule(self, rule: MessageRule) -> None:
        require_instance(rule, MessageRule, "rule")
        for name in (rule.src, rule.dst):
            if name is not None:
                self._node(name)
        self._rules.append(_Rule(rule, rule.times))

    # -- reading -----------------------------------------------------------------------

    @property
    def stage_ids(self) -> tuple[str, ...]:
        return tuple(self._stages)

    @property
    def coordinator_ids(self) -> tuple[str, ...]:
        return tuple(self._coordinators)

    def stage(self, node_id: str) -> StageRuntime:
        if node_id not in self._stages:
            raise SimulationError(f"no stage {node_id!r}; stages: {', '.join(self._stages)}")
        return self._stages[node_id].runtime

    def coordinator(self, node_id: str) -> Coordinator:
        node = self._coordinators.get(node_id)
        if node is None or node.coordinator is None:
            raise SimulationError(
                f"no coordinator {node_id!r}; coordinators: {', '.join(self._coordinators)}"
            )
        return node.coordinator

    def is_up(self, node_id: str) -> bool:
        return self._node(node_id).up

    def clock(self, node_id: str) -> int:
        """The node's own wall clock now."""
        return self.now_ms + self._node(node_id).clock_offset_ms

    def events_frame(self) -> pd.DataFrame:
        return pd.DataFrame([e.to_dict() for e in self.events], columns=list(EVENT_COLUMNS))

    def _node(self, node_id: str) -> _Node:
        node = self._stages.get(node_id) or self._coordinators.get(node_id)
        if node is None:
            known = ", ".join([*self._stages, *self._coordinators])
            raise SimulationError(f"no node {node_id!r} in the simulation; nodes: {known}")
        return node

    # -- scheduling --------------------------------------------------------------------

    def _schedule(self, at_ms: int, action: Callable[[], None]) -> None:
        at_ms = fence_int(at_ms, "at_ms", "schedule", minimum=0)
        if at_ms < self.now_ms:
            raise SimulationError(f"cannot schedule at {at_ms} ms: the simulation is already "
                                  f"at {self.now_ms} ms")
        self._seq += 1
        heapq.heappush(self._queue, (at_ms, self._seq, action))

    def start_coordinator(self, at_ms: int, node_id: str, *, term: int | None = None) -> None:
        """The coordinator plans and starts claiming (``term`` defaults to its next term)."""
        self.coordinator(node_id)

        def go() -> None:
            node = self._coordinators[node_id]
            if not node.up:
                self._log(node_id, "skipped", detail="coordinator is down; cannot start")
                return
            assert node.coordinator is not None
            self._perform(node, node.coordinator.start(self.clock(node_id), term))

        self._schedule(at_ms, go)

    def stop_split(self, at_ms: int, node_id: str) -> None:
        """The coordinator sends ``StopStage`` for its last claim's generation."""
        self._coordinator_command(at_ms, node_id, "stop_split")

    def resend_loads(self, at_ms: int, node_id: str) -> None:
        """The coordinator sends ``LoadStage`` for its last claim without claiming again."""
        self._coordinator_command(at_ms, node_id, "resend_loads")

    def _coordinator_command(self, at_ms: int, node_id: str, command: str) -> None:
        self.coordinator(node_id)

        def go() -> None:
            node = self._coordinators[node_id]
            if not node.up:
                self._log(node_id, "skipped", detail=f"coordinator is down; no {command}")
                return
            assert node.coordinator is not None
            self._perform(node, getattr(node.coordinator, command)(self.clock(node_id)))

        self._schedule(at_ms, go)

    def local_load(self, at_ms: int, stage_id: str, load: LoadClaimRef) -> None:
        """A load that arrives at the stage from its own host, not over the mesh."""
        self.stage(stage_id)
        message = LoadStage(load)  # refused here, not when the load is delivered
        self._schedule(at_ms, lambda: self._local(stage_id, message))

    def send(self, at_ms: int, src: str, dst: str, message: Message) -> None:
        """Put an arbitrary message on the network (a replayed, forged or delayed request)."""
        self._node(src)
        self._node(dst)
        if not isinstance(message, MESSAGE_TYPES):
            raise InvalidFenceInput("message", "must be one of the stage-control messages "
                                    f"({', '.join(MESSAGE_NAMES)}), not "
                                    f"{type(message).__name__}", value=message, where="send")
        self._schedule(at_ms, lambda: self._transmit(src, dst, message))

    def partition(self, at_ms: int, *groups: Iterable[str]) -> None:
        """Split the mesh: messages only flow inside a group. Unnamed nodes form one more."""
        for index, group in enumerate(groups):
            # A bare string would be split into one-letter node ids.
            if isinstance(group, str) or not isinstance(group, Iterable):
                raise InvalidFenceInput(f"groups[{index}]", "must be a list of node ids, not "
                                        f"{type(group).__name__}", value=group,
                                        where="partition")
        parts = [frozenset(g) for g in groups]
        for part in parts:
            for name in part:
                self._node(name)
        seen: set[str] = set()
        for part in parts:
            if seen & part:
                raise SimulationError(f"nodes {sorted(seen & part)} are in two groups")
            seen |= part

        def go() -> None:
            rest = frozenset(self._all_nodes()) - seen
            self._groups = tuple(p for p in (*parts, rest) if p)
            shown = " | ".join("{" + ", ".join(sorted(p)) + "}" for p in self._groups)
            self._log("network", "partition", detail=shown)

        self._schedule(at_ms, go)

    def heal(self, at_ms: int) -> None:
        def go() -> None:
            self._groups = ()
            self._log("network", "heal", detail="every node can reach every other again")

        self._schedule(at_ms, go)

    def crash(self, at_ms: int, node_id: str) -> None:
        self._node(node_id)
        self._schedule(at_ms, lambda: self._crash(node_id))

    def restart(self, at_ms: int, node_id: str) -> None:
        self._node(node_id)
        self._schedule(at_ms, lambda: self._restart(node_id))

    # -- running -----------------------------------------------------------------------

    def run(self, until_ms: int | None = None) -> list[SimEvent]:
        """Process events in time order until none is left (or ``until_ms``)."""
        if until_ms is not None:
            until_ms = fence_int(until_ms, "until_ms", "run", minimum=0)
        while self._queue:
            at_ms, _, action = self._queue[0]
            if until_ms is not None and at_ms > until_ms:
                break
            heapq.heappop(self._queue)
            self.now_ms = at_ms
            action()
        if until_ms is not None:
            self.now_ms = max(self.now_ms, until_ms)
        return self.events

    def _all_nodes(self) -> list[str]:
        return [*self._stages, *self._coordinators]

    def _log(self, node: str, kind: str, **fields: Any) -> None:
        clock = self.clock(node) if node in self._stages or node in self._coordinators else (
            self.now_ms)
        self.events.append(SimEvent(len(self.events), self.now_ms, node, clock, kind, **fields))

    def _connected(self, a: str, b: str) -> bool:
        if a == b or not self._groups:
            return True
        return any(a in g and b in g for g in self._groups)

    def _transmit(self, src: str, dst: str, message: Message) -> None:
        if not self._node(src).up:
            return
        self._log(src, "send", message=message.name, peer=dst, term=message.term)
        delay = self.network.base_delay_ms
        if self.network.jitter_ms:
            delay += self._rng.randint(0, self.network.jitter_ms)
        lost = self.network.drop_probability > 0 and (
            self._rng.random() < self.network.drop_probability)
        for held in self._rules:
            if held.remaining == 0 or not held.rule.matches(src, dst, message):
                continue
            if held.remaining is not None:
                held.remaining -= 1
            if held.rule.drop:
                self._log(src, "drop", message=message.name, peer=dst, term=message.term,
                          reason="rule", detail=held.rule.label or "dropped by a message rule")
                return
            delay += held.rule.extra_delay_ms
            if held.rule.extra_delay_ms:
                self._log(src, "delay", message=message.name, peer=dst, term=message.term,
                          detail=held.rule.label or f"held {held.rule.extra_delay_ms} ms")
        if lost:
            self._log(src, "drop", message=message.name, peer=dst, term=message.term,
                      reason="lost", detail="lost by the network")
            return
        if not self._connected(src, dst):
            self._log(src, "drop", message=message.name, peer=dst, term=message.term,
                      reason="partition", detail=f"{dst} is on the other side of the partition")
            return
        self._schedule(self.now_ms + delay, lambda: self._deliver(src, dst, message))

    def _deliver(self, src: str, dst: str, message: Message) -> None:
        if not self._connected(src, dst):
            self._log(src, "drop", message=message.name, peer=dst, term=message.term,
                      reason="partition", detail="partitioned while in flight")
            return
        if not self._node(dst).up:
            self._log(src, "drop", message=message.name, peer=dst, term=message.term,
                      reason="node_down", detail=f"{dst} is down")
            return
        if dst in self._stages:
            self._stage_receive(dst, src, message)
        else:
            self._coordinator_receive(dst, src, message)

    def _local(self, stage_id: str, message: Message) -> None:
        if not self._stages[stage_id].up:
            self._log(stage_id, "skipped", message=message.name, detail="stage is down")
            return
        self._stage_receive(stage_id, None, message)

    # -- stages --------------------------------------------------------------------------

    def _stage_receive(self, stage_id: str, src: str | None, message: Message) -> None:
        node = self._stages[stage_id]
        now = self.clock(stage_id)
        if isinstance(message, ClaimCoordinator):
            node.runtime, claimed = node.runtime.accept_claim(message.claim, now)
            decision = claimed.decision
            self._log(stage_id, "claim", message=message.name, peer=src, term=message.term,
                      accepted=decision.accepted, reason=decision.reason,
                      lease_until_ms=message.claim.lease_until_unix_ms,
                      detail=decision.message)
            for work in claimed.shut_down:
                self._log(stage_id, "shutdown", term=work.coordinator_term,
                          detail=f"shut down {work.describe()}: superseded by term "
                                 f"{message.term}")
            for work in claimed.cancelled:
                self._log(stage_id, "cancel", term=work.coordinator_term,
                          detail=f"cancelled preparing {work.describe()}: superseded by term "
                                 f"{message.term}")
            self._reply(stage_id, src, ClaimReply(decision, message.term, message.round_id))
        elif isinstance(message, LoadStage):
            before = node.runtime
            node.runtime, loaded = before.load(message.load, now, prepare=self.prepare_ms > 0)
            load_decision = loaded.decision
            held = load_decision.current
            self._log(stage_id, "load", message=message.name, peer=src, term=message.term,
                      accepted=load_decision.accepted, reason=load_decision.reason,
                      lease_until_ms=None if held is None else held.lease_until_unix_ms,
                      detail=load_decision.message)
            started = loaded.started
            # A repeated load names work the stage already prepares or runs: nothing new
            # starts, so it is neither prepared again nor reported ready again.
            if started is not None and started not in (*before.preparing, *before.running):
                if self.prepare_ms > 0:
                    self._prepare(stage_id, started, src)
                else:
                    self._started(stage_id, started, src)
            self._reply(stage_id, src, LoadReply(load_decision, message.term, message.round_id))
        elif isinstance(message, StopStage):
            node.runtime, stop = node.runtime.stop(message.request)
            self._log(stage_id, "stop", message=message.name, peer=src, term=message.term,
                      accepted=stop.decision.accepted, reason=stop.decision.reason,
                      detail=stop.decision.message)
            for work in (*stop.stopped, *stop.cancelled):
                self._log(stage_id, "stopped", term=work.coordinator_term,
                          detail=f"stopped {work.describe()}")
            self._reply(stage_id, src, StopReply(stop.decision, message.term))
        else:
            self._log(stage_id, "ignored", message=message.name, peer=src, term=message.term,
                      detail="stages do not handle this message")

    def _reply(self, stage_id: str, dst: str | None, message: Message) -> None:
        if dst is not None and dst in self._coordinators:
            self._transmit(stage_id, dst, message)

    def _prepare(self, stage_id: str, work: StageWork, coordinator: str | None) -> None:
        node = self._stages[stage_id]
        incarnation = node.incarnation
        self._log(stage_id, "preparing", term=work.coordinator_term,
                  detail=f"preparing {work.describe()}")

        def finish() -> None:
            if not node.up or node.incarnation != incarnation:
                return
            node.runtime, promoted = node.runtime.finish_preparation(work)
            if promoted:
                self._started(stage_id, work, coordinator)

        self._schedule(self.now_ms + self.prepare_ms, finish)

    def _started(self, stage_id: str, work: StageWork, coordinator: str | None) -> None:
        self._log(stage_id, "running", term=work.coordinator_term,
                  detail=f"running {work.describe()}")
        if work.fenced and coordinator is not None and coordinator in self._coordinators:
            self._transmit(stage_id, coordinator, StageReady(work))

    # -- coordinators --------------------------------------------------------------------

    def _coordinator_receive(self, node_id: str, src: str, message: Message) -> None:
        node = self._coordinators[node_id]
        coordinator = node.coordinator
        assert coordinator is not None
        now = self.clock(node_id)
        actions: list[Action]
        if isinstance(message, ClaimReply):
            self._log(node_id, "receive", message=message.name, peer=src, term=message.term,
                      accepted=message.decision.accepted, reason=message.decision.reason,
                      detail=message.decision.message)
            actions = coordinator.on_claim_reply(src, message.decision, message.round_id, now)
        elif isinstance(message, LoadReply):
            self._log(node_id, "receive", message=message.name, peer=src, term=message.term,
                      accepted=message.decision.accepted, reason=message.decision.reason,
                      detail=message.decision.message)
            actions = coordinator.on_load_reply(src, message.decision, message.term, now)
        elif isinstance(message, StageReady):
            self._log(node_id, "receive", message=message.name, peer=src, term=message.term,
                      detail=f"{src} runs {message.work.describe()}")
            actions = coordinator.on_stage_ready(src, message.work, now)
        elif isinstance(message, StopReply):
            self._log(node_id, "receive", message=message.name, peer=src, term=message.term,
                      accepted=message.decision.accepted, reason=message.decision.reason,
                      detail=message.decision.message)
            actions = []
        else:
            self._log(node_id, "ignored", message=message.name, peer=src, term=message.term,
                      detail="coordinators do not handle this message")
            actions = []
        self._perform(node, actions)

    def _perform(self, node: _CoordinatorNode, actions: Sequence[Action]) -> None:
        incarnation = node.incarnation
        for action in actions:
            if isinstance(action, Note):
                self._log(node.node_id, action.kind, term=action.term, accepted=action.accepted,
                          reason=action.reason, detail=action.detail)
            elif isinstance(action, Send):
                self._transmit(node.node_id, action.dst, action.message)
            elif isinstance(action, SetTimer):
                self._set_timer(node, action, incarnation)

    def _set_timer(self, node: _CoordinatorNode, timer: SetTimer, incarnation: int) -> None:
        def fire() -> None:
            if not node.up or node.incarnation != incarnation or node.coordinator is None:
                return
            actions = node.coordinator.on_timer(timer.timer, timer.round_id,
                                                self.clock(node.node_id))
            self._perform(node, actions)

        self._schedule(self.now_ms + timer.delay_ms, fire)

    # -- failures ------------------------------------------------------------------------

    def _crash(self, node_id: str) -> None:
        node = self._node(node_id)
        if not node.up:
            return
        node.up = False
        node.incarnation += 1
        if isinstance(node, _Stage):
            lost = [w.describe() for w in (*node.runtime.running, *node.runtime.preparing)]
            node.runtime = node.runtime.crash(keep_claims=self.durable_fence)
            memory = "claims kept" if self.durable_fence else "claims forgotten"
            detail = f"crashed; lost work: {', '.join(lost) or 'none'}; {memory}"
        else:
            assert isinstance(node, _CoordinatorNode) and node.coordinator is not None
            node.coordinator.crash()
            detail = f"crashed at term {node.coordinator.term}"
        self._log(node_id, "crash", detail=detail)

    def _restart(self, node_id: str) -> None:
        node = self._node(node_id)
        if node.up:
            return
        node.up = True
        node.incarnation += 1
        if isinstance(node, _CoordinatorNode) and node.coordinator is not None:
            node.coordinator.restart()
            detail = f"restarted remembering term {node.coordinator.term}"
        else:
            detail = "restarted"
        self._log(node_id, "restart", detail=detail)

