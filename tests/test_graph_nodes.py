"""A layer's fixed time follows the operations llama.cpp's graph of its architecture
computes (planner.performance.graph_nodes): the shipped table is what
planner.llamacpp.graph counts, every preset's architecture is in it, and the estimate
charges a layer of more operations more fixed time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from graph_node_counts import (
    EXPERT_SUM_NAME,
    FREE_OPS,
    OUTSIDE_LAYERS,
    ROUTER_NAMES,
    arch_model,
    computed_nodes,
    counts,
    nodes_per_layer,
)

from planner.llamacpp.graph.schedule import build_graph
from planner.llamacpp.graph.shapes import GraphModel
from planner.models.presets import list_presets, load_preset
from planner.performance import (
    ModelTraffic,
    PerformanceError,
    Rates,
    StageLoad,
    step_terms,
    step_work,
)
from planner.performance.graph_nodes import (
    FUSED_ADDS,
    LAYER_NODES,
    REFERENCE_LAYER_NODES,
    fixed_time_layers,
    layer_nodes,
)


def test_the_table_is_what_the_graphs_of_llama_cpp_s_models_compute() -> None:
    assert counts() == LAYER_NODES


def test_a_llama_graph_has_its_stated_nodes_outside_its_layers() -> None:
    """The stand-in for the families that do not build layer by layer is a llama
    graph's own: its nodes less its layers'."""
    _, model = arch_model("llama-dense.gguf")
    layers = len(model.blocks) * REFERENCE_LAYER_NODES
    assert computed_nodes(model) - layers == OUTSIDE_LAYERS


def test_a_llama_layer_is_the_unit() -> None:
    assert layer_nodes("llama") == REFERENCE_LAYER_NODES
    assert layer_nodes("llama", fused=True) == REFERENCE_LAYER_NODES
    assert fixed_time_layers(32, REFERENCE_LAYER_NODES) == 32
    assert fixed_time_layers(32, None) == 32


def test_a_mixture_of_experts_layer_computes_more_operations() -> None:
    """The router, its top-k, the gathered experts' products and their weighted sum."""
    dense, moe = layer_nodes("llama"), layer_nodes("llama", 2)
    assert dense is not None and moe is not None and moe > dense
    # An architecture with only a mixture of experts counted answers with it, one expert
    # sum where how many experts it uses is not said.
    assert layer_nodes("deepseek2") == layer_nodes("deepseek2", 2)
    assert layer_nodes("no-such-architecture") is None
    assert layer_nodes(None, 8) is None


def _using(model: GraphModel, experts: int) -> GraphModel:
    """``model`` with every layer with experts using ``experts`` of them a token."""
    return replace(model, blocks=tuple(
        replace(block, feed_forward=replace(block.feed_forward, n_expert_used=experts))
        if block.feed_forward and block.feed_forward.n_expert else block
        for block in model.blocks))


MIXTURES = ["qwen3moe-moe.gguf", "gpt-oss-moe.gguf", "deepseek2-moe.gguf", "llama-moe.gguf"]


@pytest.mark.parametrize("name", MIXTURES)
@pytest.mark.parametrize("experts", [1, 2, 4, 8])
def test_a_layer_adds_one_more_operation_for_each_expert_a_token_uses(
        name: str, experts: int) -> None:
    """The count follows the experts a model uses, as llama.cpp's graph of the same
    model using that many counts."""
    architecture, graph = arch_model(name)
    assert nodes_per_layer(_using(graph, experts)) == layer_nodes(architecture, experts)


