"""Sizing questions that used to run for minutes: each is answered at once or refused by
name (the time and memory limits themselves are in ``benchmarks/hostile_bench.py``)."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_sizing import _kind, _model

import planner.sizing.search as search_module
from planner import limits
from planner.models import GpuModel, load_gpu_catalog, load_preset
from planner.performance import ModelTraffic, estimate_plan, node_speeds, stage_loads
from planner.planning import rules
from planner.planning.inputs import PlanningInput
from planner.sizing import (
    SizingError,
    SizingTargets,
    fleet_node_kinds,
    fleet_nodes,
    floors,
    size_fleet,
)
from planner.targets import TargetsError, plan_or_none


def _no_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the search refuse as SizingTooLarge before its first candidate fleet."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", -1)


def test_a_tpot_no_kind_can_reach_is_answered_at_once(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """Llama 3.1 70B at 30 ms: its weights and the cache at 65,536 read at the fastest
    kinds' calibrated rates already take more; the search is never entered (it used to
    run past 90 s at 4.5 GB)."""
    _no_plans(monkeypatch)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                   SizingTargets(target_decode_tpot_ms=30))
    assert caught.value.code == "NoFleetMeetsTargets"
    said = re.search(r"takes at least ([\d.]+) ms at the fastest kinds' bandwidth "
                     r"\(instinct-mi300x", caught.value.message)
    assert said is not None and float(said.group(1)) > 30


def test_kinds_that_hold_the_model_alone_where_too_slow_are_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At 45 ms the kinds fast enough at 65,536 each hold the model alone at 131,072,
    which the planner then plans, too slow to read (48.1 ms); at 60 ms a lone MI300X is
    the answer, found in a few plans."""
    with monkeypatch.context() as patch:
        _no_plans(patch)
        with pytest.raises(SizingError) as caught:
            size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                       SizingTargets(target_decode_tpot_ms=45))
    assert caught.value.code == "NoFleetMeetsTargets"
    assert "each hold the whole model alone at 131,072" in str(caught.value)
    found = size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                       SizingTargets(target_decode_tpot_ms=60), top=1, pareto=False)
    assert found.cheapest.label == "1 x instinct-mi300x"
    assert found.plans_evaluated < 50
    # The rules remove nothing that meets the target: the plain search over the kinds
    # that can hold a share (no speed pruning) finds the same fleet.
    monkeypatch.setattr(search_module, "_speed_carriers", lambda *args: [])
    monkeypatch.setattr(search_module, "_read_time_covers", lambda *args: [])
    kinds = ["rtx-5090", "instinct-mi300x", "h200-141gb", "h100-sxm-80gb", "rtx-4090"]
    plain = size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                       SizingTargets(target_decode_tpot_ms=60), top=1, pareto=False,
                       kinds=kinds)
    assert plain.cheapest.label == "1 x instinct-mi300x"


def _random_fleets(count: int, seed: int) -> list[dict[str, int]]:
    rnd = random.Random(seed)
    kinds = [gpu.kind for gpu in load_gpu_catalog() if gpu.memory_bandwidth_bytes_per_s]
    return [{kind: rnd.randint(1, 3) for kind in rnd.sample(kinds, rnd.randint(1, 4))}
            for _ in range(count)]


@pytest.mark.parametrize("preset", ["llama-3.1-70b", "qwen3-coder-480b-a35b", "glm-4.5",
                                    "qwen3-next-80b-a3b"])
