"""The coordinator state machine and the discrete-event simulator."""

from __future__ import annotations

import pytest

from planner.fence import CoordinatorClaim, InvalidFenceInput, LoadClaimRef
from planner.fence.claims import decide_claim, decide_load
from planner.fence.coordinator import (
    Coordinator,
    CoordinatorPhase,
    CoordinatorPolicy,
    Note,
    Send,
    SetTimer,
    SplitPlan,
)
from planner.fence.errors import SimulationError
from planner.fence.messages import ClaimCoordinator, LoadStage, StopStage
from planner.fence.simulator import EVENT_COLUMNS, MessageRule, NetworkConfig, Simulation

STAGES = ("s1", "s2", "s3")


def plan(stages: tuple[str, ...] = STAGES, topology: str = "topo-1") -> SplitPlan:
    return SplitPlan("qwen", "hf://pkg", "sha", topology, "run-1", stages)


def mesh(seed: int = 0, *, stages: tuple[str, ...] = STAGES, **kwargs: object) -> Simulation:
    sim = Simulation(seed=seed, **kwargs)  # type: ignore[arg-type]
    for stage in stages:
        sim.add_stage(stage)
    return sim


def sends(actions: list, name: str) -> list[Send]:
    return [a for a in actions if isinstance(a, Send) and a.message.name == name]


def notes(actions: list, kind: str) -> list[Note]:
    return [a for a in actions if isinstance(a, Note) and a.kind == kind]


# -- plans ------------------------------------------------------------------------------------


def test_plan_hashes_follow_participants_and_layout() -> None:
    a = plan()
    assert a.participant_set_hash and a.topology_hash and a.quorum == 2
    assert plan().topology_hash == a.topology_hash
    assert plan(("s1", "s3", "s2")).participant_set_hash == a.participant_set_hash
    assert plan(("s1", "s3", "s2")).topology_hash != a.topology_hash
    assert plan(("s1", "s2")).participant_set_hash != a.participant_set_hash
    ranged = SplitPlan("qwen", "hf://pkg", "sha", "topo-1", "run-1", STAGES,
                       ((0, 10), (10, 20), (20, 30)))
    assert ranged.topology_hash != a.topology_hash


def test_plan_refuses_bad_stage_lists() -> None:
    for stages, problem in [((), "at least one"), (("s1", "s1"), "only one stage"),
                            (("s1", ""), "non-empty")]:
        with pytest.raises(InvalidFenceInput) as info:
            plan(stages)
        assert problem in str(info.value)
    with pytest.raises(InvalidFenceInput):
        SplitPlan("qwen", "hf://pkg", "sha", "t", "r", STAGES, ((0, 1),))


def test_plan_from_planned_stages() -> None:
    class Stage:
        def __init__(self, node_id: str, start: int, end: int) -> None:
            self.node_id, self.layer_start, self.layer_end = node_id, start, end

    built = SplitPlan.from_stages([Stage("n1", 0, 30), Stage("n2", 30, 62)], model_id="qwen",
                                  package_ref="p", manifest_sha256="s", topology_id="t",
                                  run_id="r")
    assert built.stage_nodes == ("n1", "n2") and built.layer_ranges == ((0, 30), (30, 62))


# -- the coordinator state machine ----------------------------------------------------------


def stage_reply(coordinator: Coordinator, stage: str, stored: CoordinatorClaim | None,
                now: int = 0) -> list:
    assert coordinator.claim is not None
    decision = decide_claim(stored, coordinator.claim, now)
    return coordinator.on_claim_reply(stage, decision, coordinator.round_id, now)