def _kernels(model: GraphModel) -> int:
    """The kernels a backend that fuses a mixture of experts' router and expert sums
    launches for one decode step: each run of router operations one kernel, each run of
    expert-sum adds one kernel per :data:`FUSED_ADDS` adds, every other computed
    operation one."""
    graph = build_graph(model, n_tokens=1, n_outputs=1, n_kv=256, flash_attn=True)
    kinds = ["router" if node.name.startswith(ROUTER_NAMES) else
             "sum" if node.name.startswith(EXPERT_SUM_NAME) else "other"
             for node in graph.nodes if node.op not in FREE_OPS]
    kernels, run, previous = 0, 0, ""
    for kind in [*kinds, "end"]:
        if kind == previous and kind != "other":
            run += 1
            continue
        if previous == "router":
            kernels += 1
        elif previous == "sum":
            kernels += -(-run // FUSED_ADDS)
        run = 1
        previous = kind
        kernels += kind == "other"
    return kernels


@pytest.mark.parametrize("name", MIXTURES)
@pytest.mark.parametrize("experts", [2, 8])
def test_a_fused_count_is_the_kernels_left_when_the_router_and_the_sums_fuse(
        name: str, experts: int) -> None:
    architecture, graph = arch_model(name)
    model = _using(graph, experts)
    twice = replace(model, blocks=model.blocks + model.blocks)
    per_layer = (_kernels(twice) - _kernels(model)) / len(model.blocks)
    fused = layer_nodes(architecture, experts, fused=True)
    assert per_layer == fused
    assert fused is not None and fused < (layer_nodes(architecture, experts) or 0)


@pytest.mark.parametrize("preset_id", list_presets())
def test_every_preset_s_architecture_is_counted(preset_id: str) -> None:
    spec = load_preset(preset_id)
    traffic = ModelTraffic.from_spec(spec)
    assert traffic.layer_nodes == layer_nodes(spec.architecture, spec.experts_used)
    assert traffic.fused_layer_nodes == layer_nodes(spec.architecture, spec.experts_used,
                                                    fused=True)
    assert traffic.layer_nodes is not None


def test_the_fixed_time_of_a_step_follows_its_layers_operations() -> None:
    traffic = ModelTraffic.dense(8 * 2**30, 4096, 8_000_000_000)
    load = StageLoad(layer_count=32, weight_bytes=8 * 2**30, routed_expert_bytes=0,
                     active_parameters=8e9,
                     kv_bytes_per_token=131072, attention_width=4096)
    plain = step_work(load, traffic, tokens=1, sequences=1, cached=1000, attended=1000,
                      overlapped=False)
    assert plain.layers == 32
    busier = step_work(load, replace(traffic, layer_nodes=38.0), tokens=1, sequences=1,
                       cached=1000, attended=1000, overlapped=False)
    assert busier.layers == 64
    assert busier.weight_bytes == plain.weight_bytes


@pytest.mark.parametrize("field", ["layer_nodes", "fused_layer_nodes"])
@pytest.mark.parametrize("nodes", [0, -3.0, 1001, "many", float("nan")])
def test_an_impossible_count_of_operations_is_refused(field: str, nodes: object) -> None:
    with pytest.raises(PerformanceError) as caught:
        ModelTraffic(2**30, 2**30, 4096, **{field: nodes})  # type: ignore[arg-type]
    assert caught.value.details["field"] == field


def test_a_device_that_fuses_pays_the_fused_count() -> None:
    """The step's work states both counts; the device's rates say which it launches."""
    traffic = ModelTraffic(2**30, 2**28, 2048, expert_count=128, experts_used=8,
                           layer_nodes=layer_nodes("qwen3moe", 8),
                           fused_layer_nodes=layer_nodes("qwen3moe", 8, fused=True))
    load = StageLoad(layer_count=48, weight_bytes=2**30, routed_expert_bytes=2**29,
                     active_parameters=3e9, kv_bytes_per_token=4096, attention_width=4096)
    work = step_work(load, traffic, tokens=1, sequences=1, cached=10, attended=10,
                     overlapped=False)
    assert work.layers == 48 * 31 / 19 and work.fused_layers == 48 * 23 / 19
    rates = Rates(read_ms_per_byte=1e-9, kv_ms_per_byte=1e-9, matrix_ms_per_flop=1e-12,
                  attention_ms_per_flop=1e-12, layer_ms=0.1)
    assert step_terms(work, rates).fixed_ms == pytest.approx(48 * 31 / 19 * 0.1)
    fusing = replace(rates, fuses_moe=1.0)
    assert step_terms(work, fusing).fixed_ms == pytest.approx(48 * 23 / 19 * 0.1)
    # A step of several tokens (lanes, a prompt's micro-batch) is counted unfused: the
    # router's fusion fired for one token only.
    lanes = step_work(load, traffic, tokens=4, sequences=4, cached=10, attended=10,
                      overlapped=False)
    assert step_terms(lanes, fusing).fixed_ms == pytest.approx(48 * 31 / 19 * 0.1)
    # A work of one count (a dense model, or one built by hand) is the same either way.
    plain = replace(work, fused_layers=None)
    assert step_terms(plain, fusing).fixed_ms == step_terms(plain, rates).fixed_ms
