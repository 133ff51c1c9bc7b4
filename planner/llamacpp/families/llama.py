"""llama.cpp's ``llm_build_llama`` and every builder whose graph is the same as far as
memory goes: attention (plain, fused, latent, sliding-window or without a cache, as the
file's tensors and caches say) or a block without it, then a feed-forward network or a
mixture of experts, each half with its norm and residual, and the output head."""

from __future__ import annotations

from planner.llamacpp.graph import Family, register


@register
class Llama(Family):
    architectures = (
        "llama", "afmoe", "apertus", "arcee", "arctic", "arwkv7", "baichuan", "bailingmoe",
        "bailingmoe2", "bert", "bitnet", "bloom", "chameleon", "chatglm", "clef",
        "codeshell", "dbrx", "deci", "deepseek", "deepseek2-ocr", "dots1", "dream",
        "ernie4_5", "ernie4_5-moe", "eurobert", "exaone", "exaone-moe", "exaone4", "gemma",
        "gemma-embedding", "gemma2", "gemma3", "gemma3n", "glm4", "gpt2", "gptj", "gptneox",
        "granite", "granite_swa", "granitemoe", "grovemoe", "hunyuan-dense", "hunyuan-moe",
        "hunyuan_vl", "internlm2", "jais", "jais2", "jina-bert-v2", "jina-bert-v3",
        "laguna", "llada", "llada-moe", "llama-embed", "llama4", "maincoder", "mellum",
        "minicpm", "minicpm3", "minimax-m2", "mistral3", "mistral4", "modern-bert", "mpt",
        "muse-glimmer", "nanbeige", "nemotron", "neo-bert", "nomic-bert", "nomic-bert-moe",
        "olmo2", "olmoe", "openelm", "orion", "paddleocr", "pangu-embedded", "phi3",
        "phimoe", "plamo3", "plm", "pockettts", "qwen", "qwen2", "qwen2moe", "qwen2vl",
        "qwen3", "qwen3moe", "qwen3tts", "qwen3vl", "qwen3vlmoe", "rnd1", "rwkv6",
        "rwkv6qwen2", "rwkv7", "seed_oss", "smallthinker", "smollm3", "spark2_5",
        "stablelm", "starcoder", "starcoder2", "t5", "t5encoder", "wavtokenizer-dec",
        "xverse")