def test_the_speed_floors_are_below_every_estimate(preset: str) -> None:
    """The floors the search prunes with are below the estimate of every plan of random
    fleets of the shipped kinds, TPOT and TTFT alike: the decode floor at the plan's own
    lanes (its compute and attention counted) and context."""
    spec = load_preset(preset)
    traffic = ModelTraffic.from_spec(spec)
    catalog = {gpu.kind: gpu for gpu in load_gpu_catalog()}
    fields = spec.planning_fields()
    checked = 0
    for mix in _random_fleets(40, 7):
        kinds = [catalog[kind] for kind in mix]
        counts = list(mix.values())
        request = PlanningInput.from_dict({**fields, "nodes": list(fleet_nodes(kinds, counts))})
        plan = plan_or_none(request)
        if plan is None:
            continue
        estimate = estimate_plan(request, plan, traffic,
                                 node_speeds(request.nodes, kinds, fleet_node_kinds(
                                     kinds, counts)), prompt_tokens=4096)
        used = [kinds[index] for index, kind in enumerate(mix)
                if any(stage.node_id.startswith(f"{kind}-") for stage in plan.stages)]
        floor = floors.decode_floor(used, traffic, request, {}, plan.parallel_lanes)
        assert estimate.estimated_tpot_ms >= floor.least_ms(plan.context_length) + (
            plan.stage_count - 1) * floors.least_hop_ms(used, {})
        assert plan.parallel_lanes >= floors.least_lanes(request)
        if estimate.ttft_ms is not None:
            # The fastest reader and the fastest computer among the plan's kinds: each
            # bounds its term (the carriers' rule), and together the whole floor.
            prefill = floors.prefill_floor(used, traffic, request, 4096)
            assert estimate.ttft_ms >= prefill.least_ms()
            for term in floors.PREFILL_TERMS:
                assert estimate.ttft_ms >= min(prefill.least_ms(**{term: i})
                                               for i in range(len(used)))
        checked += 1
    assert checked >= 10


_CATALOG = {gpu.kind: gpu for gpu in load_gpu_catalog()}
_PREFILL_KINDS = sorted(kind for kind, gpu in _CATALOG.items()
                        if gpu.memory_bandwidth_bytes_per_s and gpu.fp16_tflops)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(preset=st.sampled_from(["llama-3.1-70b", "deepseek-v3", "qwen3-coder-480b-a35b",
                               "gpt-oss-120b", "qwen3-next-80b-a3b",
                               "nemotron-nano-9b-v2"]),
       mix=st.dictionaries(st.sampled_from(_PREFILL_KINDS), st.integers(1, 6),
                           min_size=1, max_size=4),
       prompt=st.sampled_from([1, 100, 512, 513, 1024, 2047, 4096, 20000]))
def test_the_prefill_floor_is_below_the_ttft_of_random_fleets(
        preset: str, mix: dict[str, int], prompt: int) -> None:
    """No plan of any fleet has an estimated TTFT below the prefill floor of its kinds:
    prompts of one ubatch (more stages gain nothing) and of several batches, dense
    models and mixtures of experts, on mixes of the shipped kinds."""
    spec = load_preset(preset)
    traffic = ModelTraffic.from_spec(spec)
    kinds = [_CATALOG[kind] for kind in mix]
    counts = list(mix.values())
    request = PlanningInput.from_dict({**spec.planning_fields(),
                                       "nodes": list(fleet_nodes(kinds, counts))})
    plan = plan_or_none(request)
    assume(plan is not None)
    assert plan is not None
    estimate = estimate_plan(request, plan, traffic, node_speeds(
        request.nodes, kinds, fleet_node_kinds(kinds, counts)), prompt_tokens=prompt)
    assert estimate.ttft_ms is not None
    used = [gpu for gpu in kinds
            if any(stage.node_id.startswith(f"{gpu.kind}-") for stage in plan.stages)]
    floor = floors.prefill_floor(used, traffic, request, prompt)
    assert estimate.ttft_ms >= floor.least_ms()
    # Each term's fastest kind among the plan's bounds the estimate on its own: what the
    # search's carriers of a TTFT target rest on.
    for term in floors.PREFILL_TERMS:
        assert estimate.ttft_ms >= min(floor.least_ms(**{term: i}) for i in range(len(used)))
    # Each stage's share of a ubatch's reads, products, staging and activations follows
    # the body bytes it holds: the TTFT is at least the bytes each stage holds at its
    # kind's rate per held byte, plus the rest (PrefillFloor.held_byte_rates, which the
    # search's per-held-byte covers of a TTFT target rest on).
    body = max(1, sum(rules.layer_weights(request)) - (traffic.token_embedding_bytes or 0))
    rates, rest = floor.held_byte_rates(body)
    kind_of = {gpu.kind: i for i, gpu in enumerate(used)}
    least = rest + sum(
        load.weight_bytes * rates[kind_of[stage.node_id.rsplit("-", 1)[0]]]
        for stage, load in zip(plan.stages, stage_loads(request, plan, traffic), strict=True))
    assert estimate.ttft_ms >= least
    # The ubatches flow through the stages as a pipeline: one passes every stage, the
    # others wait on the busiest, and each crosses the hops (the refusal of a TTFT no
    # split reaches rests on this).
    assert floor.least_ms() <= floor.pipeline_least_ms(body, plan.stage_count)
    assert estimate.ttft_ms >= floor.pipeline_least_ms(body, plan.stage_count)


