"""One targets type and one check: sizing, availability and their commands judge a plan
the same way, with the minimum context worked out in one place."""

from __future__ import annotations

import json

import pytest
from test_cli import FIVE, run

from planner.availability import NodeReliability, fleet_availability
from planner.models import load_gpu_catalog, load_preset
from planner.planning import NodeBudget, PlanningInput, plan_topology
from planner.sizing import SizingTargets, fleet_node_kinds, fleet_nodes, size_fleet
from planner.targets import SpeedEstimator, Targets, TargetsError

GIB = 2**30


def _request(native: int = 131072) -> PlanningInput:
    return PlanningInput(native_context_length=native, layer_count=4,
                         model_weight_bytes=4 * GIB, kv_bytes_per_token=4,
                         nodes=(NodeBudget("a", 8 * GIB), NodeBudget("b", 8 * GIB)))


def test_sizing_takes_the_one_targets_type() -> None:
    assert SizingTargets is Targets


def test_the_minimum_context_is_the_floor_unless_given_and_never_above_native() -> None:
    request = _request()
    assert Targets().context_for(request) == 65536
    assert Targets().context_for(_request(native=4096)) == 4096
    assert Targets(minimum_context=100000).for_request(request).minimum_context == 100000
    with pytest.raises(TargetsError) as error:
        Targets(minimum_context=262144).for_request(request)
    assert (error.value.code, error.value.details["field"]) == ("InvalidTargets",
                                                                "minimum_context")


def test_meets_checks_context_lanes_stages_and_the_estimated_tpot() -> None:
    request = _request()
    plan = plan_topology(request)
    assert Targets().meets(plan)
    assert not Targets(minimum_context=plan.context_length + 1).meets(plan)
    assert not Targets(minimum_lanes=plan.parallel_lanes + 1).meets(plan)
    assert not Targets(minimum_nodes=plan.stage_count + 1).meets(plan)
    # A TPOT target is missed when it cannot be estimated, never guessed met.
    assert not Targets(target_decode_tpot_ms=10**6).meets(plan, None)
    assert Targets(minimum_lanes=99, target_decode_tpot_ms=1).shortfalls(plan) == [
        f"{plan.parallel_lanes} lanes < 99", "no TPOT estimate"]


def test_a_fleet_files_targets_come_with_it() -> None:
    request = PlanningInput.from_dict({**_request().to_dict(), "minimum_nodes": 2,
                                       "target_decode_tpot_ms": 40})
    targets = Targets.from_request(request, minimum_lanes=2, minimum_context=None)
    assert targets == Targets(minimum_nodes=2, target_decode_tpot_ms=40, minimum_lanes=2)
    assert Targets.from_dict(targets.to_dict()) == targets
    with pytest.raises(TargetsError):
        Targets.from_dict({"minimum_contxt": 1})


def test_sizing_and_availability_judge_the_same_fleet_alike() -> None:
    """The cheapest fleet sizing finds for a TPOT target, with nodes that never fail, is
    available all the time by availability's judgement; a target just below its
    estimated TPOT makes both say no."""
    spec = load_preset("llama-3.1-70b")
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind in ("l40s", "a100-80gb")]
    found = size_fleet(spec, catalog, Targets(target_decode_tpot_ms=200), top=1,
                       pareto=False).cheapest
    kinds = [gpu for gpu in catalog if gpu.kind in dict(found.counts)]
    counts = [dict(found.counts)[gpu.kind] for gpu in kinds]
    request = PlanningInput(**spec.planning_fields(), nodes=fleet_nodes(kinds, counts))
    estimator = SpeedEstimator(request.nodes, found.estimate and _traffic(spec), catalog,
                               fleet_node_kinds(kinds, counts))
    never = NodeReliability(annual_failure_rate=0, repair_hours=0)
    tpot = found.estimated_tpot_ms
    assert tpot is not None
    met = fleet_availability(request, never, estimator=estimator,
                             targets=Targets(target_decode_tpot_ms=200))
    assert met.availability == 1.0
    missed = fleet_availability(request, never, estimator=estimator,
                                targets=Targets(target_decode_tpot_ms=int(tpot) - 1
                                                if tpot >= 2 else 1))
    assert missed.availability == 0.0


def _traffic(spec):
    from planner.performance import ModelTraffic

    return ModelTraffic.from_spec(spec)


def test_both_commands_refuse_a_minimum_context_above_native_alike() -> None:
    """``planner availability --min-context`` above the model's native context was 0 %
    with exit 0 while ``planner size`` refused it: one rule, InvalidTargets, exit 2."""
    for args in (("availability", FIVE), ("size", FIVE)):
        done = run(*args, "--min-context", str(2**20))
        assert done.returncode == 2, done.stdout
        assert "InvalidTargets" in done.stderr and "native context 262,144" in done.stderr


def test_both_commands_state_the_same_minimum_context() -> None:
    size = json.loads(run("size", FIVE, "--json", "--top", "1").stdout)
    availability = run("availability", FIVE)
    assert "targets context >= 65,536" in availability.stdout
    assert size["fleets"][0]["context_length"] >= 65536


def test_availability_judges_a_fleet_files_tpot_target_by_the_speed_estimate(tmp_path
                                                                           ) -> None:
    # The model typed as numbers has no decode traffic: refused by name, not guessed.
    typed = FIVE.parent / "qwen480b-4x80-latency10-tpot33.toml"
    done = run("availability", typed)
    assert done.returncode == 2
    assert "TPOT target (33 ms) is judged by the speed estimate" in done.stderr
    assert "decode traffic is unknown" in done.stderr
    # A preset on 80 GiB nodes (the A100 80GB by memory): judged, and a target far below
    # any split's estimate is never met.
    fleet = tmp_path / "five.toml"
    fleet.write_text(FIVE.read_text().replace("minimum_nodes = 2",
                                              "minimum_nodes = 2\ntarget_decode_tpot_ms = 1"))
    data = json.loads(run("availability", fleet, "--json").stdout)
    assert data["availability"] == 0.0
    loose = fleet.read_text().replace("target_decode_tpot_ms = 1", "target_decode_tpot_ms = 5000")
    fleet.write_text(loose)
    assert json.loads(run("availability", fleet, "--json").stdout)["availability"] > 0.99
