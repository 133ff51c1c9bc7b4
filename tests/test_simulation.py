"""The simulated year: seeded, re-planned at every change, and in agreement with the
exact availability."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from planner import simulation
from planner.availability import NodeReliability, fleet_availability
from planner.errors import CodedError
from planner.fleet import load_fleet
from planner.limits import MAX_SIMULATED_CHANGES, MAX_SIMULATION_RUNS
from planner.simulation import (
    SimulationLimitError,
    simulate,
    simulate_many,
)

FIVE = Path(__file__).resolve().parents[1] / "data" / "fleets" / "qwen480b-5x80.toml"
FLAKY = NodeReliability(annual_failure_rate=3.0, repair_hours=300)


def _request():
    return load_fleet(FIVE).to_request()


def test_simulated_availability_agrees_with_the_exact_one() -> None:
    request = _request()
    exact = fleet_availability(request, FLAKY, min_context=65536).availability
    runs = simulate_many(request, FLAKY, runs=30, horizon_hours=4 * 8760, seed=7,
                         min_context=65536)
    values = runs["simulated_availability"]
    mean = values.mean()
    half_width = 3.29 * values.std(ddof=1) / math.sqrt(len(values))  # 99.9 %
    assert half_width < 0.02  # the interval is narrow enough to mean something
    assert mean - half_width <= exact <= mean + half_width
    # Failures arrive at the rate of the up time: n x afr x (1 - u) per year.
    expected = 5 * 3.0 * 4 * (1 - FLAKY.down_probability)
    assert abs(runs["failures"].mean() - expected) < 0.1 * expected


def test_same_seed_same_year_and_hours_add_up() -> None:
    request = _request()
    first = simulate(request, FLAKY, seed=3, min_context=65536)
    again = simulate(request, FLAKY, seed=3, min_context=65536)
    pd.testing.assert_frame_equal(first.timeline, again.timeline)
    pd.testing.assert_frame_equal(first.terms, again.terms)
    other = simulate(request, FLAKY, seed=4, min_context=65536)
    assert not other.timeline.equals(first.timeline)
    timeline = first.timeline
    assert timeline["start_hours"].iloc[0] == 0
    assert timeline["end_hours"].iloc[-1] == 8760
    assert (timeline["start_hours"].iloc[1:].to_numpy()
            == timeline["end_hours"].iloc[:-1].to_numpy()).all()
    lengths = timeline["end_hours"] - timeline["start_hours"]
    assert math.isclose(first.hours_down, lengths[~timeline["meets_targets"]].sum())
    reduced = timeline["meets_targets"] & (timeline["context_length"] < 262144)
    assert math.isclose(first.hours_reduced_context, lengths[reduced].sum())
    assert first.hours_reduced_context > 0


def test_every_new_plan_is_a_new_term_with_its_claim_traffic() -> None:
    year = simulate(_request(), FLAKY, seed=1, min_context=65536)
    terms = year.terms
    assert len(terms) >= 3
    assert list(terms["term"]) == list(range(1, len(terms) + 1))
    # A coordinator claims every stage of its plan and loads it once a quorum accepts.
    assert (terms["claim_messages"] == terms["stage_count"]).all()
    assert (terms["stages_accepted"] == terms["stage_count"]).all()
    assert (terms["load_messages"] == terms["stage_count"]).all()
    # From the second term on, surviving stages of the older term shut its work down.
    assert (terms["shutdowns"].iloc[1:] > 0).all()
    assert year.replans == len(terms) - 1
    assert year.summary()["claim_messages"] == terms["claim_messages"].sum()
    # The timeline names the term in force; consecutive plans differ.
    assert set(year.timeline["term"].dropna()) == set(terms["term"])
    assert (terms["node_ids"].iloc[1:].to_numpy() != terms["node_ids"].iloc[:-1].to_numpy()).all()


def test_a_fleet_that_never_fails_has_one_term() -> None:
    year = simulate(_request(), NodeReliability(annual_failure_rate=0), seed=0)
    assert year.failures == 0 and year.replans == 0 and year.hours_down == 0
    assert len(year.timeline) == 1


# -- hostile settings ---------------------------------------------------------------------


@pytest.mark.parametrize(("reliability", "horizon", "fence"), [
    (NodeReliability(annual_failure_rate=1e9, repair_hours=0.001), 8760, True),
    (NodeReliability(annual_failure_rate=1e9, repair_hours=0), 8760, False),
    (NodeReliability(annual_failure_rate=1, repair_hours=24), 1e9, False),
    (NodeReliability(annual_failure_rate=1e300, repair_hours=1e-300), 1e300, False),
])
def test_a_horizon_of_too_many_changes_is_refused_by_name(
        reliability: NodeReliability, horizon: float, fence: bool) -> None:
    with pytest.raises(SimulationLimitError) as caught:
        simulate(_request(), reliability, horizon_hours=horizon, fence=fence)
    assert caught.value.code == "SimulationTooLarge"
    assert caught.value.details["limit"] == MAX_SIMULATED_CHANGES


def test_too_many_fence_exchanges_are_refused_and_the_counts_alone_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The limit is lowered so that the test stays quick; make bench runs the real one.
    monkeypatch.setattr(simulation, "MAX_FENCE_TERMS", 50)
    # About two re-plans an hour: more coordinator terms than the fence may run.
    flaky = NodeReliability(annual_failure_rate=8760, repair_hours=0.5)
    with pytest.raises(SimulationLimitError) as caught:
        simulate(_request(), flaky, horizon_hours=200, min_context=65536)
    assert caught.value.details["limit"] == 50
    year = simulate(_request(), flaky, horizon_hours=200, min_context=65536, fence=False)
    assert year.replans > 50


@pytest.mark.parametrize(("arguments", "field"), [
    ({"fence": "no"}, "fence"), ({"fence": 0}, "fence"), ({"fence": None}, "fence"),
    ({"seed": -1}, "seed"), ({"seed": "3"}, "seed"), ({"seed": 1.5}, "seed"),
    ({"horizon_hours": "8760"}, "horizon_hours"), ({"horizon_hours": math.nan}, "horizon_hours"),
])
def test_wrong_settings_are_refused_by_field(arguments: dict, field: str) -> None:
    with pytest.raises(CodedError) as caught:
        simulate(_request(), FLAKY, **arguments)
    assert caught.value.details["field"] == field


@pytest.mark.parametrize("reliability", [[FLAKY], "flaky", 3, {"gpu-0": 0.5}])
def test_reliability_of_the_wrong_type_is_refused(reliability: object) -> None:
    request = _request()
    if isinstance(reliability, dict):
        reliability = {request.nodes[0].node_id: 0.5}
    with pytest.raises(CodedError) as caught:
        simulate(request, reliability)
    assert caught.value.code == "InvalidReliability"


@pytest.mark.parametrize("runs", [-1, "3", 2.0, MAX_SIMULATION_RUNS + 1])
def test_simulate_many_refuses_a_bad_number_of_runs(runs: object) -> None:
    with pytest.raises(CodedError) as caught:
        simulate_many(_request(), FLAKY, runs=runs)
    assert caught.value.details["field"] == "runs"