def test_coordinator_claims_every_stage_and_loads_only_at_quorum() -> None:
    c = Coordinator("c1", plan())
    actions = c.start(0, term=4)
    assert [s.dst for s in sends(actions, "ClaimCoordinator")] == list(STAGES)
    assert all(isinstance(s.message, ClaimCoordinator) and s.message.term == 4
               for s in sends(actions, "ClaimCoordinator"))
    assert any(isinstance(a, SetTimer) and a.timer == "claim_timeout" for a in actions)
    assert not sends(stage_reply(c, "s1", None), "LoadStage")
    assert c.phase is CoordinatorPhase.CLAIMING
    second = stage_reply(c, "s2", None)
    loads = sends(second, "LoadStage")
    assert [s.dst for s in loads] == list(STAGES) and notes(second, "quorum")
    assert all(isinstance(s.message, LoadStage) and s.message.load.coordinator_term == 4
               and s.message.load.coordinator_id == "c1" for s in loads)
    assert c.phase is CoordinatorPhase.LOADING and c.quorum_terms == [4]


def test_four_stages_need_three_accepts() -> None:
    c = Coordinator("c1", plan(("s1", "s2", "s3", "s4")))
    c.start(0, term=1)
    for stage in ("s1", "s2"):
        assert not sends(stage_reply(c, stage, None), "LoadStage")
    assert sends(stage_reply(c, "s3", None), "LoadStage")


def test_no_quorum_retries_with_a_higher_term_then_gives_up() -> None:
    c = Coordinator("c1", plan(), CoordinatorPolicy(max_attempts=2, retry_interval_ms=500))
    c.start(0, term=1)
    stage_reply(c, "s1", None)
    timed_out = c.on_timer("claim_timeout", c.round_id, 2_000)
    assert notes(timed_out, "no_quorum") and notes(timed_out, "retry")
    assert c.phase is CoordinatorPhase.STANDBY
    retry = c.on_timer("retry", c.round_id, 2_500)
    assert [s.message.term for s in sends(retry, "ClaimCoordinator")] == [2, 2, 2]
    final = c.on_timer("claim_timeout", c.round_id, 4_500)
    assert notes(final, "give_up") and c.phase is CoordinatorPhase.GAVE_UP


def test_stale_rejections_make_the_coordinator_stand_down_or_outbid() -> None:
    newer = SplitPlan("qwen", "hf://pkg", "sha", "other", "run-9", STAGES).claim("c9", 6, 10**9)
    humble = Coordinator("c1", plan())
    humble.start(0, term=5)
    for stage in STAGES:
        actions = stage_reply(humble, stage, newer)
    assert notes(actions, "stand_down") and humble.phase is CoordinatorPhase.STOOD_DOWN
    assert humble.highest_seen_term == 6

    bold = Coordinator("c1", plan(), CoordinatorPolicy(stand_down_on_newer_term=False,
                                                       retry_interval_ms=100))
    bold.start(0, term=5)
    for stage in STAGES:
        stage_reply(bold, stage, newer)
    retry = bold.on_timer("retry", bold.round_id, 200)
    assert {s.message.term for s in sends(retry, "ClaimCoordinator")} == {7}


def test_late_replies_to_an_abandoned_round_are_ignored() -> None:
    c = Coordinator("c1", plan(), CoordinatorPolicy(retry_interval_ms=10))
    c.start(0, term=1)
    old_round, old_claim = c.round_id, c.claim
    c.on_timer("claim_timeout", old_round, 2_000)
    c.on_timer("retry", old_round, 2_010)
    assert c.term == 2
    assert old_claim is not None
    late = c.on_claim_reply("s1", decide_claim(None, old_claim, 0), old_round, 2_020)
    assert late == [] and c.accepted_by == set()


def test_expired_lease_on_load_triggers_a_renewal_of_the_same_term() -> None:
    c = Coordinator("c1", plan(), CoordinatorPolicy(lease_ms=100))
    c.start(0, term=3)
    stage_reply(c, "s1", None)
    stage_reply(c, "s2", None)
    assert c.claim is not None
    expired = decide_load(c.claim, LoadClaimRef.for_claim(c.claim), 500)
    actions = c.on_load_reply("s3", expired, 3, 500)
    assert notes(actions, "renew")
    claims = sends(actions, "ClaimCoordinator")
    assert {s.message.term for s in claims} == {3}
    assert all(s.message.claim.lease_until_unix_ms == 600 for s in claims)


