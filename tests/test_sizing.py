"""Cheapest fleets: exact against brute force over every count vector, re-checked with
plan_topology and every f-node removal."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan_topology
from planner.errors import PlanError
from planner.models import GpuModel, load_gpu_catalog, load_preset
from planner.performance import ModelTraffic, node_speeds, try_estimate
from planner.planning import as_planning_input, rules
from planner.planning.rules import context_floor, layer_weights
from planner.sizing import (
    SizingError,
    SizingTargets,
    fleet_nodes,
    floors,
    pareto_front,
    size_fleet,
)
from planner.targets import TargetsError

UNIT = 10**6  # bytes of one layer's weights


def _kind(kind: str, units: int, price: float, bandwidth: int = 10**9,
          latency: int | None = None, max_count: int | None = None,
          headroom: int | None = None, tflops: float | None = None) -> GpuModel:
    return GpuModel(name=kind.upper(), memory_bytes=units * UNIT, vendor="V", note="n",
                    id=kind, price_per_hour=price, price_source="test",
                    price_date="2026-01-01", memory_bandwidth_bytes_per_s=bandwidth,
                    memory_bandwidth_source="test", headroom_bytes=headroom,
                    stage_transfer_latency_ms=latency, max_count=max_count,
                    fp16_tflops=tflops, fp16_tflops_source=None if tflops is None else "test")


def _model(layers: int, kv: int, native: int = 131072) -> dict[str, Any]:
    return {"native_context_length": native, "layer_count": layers,
            "model_weight_bytes": layers * UNIT, "kv_bytes_per_token": kv}


def _meets(model: dict[str, Any], traffic: ModelTraffic, kinds: list[GpuModel],
           node_ids: list[str], targets: SizingTargets) -> tuple[bool, Any]:
    """The definition, written plainly: plan the fleet of exactly these nodes."""
    all_nodes = {n.node_id: n for n in fleet_nodes(kinds, [k.max_count or 0 for k in kinds])}
    request = as_planning_input({
        **model, "minimum_nodes": targets.minimum_nodes,
        "target_decode_tpot_ms": targets.target_decode_tpot_ms,
        "nodes": [all_nodes[n].to_dict() for n in node_ids]})
    if not node_ids:
        return False, None
    try:
        plan = plan_topology(request)
    except PlanError:
        return False, None
    minimum = targets.minimum_context or context_floor(request)
    if plan.context_length < minimum or plan.parallel_lanes < targets.minimum_lanes:
        return False, plan
    if targets.target_decode_tpot_ms is not None or targets.target_ttft_ms is not None:
        estimate, _ = try_estimate(request, plan, traffic, kinds,
                                   prompt_tokens=targets.prompt_tokens)
        if estimate is None:
            return False, plan
        if (targets.target_decode_tpot_ms is not None
                and estimate.estimated_tpot_ms > targets.target_decode_tpot_ms):
            return False, plan
        if targets.target_ttft_ms is not None and (
                estimate.ttft_ms is None or estimate.ttft_ms > targets.target_ttft_ms):
            return False, plan
    return True, plan


def _brute_force(model: dict[str, Any], traffic: ModelTraffic, kinds: list[GpuModel],
                 targets: SizingTargets) -> list[tuple[tuple[float, int, int], tuple[int, ...]]]:
    f = targets.failures_tolerated
    seen: dict[tuple[str, ...], tuple[bool, Any]] = {}

    def meets(ids: list[str]) -> tuple[bool, Any]:
        if tuple(ids) not in seen:
            seen[tuple(ids)] = _meets(model, traffic, kinds, ids, targets)
        return seen[tuple(ids)]

    found = []
    # At most layer_count + f of a kind: more are never planned, even after f losses.
    most = model["layer_count"] + f
    for counts in itertools.product(*(range(min(k.max_count, most) + 1) for k in kinds)):
        ids = [n.node_id for n in fleet_nodes(kinds, counts)]
        ok, plan = meets(ids)
        if not ok:
            continue
        # Every f of the actual nodes, not per-kind counts: checks the symmetry too.
        if f and (len(ids) <= f or not all(
                meets([i for i in ids if i not in gone])[0]
                for gone in itertools.combinations(ids, f))):
            continue
        cost = round(sum(k.price_per_hour * n for k, n in zip(kinds, counts, strict=True)), 6)
        found.append(((cost, len(ids), -plan.context_length), counts, plan))
    # A fleet that holds a cheaper listed fleet and plans the same stages on it only adds
    # idle nodes to it: it is no alternative, and is not listed.
    listed: list[tuple[tuple[float, int, int], tuple[int, ...], Any]] = []
    for key, counts, plan in sorted(found, key=lambda entry: entry[:2]):
        if not any(_holds(counts, other) and plan == other_plan
                   for _, other, other_plan in listed):
            listed.append((key, counts, plan))
    return [(key, counts) for key, counts, _ in listed]


def _holds(counts: tuple[int, ...], other: tuple[int, ...]) -> bool:
    """Whether a fleet of ``counts`` has every node of a fleet of ``other`` (nodes of a
    kind are named in order, so the smaller fleet's nodes are the larger's first ones)."""
    return counts != other and all(a >= b for a, b in zip(counts, other, strict=True))


def _assert_no_idle_supersets(result: Any, kinds: list[GpuModel]) -> None:
    """No fleet listed holds a cheaper listed fleet and plans the same stages on it."""
    listed = [(tuple(f.counts_by_kind.get(k.kind, 0) for k in kinds), f)
              for f in result.fleets]
    for counts, fleet in listed:
        for other_counts, other in listed:
            assert not (_holds(counts, other_counts) and fleet.plan == other.plan), (
                f"{fleet.label} (USD {fleet.cost_per_hour_usd}) is {other.label} "
                f"(USD {other.cost_per_hour_usd}) with idle nodes")


@st.composite
def questions(draw: st.DrawFn) -> tuple[dict[str, Any], list[GpuModel], SizingTargets]:
    layers = draw(st.integers(2, 6))
    # 1, 3 or 5 B of KV a layer and token: 6.6%, 20% or 33% of a layer's weights at
    # 65,536 tokens and twice that at 131,072, so that the higher context costs room.
    model = _model(layers, layers * draw(st.sampled_from((1, 3, 5))))
    count = draw(st.integers(1, 3))
    kinds = []
    for index in range(count):
        kinds.append(_kind(
            f"k{index}", draw(st.sampled_from((1, 2, 3, 5, 8, 8))),
            draw(st.sampled_from((1.0, 1.5, 2.0, 3.0))),
            bandwidth=draw(st.sampled_from((10**9, 2 * 10**9))),
            latency=draw(st.sampled_from((None, None, 0, 3))),
            max_count=draw(st.sampled_from((0, 2, 3, 3)))))
    targets = SizingTargets(
        minimum_context=draw(st.sampled_from((None, 131072))),
        minimum_nodes=draw(st.integers(0, 2)),
        target_decode_tpot_ms=draw(st.sampled_from((None, None, 5, 8))),
        failures_tolerated=draw(st.integers(0, 2)))
    return model, kinds, targets


@pytest.mark.slow
@settings(max_examples=100)
@given(questions())
def test_size_fleet_matches_brute_force(question: tuple) -> None:
    _assert_matches_brute_force(question)


# A small instance of the oracle for the fast suite: the same questions, fewer of them.
@settings(max_examples=20, derandomize=True, database=None)
@given(questions())
def test_size_fleet_matches_brute_force_on_a_few_questions(question: tuple) -> None:
    _assert_matches_brute_force(question)


@st.composite
def tpot_questions(draw: st.DrawFn) -> tuple[dict[str, Any], list[GpuModel], SizingTargets,
                                             ModelTraffic]:
    """TPOT targets where the context a fleet plans decides whether it meets them: no
    latencies (the planner takes the highest context that fits), a KV cache that costs
    room and read time at 131,072, compute and attention that count (FP16 rates a
    thousandth of a real GPU's), and targets across the range from no fleet to any."""
    layers = draw(st.integers(2, 6))
    model = _model(layers, layers * draw(st.sampled_from((3, 5, 8))))
    kinds = [_kind(f"k{index}", draw(st.sampled_from((1, 2, 3, 5, 8, 12))),
                   draw(st.sampled_from((1.0, 1.5, 2.0, 3.0))),
                   bandwidth=draw(st.sampled_from((10**9, 2 * 10**9, 4 * 10**9))),
                   max_count=draw(st.sampled_from((1, 2, 3, 4))),
                   tflops=draw(st.sampled_from((None, 0.01, 0.1))))
             for index in range(draw(st.integers(1, 3)))]
    targets = SizingTargets(
        minimum_context=draw(st.sampled_from((None, None, 131072))),
        minimum_nodes=draw(st.integers(0, 2)),
        minimum_lanes=draw(st.sampled_from((1, 1, 4))),
        target_decode_tpot_ms=draw(st.integers(2, 40)),
        failures_tolerated=draw(st.integers(0, 1)))
    traffic = ModelTraffic.dense(model["model_weight_bytes"], hidden_size=16,
                                 parameter_count=draw(st.sampled_from(
                                     (None, model["model_weight_bytes"] // 2))))
    return model, kinds, targets, traffic


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(tpot_questions())
def test_size_fleet_matches_brute_force_on_tpot_targets(question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@settings(max_examples=25, derandomize=True, database=None, deadline=None)
@given(tpot_questions())
def test_size_fleet_matches_brute_force_on_a_few_tpot_targets(question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@st.composite
def ttft_questions(draw: st.DrawFn) -> tuple[dict[str, Any], list[GpuModel], SizingTargets,
                                             ModelTraffic]:
    """TTFT targets, alone or beside a TPOT target: prompts of one ubatch and of several
    batches on kinds with and without an FP16 rate, and targets across the range from
    no fleet to any (a 1,024-token prompt takes from about 0.1 s to a few seconds)."""
    model, kinds, targets, _ = draw(tpot_questions())
    kinds = [replace(kind, fp16_tflops=tflops, fp16_tflops_source=tflops and "test")
             for kind, tflops in zip(kinds, draw(st.lists(st.sampled_from(
                 (None, 0.01, 0.03, 0.1, 0.1)), min_size=len(kinds), max_size=len(kinds))),
                                     strict=True)]
    traffic = ModelTraffic.dense(model["model_weight_bytes"], hidden_size=16,
                                 parameter_count=model["model_weight_bytes"] // 2)
    targets = replace(targets,
                      target_decode_tpot_ms=draw(st.sampled_from((None, None, 10, 20))),
                      target_ttft_ms=draw(st.sampled_from((2, 20, 100, 500, 2000))),
                      prompt_tokens=draw(st.sampled_from((1, 300, 1024, 5000))))
    return model, kinds, targets, traffic


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(ttft_questions())
def test_size_fleet_matches_brute_force_on_ttft_targets(question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@settings(max_examples=25, derandomize=True, database=None, deadline=None)
@given(ttft_questions())
def test_size_fleet_matches_brute_force_on_a_few_ttft_targets(question: tuple) -> None:
    """Every fleet sizing returns meets the TPOT and TTFT targets on its estimate, and
    the prefill floor the search prunes with removes no fleet that meets them."""
    _assert_matches_brute_force(question[:3], question[3])


@st.composite
def pipeline_questions(draw: st.DrawFn) -> tuple[dict[str, Any], list[GpuModel],
                                                 SizingTargets, ModelTraffic]:
    """TTFT targets for prompts of several ubatches, drawn between the least any number of
    stages can do and what one stage does: where how few stages a fleet plans on decides
    whether it meets them (the search prunes partial fleets that hold the model at the
    highest context on too few nodes)."""
    model, kinds, targets, traffic = draw(ttft_questions())
    kinds = [replace(kind, fp16_tflops=kind.fp16_tflops or 0.1, fp16_tflops_source="test")
             for kind in kinds]
    prompt = draw(st.sampled_from((1024, 2048, 5000)))
    probe = as_planning_input({**model, "nodes": [{"node_id": "p", "detected_vram_bytes": 1}]})
    by_stages = floors.prefill_floor(kinds, traffic, probe, prompt).pipeline_least_ms_by_stages(
        sum(layer_weights(probe)), model["layer_count"])
    target = draw(st.integers(max(1, int(by_stages[-1])), int(by_stages[0] * 1.3) + 2))
    return model, kinds, replace(targets, target_ttft_ms=target, prompt_tokens=prompt,
                                 target_decode_tpot_ms=None), traffic


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(pipeline_questions())
def test_size_fleet_matches_brute_force_on_pipeline_bound_ttft_targets(question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(pipeline_questions())
def test_size_fleet_matches_brute_force_on_a_few_pipeline_bound_ttft_targets(
        question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@st.composite
def uneven_layer_questions(draw: st.DrawFn) -> tuple[dict[str, Any], list[GpuModel],
                                                     SizingTargets, ModelTraffic]:
    """TPOT targets on a model whose layers differ in size, so that a node takes fewer
    layers from some start layers than from others: fleets whose nodes, walked largest
    first as the planner orders the stages, reach the last layer at a higher context
    though the fewest layers each surely takes fall short (the search counts those
    contexts as planned, and prunes where their reads miss the target). The targets lie
    between the least TPOT at the lowest context and a little above that at the highest.
    With a spare in two questions of three, what is left after losing the largest nodes
    must walk through the layers and meet the read covers without them; with fast small
    kinds, a stage's hop is a share of what it reads worth counting. (Of 300 questions,
    each of these bounds prunes partial fleets in 20 to 60.)"""
    layers = draw(st.integers(4, 8))
    weights = [draw(st.sampled_from((1, 1, 3))) * UNIT for _ in range(layers)]
    model = {**_model(layers, layers * draw(st.sampled_from((5, 8, 12))),
                      native=draw(st.sampled_from((131072, 262144)))),
             "model_weight_bytes": sum(weights), "layer_weight_bytes": weights}
    kinds = [_kind(f"k{index}", draw(st.sampled_from((2, 3, 4, 5, 6))),
                   draw(st.sampled_from((1.0, 1.5, 2.0, 3.0))),
                   bandwidth=draw(st.sampled_from((10**9, 4 * 10**9, 16 * 10**9))),
                   max_count=draw(st.sampled_from((2, 3, 4))),
                   tflops=draw(st.sampled_from((None, 0.1))))
             for index in range(draw(st.integers(2, 3)))]
    traffic = ModelTraffic.dense(sum(weights), hidden_size=16)
    targets = SizingTargets(minimum_nodes=draw(st.integers(0, 2)),
                            failures_tolerated=draw(st.sampled_from((0, 1, 1))))
    probe = as_planning_input({**model, "nodes": [{"node_id": "p", "detected_vram_bytes": 1}]})
    floor = floors.decode_floor(kinds, traffic, probe, {})
    contexts = rules.context_candidates(probe)
    low, high = floor.least_ms(min(contexts)), floor.least_ms(max(contexts))
    if math.isinf(low):
        return model, kinds, replace(targets, target_decode_tpot_ms=40), traffic
    target = draw(st.integers(max(1, int(low)), int(high * 1.2) + 2))
    return model, kinds, replace(targets, target_decode_tpot_ms=target), traffic


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(uneven_layer_questions())
def test_size_fleet_matches_brute_force_on_uneven_layers(question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(uneven_layer_questions())
def test_size_fleet_matches_brute_force_on_a_few_uneven_layer_questions(
        question: tuple) -> None:
    _assert_matches_brute_force(question[:3], question[3])


def _assert_matches_brute_force(question: tuple, traffic: ModelTraffic | None = None
                                ) -> None:
    model, kinds, targets = question
    traffic = traffic or ModelTraffic.dense(model["model_weight_bytes"], hidden_size=16)
    expected = _brute_force(model, traffic, kinds, targets)
    try:
        result = size_fleet(model, kinds, targets, top=3, traffic=traffic, pareto=False)
    except SizingError as error:
        assert error.code == "NoFleetMeetsTargets", error
        assert expected == []
        return
    got = [tuple(f.counts_by_kind.get(k.kind, 0) for k in kinds) for f in result.fleets]
    assert got == [counts for _, counts in expected[:3]]
    _assert_no_idle_supersets(result, kinds)
    for fleet, (key, _) in zip(result.fleets, expected, strict=False):
        assert fleet.cost_per_hour_usd == pytest.approx(key[0])
        # Re-check: the fleet plans as reported and survives every f-node removal.
        ok, plan = _meets(model, traffic, kinds, list(fleet.node_ids), targets)
        assert ok and plan == fleet.plan
        for gone in itertools.combinations(fleet.node_ids, targets.failures_tolerated):
            left = [i for i in fleet.node_ids if i not in gone]
            assert _meets(model, traffic, kinds, left, targets)[0]


def test_cheapest_is_cheaper_kind_mix_and_ties_prefer_fewer_nodes() -> None:
    model = _model(4, 1)
    # Two "small" nodes (2 layers each) cost the same as one "big" (4 layers): fewer wins.
    kinds = [_kind("small", 3, 1.0, max_count=4), _kind("big", 5, 2.0, max_count=2)]
    result = size_fleet(model, kinds, top=3, traffic=ModelTraffic.dense(4 * UNIT, 16))
    assert result.cheapest.counts == (("big", 1),)
    assert result.fleets[1].counts == (("small", 2),)
    assert result.cheapest.cost_per_hour_usd == 2.0
    frame = result.frame()
    assert list(frame["fleet"])[:2] == ["1 x big", "2 x small"]
    assert {"cost_per_hour_usd", "estimated_tpot_ms", "tokens_per_s",
            "cost_per_million_tokens_usd", "count_big", "count_small"} <= set(frame.columns)


def test_failures_tolerated_adds_spares() -> None:
    model = _model(4, 1)
    kinds = [_kind("small", 3, 1.0, max_count=6)]
    assert size_fleet(model, kinds).cheapest.node_count == 2
    tolerant = size_fleet(model, kinds, SizingTargets(failures_tolerated=2))
    assert tolerant.cheapest.node_count == 4
    assert tolerant.cheapest.to_dict()["failures_tolerated"] == 2


def test_json_keys_are_the_documented_ones() -> None:
    model = _model(4, 1)
    result = size_fleet(model, [_kind("big", 5, 2.0, max_count=2)],
                        traffic=ModelTraffic.dense(4 * UNIT, 16))
    assert list(result.cheapest.to_dict()) == [
        "counts", "nodes", "cost_per_hour", "context_length", "stage_count",
        "parallel_lanes", "estimated_tpot_ms", "estimated_ttft_ms", "tokens_per_s",
        "estimated_context_fill_ms", "cost_per_million_tokens", "failures_tolerated"]
    assert result.cheapest.to_dict()["nodes"] == ["big-00"]


def test_no_fleet_says_how_far_the_largest_gets() -> None:
    spec = load_preset("qwen3-coder-480b-a35b")
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind == "h100-sxm-80gb"]
    limited = [GpuModel(**{**catalog[0].to_dict(), "max_count": 3})]
    with pytest.raises(SizingError) as caught:
        size_fleet(spec, limited, SizingTargets(minimum_context=65536))
    assert caught.value.code == "NoFleetMeetsTargets"
    message = caught.value.message
    assert "of 62 layers at 65,536" in message and "h100-sxm-80gb" in message


@pytest.mark.parametrize(("targets", "field"), [
    ({"minimum_lanes": 0}, "minimum_lanes"),
    ({"failures_tolerated": -1}, "failures_tolerated"),
    ({"minimum_context": 1.5}, "minimum_context"),
    ({"target_decode_tpot_ms": True}, "target_decode_tpot_ms"),
])
def test_bad_targets_name_the_field(targets: dict, field: str) -> None:
    with pytest.raises(TargetsError) as caught:
        SizingTargets(**targets)
    assert caught.value.code == "InvalidTargets"
    assert caught.value.details["field"] == field


def test_context_above_native_and_unknown_kinds_are_refused() -> None:
    model = _model(4, 1, native=4096)
    kinds = [_kind("big", 5, 2.0, max_count=2)]
    with pytest.raises(TargetsError) as caught:
        size_fleet(model, kinds, SizingTargets(minimum_context=8192))
    assert caught.value.code == "InvalidTargets"
    with pytest.raises(SizingError) as caught:
        size_fleet(model, kinds, kinds=["nope"])
    assert caught.value.code == "UnknownKind"
    unpriced = GpuModel("U", 5 * UNIT, "V", "n", id="u")
    with pytest.raises(SizingError) as caught:
        size_fleet(model, [unpriced], kinds=["u"])
    assert caught.value.code == "UnpricedKind"
    with pytest.raises(SizingError) as caught:
        size_fleet(model, [unpriced])
    assert caught.value.code == "EmptyCatalog"
    with pytest.raises(SizingError) as caught:
        size_fleet(model, [_kind("a", 5, 1.0), _kind("a-1", 5, 1.0)])
    assert caught.value.code == "AmbiguousKindIds"


def test_pareto_front_keeps_only_undominated_fleets() -> None:
    model = _model(4, 16)  # a layer: 1.26 UNIT at 65,536 tokens, 1.52 at 131,072
    kinds = [_kind("small", 3, 1.0, max_count=8), _kind("fast", 9, 4.0, bandwidth=10**10,
                                                         max_count=2)]
    result = size_fleet(model, kinds, top=3, traffic=ModelTraffic.dense(4 * UNIT, 16))
    front = result.pareto
    assert front and front[0].cost_per_hour_usd == result.cheapest.cost_per_hour_usd
    points = [(f.cost_per_hour_usd, -f.plan.context_length, f.estimated_tpot_ms)
              for f in front]
    for a in points:
        assert not any(b != a and all(x <= y for x, y in zip(b, a, strict=True))
                       for b in points)
    assert pareto_front([*front, *front]) == front


def test_presets_size_with_the_shipped_catalog() -> None:
    catalog = load_gpu_catalog()
    spec = load_preset("llama-3.1-70b")
    result = size_fleet(spec, catalog, SizingTargets(failures_tolerated=1),
                        kinds=["h100-sxm-80gb", "a100-80gb", "l40s"], top=3)
    cheapest = result.cheapest
    assert cheapest.failures_tolerated == 1
    assert cheapest.estimated_tpot_ms is not None and cheapest.estimated_tpot_ms > 0
    speeds = node_speeds(fleet_nodes([g for g in catalog if g.kind in dict(cheapest.counts)],
                                     [n for _, n in cheapest.counts]), catalog)
    assert set(speeds) == set(cheapest.node_ids)


def test_ties_follow_catalog_order_whatever_the_kind_sizes() -> None:
    # The search decides the largest kinds first; equal fleets must still come in the
    # order of their count vectors in catalog order (as the brute force sorts them: (0, 1)
    # before (1, 0)), and each fleet's counts belong to its own kinds.
    model = _model(2, 1, native=65536)
    small, large = _kind("small", 3, 1.0, max_count=2), _kind("large", 8, 1.0, max_count=2)
    traffic = ModelTraffic.dense(2 * UNIT, 16)
    for kinds in ([small, large], [large, small]):
        result = size_fleet(model, kinds, top=2, traffic=traffic, pareto=False)
        assert [f.counts for f in result.fleets] == [((k.kind, 1),) for k in kinds[::-1]]
        assert {f.plan.context_length for f in result.fleets} == {65536}
        for fleet in result.fleets:
            ok, plan = _meets(model, traffic, kinds, list(fleet.node_ids), SizingTargets())
            assert ok and plan == fleet.plan


@pytest.mark.parametrize("failures", [0, 1])
def test_no_fleet_listed_is_a_cheaper_one_with_idle_nodes(failures: int) -> None:
    # Qwen3-Coder-480B on the shipped catalog: 2 x MI300X plans 2 stages at 262,144; the
    # same two stages on 2 x MI300X and an RTX 3090 left idle (USD 4.09) were listed #2.
    spec = load_preset("qwen3-coder-480b-a35b")
    catalog = load_gpu_catalog()
    result = size_fleet(spec, catalog, SizingTargets(failures_tolerated=failures), top=8,
                        pareto=False)
    kinds = [gpu for gpu in catalog if gpu.kind in result.kinds]
    assert len(result.fleets) == 8
    _assert_no_idle_supersets(result, kinds)
    if not failures:
        labels = [fleet.label for fleet in result.fleets]
        assert labels[0] == "2 x instinct-mi300x"
        assert "1 x rtx-3090 + 2 x instinct-mi300x" not in labels, labels
