"""How many ggml operations one layer of a model computes, by its architecture: llama.cpp
pays a fixed time for each (a kernel launch on a GPU, the threads meeting at a barrier on
a CPU), so a layer's fixed time is a llama layer's in proportion to its operations.

The counts are of the graphs :mod:`planner.llamacpp.graph` builds for llama.cpp's own
small model of each architecture (``test-llama-archs``; their headers are in
``tests/data/llama_archs_headers.tar.gz``): a layer's operations that compute (a view,
reshape, permute or transpose computes nothing), with flash attention, of the dense and
the mixture-of-experts model where an architecture has both. ``tests/graph_node_counts.py``
counts them, and ``tests/test_graph_nodes.py`` holds this table to them.
"""

from __future__ import annotations

# A llama layer's operations (its norms, products, rotations, cache writes, attention,
# activation and residual sums): the unit of a backend's fixed time per layer.
REFERENCE_LAYER_NODES = 19.0

LAYER_NODES: dict[str, dict[str, float]] = {
    "afmoe": {"moe": 24.5},
    "arcee": {"dense": 18},
    "arctic": {"moe": 25},
    "baichuan": {"dense": 19},
    "bailingmoe": {"moe": 30},
    "bailingmoe2": {"moe": 22.5},
    "bailingmoe3": {"moe": 45.5},
    "bloom": {"dense": 16},
    "chatglm": {"dense": 18},
    "codeshell": {"dense": 18},
    "cogvlm": {"dense": 17},
    "cohere2": {"dense": 16},
    "cohere2moe": {"moe": 22},
    "command-r": {"dense": 17},
    "dbrx": {"moe": 23},
    "deci": {"dense": 19},
    "deepseek": {"moe": 24.5},
    "deepseek2": {"moe": 32},
    "deepseek32": {"moe": 50.5},
    "deepseek4": {"moe": 94.25},
    "dots1": {"moe": 24.5},
    "dots3note": {"moe": 41.5},
    "dream": {"dense": 19},
    "ernie4_5": {"moe": 19},
    "ernie4_5-moe": {"moe": 24.5},
    "exaone": {"dense": 19},
    "exaone-moe": {"moe": 24.5},
    "exaone4": {"dense": 19},
    "falcon": {"dense": 16},
    "falcon-h1": {"dense": 40},
    "gemma": {"dense": 19},
    "gemma2": {"dense": 19},
    "gemma3": {"dense": 19},
    "glm-dsa": {"moe": 50.5},
    "glm4": {"dense": 18},
    "glm4moe": {"moe": 24.5},
    "glm5-next": {"moe": 87.5},
    "gpt-oss": {"moe": 25},
    "gpt2": {"dense": 14},
    "gptneox": {"dense": 16},
    "granite": {"dense": 19, "moe": 30},
    "granite_swa": {"dense": 19},
    "granitehybrid": {"dense": 23.5},
    "granitemoe": {"dense": 19, "moe": 30},
    "grok": {"moe": 31},
    "grovemoe": {"moe": 25},
    "hrm_text": {"dense": 28.5},
    "hunyuan-dense": {"dense": 19},
    "hunyuan-moe": {"moe": 30},
    "hunyuan_vl": {"dense": 19},
    "hy_v3": {"moe": 29},
    "hy_v4": {"moe": 116},
    "internlm2": {"dense": 19},
    "jais": {"dense": 17},
    "jais2": {"dense": 18},
    "jamba": {"dense": 25},
    "kimi-k3": {"moe": 83.5},
    "kimi-linear": {"moe": 41},
    "laguna": {"moe": 24.5},
    "lfm2": {"dense": 18.5},
    "lfm2moe": {"moe": 21.5},
    "llada": {"dense": 19},
    "llada-moe": {"moe": 25},
    "llama": {"dense": 19, "moe": 25},
    "llama4": {"moe": 24.5},
    "maincoder": {"dense": 19},
    "mamba": {"dense": 21},
    "mamba2": {"dense": 21},
    "maple": {"moe": 25},
    "mellum": {"moe": 25},
    "mimo2": {"moe": 25},
    "minicpm": {"dense": 19, "moe": 25},
    "minicpm3": {"dense": 27},
    "minimax-01": {"moe": 37},
    "minimax-m2": {"moe": 25},
    "minimax-m3": {"moe": 39},
    "mistral3": {"dense": 19, "moe": 25},
    "mistral4": {"moe": 32},
    "mpt": {"dense": 14},
    "muse-glimmer": {"dense": 19},
    "nanbeige": {"dense": 19},
    "nemotron": {"dense": 18},
    "nemotron_h": {"dense": 13},
    "nemotron_h_moe": {"dense": 13},
    "olmo": {"dense": 19},
    "olmo2": {"dense": 19},
    "olmoe": {"moe": 25},
    "openelm": {"dense": 17},
    "orion": {"dense": 19},
    "paddleocr": {"moe": 19},
    "pangu-embedded": {"dense": 19},
    "phi2": {"dense": 16},
    "phi3": {"dense": 18},
    "phimoe": {"moe": 25},
    "plamo": {"dense": 17},
    "plamo2": {"dense": 24.5},
    "plamo3": {"dense": 16},
    "pockettts": {"dense": 18},
    "qwen": {"dense": 17},
    "qwen2": {"dense": 19},
    "qwen2moe": {"moe": 30},
    "qwen2vl": {"dense": 19},
    "qwen3": {"dense": 19},
    "qwen35": {"dense": 27},
    "qwen35moe": {"moe": 37},
    "qwen3moe": {"moe": 25},
    "qwen3next": {"moe": 37},
    "qwen3tts": {"dense": 19},
    "qwen3vl": {"dense": 19},
    "qwen3vlmoe": {"moe": 25},
    "qwen4exp": {"moe": 81.5},
    "refact": {"dense": 19, "moe": 16},
    "rnd1": {"moe": 25},
    "seed_oss": {"dense": 19},
    "smallthinker": {"moe": 25},
    "smollm3": {"dense": 19},
    "spark2_5": {"dense": 19},
    "stablelm": {"dense": 19},
    "starcoder": {"dense": 14},
    "starcoder2": {"dense": 18},
    "talkie": {"dense": 21},
    "xverse": {"dense": 19},
}


def layer_nodes(architecture: str | None, experts: bool) -> float | None:
    """The operations of one layer of ``architecture`` (its mixture-of-experts model's
    when ``experts``, where it has both); ``None`` for an architecture not counted."""
    counts = LAYER_NODES.get(architecture or "")
    if not counts:
        return None
    wanted = "moe" if experts else "dense"
    return counts.get(wanted, next(iter(counts.values())))


def fixed_time_layers(layer_count: float, nodes: float | None) -> float:
    """``layer_count`` layers of ``nodes`` operations each, counted in llama layers (the
    unit of a backend's fixed time per layer); unknown operations count as a llama
    layer's."""
    return layer_count if nodes is None else layer_count * nodes / REFERENCE_LAYER_NODES
