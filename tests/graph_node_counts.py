"""Computed graph nodes of one layer of each architecture llama.cpp's test-llama-archs
models cover (``tests/data/llama_archs_headers.tar.gz``), as ``planner.llamacpp.graph``
builds their graphs: what ``planner.performance.graph_nodes`` ships.
``python tests/graph_node_counts.py`` prints the table."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

import gguf_files

from planner.llamacpp.graph.schedule import build_graph
from planner.llamacpp.graph.shapes import GraphModel
from planner.llamacpp.layout import model_from_gguf

# ggml operations that compute nothing (a new view of the same bytes).
FREE_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"})
# A mixture of experts' router, from its probabilities to its chosen experts' weights
# (llama.cpp's build_moe_ffn names them so), and the sums of its experts' outputs.
ROUTER_NAMES = ("ffn_moe_probs", "ffn_moe_argsort", "ffn_moe_weights")
EXPERT_SUM_NAME = "ffn_moe_out"
ROUTER_PRODUCT_NAME = "ffn_moe_logits"  # one a layer with experts
# A llama graph's computed nodes outside its layers (inputs, the output norm and head):
# what a family that does not build layer by layer is taken to have beside its layers.
OUTSIDE_LAYERS = 9


def computed_nodes(model: GraphModel, names: tuple[str, ...] = ()) -> int:
    """The nodes of one decode step's graph (flash attention on) that compute; of those,
    only the ones whose name starts with one of ``names`` where any are given."""
    graph = build_graph(model, n_tokens=1, n_outputs=1, n_kv=256, flash_attn=True)
    return sum(1 for node in graph.nodes if node.op not in FREE_OPS
               and (not names or node.name.startswith(names)))


def nodes_per_layer(model: GraphModel, names: tuple[str, ...] = ()) -> float:
    """A layer's computed nodes (of ``names`` only, where given): what a graph of twice
    the layers adds, per layer; where a family builds other than layer by layer (the
    doubled graph is no longer), the whole graph's nodes less a llama graph's outside its
    layers, per layer."""
    once = computed_nodes(model, names)
    twice = computed_nodes(dataclasses.replace(model, blocks=model.blocks + model.blocks),
                           names)
    if twice > once or names:
        return (twice - once) / len(model.blocks)
    return (once - OUTSIDE_LAYERS) / len(model.blocks)


def arch_model(name: str) -> tuple[str, GraphModel]:
    """The architecture and graph shape of one of llama.cpp's test models (``name``, a
    file of ``tests/data/llama_archs_headers.tar.gz``)."""
    header, size = gguf_files.arch_headers()[name]
    with tempfile.TemporaryDirectory() as folder:
        model = model_from_gguf(gguf_files.write_arch_file(Path(folder), name, header,
                                                           size))
    return model.architecture, model.graph


def counts() -> dict[str, dict[str, float]]:
    """Architecture -> ``{"dense": nodes}`` and, of a mixture of experts, ``{"moe":
    nodes less the sums of its experts' outputs, "router": its router's nodes,
    "expert_layers": the share of its layers with experts}`` (each per layer)."""
    table: dict[str, dict[str, float]] = {}
    for name in sorted(gguf_files.arch_headers()):
        architecture, graph = arch_model(name)
        entry = table.setdefault(architecture, {})
        nodes = nodes_per_layer(graph)
        expert_layers = nodes_per_layer(graph, (ROUTER_PRODUCT_NAME,))
        if name.removesuffix(".gguf").endswith("-moe") and not expert_layers:
            entry["moe"] = nodes  # a family whose graph routes no experts
        elif name.removesuffix(".gguf").endswith("-moe"):
            entry["moe"] = nodes - nodes_per_layer(graph, (EXPERT_SUM_NAME,))
            entry["router"] = nodes_per_layer(graph, ROUTER_NAMES)
            entry["expert_layers"] = expert_layers
        else:
            entry["dense"] = nodes
    return table


if __name__ == "__main__":
    sys.stdout.write(repr(counts()) + "\n")