_CPU = GpuModel("A 32-core CPU", 256 * 2**30, id="cpu-32", vendor="AMD", backend="cpu",
                memory_type="ddr", memory_bandwidth_bytes_per_s=400 * 10**9,
                core_count=32, boost_clock_mhz=4000, simd_width_bits=512)


@pytest.mark.parametrize("mix", [{"cpu-32": 2}, {"cpu-32": 1, "rtx-4090": 3}])
def test_the_prefill_floor_is_below_a_mixture_of_experts_on_cpus(mix: dict[str, int]
                                                                 ) -> None:
    """The CPU multiplies an expert's few tokens at its full rate, the GPUs below it: the
    floor counts the experts' products at the lowest of its kinds' rates, so that it stays
    below a CPU's estimate, alone or beside GPUs."""
    spec = load_preset("gpt-oss-120b")
    traffic = ModelTraffic.from_spec(spec)
    catalog = {**_CATALOG, _CPU.kind: _CPU}
    kinds = [catalog[kind] for kind in mix]
    counts = list(mix.values())
    request = PlanningInput.from_dict({**spec.planning_fields(),
                                       "nodes": list(fleet_nodes(kinds, counts))})
    plan = plan_or_none(request)
    assert plan is not None
    estimate = estimate_plan(request, plan, traffic, node_speeds(
        request.nodes, kinds, fleet_node_kinds(kinds, counts)), prompt_tokens=4096)
    assert estimate.ttft_ms is not None
    used = [gpu for gpu in kinds
            if any(stage.node_id.startswith(f"{gpu.kind}-") for stage in plan.stages)]
    assert _CPU in used
    floor = floors.prefill_floor(used, traffic, request, 4096)
    assert estimate.ttft_ms >= floor.least_ms()
    for term in floors.PREFILL_TERMS:
        assert estimate.ttft_ms >= min(floor.least_ms(**{term: i}) for i in range(len(used)))


def test_a_ttft_no_kind_can_reach_is_answered_at_once(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    _no_plans(monkeypatch)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("llama-3.1-70b"), load_gpu_catalog(),
                   SizingTargets(target_ttft_ms=10, prompt_tokens=32768))
    assert caught.value.code == "NoFleetMeetsTargets"
    assert "no split fills a 32,768-token prompt within the TTFT target of 10 ms" in str(
        caught.value)


@pytest.mark.parametrize(("target", "said"), [
    # Each ubatch of the prompt routes to nearly every expert, so the stages read almost
    # all 712 GB, which takes about 300 ms at the fastest kind's calibrated bandwidth (it
    # used to search for 10 s and end in SizingTooLarge, as only the compute was counted).
    (116, "reading the weights a ubatch uses and computing with them takes at least"),
    # One ubatch through the whole model takes at least 367 ms, and the second waits on
    # the busiest stage, whose share shrinks only as more stages add hops of 12 ms each:
    # 475 ms at least (it used to search 3,000 plans for 8 s and end in SizingTooLarge).
    (420, "its ubatches pass through the stages in turn, which takes at least"),
])
def test_a_ttft_below_the_fastest_prefill_is_answered_at_once(
        monkeypatch: pytest.MonkeyPatch, target: int, said: str) -> None:
    """DeepSeek-V3, 1,024 tokens in two ubatches: a target below what any split can do
    is refused before any plan, with the bound that refuses it."""
    _no_plans(monkeypatch)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("deepseek-v3"), load_gpu_catalog(),
                   SizingTargets(target_ttft_ms=target, prompt_tokens=1024))
    assert caught.value.code == "NoFleetMeetsTargets"
    # The targets are missed at the context, not the context out of reach.
    assert caught.value.message.startswith(
        "no fleet within the counts available meets the targets (a context of at least "
        "65,536): no split fills a 1,024-token prompt")
    found = re.search(re.escape(said) + r" ([\d,.]+) ms", caught.value.message)
    assert found is not None and float(found.group(1).replace(",", "")) > target


