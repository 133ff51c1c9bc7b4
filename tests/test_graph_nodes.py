"""A layer's fixed time follows the operations llama.cpp's graph of its architecture
computes (planner.performance.graph_nodes): the shipped table is what
planner.llamacpp.graph counts, every preset's architecture is in it, and the estimate
charges a layer of more operations more fixed time."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import gguf_files
import pytest
from graph_node_counts import OUTSIDE_LAYERS, computed_nodes, counts

from planner.llamacpp.layout import model_from_gguf
from planner.models.presets import list_presets, load_preset
from planner.performance import ModelTraffic, PerformanceError, StageLoad, step_work
from planner.performance.graph_nodes import (
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
    header, size = gguf_files.arch_headers()["llama-dense.gguf"]
    with tempfile.TemporaryDirectory() as folder:
        model = model_from_gguf(gguf_files.write_arch_file(Path(folder), "llama-dense.gguf",
                                                           header, size)).graph
    layers = len(model.blocks) * REFERENCE_LAYER_NODES
    assert computed_nodes(model) - layers == OUTSIDE_LAYERS


def test_a_llama_layer_is_the_unit() -> None:
    assert layer_nodes("llama", experts=False) == REFERENCE_LAYER_NODES
    assert fixed_time_layers(32, REFERENCE_LAYER_NODES) == 32
    assert fixed_time_layers(32, None) == 32


def test_a_mixture_of_experts_layer_computes_more_operations() -> None:
    """The router, its top-k, the gathered experts' products and their weighted sum."""
    dense, moe = layer_nodes("llama", experts=False), layer_nodes("llama", experts=True)
    assert dense is not None and moe is not None and moe > dense
    # An architecture with one model counted answers with it either way.
    assert layer_nodes("deepseek2", experts=False) == layer_nodes("deepseek2", experts=True)
    assert layer_nodes("no-such-architecture", experts=False) is None
    assert layer_nodes(None, experts=True) is None


@pytest.mark.parametrize("preset_id", list_presets())
def test_every_preset_s_architecture_is_counted(preset_id: str) -> None:
    spec = load_preset(preset_id)
    traffic = ModelTraffic.from_spec(spec)
    assert traffic.layer_nodes == layer_nodes(spec.architecture, spec.expert_count is not None)
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


@pytest.mark.parametrize("nodes", [0, -3.0, 1001, "many", float("nan")])
def test_an_impossible_count_of_operations_is_refused(nodes: object) -> None:
    with pytest.raises(PerformanceError) as caught:
        ModelTraffic(2**30, 2**30, 4096, layer_nodes=nodes)  # type: ignore[arg-type]
    assert caught.value.details["field"] == "layer_nodes"
