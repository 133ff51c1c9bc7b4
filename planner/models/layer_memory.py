"""What llama.cpp keeps for each layer of a model: KV rows per cell, indexer rows per cell
and recurrent state per sequence, read from the GGUF metadata the way llama.cpp's
``load_hparams`` and ``create_memory`` read it (release b11434).

Every architecture llama.cpp knows is read; each falls in one of these memory kinds:

none
    Encoders and diffusion models (``bert``, ``t5encoder``, ``dream``, ...): no cache.
kv
    An attention cache: each cached layer keeps one K row of ``n_embd_head_k x
    n_head_kv(layer)`` elements and one V row of ``n_embd_head_v x n_head_kv(layer)`` per
    cell. Latent attention (``attention.key_length_mla`` set) keeps no V row. Sliding-window
    layers (llama.cpp's per-architecture pattern, or the file's
    ``attention.sliding_window_pattern``) keep their own small cache; the window layers'
    head sizes may differ (``attention.key_length_swa``). Layers past
    ``n_layer_kv_from_start`` reuse an earlier layer's cache (gemma3n, gemma4), and
    multi-token-prediction blocks (``nextn_predict_layers``) get none.
recurrent
    ``llama_memory_recurrent``: every layer keeps an R row (``n_embd_r``) and an S row
    (``n_embd_s``) of f32 per sequence: one cell per parallel sequence, whatever the
    context (mamba, mamba2, rwkv6/7).
hybrid
    Attention layers keep KV rows, recurrent layers R and S (jamba, falcon-h1, granitehybrid,
    nemotron_h, qwen3next, qwen35, lfm2, kimi-linear, ...); which layer is which follows
    each architecture's rule (no KV heads, a recurrent-layers array or a full-attention
    interval).
compressed attention
    DeepSeek-V4 (``deepseek4``): every layer keeps a K-only sliding-window cache; a layer
    whose ``attention.compress_ratios`` entry is 4 (CSA) adds a compressed K cache and a
    lightning-indexer cache of one cell per 4 tokens, one whose entry is 128 (HCA) a
    compressed K cache of one cell per 128 tokens, and each keeps f32 compressor state per
    sequence (``llama_kv_cache_dsv4``). Its caches keep one stream per sequence whatever
    ``--kv-unified`` says.
sparse attention
    The DSA/MSA architectures (deepseek32, glm-dsa, minimax-m3, hy_v4, dots3note,
    glm5-next, qwen4exp) keep, beside the main cache, an indexer cache of one
    ``attention.indexer.key_length`` key head per cell on the layers that run an indexer.

``UnsupportedArchitecture`` is raised only for a name llama.cpp does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.limits import MAX_ATTENTION_HEADS, MAX_ATTENTION_WIDTH, MAX_CONTEXT
from planner.models.gguf_metadata import GgufMetadata
from planner.models.spec import ATTENTION_FIELDS, ModelError
from planner.units import layer_range

# llama.cpp b11434's architecture names (src/llama-arch.cpp, LLM_ARCH_NAMES).
LLAMA_CPP_ARCHITECTURES = frozenset({
    "llama", "llama4", "deci", "falcon", "grok", "gpt2", "gptj", "gptneox", "mpt",
    "baichuan", "starcoder", "refact", "bert", "modern-bert", "nomic-bert", "nomic-bert-moe",
    "neo-bert", "jina-bert-v2", "jina-bert-v3", "eurobert", "bloom", "stablelm", "qwen",
    "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen3moe", "qwen3next", "qwen3vl", "qwen3vlmoe",
    "qwen35", "qwen35moe", "clef", "qwen4exp", "phi2", "phi3", "phimoe", "plamo", "plamo2",
    "plamo3", "codeshell", "orion", "internlm2", "minicpm", "minicpm3", "gemma", "gemma2",
    "gemma3", "gemma3n", "gemma4", "gemma4-assistant", "gemma-embedding", "starcoder2",
    "mamba", "mamba2", "maple", "jamba", "falcon-h1", "xverse", "command-r", "cohere2",
    "cohere2moe", "dbrx", "olmo", "olmo2", "olmoe", "muse-glimmer", "openelm", "arctic",
    "deepseek", "deepseek2", "deepseek2-ocr", "deepseek32", "deepseek4", "chatglm", "glm4",
    "glm4moe", "glm-dsa", "bitnet", "t5", "t5encoder", "jais", "jais2", "nemotron",
    "nemotron_h", "nemotron_h_moe", "exaone", "exaone4", "exaone-moe", "rwkv6", "rwkv6qwen2",
    "rwkv7", "arwkv7", "granite", "granitemoe", "granitehybrid", "graniteswitch",
    "granite_swa", "chameleon", "wavtokenizer-dec", "plm", "bailingmoe", "bailingmoe2",
    "bailingmoe3", "dots1", "dots3note", "arcee", "afmoe", "laguna", "ernie4_5",
    "ernie4_5-moe", "hunyuan-moe", "hunyuan-dense", "hunyuan_vl", "hy_v3", "hy_v4",
    "smollm3", "gpt-oss", "lfm2", "lfm2moe", "dream", "smallthinker", "llada", "llada-moe",
    "seed_oss", "grovemoe", "apertus", "minimax-01", "hrm_text", "minimax-m2", "minimax-m3",
    "cogvlm", "rnd1", "pangu-embedded", "mistral3", "eagle3", "dflash", "mistral4",
    "paddleocr", "mimo2", "step35", "spark2_5", "llama-embed", "maincoder", "kimi-linear",
    "kimi-k3", "glm5-next", "talkie", "mellum", "nanbeige", "qwen3tts", "pockettts",
})

# create_memory: no cache at all.
NO_CACHE = frozenset({
    "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert",
    "eurobert", "wavtokenizer-dec", "modern-bert", "gemma-embedding", "dream", "llada",
    "llada-moe", "rnd1", "clef", "t5encoder",
})
# llm_arch_is_recurrent: every layer keeps recurrent state only.
RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# llm_arch_is_hybrid.
HYBRID = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next",
    "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01",
})
# Hybrids whose recurrent layers are those with no KV heads.
_RECURRENT_WHERE_NO_KV_HEADS = frozenset({
    "jamba", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "kimi-linear", "bailingmoe3",
    "kimi-k3", "glm5-next",
})
# Hybrids whose recurrent layers come from attention.recurrent_layers or, without it,
# every layer but each full_attention_interval-th.
_RECURRENT_BY_INTERVAL = frozenset({"qwen3next", "qwen35", "qwen35moe", "qwen4exp",
                                    "minimax-01"})
# Architectures with a sparse-attention indexer cache beside the main one.
INDEXED = frozenset({"deepseek32", "glm-dsa", "minimax-m3", "hy_v4", "dots3note",
                     "glm5-next", "qwen4exp"})
# llama_memory_hybrid_idx: a K-only indexer cache whose row holds, when the indexer pools
# its keys (k-pool), the raw key beside the pooled ones: key | gate | pooled for
# glm5-next, key | pooled for qwen4exp (llama_hparams::indexer_kpool_row).
_POOLED_INDEX_ROW = {"glm5-next": 3, "qwen4exp": 2}


@dataclass(frozen=True, slots=True)
class SlidingRule:
    """llama.cpp's sliding-window pattern for an architecture: every ``period``-th layer
    is full attention (``dense_first``: counting from a full first layer); the file's
    ``attention.sliding_window_pattern`` overrides the period. ``when_window``: only when
    the file sets a window; ``window``: a fixed window llama.cpp uses instead of the file's
    (None: the file's)."""

    period: int
    dense_first: bool = False
    when_window: bool = False
    window: int | None = None
    default_window: int | None = None
    from_file: bool = False
    """The pattern is the file's per-layer array (no default period)."""


SLIDING_RULES: dict[str, SlidingRule] = {
    "gpt-oss": SlidingRule(2),
    "gemma2": SlidingRule(2, default_window=4096),
    "gemma3": SlidingRule(6, when_window=True),
    "gemma3n": SlidingRule(5),
    "gemma4": SlidingRule(0, from_file=True),
    "gemma4-assistant": SlidingRule(0, from_file=True),
    "cohere2": SlidingRule(4),
    "cohere2moe": SlidingRule(4, dense_first=True),
    "olmo2": SlidingRule(4, when_window=True),
    "afmoe": SlidingRule(4, when_window=True),
    "smallthinker": SlidingRule(4, dense_first=True, when_window=True, window=4096),
    "exaone-moe": SlidingRule(4, default_window=128),
    "mellum": SlidingRule(4, when_window=True),
    "muse-glimmer": SlidingRule(4),
    "plamo3": SlidingRule(8, when_window=True),
    "laguna": SlidingRule(4, dense_first=True, when_window=True),
    "granite_swa": SlidingRule(0, from_file=True),
    "maple": SlidingRule(0, from_file=True),
    "mimo2": SlidingRule(0, from_file=True),
    "spark2_5": SlidingRule(0, from_file=True),
    "step35": SlidingRule(0, from_file=True),
    "dots3note": SlidingRule(0, from_file=True),
}


@dataclass(frozen=True, slots=True)
class LayerMemory:
    """What llama.cpp keeps for one layer: elements per KV cell (K, V, indexer K and V),
    whether the layer's attention is windowed, and f32 elements of recurrent state per
    sequence (R + S rows)."""

    key_elements: int = 0
    value_elements: int = 0
    index_key_elements: int = 0
    index_value_elements: int = 0
    state_elements: int = 0
    sliding: bool = False
    compressed_elements: int = 0
    """Elements per cell of the layer's compressed caches (DeepSeek-V4: one cell per
    ``compress_ratio`` tokens, K only, in the K cache type)."""
    compress_ratio: int = 0
    key_head: int = 0
    """The layer's K head size as llama.cpp's hparams give it (``n_embd_head_k(il)``: the
    sliding-window one on a sliding-window layer), whether or not it keeps a cache."""
    value_head: int = 0

    @property
    def has_kv(self) -> bool:
        return bool(self.key_elements or self.value_elements or self.index_key_elements
                    or self.index_value_elements or self.compressed_elements)


@dataclass(frozen=True, slots=True)
class ModelMemory:
    """Every layer's :class:`LayerMemory`, the window of the windowed layers, the memory
    kind and notes on what llama.cpp does."""

    kind: str
    layers: tuple[LayerMemory, ...]
    sliding_window: int
    notes: tuple[str, ...]


def _pattern(layer_count: int, period: int, dense_first: bool) -> list[bool]:
    """llama_hparams::set_swa_pattern: True = sliding window."""
    if dense_first:
        return [period == 0 or index % period != 0 for index in range(layer_count)]
    return [period == 0 or index % period < period - 1 for index in range(layer_count)]


def _sliding(meta: GgufMetadata, n_layer: int) -> tuple[list[bool], int]:
    """Which layers are windowed and the window, as llama.cpp's load_arch_hparams sets
    them; ([False...], 0) when none is."""
    none = ([False] * meta.layer_count, 0)
    window = meta.count("attention.sliding_window", 0)
    if meta.architecture == "llama4":
        # Chunked attention of 8192 tokens on 3 layers in 4 (or the file's pattern),
        # unless the window is 0.
        if meta.has("attention.sliding_window") and window == 0:
            return none
        flags = meta.flags_per_layer("attention.sliding_window_pattern")
        if flags is None:
            period = meta.count("attention.sliding_window_pattern", 4)
            flags = _pattern(meta.layer_count, period, False)
        return flags, 8192
    if meta.architecture == "exaone4":
        if n_layer != 64:
            return none
        return _pattern(meta.layer_count, 4, False), window or 4096
    if meta.architecture == "lfm2":
        return none  # set below from the recurrent layers when the file sets a window
    rule = SLIDING_RULES.get(meta.architecture)
    if rule is None:
        return none
    if rule.when_window and not window:
        return none
    if rule.window is None and rule.default_window is None and \
            not meta.has("attention.sliding_window"):
        raise meta.missing("attention.sliding_window")
    size = rule.window if rule.window is not None else window or (rule.default_window or 0)
    flags = meta.flags_per_layer("attention.sliding_window_pattern")
    if flags is None:
        if rule.from_file:
            return none
        period = meta.count("attention.sliding_window_pattern", rule.period)
        flags = _pattern(meta.layer_count, period, rule.dense_first)
    # Layers past the trunk (multi-token prediction) are never windowed.
    flags = [flag and index < n_layer for index, flag in enumerate(flags)]
    return flags, size if any(flags) else 0


def _recurrent_layers(meta: GgufMetadata, n_layer: int, heads_kv: list[int],
                      ffn: list[int]) -> list[bool]:
    arch = meta.architecture
    if arch in RECURRENT:
        return [True] * meta.layer_count
    if arch in _RECURRENT_WHERE_NO_KV_HEADS:
        return [h == 0 for h in heads_kv]
    if arch in ("nemotron_h", "nemotron_h_moe"):
        return [i < n_layer and heads_kv[i] == 0 and ffn[i] == 0 for i in range(meta.layer_count)]
    if arch == "falcon-h1":
        return [True] * meta.layer_count
    if arch in _RECURRENT_BY_INTERVAL:
        flags = meta.flags_per_layer("attention.recurrent_layers")
        if flags is not None:
            return flags
        interval = meta.count("full_attention_interval", 4)
        return [i < n_layer and interval > 0 and (i + 1) % interval != 0
                for i in range(meta.layer_count)]
    return [False] * meta.layer_count


def _state_elements(meta: GgufMetadata, n_embd: int, n_head: int) -> int:
    """llama_hparams::n_embd_r() + n_embd_s(): f32 elements of one sequence's state."""
    wkv = meta.count("wkv.head_size", 0)
    if wkv:
        return meta.count("token_shift_count", 2) * n_embd + n_embd * wkv
    d_conv = meta.count("ssm.conv_kernel", 0)
    kda = meta.count("kda.head_dim", 0)
    shortconv = meta.count("shortconv.l_cache", 0)
    if shortconv:
        r = n_embd * (shortconv - 1)
    elif kda:
        r = 3 * (d_conv - 1 if d_conv else 3) * n_head * kda
    else:
        d_inner = meta.count("ssm.inner_size", 0)
        r = (d_conv - 1 if d_conv else 0) * (
            d_inner + 2 * meta.count("ssm.group_count", 0) * meta.count("ssm.state_size", 0))
    if kda:
        s = kda * kda * n_head
    elif meta.architecture == "minimax-01":
        head = meta.count("attention.key_length", 0) or (n_embd // n_head if n_head else 0)
        s = head * head * n_head
    else:
        s = meta.count("ssm.state_size", 0) * meta.count("ssm.inner_size", 0)
    return r + s


def _ple_state(meta: GgufMetadata, n_embd: int) -> tuple[set[int], int]:
    """The recurrent layers that keep a per-layer n-gram embedding's convolution history
    (qwen4exp's ``ple.layers``) and its f32 elements per sequence
    (``llama_hparams::ple_conv_state``: ``(kernel - 1) x n-gram size x streams x
    n_embd``, a row of its own in llama_memory_recurrent)."""
    layers = meta.counts("ple.layers", longest=meta.layer_count, maximum=meta.layer_count - 1)
    if not layers:
        return set(), 0
    ngram = meta.count("ple.ngram_size", 0)
    kernel = meta.count("ple.conv_kernel", 0)
    heads = max(0, ngram - 1) * meta.count("ple.heads_per_ngram", 0)
    if not heads or not kernel:
        return set(), 0
    return set(layers), (kernel - 1) * ngram * meta.count("hyper_connection.count", 0) * n_embd


# llama-kv-cache-dsv4.h: the two compression ratios DeepSeek-V4 caches.
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128


def _compressed_attention(meta: GgufMetadata, layer_count: int, notes: list[str]) -> ModelMemory:
    """DeepSeek-V4's caches (llama_kv_cache_dsv4): K-only rows of ``key_length`` in a
    sliding-window cache on every layer, and by each layer's compression ratio a compressed
    cache (with, for CSA, the lightning indexer's ``indexer.key_length`` rows) and the
    compressors' f32 state: a kv and a score plane of ``2 x ratio`` rows of ``2 x width``
    for CSA and its indexer, ``ratio`` rows of ``width`` for HCA."""
    head_k = meta.count("attention.key_length", 0)
    index_k = meta.count("attention.indexer.key_length", 0)
    window = meta.count("attention.sliding_window", 0)
    if not head_k:
        raise meta.missing("attention.key_length")
    ratios = meta.counts_per_layer("attention.compress_ratios", [0] * layer_count)
    nextn = meta.count("nextn_predict_layers", 0)
    layers = []
    for index in range(layer_count):
        ratio = ratios[index] if index < layer_count - nextn else 0
        compressed = state = 0
        if ratio == DSV4_CSA_RATIO:
            compressed = head_k + index_k
            state = 2 * (2 * ratio) * (2 * head_k) + 2 * (2 * ratio) * (2 * index_k)
        elif ratio == DSV4_HCA_RATIO:
            compressed = head_k
            state = 2 * ratio * head_k
        layers.append(LayerMemory(head_k, 0, 0, 0, state, bool(window), compressed,
                                  ratio if compressed else 0, key_head=head_k))
    notes.append(f"compressed attention: every layer caches {head_k}-element K rows in a "
                 f"{window}-token window; {sum(1 for r in ratios if r == DSV4_CSA_RATIO)} "
                 f"layer(s) add a cache of one cell per {DSV4_CSA_RATIO} tokens (with the "
                 f"lightning indexer's), {sum(1 for r in ratios if r == DSV4_HCA_RATIO)} "
                 f"one of one cell per {DSV4_HCA_RATIO} tokens")
    return ModelMemory("compressed", tuple(layers), window, tuple(notes))


def _latent(meta: GgufMetadata) -> bool:
    """Latent attention (MLA): the file states the per-head key and value lengths of its
    decompressed form (``attention.key_length_mla``), caching the compressed row."""
    return bool(meta.count("attention.key_length_mla", 0)
                and meta.count("attention.value_length_mla", 0))


def attention_shape(meta: GgufMetadata, memory: ModelMemory) -> dict[str, int | None]:
    """The attention the speed estimate computes with (``ATTENTION_FIELDS`` of
    :class:`~planner.models.spec.ModelSpec`), from the file's keys and the layers llama.cpp
    builds: the most query and KV heads of a layer (``attention.head_count``,
    ``attention.head_count_kv``), the head size (``attention.key_length``, else the
    embedding over the heads), the window and the layers that attend over it only (the
    architecture's pattern, as for the cache), and of latent attention the cache's rank
    and rotary size (``attention.kv_lora_rank``, ``rope.dimension_count``; without them,
    the value and the key's remainder). Every field is None for a model whose layers keep
    no attention (recurrent ones). Refuses by name a count past its bound
    (planner.limits)."""
    shape: dict[str, int | None] = dict.fromkeys(ATTENTION_FIELDS)
    heads = max(meta.counts_per_layer("attention.head_count", 0,
                                      maximum=MAX_ATTENTION_HEADS), default=0)
    if not heads or not any(layer.has_kv for layer in memory.layers):
        return shape
    size = max(layer.key_head for layer in memory.layers if layer.has_kv)
    if not 1 <= size <= MAX_ATTENTION_WIDTH // heads:
        raise meta.bad("attention.key_length", f"must be from 1 to "
                       f"{MAX_ATTENTION_WIDTH // heads:,} ({heads:,} query heads of it are "
                       f"at most {MAX_ATTENTION_WIDTH:,} wide)", size)
    kv_heads = max(meta.counts_per_layer("attention.head_count_kv", heads,
                                         maximum=heads, why="at most the query heads"))
    shape.update(attention_heads=heads, head_size=size, kv_heads=kv_heads or None)
    windowed = sum(1 for layer in memory.layers if layer.sliding)
    if windowed and memory.sliding_window:
        if memory.sliding_window > MAX_CONTEXT:
            raise meta.bad("attention.sliding_window", f"must be at most {MAX_CONTEXT:,}",
                           memory.sliding_window)
        shape.update(sliding_window=memory.sliding_window, sliding_window_layers=windowed)
    if _latent(meta):
        value = max(layer.value_head for layer in memory.layers)
        rank = meta.count("attention.kv_lora_rank", value, minimum=1,
                          maximum=MAX_ATTENTION_WIDTH)
        rope = meta.count("rope.dimension_count", max(0, size - rank), maximum=size,
                          why="at most attention.key_length")
        shape.update(kv_lora_rank=rank, rope_head_size=rope or None)
    return shape


def model_memory(meta: GgufMetadata) -> ModelMemory:
    """Each layer's cache and state as llama.cpp b11434 builds them for a GGUF model, read
    from its metadata."""
    architecture, layer_count, where = meta.architecture, meta.layer_count, meta.where
    if architecture not in LLAMA_CPP_ARCHITECTURES:
        raise ModelError(
            "UnsupportedArchitecture",
            f"{where}: llama.cpp does not know the architecture {architecture!r}",
            file=where, architecture=architecture)
    notes: list[str] = []
    if architecture in NO_CACHE:
        notes.append(f"{architecture} keeps no KV cache and no recurrent state in llama.cpp")
        return ModelMemory("none", (LayerMemory(),) * layer_count, 0, tuple(notes))
    nextn = meta.count("nextn_predict_layers", 0)
    if nextn > layer_count:
        raise meta.bad("nextn_predict_layers", f"exceeds the {layer_count} blocks", nextn)
    if architecture == "deepseek4":
        return _compressed_attention(meta, layer_count, notes)
    n_layer = layer_count - nextn
    n_embd = meta.count("embedding_length", 0)
    heads = meta.counts_per_layer("attention.head_count", [0] * layer_count)
    heads_kv = meta.counts_per_layer("attention.head_count_kv", heads)
    ffn = meta.counts_per_layer("feed_forward_length", [0] * layer_count)
    n_head = heads[0]
    plain = architecture not in RECURRENT and architecture not in HYBRID
    if plain and not meta.has("attention.head_count"):
        raise meta.missing("attention.head_count")
    if n_head:
        has_lengths = (meta.has("attention.key_length")
                       and meta.has("attention.value_length"))
        if not n_embd and not has_lengths:
            raise meta.missing("embedding_length")
        head_k = meta.count("attention.key_length", n_embd // n_head)
        head_v = meta.count("attention.value_length", n_embd // n_head)
    else:
        head_k = head_v = 0
    head_k_swa = meta.count("attention.key_length_swa", head_k)
    head_v_swa = meta.count("attention.value_length_swa", head_v)
    latent = _latent(meta)
    sliding, window = _sliding(meta, n_layer)
    recurrent = _recurrent_layers(meta, n_layer, heads_kv, ffn)
    if architecture == "lfm2" and meta.count("attention.sliding_window", 0):
        sliding = [not flag for flag in recurrent]
        window = meta.count("attention.sliding_window", 0)
    state = _state_elements(meta, n_embd, n_head) if any(recurrent) else 0
    ple_layers, ple_state = _ple_state(meta, n_embd)

    # Which layers keep attention KV rows.
    if architecture in RECURRENT:
        attention = [False] * layer_count
    elif architecture == "falcon-h1":
        attention = [True] * layer_count
    elif architecture in ("nemotron_h", "nemotron_h_moe"):
        attention = [not recurrent[i] and ffn[i] == 0 for i in range(layer_count)]
    elif architecture in HYBRID:
        attention = [i < n_layer and not recurrent[i] for i in range(layer_count)]
    else:
        attention = [heads_kv[i] > 0 or latent for i in range(layer_count)]
    if nextn and architecture not in ("nemotron_h", "nemotron_h_moe", "falcon-h1"):
        # Multi-token-prediction blocks are never attended by the trunk.
        attention = [flag and i < n_layer for i, flag in enumerate(attention)]
        notes.append(f"the last {nextn} block(s) are multi-token-prediction layers: llama.cpp "
                     f"loads their weights and gives them no cache")
    kv_from_start = layer_count
    if architecture == "gemma3n":
        kv_from_start = 20
    elif architecture == "gemma4":
        kv_from_start = layer_count - meta.count("attention.shared_kv_layers", 0)
    if kv_from_start < layer_count:
        reuse = ("reuses the cache of an earlier layer and keeps none of its own"
                 if layer_count - kv_from_start == 1 else
                 "reuse the cache of an earlier layer and keep none of their own")
        notes.append(f"{'layer' if layer_count - kv_from_start == 1 else 'layers'} "
                     f"{layer_range(kv_from_start, layer_count, '-')} {reuse}")

    index_key = meta.count("attention.indexer.key_length", 0) if architecture in INDEXED else 0
    index_flags = meta.flags_per_layer("attention.indexer.types")
    if architecture in _POOLED_INDEX_ROW:
        # qwen4exp pools by its compress ratios, glm5-next by attention.indexer.kpool.
        kpool = (max(meta.counts_per_layer("attention.compress_ratios", [0] * layer_count))
                 if architecture == "qwen4exp" else meta.count("attention.indexer.kpool", 0))
        index_row = index_key * (_POOLED_INDEX_ROW[architecture] if kpool else 1)
    layers = []
    for index in range(layer_count):
        swa = sliding[index]
        k = v = ik = iv = 0
        if attention[index] and index < kv_from_start:
            kv_heads = heads_kv[index] if not latent else max(heads_kv[index], 1)
            k = (head_k_swa if swa else head_k) * kv_heads
            v = 0 if latent else (head_v_swa if swa else head_v) * kv_heads
            if index_key and (index_flags is None or index_flags[index]) and \
                    not (architecture == "minimax-m3"
                         and index < meta.count("leading_dense_block_count", 0)):
                if architecture in _POOLED_INDEX_ROW:
                    ik, iv = index_row, 0
                else:
                    ik = index_key
                    iv = 0 if latent else (head_v_swa if swa else head_v)
        layer_state = state + (ple_state if index in ple_layers else 0) if recurrent[index] \
            else 0
        layers.append(LayerMemory(k, v, ik, iv, layer_state,
                                  swa and bool(k or v),
                                  key_head=head_k_swa if swa else head_k,
                                  value_head=head_v_swa if swa else head_v))
    kind = ("recurrent" if architecture in RECURRENT else
            "hybrid" if architecture in HYBRID else "kv")
    if kind == "kv" and not any(layer.has_kv for layer in layers):
        raise meta.bad("attention.head_count_kv", "leaves no layer with a KV cache, which "
                       "llama.cpp cannot run", heads_kv)
    window_key = meta.count("attention.sliding_window", 0)
    if window_key and not window and architecture not in SLIDING_RULES \
            and architecture not in ("llama4", "exaone4", "lfm2"):
        notes.append(f"the file sets a {window_key}-token sliding window, which llama.cpp does "
                     f"not apply to {architecture}: every layer keeps a full-context cache")
    if architecture in ("deepseek2", "deepseek2-ocr") and not latent:
        notes.append("this file predates latent-attention metadata (no "
                     "attention.key_length_mla), so llama.cpp caches full per-head K and V")
    if latent:
        notes.append(f"latent attention (MLA): llama.cpp caches one {head_k}-element row per "
                     f"layer and no V row")
    if state:
        notes.append(f"{sum(recurrent)} of {layer_count} layers keep recurrent state: "
                     f"{state:,} f32 elements (R and S rows) per sequence each, whatever the "
                     f"context")
    return ModelMemory(kind, tuple(layers), window, tuple(notes))