def test_the_prefill_read_covers_remove_no_fleet_that_meets_the_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With a TTFT target the fleet must read the weights fast enough over its nodes; the
    same cheapest fleets come out with the rule as without it, from fewer plans."""
    kinds = ["h100-sxm-80gb", "a100-80gb", "l40s", "rtx-4090"]
    model, catalog = load_preset("llama-3.1-70b"), load_gpu_catalog()
    targets = SizingTargets(target_ttft_ms=3000, prompt_tokens=4096)
    ruled = size_fleet(model, catalog, targets, kinds=kinds, top=3, pareto=False)
    monkeypatch.setattr(search_module, "_prefill_read_covers", lambda *args: [])
    plain = size_fleet(model, catalog, targets, kinds=kinds, top=3, pareto=False)
    assert [f.counts for f in ruled.fleets] == [f.counts for f in plain.fleets]
    assert ruled.plans_evaluated <= plain.plans_evaluated
    for fleet in ruled.fleets:
        assert fleet.estimated_ttft_ms is not None and fleet.estimated_ttft_ms <= 3000


def test_a_search_that_stops_short_says_how_close_it_came(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SizingTooLarge on a speed target names the fastest estimate it saw and its fleet,
    so the user knows how far to relax the target."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 20)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("deepseek-v3"), load_gpu_catalog(),
                   SizingTargets(target_ttft_ms=440, prompt_tokens=1024), pareto=False)
    assert caught.value.code == "SizingTooLarge"
    said = re.search(r"the fastest plans evaluated reach an estimated TTFT of ([\d,.]+) ms "
                     r"\((\d+ x [a-z0-9-]+)", caught.value.message)
    assert said is not None and float(said.group(1).replace(",", "")) > 440
    assert "against the target of 440 ms" in caught.value.message


def test_fleets_that_plan_on_too_few_stages_for_a_ttft_are_not_searched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3, 8,192 tokens (four batches of four ubatches): a split into enough
    stages could reach the floor over any number of them, but four MI300X hold the whole
    model at its native context, so every fleet with them plans on four stages or fewer,
    whose floor is higher, and their own estimate is above it. A target below the floor
    over any number of stages is answered at once."""
    spec = load_preset("deepseek-v3")
    traffic = ModelTraffic.from_spec(spec)
    request = PlanningInput.from_dict({**spec.planning_fields(), "nodes": [
        {"node_id": "probe", "detected_vram_bytes": 1}]})
    body = max(1, sum(rules.layer_weights(request)) - (traffic.token_embedding_bytes or 0))
    catalog = {gpu.kind: gpu for gpu in load_gpu_catalog()}
    kinds = [gpu for gpu in catalog.values() if gpu.price_per_hour
             and gpu.memory_bandwidth_bytes_per_s]
    floor = floors.prefill_floor(kinds, traffic, request, 8192)
    by_stages = floor.pipeline_least_ms_by_stages(body, request.layer_count)
    assert by_stages[3] > 1.05 * by_stages[-1]
    mi300x = catalog["instinct-mi300x"]
    fleet = PlanningInput.from_dict({**spec.planning_fields(),
                                     "nodes": list(fleet_nodes([mi300x], [4]))})
    plan = plan_or_none(fleet)
    assert plan is not None and plan.stage_count <= 4
    estimate = estimate_plan(fleet, plan, traffic, node_speeds(fleet.nodes, [mi300x]),
                             prompt_tokens=8192)
    assert estimate.ttft_ms is not None and estimate.ttft_ms >= by_stages[3]
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 100)
    target = int(by_stages[-1] * 0.95)
    with pytest.raises(SizingError) as caught:
        size_fleet(spec, load_gpu_catalog(),
                   SizingTargets(target_ttft_ms=target, prompt_tokens=8192), pareto=False)
    assert caught.value.code == "NoFleetMeetsTargets", caught.value
    assert "its ubatches pass through the stages in turn" in caught.value.message


def test_the_pipeline_floor_gains_nothing_on_a_prompt_of_one_ubatch() -> None:
    """One ubatch per batch: the stages wait on nothing but the hops, so the floor is the
    plain one; two ubatches on one stage take about twice one (less its fixed and
    attention times, which the busiest stage's share leaves out)."""
    spec = load_preset("llama-3.1-70b")
    traffic = ModelTraffic.from_spec(spec)
    request = PlanningInput.from_dict({**spec.planning_fields(), "nodes": [
        {"node_id": "probe", "detected_vram_bytes": 1}]})
    body = max(1, sum(rules.layer_weights(request)) - (traffic.token_embedding_bytes or 0))
    kinds = [_CATALOG["h100-sxm-80gb"]]
    one = floors.prefill_floor(kinds, traffic, request, 512)
    assert one.pipeline_least_ms(body, 80) == pytest.approx(one.least_ms())
    two = floors.prefill_floor(kinds, traffic, request, 1024)
    assert 1.9 * one.least_ms() < two.pipeline_least_ms(body, 1) <= 2 * two.least_ms()
    assert one.least_ms() < two.pipeline_least_ms(body, 80) < two.pipeline_least_ms(body, 1)