def test_stop_and_resend_use_the_last_claim() -> None:
    c = Coordinator("c1", plan())
    with pytest.raises(InvalidFenceInput):
        c.stop_split(0)
    c.start(0, term=8)
    stops = sends(c.stop_split(10), "StopStage")
    assert len(stops) == 3 and all(isinstance(s.message, StopStage) and s.message.term == 8
                                   for s in stops)
    assert c.phase is CoordinatorPhase.STOPPED
    assert len(sends(c.resend_loads(20), "LoadStage")) == 3


# -- the simulator --------------------------------------------------------------------------


@pytest.mark.parametrize(("prepare_ms", "resend_at"), [(1_000, 500), (0, 500)])
def test_a_repeated_load_starts_nothing_new(prepare_ms: int, resend_at: int) -> None:
    # The loads are sent again while the stages prepare (or, with no preparation, run)
    # the work the first loads started: each stage prepares and runs it once and reports
    # it ready once.
    sim = mesh(prepare_ms=prepare_ms)
    sim.add_coordinator("c1", plan())
    sim.start_coordinator(0, "c1")
    sim.resend_loads(resend_at, "c1")
    sim.run(10_000)
    for stage in STAGES:
        kinds = [event.kind for event in sim.events if event.node == stage]
        assert kinds.count("load") == 2
        assert kinds.count("preparing") == (1 if prepare_ms else 0)
        assert kinds.count("running") == 1
    ready = [event for event in sim.events
             if event.kind == "send" and event.message == "StageReady"]
    assert len(ready) == len(STAGES)


def run_fresh(seed: int, **network: object) -> Simulation:
    sim = mesh(seed, network=NetworkConfig(**network))  # type: ignore[arg-type]
    sim.add_coordinator("c1", plan())
    sim.start_coordinator(0, "c1", term=1)
    sim.run()
    return sim


def test_same_seed_same_run_and_seeds_change_timing() -> None:
    one = run_fresh(3, jitter_ms=50, drop_probability=0.2).events_frame()
    two = run_fresh(3, jitter_ms=50, drop_probability=0.2).events_frame()
    assert one.equals(two)
    others = [run_fresh(seed, jitter_ms=50, drop_probability=0.2).events_frame()
              for seed in range(4, 8)]
    assert any(not frame.equals(one) for frame in others)


def test_running_in_pieces_equals_one_run() -> None:
    whole = run_fresh(5, jitter_ms=40)
    pieces = mesh(5, network=NetworkConfig(jitter_ms=40))
    pieces.add_coordinator("c1", plan())
    pieces.start_coordinator(0, "c1", term=1)
    pieces.run(until_ms=60)
    assert pieces.now_ms == 60 and pieces.coordinator("c1").phase is not CoordinatorPhase.RUNNING
    pieces.run()
    assert pieces.events == whole.events


def test_events_frame_has_the_documented_columns() -> None:
    frame = run_fresh(0).events_frame()
    assert tuple(frame.columns) == EVENT_COLUMNS
    assert frame["time_ms"].is_monotonic_increasing
    assert {"attempt", "send", "claim", "receive", "quorum", "load", "preparing", "running",
            "split_started"} <= set(frame["kind"])
    claims = frame[frame["kind"] == "claim"]
    assert len(claims) == 3 and claims["accepted"].all()
    assert (claims["message"] == "ClaimCoordinator").all() and (claims["term"] == 1).all()


def test_a_lossless_fresh_start_runs_every_stage() -> None:
    sim = run_fresh(11)
    assert sim.coordinator("c1").phase is CoordinatorPhase.RUNNING
    for stage in STAGES:
        (work,) = sim.stage(stage).running
        assert (work.coordinator_term, work.coordinator_id) == (1, "c1")


