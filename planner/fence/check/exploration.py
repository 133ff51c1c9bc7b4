"""Breadth-first exploration: :func:`check` one configuration within a state budget
(with progress reports), :func:`check_defaults` several (optionally in worker
processes), :func:`replay` a counterexample, :func:`reachable_states` for tests."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

from planner._validate import flag, integer
from planner.fence.check._properties import PROPERTIES, property_named
from planner.fence.check.configuration import (
    DEFAULT_CONFIGS,
    TICK_MS,
    CheckConfig,
    CheckConfigError,
    NamedConfig,
    config_error,
)
from planner.fence.check.model import (
    STEP_KINDS,
    Action,
    ClaimRule,
    FenceModel,
    LoadRule,
    ModelState,
    Rules,
    StopRule,
)
from planner.fence.check.report import (
    CheckReport,
    CheckResult,
    Counterexample,
    PropertyResult,
    model_fingerprint,
)
from planner.fence.claims import decide_claim, decide_load
from planner.fence.errors import FenceError
from planner.fence.runtime import decide_stop


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
    if properties is not None and (isinstance(properties, str)
                                   or not isinstance(properties, Iterable)):
        raise CheckConfigError("properties", "must be a list of property names", properties)
    chosen = PROPERTIES if properties is None else tuple(property_named(n) for n in properties)
    max_states = integer(max_states, config_error("max_states"), minimum=1, maximum=10**9)
    progress_every = integer(progress_every, config_error("progress_every"), minimum=1,
                             maximum=10**9)
    partial = flag(partial, config_error("partial"))
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
    if not isinstance(counterexample, Counterexample):
        raise CheckConfigError("counterexample", "must be a Counterexample, not "
                               f"{type(counterexample).__name__}", counterexample)
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
    if configs is not None and (isinstance(configs, str) or not isinstance(configs, Iterable)):
        raise CheckConfigError("configs", "must be a list of NamedConfig", configs)
    chosen = DEFAULT_CONFIGS if configs is None else tuple(configs)
    for index, named in enumerate(chosen):
        if not isinstance(named, NamedConfig):
            raise CheckConfigError(f"configs[{index}]", "must be a NamedConfig, not "
                                   f"{type(named).__name__}", named)
    workers = integer(workers, config_error("workers"), minimum=1, maximum=64)
    max_states = integer(max_states, config_error("max_states"), minimum=1, maximum=10**9)
    if progress is not None and not callable(progress):
        raise CheckConfigError("progress", "must be a function of (name, CheckProgress)",
                               progress)
    # Read before exploring: the code that runs is the code loaded now.
    fingerprint = model_fingerprint()
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
    return CheckReport(tuple(zip(chosen, results, strict=True)), fingerprint)