def test_a_model_typed_as_numbers_cannot_meet_a_speed_target() -> None:
    """No speed estimate: refused at once as the one targets check refuses it."""
    with pytest.raises(TargetsError) as caught:
        size_fleet(_model(4, 4), [_kind("a", 8, 1.0)], SizingTargets(target_decode_tpot_ms=50))
    assert caught.value.code == "TpotNotEstimable"
    assert "typed as numbers" in caught.value.message
    with pytest.raises(TargetsError) as caught:
        size_fleet(_model(4, 4), [_kind("a", 8, 1.0)],
                   SizingTargets(target_ttft_ms=50, prompt_tokens=100))
    assert caught.value.code == "TtftNotEstimable"


def test_more_of_a_kind_than_layers_and_spares_is_never_searched() -> None:
    kinds = [_kind(f"k{i}", 1 + i % 3, 1.0 + i / 10) for i in range(12)]
    capped = [replace(kind, max_count=10_000) for kind in kinds]
    targets = SizingTargets(failures_tolerated=2)
    plain = size_fleet(_model(6, 6), kinds, targets, top=3, pareto=False)
    huge = size_fleet(_model(6, 6), capped, targets, top=3, pareto=False)
    assert [f.counts for f in huge.fleets] == [f.counts for f in plain.fleets]
    assert huge.plans_evaluated == plain.plans_evaluated


def test_too_many_kinds_are_refused_by_name() -> None:
    kinds = [_kind(f"k{i:03d}", 8, 1.0 + i / 1000) for i in range(101)]
    with pytest.raises(SizingError) as caught:
        size_fleet(_model(4, 4), kinds)
    assert caught.value.code == "TooManyKinds"
    assert "101 kinds" in caught.value.message and "--kinds" in caught.value.message


def test_the_search_stops_at_its_bounds_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = [_kind(f"k{i}", 1 + i % 4, 1.0 + i / 7) for i in range(8)]
    # Stopped before any fleet is proven: there is nothing to list.
    monkeypatch.setattr(limits, "MAX_SIZING_QUEUE", 3)
    with pytest.raises(SizingError) as caught:
        size_fleet(_model(6, 6), kinds, SizingTargets(failures_tolerated=1), pareto=False)
    assert caught.value.code == "SizingTooLarge"
    assert "size with fewer kinds" in caught.value.message