def test_lossy_network_never_loads_before_quorum() -> None:
    without_quorum = 0
    for seed in range(20):
        sim = run_fresh(seed, drop_probability=0.5)
        frame = sim.events_frame()
        assert ((frame["kind"] == "drop") & (frame["reason"] == "lost")).any()
        quorum_times = frame.loc[frame["kind"] == "quorum", "time_ms"]
        load_times = frame.loc[(frame["kind"] == "send") & (frame["message"] == "LoadStage"),
                               "time_ms"]
        if quorum_times.empty:
            without_quorum += 1
            assert load_times.empty
            assert all(not sim.stage(s).running for s in STAGES)
        else:
            assert load_times.min() >= quorum_times.min()
    assert 0 < without_quorum < 20


def test_crashed_stage_drops_messages_and_forgets_claims_on_restart() -> None:
    sim = mesh(network=NetworkConfig(jitter_ms=0))
    sim.add_coordinator("c1", plan())
    sim.start_coordinator(0, "c1", term=1)
    sim.crash(5_000, "s1")
    sim.restart(6_000, "s1")
    sim.run()
    assert sim.stage("s1").claims == () and sim.stage("s1").running == ()
    assert sim.stage("s2").running
    frame = sim.events_frame()
    assert "claims forgotten" in frame[frame["kind"] == "crash"]["detail"].iloc[0]

    durable = mesh(network=NetworkConfig(jitter_ms=0), durable_fence=True)
    durable.add_coordinator("c1", plan())
    durable.start_coordinator(0, "c1", term=1)
    durable.crash(5_000, "s1")
    durable.run()
    assert durable.stage("s1").accepted_term(("qwen", "hf://pkg", "sha")) == 1
    assert not durable.is_up("s1")


def test_down_stage_loses_messages_sent_to_it() -> None:
    sim = mesh()
    sim.add_coordinator("c1", plan())
    sim.crash(0, "s3")
    sim.start_coordinator(10, "c1", term=1)
    sim.run()
    drops = [e for e in sim.events if e.kind == "drop" and e.peer == "s3"]
    assert {e.message for e in drops} == {"ClaimCoordinator", "LoadStage"}
    assert all(e.reason == "node_down" and e.node == "c1" for e in drops)


def test_partition_blocks_messages_until_heal() -> None:
    sim = mesh(network=NetworkConfig(jitter_ms=0))
    sim.add_coordinator("c1", plan(), policy=CoordinatorPolicy(max_attempts=1))
    sim.partition(0, {"c1", "s1"}, {"s2", "s3"})
    sim.start_coordinator(10, "c1", term=1)
    sim.heal(5_000)
    sim.start_coordinator(6_000, "c1", term=2)
    sim.run()
    blocked = [e for e in sim.events if e.kind == "drop" and e.reason == "partition"]
    assert {e.peer for e in blocked} == {"s2", "s3"} and all(e.time_ms < 5_000 for e in blocked)
    assert [e.term for e in sim.events if e.kind == "quorum"] == [2]
    assert all(sim.stage(s).running for s in STAGES)


def test_partition_starting_mid_flight_drops_the_message() -> None:
    sim = mesh(network=NetworkConfig(base_delay_ms=100, jitter_ms=0))
    sim.add_coordinator("c1", plan(), policy=CoordinatorPolicy(max_attempts=1))
    sim.start_coordinator(0, "c1", term=1)
    sim.partition(50, {"c1"})
    sim.run()
    in_flight = [e for e in sim.events if e.kind == "drop"]
    assert len(in_flight) == 3 and all("in flight" in e.detail for e in in_flight)
    assert not any(e.kind == "claim" for e in sim.events)


def test_leases_are_judged_on_the_receiving_stage_clock() -> None:
    sim = Simulation(network=NetworkConfig(jitter_ms=0))
    sim.add_stage("s1")
    sim.add_stage("s2", clock_offset_ms=2_000)
    sim.add_stage("s3", clock_offset_ms=-2_000)
    sim.add_coordinator("c1", plan(), policy=CoordinatorPolicy(lease_ms=1_500, max_renewals=0))
    sim.start_coordinator(0, "c1", term=1)
    sim.run()
    by_stage = {e.node: e for e in sim.events if e.kind == "claim"}
    assert by_stage["s1"].accepted and by_stage["s3"].accepted
    assert by_stage["s2"].reason == "ExpiredLease" and by_stage["s2"].clock_ms == 2_020
    assert by_stage["s2"].lease_until_ms == 1_500


