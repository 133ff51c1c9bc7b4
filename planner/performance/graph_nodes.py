"""How many ggml operations one layer of a model computes, by its architecture: llama.cpp
pays a fixed time for each (a kernel launch on a GPU, the threads meeting at a barrier on
a CPU), so a layer's fixed time is a llama layer's in proportion to its operations.

The counts are of the graphs :mod:`planner.llamacpp.graph` builds for llama.cpp's own
small model of each architecture (``test-llama-archs``; their headers are in
``tests/data/llama_archs_headers.tar.gz``): a layer's operations that compute (a view,
reshape, permute or transpose computes nothing), with flash attention, of the dense and
the mixture-of-experts model where an architecture has both. A mixture of experts' count
leaves out the sum of its experts' outputs (an add for each expert a token uses past the
first, in each layer with experts: ``expert_layers`` of its layers) and states its router's
operations (softmax, top-k, the chosen experts' weights: ``router``), so that
:func:`layer_nodes` counts a model's own experts, and what a GPU backend that runs the
router and the sum as one kernel each launches (``fused``; which builds do:
:func:`planner.performance.fuses_moe_kernels`). ``tests/graph_node_counts.py`` counts
them, and ``tests/test_graph_nodes.py`` holds this table to them.
"""

from __future__ import annotations

import math
from typing import TypedDict

# The adds of one shape every fusing GPU backend of b11434 sums in one kernel (Metal's
# chain of 7; CUDA's 8, Vulkan's 9, where its first fusion, pull request 15252, took 6):
# an expert layer's sum of its experts' outputs, one kernel for up to 8 experts.
FUSED_ADDS = 7

# A llama layer's operations (its norms, products, rotations, cache writes, attention,
# activation and residual sums): the unit of a backend's fixed time per layer.
REFERENCE_LAYER_NODES = 19.0

LAYER_NODES: dict[str, dict[str, float]] = {
    "afmoe": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "arcee": {"dense": 18},
    "arctic": {"moe": 24, "router": 3, "expert_layers": 1},
    "baichuan": {"dense": 19},
    "bailingmoe": {"moe": 29, "router": 3, "expert_layers": 1},
    "bailingmoe2": {"moe": 22, "router": 1.5, "expert_layers": 0.5},
    "bailingmoe3": {"moe": 45, "router": 1.5, "expert_layers": 0.5},
    "bloom": {"dense": 16},
    "chatglm": {"dense": 18},
    "codeshell": {"dense": 18},
    "cogvlm": {"dense": 17},
    "cohere2": {"dense": 16},
    "cohere2moe": {"moe": 21.5, "router": 1.5, "expert_layers": 0.5},
    "command-r": {"dense": 17},
    "dbrx": {"moe": 22, "router": 3, "expert_layers": 1},
    "deci": {"dense": 19},
    "deepseek": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "deepseek2": {"moe": 31.5, "router": 1.5, "expert_layers": 0.5},
    "deepseek32": {"moe": 50, "router": 1.5, "expert_layers": 0.5},
    "deepseek4": {"moe": 94.25},
    "dots1": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "dots3note": {"moe": 41, "router": 1.5, "expert_layers": 0.5},
    "dream": {"dense": 19},
    "ernie4_5": {"moe": 19},
    "ernie4_5-moe": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "exaone": {"dense": 19},
    "exaone-moe": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "exaone4": {"dense": 19},
    "falcon": {"dense": 16},
    "falcon-h1": {"dense": 40},
    "gemma": {"dense": 19},
    "gemma2": {"dense": 19},
    "gemma3": {"dense": 19},
    "glm-dsa": {"moe": 50, "router": 1.5, "expert_layers": 0.5},
    "glm4": {"dense": 18},
    "glm4moe": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "glm5-next": {"moe": 87, "router": 1.5, "expert_layers": 0.5},
    "gpt-oss": {"moe": 24, "router": 3, "expert_layers": 1},
    "gpt2": {"dense": 14},
    "gptneox": {"dense": 16},
    "granite": {"dense": 19, "moe": 29, "router": 3, "expert_layers": 1},
    "granite_swa": {"dense": 19},
    "granitehybrid": {"dense": 23.5},
    "granitemoe": {"dense": 19, "moe": 29, "router": 3, "expert_layers": 1},
    "grok": {"moe": 30, "router": 3, "expert_layers": 1},
    "grovemoe": {"moe": 24, "router": 3, "expert_layers": 1},
    "hrm_text": {"dense": 28.5},
    "hunyuan-dense": {"dense": 19},
    "hunyuan-moe": {"moe": 29, "router": 3, "expert_layers": 1},
    "hunyuan_vl": {"dense": 19},
    "hy_v3": {"moe": 28, "router": 3, "expert_layers": 1},
    "hy_v4": {"moe": 115.5, "router": 3, "expert_layers": 0.5},
    "internlm2": {"dense": 19},
    "jais": {"dense": 17},
    "jais2": {"dense": 18},
    "jamba": {"dense": 25},
    "kimi-k3": {"moe": 83, "router": 1.5, "expert_layers": 0.5},
    "kimi-linear": {"moe": 40.5, "router": 1.5, "expert_layers": 0.5},
    "laguna": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "lfm2": {"dense": 18.5},
    "lfm2moe": {"moe": 21, "router": 1.5, "expert_layers": 0.5},
    "llada": {"dense": 19},
    "llada-moe": {"moe": 24, "router": 3, "expert_layers": 1},
    "llama": {"dense": 19, "moe": 24, "router": 3, "expert_layers": 1},
    "llama4": {"moe": 24, "router": 1.5, "expert_layers": 0.5},
    "maincoder": {"dense": 19},
    "mamba": {"dense": 21},
    "mamba2": {"dense": 21},
    "maple": {"moe": 24, "router": 3, "expert_layers": 1},
    "mellum": {"moe": 24, "router": 3, "expert_layers": 1},
    "mimo2": {"moe": 24, "router": 3, "expert_layers": 1},
    "minicpm": {"dense": 19, "moe": 24, "router": 3, "expert_layers": 1},
    "minicpm3": {"dense": 27},
    "minimax-01": {"moe": 36, "router": 3, "expert_layers": 1},
    "minimax-m2": {"moe": 24, "router": 3, "expert_layers": 1},
    "minimax-m3": {"moe": 38.5, "router": 1.5, "expert_layers": 0.5},
    "mistral3": {"dense": 19, "moe": 24, "router": 3, "expert_layers": 1},
    "mistral4": {"moe": 31.5, "router": 1.5, "expert_layers": 0.5},
    "mpt": {"dense": 14},
    "muse-glimmer": {"dense": 19},
    "nanbeige": {"dense": 19},
    "nemotron": {"dense": 18},
    "nemotron_h": {"dense": 13},
    "nemotron_h_moe": {"dense": 13},
    "olmo": {"dense": 19},
    "olmo2": {"dense": 19},
    "olmoe": {"moe": 24, "router": 3, "expert_layers": 1},
    "openelm": {"dense": 17},
    "orion": {"dense": 19},
    "paddleocr": {"moe": 19},
    "pangu-embedded": {"dense": 19},
    "phi2": {"dense": 16},
    "phi3": {"dense": 18},
    "phimoe": {"moe": 24, "router": 3, "expert_layers": 1},
    "plamo": {"dense": 17},
    "plamo2": {"dense": 24.5},
    "plamo3": {"dense": 16},
    "pockettts": {"dense": 18},
    "qwen": {"dense": 17},
    "qwen2": {"dense": 19},
    "qwen2moe": {"moe": 29, "router": 3, "expert_layers": 1},
    "qwen2vl": {"dense": 19},
    "qwen3": {"dense": 19},
    "qwen35": {"dense": 27},
    "qwen35moe": {"moe": 36, "router": 3, "expert_layers": 1},
    "qwen3moe": {"moe": 24, "router": 3, "expert_layers": 1},
    "qwen3next": {"moe": 36, "router": 3, "expert_layers": 1},
    "qwen3tts": {"dense": 19},
    "qwen3vl": {"dense": 19},
    "qwen3vlmoe": {"moe": 24, "router": 3, "expert_layers": 1},
    "qwen4exp": {"moe": 80.5, "router": 3, "expert_layers": 1},
    "refact": {"dense": 19, "moe": 16},
    "rnd1": {"moe": 24, "router": 3, "expert_layers": 1},
    "seed_oss": {"dense": 19},
    "smallthinker": {"moe": 24, "router": 3, "expert_layers": 1},
    "smollm3": {"dense": 19},
    "spark2_5": {"dense": 19},
    "stablelm": {"dense": 19},
    "starcoder": {"dense": 14},
    "starcoder2": {"dense": 18},
    "talkie": {"dense": 21},
    "xverse": {"dense": 19},
}