def test_the_pareto_pass_stops_at_the_bounds_with_a_note(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The pass over higher contexts shares the search's bounds: past them the front
    covers the contexts it reached, and the notes say so (it used to run for minutes
    when no fleet plans the higher contexts)."""
    model = _model(4, 16)
    kinds = [_kind("small", 3, 1.0, max_count=8), _kind("fast", 9, 4.0, bandwidth=10**10,
                                                         max_count=2)]
    traffic = ModelTraffic.dense(model["model_weight_bytes"], hidden_size=16)
    # Three fleets: the two cheapest (2 x small, 1 x fast) are found within the plans
    # the first context needs, so the pass over the higher one would plan nothing new.
    whole = size_fleet(model, kinds, top=3, traffic=traffic)
    alone = size_fleet(model, kinds, top=3, traffic=traffic, pareto=False)
    assert whole.plans_evaluated > alone.plans_evaluated + 1
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", alone.plans_evaluated)
    cut = size_fleet(model, kinds, top=3, traffic=traffic)
    assert cut.fleets == whole.fleets
    assert any(note.startswith("the Pareto front leaves out contexts from")
               for note in cut.notes)


@pytest.mark.parametrize(("preset", "tpot"), [("llama-3.1-70b", 84), ("glm-4.5", 72),
                                              ("deepseek-v3", 44), ("llama-4-maverick", 26),
                                              ("deepseek-v3.2", 54)])
def test_tpot_targets_between_the_floor_and_any_fleet_are_answered(
        monkeypatch: pytest.MonkeyPatch, preset: str, tpot: int) -> None:
    """Targets a fleet of more memory misses because it plans a longer context: each used
    to end in SizingTooLarge after 3,000 plans. The planned context only grows with the
    fleet, so a partial fleet sure to plan a context no plan reads within the target is
    not searched further: each is answered (fleets that meet it, re-checked with the one
    targets check, or NoFleetMeetsTargets) in fewer than 2,000 of the 3,000 plans allowed."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 2000)
    spec = load_preset(preset)
    targets = SizingTargets(target_decode_tpot_ms=tpot)
    try:
        result = size_fleet(spec, load_gpu_catalog(), targets, pareto=False)
    except SizingError as error:
        assert error.code == "NoFleetMeetsTargets", error
        return
    traffic = ModelTraffic.from_spec(spec)
    catalog = {gpu.kind: gpu for gpu in load_gpu_catalog()}
    for fleet in result.fleets:
        kinds = [catalog[kind] for kind, _ in fleet.counts]
        counts = [n for _, n in fleet.counts]
        request = PlanningInput.from_dict({**spec.planning_fields(),
                                           "nodes": list(fleet_nodes(kinds, counts))})
        plan = plan_or_none(request)
        assert plan == fleet.plan
        estimate = estimate_plan(request, plan, traffic, node_speeds(
            request.nodes, kinds, fleet_node_kinds(kinds, counts)))
        assert targets.for_request(request).meets(plan, estimate)


def test_a_model_with_a_state_per_sequence_is_sized_at_its_fewest_lanes() -> None:
    """A kind that holds the model at the minimum context only with one lane (each lane
    keeps its own recurrent state) makes a fleet that meets the default targets: the
    search's needs are those of the fewest lanes (it used to take the most, and found
    no fleet)."""
    spec = load_preset("nemotron-nano-9b-v2")
    probe = PlanningInput.from_dict({**spec.planning_fields(),
                                     "nodes": [{"node_id": "p", "detected_vram_bytes": 1}]})
    one_lane = sum(rules.layer_bytes(probe, 65536, 1))
    assert one_lane < sum(rules.layer_bytes(probe, 65536, 2))
    tight = replace(load_gpu_catalog()[0], id="tight", name="Tight", headroom_bytes=0,
                    memory_bytes=one_lane, max_count=2)
    found = size_fleet(spec, [tight], SizingTargets(), top=1, pareto=False)
    assert found.cheapest.label == "1 x tight"
    assert (found.cheapest.plan.parallel_lanes, found.cheapest.plan.context_length) == (
        1, 65536)


def test_a_tpot_target_with_a_spare_is_answered_without_planning_what_cannot_fit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 4 Maverick's layers alternate between experts and dense: many mixes of small
    cards hold enough layers and bytes in all but no walk of their stages fits. Each node
    taking all it can, largest first, gets as far as any set of them: a fleet (less its
    f largest) that does not get through is not planned (this used to make 3,000 plans
    of fleets that do not fit and stop with SizingTooLarge)."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 300)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("llama-4-maverick"), load_gpu_catalog(),
                   SizingTargets(target_decode_tpot_ms=27, failures_tolerated=1),
                   pareto=False)
    assert caught.value.code == "NoFleetMeetsTargets"


def _with_cheap_16_gib_kind(tmp_path: Path) -> list[GpuModel]:
    """The shipped catalog and one more kind: 16 GiB at USD 0.25 an hour, slow."""
    catalog = tmp_path / "gpus.toml"
    catalog.write_text(files("planner.data").joinpath("gpus.toml").read_text() + """
[[gpu]]
name = "Cheap 16"
memory = "16 GiB"
memory_type = "gddr"
backend = "cuda"
price_per_hour = 0.25
memory_bandwidth_bytes_per_s = 716_800_000_000
fp16_tflops = 194.9
""")
    return load_gpu_catalog(catalog)


