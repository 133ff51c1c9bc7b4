"""Exact availability against brute force over every failure subset."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from datetime import timedelta
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planner_strategies import requests

from planner.availability import (
    AvailabilityError,
    NodeReliability,
    fleet_availability,
)
from planner.errors import PlanError
from planner.models import ModelError
from planner.planning import NodeBudget, PlanningInput, plan_topology

GIB = 2**30


def _budget(node: NodeBudget) -> tuple:
    return (node.detected_vram_bytes, node.max_vram_bytes or -1, node.runtime_headroom_bytes,
            -1 if node.stage_transfer_latency_ms is None else node.stage_transfer_latency_ms)


def _plan_outcome(request: PlanningInput, survivors: tuple[NodeBudget, ...],
                  min_context: int | None, min_lanes: int) -> tuple[int, bool]:
    if not survivors:
        return 0, False
    try:
        plan = plan_topology(replace(request, nodes=survivors))
    except PlanError as error:
        assert error.code == "NoValidTopology"
        return 0, False
    # The request's own TPOT target steers the planner only; a TPOT target is judged by
    # the speed estimate when it is one of the targets (tested below).
    good = ((min_context is None or plan.context_length >= min_context)
            and plan.parallel_lanes >= min_lanes)
    return plan.context_length, good


def brute_force(request: PlanningInput, down: dict[str, float], min_context: int | None,
                min_lanes: int, *, sample_check: int = 24
                ) -> tuple[Fraction, dict[int, Fraction]]:
    """Sum over all 2^n subsets of down nodes, with each subset's own probability.

    Up to 6 nodes every subset is planned with its own node ids. Beyond that a plan per
    subset is too slow for a unit test: subsets with the same multiset of node budgets
    share one plan, and ``sample_check`` subsets are planned by their own ids as well to
    show that sharing is sound.
    """
    up = Fraction(0)
    contexts: dict[int, Fraction] = {}
    nodes = request.nodes
    share = len(nodes) > 6
    memo: dict[tuple, tuple[int, bool]] = {}
    checked = 0
    for pattern in itertools.product((False, True), repeat=len(nodes)):
        weight = Fraction(1)
        for node, is_down in zip(nodes, pattern, strict=True):
            u = Fraction(down[node.node_id])
            weight *= u if is_down else 1 - u
        if weight == 0:
            continue
        survivors = tuple(n for n, is_down in zip(nodes, pattern, strict=True) if not is_down)
        if share:
            key = tuple(sorted(_budget(n) for n in survivors))
            if key not in memo:
                memo[key] = _plan_outcome(request, survivors, min_context, min_lanes)
            elif checked < sample_check:
                checked += 1
                assert _plan_outcome(request, survivors, min_context, min_lanes) == memo[key]
            context, good = memo[key]
        else:
            context, good = _plan_outcome(request, survivors, min_context, min_lanes)
        contexts[context] = contexts.get(context, Fraction(0)) + weight
        if good:
            up += weight
    return up, contexts


U_POOL = (0.0, 0.01, 0.2, 0.5, 0.9, 1.0)


def _meets_everything(request: PlanningInput) -> bool:
    try:
        plan_topology(request)
    except PlanError as error:
        return error.code == "NoValidTopology"
    return True


@st.composite
def fleets_with_failures(draw: st.DrawFn, max_nodes: int = 12, min_nodes: int = 0
                         ) -> tuple[PlanningInput, dict[str, float], int | None]:
    raw = draw(requests(max_nodes=max_nodes, max_layers=5, failures=False))
    while 0 < len(raw["nodes"]) < min_nodes:
        # Copies of drawn nodes under new ids: more nodes, and more of them equal.
        copy = dict(draw(st.sampled_from(raw["nodes"])))
        copy["node_id"] = f"copy-{len(raw['nodes']):02d}"
        raw["nodes"].append(copy)
    request = PlanningInput.from_dict(raw)
    # A small pool of down probabilities, so that equal nodes often share one.
    pool = draw(st.lists(st.sampled_from(U_POOL), min_size=1, max_size=2, unique=True))
    down = {node.node_id: draw(st.sampled_from(pool)) for node in request.nodes}
    # A minimum context the model has (above its native context is refused, tested below).
    min_context = draw(st.sampled_from(
        [None, *(c for c in (512, 16384, 65536) if c <= request.native_context_length)]))
    return request, down, min_context


# Each example plans every one of up to 2**12 failure subsets by brute force: seconds, not ms.
@settings(max_examples=25, deadline=timedelta(seconds=60))
@given(fleets_with_failures())
def test_exact_availability_matches_every_failure_subset(case) -> None:
    request, down, min_context = case
    if not _meets_everything(request):
        with pytest.raises(PlanError):
            fleet_availability(request, down=down)
        return
    truth, contexts = brute_force(request, down, min_context, 1)
    result = fleet_availability(request, down=down, min_context=min_context, exact_states=4096)
    assert result.exact
    assert result.availability == pytest.approx(float(truth), abs=1e-12)
    assert set(result.context_distribution) == set(contexts)
    for context, probability in contexts.items():
        assert result.context_distribution[context] == pytest.approx(float(probability),
                                                                      abs=1e-12)
    # Stopping early (at 2 % unexplored) gives an interval that holds the truth.
    bounded = fleet_availability(request, down=down, min_context=min_context,
                                 exact_states=0, tolerance=0.02)
    assert bounded.availability_lower <= truth <= bounded.availability_upper
    assert bounded.availability_upper - bounded.availability_lower <= 0.02 + 1e-15
    assert bounded.unexplored_mass < 0.02


# The fleets of 10 to 12 nodes the general strategy reaches only now and then.
@settings(max_examples=3, deadline=timedelta(seconds=60))
@given(fleets_with_failures(min_nodes=10))
def test_exact_availability_matches_every_failure_subset_of_10_to_12_nodes(case) -> None:
    request, down, min_context = case
    assert 10 <= len(request.nodes) <= 12
    if not _meets_everything(request):
        return
    truth, contexts = brute_force(request, down, min_context, 1)
    result = fleet_availability(request, down=down, min_context=min_context, exact_states=4096)
    assert result.exact
    assert result.availability == pytest.approx(float(truth), abs=1e-12)
    assert result.context_distribution == pytest.approx(
        {context: float(p) for context, p in contexts.items()}, abs=1e-12)


def test_down_probability_is_repair_over_cycle() -> None:
    reliability = NodeReliability(annual_failure_rate=0.119, repair_hours=72)
    assert reliability.down_probability == 72 / (8760 / 0.119 + 72)
    assert NodeReliability(annual_failure_rate=0, repair_hours=72).down_probability == 0
    for bad in (-1, float("nan"), float("inf"), "2", True):
        with pytest.raises(AvailabilityError) as error:
            NodeReliability(annual_failure_rate=bad)
        assert error.value.code == "InvalidReliability"


def _uniform_fleet(count: int, *, layers: int = 6, per_node_layers: int = 2) -> PlanningInput:
    # Each node holds `per_node_layers` layers at the floor context, so the model needs
    # layers / per_node_layers nodes.
    layer = 4 * GIB
    return PlanningInput(
        native_context_length=4096, layer_count=layers, model_weight_bytes=layers * layer,
        kv_bytes_per_token=layers, minimum_nodes=1,
        nodes=tuple(NodeBudget(f"gpu-{i:03d}", per_node_layers * layer + 2**20)
                    for i in range(count)))


def test_one_plan_settles_every_state_in_which_its_nodes_survive() -> None:
    # 200 equal nodes, 3 needed: up exactly when at most 197 are down. The plan of all
    # 200 settles every state that keeps its 3 nodes; one more plan (2 left, no fit)
    # settles the rest: exact, from 2 plans instead of 201.
    request = _uniform_fleet(200)
    u = 0.3
    result = fleet_availability(request, down={n.node_id: u for n in request.nodes},
                                tolerance=0, exact_states=100)
    truth = sum(Fraction(math.comb(200, d)) * Fraction(u) ** d * (1 - Fraction(u)) ** (200 - d)
                for d in range(198))
    assert result.exact and result.availability == float(truth)
    assert result.states_evaluated == 2


def test_ten_thousand_equal_nodes_are_exact_from_two_plans() -> None:
    request = _uniform_fleet(10_000)
    reliability = NodeReliability()
    result = fleet_availability(request, reliability)
    u = Fraction(reliability.down_probability)
    down_tail = sum(math.comb(10_000, d) * u**d * (1 - u) ** (10_000 - d)
                    for d in range(9_998, 10_001))
    assert result.availability_lower <= 1 - down_tail <= result.availability_upper
    assert result.states_evaluated <= 2


def test_states_cap_still_gives_a_sound_interval() -> None:
    # Twelve nodes of distinct sizes (each its own group), half the time down.
    request = replace(_uniform_fleet(12), nodes=tuple(
        replace(node, detected_vram_bytes=node.detected_vram_bytes + index)
        for index, node in enumerate(_uniform_fleet(12).nodes)))
    down = {n.node_id: 0.5 for n in request.nodes}
    exact = fleet_availability(request, down=down, exact_states=5000)
    assert exact.exact
    capped = fleet_availability(request, down=down, exact_states=0, max_states=3,
                                tolerance=0)
    assert capped.states_evaluated == 3
    assert capped.availability_lower <= exact.availability <= capped.availability_upper
    assert capped.availability_upper - capped.availability_lower > 0.1


def test_request_errors_are_not_down_states() -> None:
    request = replace(_uniform_fleet(3), context_length_override=10**6)
    with pytest.raises(PlanError) as error:
        fleet_availability(request)
    assert error.value.code == "ContextExceedsNative"
    with pytest.raises(AvailabilityError) as bad:
        fleet_availability(_uniform_fleet(3), down={"gpu-000": 1.5, "gpu-001": 0,
                                                    "gpu-002": 0})
    assert bad.value.code == "InvalidReliability"


def test_spares_of_one_kind_are_the_fewest_that_reach_the_target() -> None:
    from planner.availability import SpareKind, spares_for

    request = _uniform_fleet(3)  # needs all 3 nodes
    reliability = NodeReliability(annual_failure_rate=2.0, repair_hours=200)
    kind = SpareKind("gpu", request.nodes[0], reliability)
    result = spares_for(request, 0.999, [kind], reliability=reliability)
    found = result.spare_count
    assert result.availability.availability >= 0.999
    assert all(node.node_id.startswith("spare-gpu-") for node in result.nodes)
    fewer = fleet_availability(
        replace(request, nodes=(*request.nodes, *kind.nodes(found - 1, set()))),
        reliability)
    assert fewer.availability < 0.999
    with pytest.raises(AvailabilityError) as error:
        spares_for(request, 0.999, [kind], reliability=reliability, max_spares=found - 1)
    assert error.value.code == "SparesUnreachable"


def test_cheapest_spare_mix_beats_fewest_nodes_on_price() -> None:
    from planner.availability import SpareKind, spares_for

    request = _uniform_fleet(3)
    own = NodeReliability(annual_failure_rate=2.0, repair_hours=200)
    flaky = NodeReliability(annual_failure_rate=4.0, repair_hours=400)
    steady = NodeReliability(annual_failure_rate=0.1, repair_hours=24)
    cheap = SpareKind("cheap", request.nodes[0], flaky, price_per_hour=1.0)
    dear = SpareKind("dear", request.nodes[0], steady, price_per_hour=1.5)
    assert fleet_availability(request, own).availability < 0.9
    result = spares_for(request, 0.999, [cheap, dear], reliability=own)
    assert result.availability.availability >= 0.999
    # Neither kind alone is the cheapest way: one of each (2.5 an hour) beats three cheap
    # ones (3.0) and two dear ones (3.0).
    assert result.counts == {"cheap": 1, "dear": 1}
    # Every mix that costs less falls short, and so does every mix of the same price
    # with fewer nodes.
    assert result.cost_per_hour == sum(
        count * {"cheap": 1.0, "dear": 1.5}[name] for name, count in result.counts.items())
    for n_cheap in range(0, 8):
        for n_dear in range(0, 5):
            cost = n_cheap * 1.0 + n_dear * 1.5
            if cost > result.cost_per_hour or (
                    cost == result.cost_per_hour
                    and n_cheap + n_dear >= result.spare_count):
                continue
            fleet = replace(request, nodes=(*request.nodes, *cheap.nodes(n_cheap, set()),
                                            *dear.nodes(n_dear, set())))
            rel = {**{n.node_id: own for n in request.nodes},
                   **{n.node_id: flaky for n in fleet.nodes if "cheap" in n.node_id},
                   **{n.node_id: steady for n in fleet.nodes if "dear" in n.node_id}}
            assert fleet_availability(fleet, rel).availability < 0.999


def test_targets_set_context_lanes_and_tpot() -> None:
    from pathlib import Path

    from planner.fleet import load_fleet
    from planner.models import load_gpu_catalog, load_preset
    from planner.performance import ModelTraffic
    from planner.targets import SpeedEstimator, Targets, TargetsError

    fleets = Path(__file__).resolve().parents[1] / "data" / "fleets"
    five = load_fleet(fleets / "qwen480b-5x80.toml").to_request()
    flaky = NodeReliability(annual_failure_rate=3.0, repair_hours=300)
    by_targets = fleet_availability(five, flaky, targets=Targets(minimum_context=262144))
    by_keywords = fleet_availability(five, flaky, min_context=262144)
    assert by_targets == by_keywords
    assert fleet_availability(five, flaky, targets=Targets(minimum_lanes=5)
                              ).availability == 0
    # A minimum context the model does not have is refused, as sizing refuses it.
    with pytest.raises(TargetsError) as error:
        fleet_availability(five, flaky, min_context=262144 * 2)
    assert error.value.code == "InvalidTargets"
    # A TPOT target is judged by the speed estimate: without one it is refused, not
    # guessed (this model is typed as numbers: its decode traffic is unknown).
    latency = load_fleet(fleets / "qwen480b-4x80-latency10-tpot33.toml").to_request()
    with pytest.raises(TargetsError) as error:
        fleet_availability(latency, flaky, targets=Targets(target_decode_tpot_ms=50))
    assert error.value.code == "TpotNotEstimable"
    catalog = load_gpu_catalog()
    traffic = ModelTraffic.from_spec(load_preset("qwen3-coder-480b-a35b"))
    typed = SpeedEstimator(latency.nodes, None, catalog)
    with pytest.raises(TargetsError, match="decode traffic is unknown"):
        fleet_availability(latency, flaky, targets=Targets(target_decode_tpot_ms=50),
                           estimator=typed)
    # With the traffic (the nodes are 80 GiB: the A100 80GB by memory) the estimate of
    # each failure state's plan is compared with the target.
    estimator = SpeedEstimator(latency.nodes, traffic, catalog)
    whole = planner_plan = fleet_availability(latency, flaky, estimator=estimator)
    assert whole.availability > 0
    from planner.planning import plan_topology

    planner_plan = plan_topology(latency)
    tpot = estimator(latency, planner_plan).estimated_tpot_ms
    met = fleet_availability(latency, flaky, estimator=estimator,
                             targets=Targets(target_decode_tpot_ms=int(tpot) + 1))
    missed = fleet_availability(latency, flaky, estimator=estimator,
                                targets=Targets(target_decode_tpot_ms=int(tpot) - 1))
    assert met.availability == whole.availability
    assert missed.availability < met.availability


def test_cheapest_catalog_spares_cost_no_more_than_any_single_kind() -> None:
    from pathlib import Path

    from planner.availability import catalog_spare_kinds, spares_for
    from planner.fleet import load_fleet
    from planner.models import load_gpu_catalog

    five = load_fleet(Path(__file__).resolve().parents[1] / "data" / "fleets"
                      / "qwen480b-5x80.toml").to_request()
    flaky = NodeReliability(annual_failure_rate=3.0, repair_hours=300)
    kinds = [k for k in catalog_spare_kinds(load_gpu_catalog())
             if k.budget.detected_vram_bytes >= 80 * GIB]
    assert kinds and all(k.price_per_hour is not None for k in kinds)
    mix = spares_for(five, 0.9999, kinds, reliability=flaky, min_context=65536, max_spares=3)
    assert mix.availability.availability >= 0.9999
    for kind in kinds:
        try:
            alone = spares_for(five, 0.9999, [kind], reliability=flaky, min_context=65536,
                               max_spares=3)
        except AvailabilityError:
            continue
        assert mix.cost_per_hour <= alone.cost_per_hour + 1e-9


def test_node_figures_come_from_own_then_fleet_then_catalog_then_defaults() -> None:
    from planner.availability import ReliabilityOverride, fleet_reliability
    from planner.models import load_gpu_catalog

    catalog = load_gpu_catalog()
    h100 = next(gpu for gpu in catalog if gpu.name == "NVIDIA H100 SXM 80GB")
    rtx = next(gpu for gpu in catalog if gpu.name == "NVIDIA GeForce RTX 5090")
    nodes = [NodeBudget("own", 80 * GIB), NodeBudget("named", 1 * GIB),
             NodeBudget("by-memory", rtx.memory_bytes), NodeBudget("unknown", 7 * GIB),
             NodeBudget("two-kinds", 24 * GIB)]
    overrides = {"own": ReliabilityOverride(annual_failure_rate=0.5, gpu=h100.kind),
                 "named": ReliabilityOverride(gpu=h100.name)}
    plain = fleet_reliability(nodes, catalog=catalog, overrides=overrides)
    assert plain["own"] == NodeReliability(0.5, h100.repair_hours)
    assert plain["named"] == NodeReliability(h100.annual_failure_rate, h100.repair_hours)
    assert plain["by-memory"] == NodeReliability(rtx.annual_failure_rate, rtx.repair_hours)
    assert plain["unknown"] == NodeReliability()
    # The RTX 3090 and 4090 both have 24 GiB: no guess, the defaults.
    assert plain["two-kinds"] == NodeReliability()
    fleet_wide = fleet_reliability(nodes, catalog=catalog, overrides=overrides,
                                   repair_hours=10)
    assert fleet_wide["own"] == NodeReliability(0.5, 10)
    assert fleet_wide["by-memory"] == NodeReliability(rtx.annual_failure_rate, 10)
    # A node's own repair time with the catalog's failure rate (by memory).
    partly = fleet_reliability(nodes, catalog=catalog,
                               overrides={"by-memory": ReliabilityOverride(repair_hours=5)})
    assert partly["by-memory"] == NodeReliability(rtx.annual_failure_rate, 5)
    with pytest.raises(ModelError, match="'own': gpu 'TPU v9' is not in the catalog") as error:
        fleet_reliability(nodes, catalog=catalog,
                          overrides={"own": ReliabilityOverride(gpu="TPU v9")})
    assert error.value.code == "UnknownGpuKind"


def test_fleet_files_carry_each_nodes_failure_figures_both_ways() -> None:
    from planner.availability import ReliabilityOverride, document_overrides
    from planner.fleet import (
        FleetDocument,
        FleetFileError,
        fleet_to_json,
        fleet_to_toml,
        parse_fleet_json,
        parse_fleet_toml,
    )

    text = ('[model]\npreset = "llama-3.1-70b"\n'
            '[[nodes]]\nid = "a"\ncount = 3\nvram = "80 GiB"\nannual_failure_rate = 0.5\n'
            '[[nodes]]\nid = "a-03"\nvram = "80 GiB"\n'
            '[[nodes]]\nid = "b"\nvram = "24 GiB"\nrepair_hours = 12\ngpu = "rtx-4090"\n')
    document = parse_fleet_toml(text)
    assert document_overrides(document) == {
        **{f"a-0{i}": ReliabilityOverride(annual_failure_rate=0.5) for i in range(3)},
        "b": ReliabilityOverride(repair_hours=12, gpu="rtx-4090")}
    # a-03 has the others' budget and number but not their figures: it stays apart.
    written = fleet_to_toml(document)
    assert written.count("[[nodes]]") == 3
    assert parse_fleet_toml(written) == document
    assert FleetDocument.from_dict(document.to_dict()) == document
    # JSON resolves the preset to its numbers; the figures are kept as they are.
    assert parse_fleet_json(fleet_to_json(document)).reliability == document.reliability
    for bad, field in [("annual_failure_rate = 0.5", "annual_failure_rate = -0.5"),
                       ("repair_hours = 12", 'repair_hours = "12 h"'),
                       ("gpu = \"rtx-4090\"", "gpu = 4090")]:
        with pytest.raises(FleetFileError) as error:
            parse_fleet_toml(text.replace(bad, field))
        key = field.split(" = ")[0]
        assert error.value.field.endswith(f".{key}") and error.value.node_id in ("a", "b")
    raw = json.loads(fleet_to_json(document))
    raw["nodes"][0]["annual_failure_rate"] = float("inf")
    with pytest.raises(FleetFileError) as error:
        parse_fleet_json(json.dumps(raw))
    assert (error.value.field, error.value.node_id) == ("nodes[0].annual_failure_rate", "a-00")


@st.composite
def mid_size_fleets(draw: st.DrawFn) -> tuple[PlanningInput, dict[str, float], int]:
    """13 to 40 nodes in 2 to 4 kinds of equal nodes, some kinds never or always down."""
    layers = 6
    layer = 4 * GIB
    kinds = draw(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 4),
                                    st.sampled_from((0.0, 0.02, 0.1, 0.3, 0.6, 1.0))),
                          min_size=2, max_size=4).filter(
        lambda ks: 13 <= sum(k[0] for k in ks) <= 40
        and math.prod(k[0] + 1 for k in ks) <= 150))
    nodes, down = [], {}
    for index, (count, held, u) in enumerate(kinds):
        for i in range(count):
            node = NodeBudget(f"k{index}-{i:02d}", held * layer + 2**20)
            nodes.append(node)
            down[node.node_id] = u
    request = PlanningInput(native_context_length=4096, layer_count=layers,
                            model_weight_bytes=layers * layer, kv_bytes_per_token=layers,
                            minimum_nodes=draw(st.integers(1, 3)), nodes=tuple(nodes))
    return request, down, draw(st.sampled_from((1, 2)))


def _truth_by_count_vectors(request: PlanningInput, down: dict[str, float],
                            min_lanes: int) -> Fraction:
    """Sum over down counts per kind (k0, k1, ...), each state weighted by binomials."""
    kinds: dict[str, list[NodeBudget]] = {}
    for node in request.nodes:
        kinds.setdefault(node.node_id.split("-")[0], []).append(node)
    groups = list(kinds.values())
    up = Fraction(0)
    for state in itertools.product(*(range(len(g) + 1) for g in groups)):
        weight = Fraction(1)
        for group, d in zip(groups, state, strict=True):
            u = Fraction(down[group[0].node_id])
            weight *= math.comb(len(group), d) * u**d * (1 - u) ** (len(group) - d)
        if weight == 0:
            continue
        survivors = tuple(n for group, d in zip(groups, state, strict=True)
                          for n in group[d:])
        _, good = _plan_outcome(request, survivors, None, min_lanes)
        if good:
            up += weight
    return up


@settings(max_examples=8, deadline=timedelta(seconds=60))
@given(mid_size_fleets(), st.sampled_from((0.2, 1e-3, 1e-7, 0.0)), st.integers(1, 60))
def test_large_fleet_interval_holds_the_exact_value_on_mid_size_fleets(
        case, tolerance, max_states) -> None:
    request, down, min_lanes = case
    truth = _truth_by_count_vectors(request, down, min_lanes)
    exact = fleet_availability(request, down=down, min_lanes=min_lanes, exact_states=10**6)
    assert exact.exact and exact.availability == float(truth)
    bounded = fleet_availability(request, down=down, min_lanes=min_lanes, exact_states=0,
                                 tolerance=tolerance, max_states=max_states)
    assert bounded.availability_lower <= truth <= bounded.availability_upper
    assert bounded.states_evaluated <= max_states
    # The gap is the unexplored mass (rounded outwards), and below the tolerance unless
    # the state budget ran out first.
    gap = bounded.availability_upper - bounded.availability_lower
    assert gap == pytest.approx(bounded.unexplored_mass, abs=1e-12)
    if bounded.states_evaluated < max_states:
        assert bounded.unexplored_mass <= tolerance + 1e-15
    # What the context distribution holds is exactly the explored mass.
    assert sum(bounded.context_distribution.values()) == pytest.approx(
        1 - bounded.unexplored_mass, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.sampled_from((0.0, 1e-9, 0.001, 0.3, 0.5, 1.0)),
       st.data())
def test_a_groups_probability_of_a_range_of_down_counts_is_exact(count, u, data) -> None:
    from planner.availability.states import _GroupPmf

    lo = data.draw(st.integers(0, count))
    hi = data.draw(st.integers(lo, count))
    pmf = _GroupPmf(count, u)
    exact = sum(math.comb(count, d) * Fraction(u) ** d * (1 - Fraction(u)) ** (count - d)
                for d in range(lo, hi + 1))
    assert Fraction(pmf.mass(lo, hi), 1 << pmf.shift) == exact


def test_spares_for_a_large_fleet_bounds_each_fleets_exploration() -> None:
    from planner.availability import SpareKind, spares_for

    # Three kinds of ten nodes (1,331 failure states), each holding one of 28 layers: up
    # while at most two nodes are down.
    layer = 4 * GIB
    nodes = tuple(NodeBudget(f"k{kind}-{i:02d}", layer + 2**20, runtime_headroom_bytes=kind)
                  for kind in range(3) for i in range(10))
    request = PlanningInput(native_context_length=4096, layer_count=28,
                            model_weight_bytes=28 * layer, kv_bytes_per_token=28, nodes=nodes)
    flaky = NodeReliability(annual_failure_rate=8.0, repair_hours=60)
    kind = SpareKind("k0", nodes[0], flaky)
    found = spares_for(request, 0.95, [kind], reliability=flaky, max_states=40)
    assert found.availability.states_evaluated <= 40
    assert found.availability.availability_lower >= 0.95
    assert found.spare_count >= 1
    # One spare fewer falls short, with the same bound on the exploration.
    fewer = replace(request, nodes=(*nodes, *kind.nodes(found.spare_count - 1, set())))
    assert fleet_availability(fewer, flaky, max_states=40).availability_lower < 0.95


def test_spares_copy_the_speed_of_the_node_they_copy_for_a_tpot_target() -> None:
    # The home lab names its nodes' kinds and has a TPOT target: a spare copied from one
    # of its nodes has that node's speed, so the fleet with spares is still judged (it
    # was refused, TpotNotEstimable, naming the spare as a node of unknown speed).
    from planner.availability import spares_table
    from planner.fleet import example_fleet, load_fleet
    from planner.models import load_gpu_catalog
    from planner.targets import SpeedEstimator, Targets

    document = load_fleet(example_fleet("llama70b-home-lab"))
    request = document.to_request()
    estimator = SpeedEstimator.for_document(document, load_gpu_catalog())
    targets = Targets(target_decode_tpot_ms=400)
    table = spares_table(request, targets=targets, estimator=estimator, max_spares=2)
    assert table["spare_count"].notna().all(), table
    # A spare is no faster than the node it copies: at 40 ms no number of them helps.
    strict = spares_table(request, targets=Targets(target_decode_tpot_ms=40),
                          estimator=estimator, max_spares=2)
    assert (strict["spares"] == "unreachable").all(), strict