def layer_nodes(architecture: str | None, experts_used: int | None = None, *,
                fused: bool = False) -> float | None:
    """The operations of one layer of ``architecture``: of its mixture-of-experts model
    where ``experts_used`` is given (and it has one), each layer with experts summing
    its ``experts_used`` experts' outputs; ``fused``, as a backend that runs the router
    and that sum as one kernel each counts them. ``None`` for an architecture not
    counted."""
    counts = LAYER_NODES.get(architecture or "")
    if not counts:
        return None
    if "moe" not in counts or (not experts_used and "dense" in counts):
        return counts["dense"]
    share = counts.get("expert_layers", 0.0)
    # An expert layer adds its experts' outputs one by one (one add where it uses one
    # expert, or where how many is not known).
    adds = max((experts_used or 0) - 1, 1)
    if not fused:
        return counts["moe"] + share * adds
    kernels = 1 + math.ceil(adds / FUSED_ADDS)
    return counts["moe"] - counts.get("router", 0.0) + share * kernels


class LayerNodeCounts(TypedDict):
    """:class:`~planner.performance.ModelTraffic`'s two counts of a layer's operations."""

    layer_nodes: float | None
    fused_layer_nodes: float | None


def layer_node_counts(architecture: str | None, experts_used: int | None
                      ) -> LayerNodeCounts:
    """A model's :class:`~planner.performance.ModelTraffic` counts: ``layer_nodes`` and
    ``fused_layer_nodes`` (:func:`layer_nodes` unfused and fused)."""
    return {"layer_nodes": layer_nodes(architecture, experts_used),
            "fused_layer_nodes": layer_nodes(architecture, experts_used, fused=True)}


def fixed_time_layers(layer_count: float, nodes: float | None) -> float:
    """``layer_count`` layers of ``nodes`` operations each, counted in llama layers (the
    unit of a backend's fixed time per layer); unknown operations count as a llama
    layer's."""
    return layer_count if nodes is None else layer_count * nodes / REFERENCE_LAYER_NODES