def test_a_cheap_small_kind_leaves_a_tpot_target_answered_at_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """DeepSeek-V3.2 at 58 ms: the largest fleet plans 67.2 ms at 163,840 with 4 lanes
    (within 6 ms below that the search still stops with SizingTooLarge). Fleets of three
    MI300X and small cards hold the model there on 4 to 13 stages and miss it by far, but
    the small cards each take a layer or two only from some start layers, so the layers
    their nodes surely take fell short of the model and those fleets had no level: one
    cheap 16 GiB kind more made such fleets 3,000 plans and SizingTooLarge. Walked
    largest first, as the planner orders the stages, they reach the last layer at
    163,840, where the fast nodes hold too little of the model: a handful of plans."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 100)
    with pytest.raises(SizingError) as caught:
        size_fleet(load_preset("deepseek-v3.2"), _with_cheap_16_gib_kind(tmp_path),
                   SizingTargets(target_decode_tpot_ms=58), pareto=False)
    assert caught.value.code == "NoFleetMeetsTargets", caught.value
    said = re.search(r"estimated TPOT ([\d.]+) ms > 58 ms", caught.value.message)
    assert said is not None and float(said.group(1)) > 58


@pytest.mark.slow
def test_a_cheap_small_kind_leaves_tpot_targets_with_a_spare_answered(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Llama 4 Maverick surviving the loss of a node, with a cheap 16 GiB kind, at TPOT
    targets on both sides of what the largest fleet reaches: fleets of one large node and
    dozens of small cards hold enough layers after losing the large one, so every mix of
    them was once queued, more than 500,000 (SizingTooLarge after 10 to 17 s). What is
    left after losing the f largest must walk through the layers, and the small cards to
    come cannot take the next expert layer; a speed cover holds for it without what its f
    largest gave; and each small stage pays a hop for the little it reads. Every target
    is answered within a queue of 20,000: refused as NoFleetMeetsTargets below the
    reach, and above it by a fleet that meets the target, no dearer as the target
    loosens. Within 4 ms below the reach (about 39 ms) the search still stops with
    SizingTooLarge: proving that no mix of small cards reaches such a target takes more
    than the queue (checked apart, so that closing the gap shows)."""
    monkeypatch.setattr(limits, "MAX_SIZING_QUEUE", 20_000)
    catalog = _with_cheap_16_gib_kind(tmp_path)
    answered_costs: list[float] = []
    refused = 0
    with pytest.raises(SizingError) as gap:
        size_fleet(load_preset("llama-4-maverick"), catalog,
                   SizingTargets(target_decode_tpot_ms=37, failures_tolerated=1),
                   pareto=False)
    assert gap.value.code == "SizingTooLarge"
    reach = re.search(r"reach an estimated TPOT of ([\d.]+) ms", gap.value.message)
    # The reach lies between the target refused here and the first one answered below.
    assert reach is not None and 37 < float(reach.group(1)) < 40, gap.value.message
    for tpot in (25, 28, 31, 33, 40, 41, 44, 47, 50):
        try:
            result = size_fleet(load_preset("llama-4-maverick"), catalog,
                                SizingTargets(target_decode_tpot_ms=tpot,
                                              failures_tolerated=1),
                                pareto=False)
        except SizingError as refusal:
            assert refusal.code == "NoFleetMeetsTargets", refusal
            assert not answered_costs, f"{tpot} ms refused after a tighter target was met"
            refused += 1
            continue
        best = result.fleets[0]
        assert best.estimate is not None and best.estimate.estimated_tpot_ms <= tpot
        assert best.failures_tolerated == 1
        assert not answered_costs or best.cost_per_hour_usd <= answered_costs[-1]
        answered_costs.append(best.cost_per_hour_usd)
    assert refused and answered_costs, (refused, answered_costs)


def test_a_search_that_stops_after_proving_some_fleets_lists_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3.1 70B at 84 ms: one MI300X meets the target, and so does every fleet that
    adds cards it leaves idle, which are no alternatives; proving which fleet comes next
    passes the bounds. The fleets proven cheapest are listed, and the notes say the rest
    are not."""
    monkeypatch.setattr(limits, "MAX_SIZING_PLANS", 300)
    spec = load_preset("llama-3.1-70b")
    targets = SizingTargets(target_decode_tpot_ms=84)
    cheapest = size_fleet(spec, load_gpu_catalog(), targets, top=1, pareto=False)
    result = size_fleet(spec, load_gpu_catalog(), targets, top=5, pareto=False)
    assert result.fleets[0].counts == cheapest.fleets[0].counts == (("instinct-mi300x", 1),)
    assert len(result.fleets) < 5
    assert any(note.startswith(f"only {len(result.fleets)} of the 5 fleets asked for")
               for note in result.notes), result.notes