def test_coordinator_clock_sets_the_lease() -> None:
    sim = mesh(network=NetworkConfig(jitter_ms=0))
    sim.add_coordinator("c1", plan(), policy=CoordinatorPolicy(lease_ms=1_000, max_attempts=1),
                        clock_offset_ms=-5_000)
    sim.start_coordinator(0, "c1", term=1)
    sim.run()
    claims = [e for e in sim.events if e.kind == "claim"]
    assert all(e.reason == "ExpiredLease" and e.lease_until_ms == -4_000 for e in claims)
    assert not any(e.kind == "running" for e in sim.events)


def test_message_rules_delay_or_drop_a_limited_number_of_messages() -> None:
    sim = mesh(network=NetworkConfig(jitter_ms=0))
    sim.add_coordinator("c1", plan())
    sim.add_rule(MessageRule(dst="s1", message="ClaimCoordinator", drop=True, times=1))
    sim.add_rule(MessageRule(dst="s2", message="LoadStage", extra_delay_ms=700, times=None))
    sim.start_coordinator(0, "c1", term=1)
    sim.run()
    assert [e.peer for e in sim.events if e.kind == "drop"] == ["s1"]
    load_at_s2 = next(e for e in sim.events if e.kind == "load" and e.node == "s2")
    quorum_at = next(e.time_ms for e in sim.events if e.kind == "quorum")
    assert load_at_s2.time_ms == quorum_at + 720
    # s1 never got the claim, so its load is refused: the split stays incomplete.
    s1_load = next(e for e in sim.events if e.kind == "load" and e.node == "s1")
    assert s1_load.reason == "MissingClaim"


def test_stale_messages_can_be_injected() -> None:
    sim = mesh(network=NetworkConfig(jitter_ms=0))
    sim.add_coordinator("c1", plan())
    sim.start_coordinator(0, "c1", term=5)
    old = plan().claim("c0", 4, 10**9)
    sim.send(3_000, "c1", "s1", ClaimCoordinator(old))
    sim.local_load(3_000, "s2", LoadClaimRef.for_claim(old))
    sim.run()
    stale = [e for e in sim.events if e.time_ms >= 3_000 and e.kind in ("claim", "load")]
    assert [(e.node, e.reason) for e in stale] == [("s2", "TermMismatch"), ("s1", "StaleTerm")]


def test_describe_reads_as_a_sentence() -> None:
    sim = run_fresh(0)
    lines = [e.describe() for e in sim.events]
    assert lines[0].startswith("t=0 ms c1 attempt term 1")
    assert any("claim ClaimCoordinator <- c1 term 1: accepted" in line for line in lines)


def test_configuration_errors_name_the_problem() -> None:
    sim = mesh()
    with pytest.raises(SimulationError, match="already in the simulation"):
        sim.add_stage("s1")
    with pytest.raises(SimulationError, match="not in the simulation: s9"):
        sim.add_coordinator("c1", plan(("s1", "s9")))
    with pytest.raises(SimulationError, match="no node 'ghost'"):
        sim.crash(10, "ghost")
    with pytest.raises(SimulationError, match="two groups"):
        sim.partition(0, {"s1", "s2"}, {"s2"})
    with pytest.raises(InvalidFenceInput, match="drop_probability"):
        NetworkConfig(drop_probability=1.5)
    sim.add_coordinator("c1", plan())
    sim.start_coordinator(100, "c1")
    sim.run()
    with pytest.raises(SimulationError, match="already at"):
        sim.crash(50, "s1")
    assert SimulationError("x").code == "InvalidSimulation"
