"""What llama.cpp allocates on each device of a layer split, component by component.

The planner's design rule (``w_j + ceil(kv/L) * context`` per layer) leaves out most of
what makes a real split run out of memory. This module follows llama.cpp's own code
(the version pinned in ``validation/``, checked against its logs by ``make validate``):

weights (``llama_model::load_tensors``)
    Each ``blk.N.*`` tensor lives on the device of layer N. The input embeddings
    (``token_embd`` and the other input tensors) always stay in host memory, which maps
    the file from the first of them to the end of the last. Every other
    tensor (``output``, ``output_norm``, ...) goes to the output device, the last one; a
    model without ``output.weight`` ties its head to ``token_embd``, and llama.cpp loads a
    second copy of it there (``TENSOR_DUPLICATED``). Tensors are padded to the buffer's
    alignment.
KV cache (``llama_kv_cache``, ``llama_kv_cache_iswa``)
    The context is padded to 256 cells. One cache (``--kv-unified``) holds every lane;
    otherwise each of the ``P`` lanes gets its own stream of ``pad(ctx / P, 256)`` cells.
    Sliding-window layers keep ``pad(min(cells, window * (P if unified else 1) + ubatch),
    256)`` cells per stream. Each layer's K row is ``row(type_k, n_embd_k_gqa)`` bytes per
    cell, its V row ``row(type_v, n_embd_v_gqa)``; latent attention (MLA) keeps no V row.
compute buffer (``llama_context::sched_reserve``)
    Derived from the model's graph (:mod:`planner.model_graphs`, allocated by
    :mod:`planner.compute_graph` as ggml-alloc does it): every tensor of the prompt graph
    of a ubatch (the attention's projections, scores without flash attention, the
    feed-forward or experts' intermediates, the router, the logits of every token on the
    output device) and of the generation graph, placed in order in a best-fit buffer that
    reuses freed tensors; each backend's buffer is the furthest any of its tensors reached.
    Split over devices, a device also holds copies of the tensors it reads from another
    one, and every input and copy four times over when pipeline parallelism is on
    (``GGML_SCHED_MAX_COPIES``).
output buffer (``llama_context::output_reserve``)
    ``n_vocab x max(1, P)`` floats in host memory.
overhead
    What the backend itself takes on each device (CUDA/ROCm context, Metal); llama.cpp does
    not log it. Defaults per backend are in ``data/gpus.toml``.

``estimate`` returns a :class:`MemoryEstimate`: one :class:`DeviceMemory` per device plus
the host, with totals and a DataFrame.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from planner._validate import Fail, flag, instance, integer, is_integral, shown
from planner.errors import CodedError, InvalidInput
from planner.limits import (
    DEFAULT_BATCH,
    DEFAULT_CACHE_TYPE,
    DEFAULT_PARALLEL_LANES,
    DEFAULT_UBATCH,
    MAX_BYTES,
    MAX_LAYERS,
)
from planner.model_graphs import (
    AttentionShape,
    BlockShape,
    FeedForwardShape,
    GraphModel,
    compute_buffers,
    graph_model,
)
from planner.models.kv_cache import CACHE_TYPES, check_cache_type, row_bytes
from planner.planning.memory_rule import LayerCosts

COMPONENTS = ("weights_bytes", "kv_bytes", "state_bytes", "compute_bytes", "output_bytes",
              "overhead_bytes")
KEYS = (*COMPONENTS, "total_bytes")
KV_PADDING = 256
# ggml-backend.cpp: GGML_SCHED_MAX_COPIES, the input copies kept for pipeline parallelism.
SCHED_MAX_COPIES = 4
# Buffers align each tensor to 32 bytes on the CPU and RPC backends (TENSOR_ALIGNMENT).
TENSOR_ALIGNMENT = 32
INPUT_TENSOR_PREFIXES = ("token_embd", "position_embd", "token_types",
                         "per_layer_token_embd")
_BLOCK = re.compile(r"^blk\.(\d+)\.")
_MIB = 1024 * 1024
# How close an estimate must come to what llama.cpp allocated, per device and component:
# ("abs", bytes) or ("rel", share of the measured figure). `make validate` and the tests
# of the recorded runs both judge with these.
ACCURACY_TARGETS: dict[str, tuple[str, float]] = {
    "weights_bytes": ("abs", 0.05 * _MIB),
    "kv_bytes": ("abs", 0.05 * _MIB),
    "state_bytes": ("abs", 0.05 * _MIB),
    "output_bytes": ("abs", 0.05 * _MIB),
    "compute_bytes": ("rel", 0.10),
    "total_bytes": ("rel", 0.05),
}


def within_target(component: str, estimated: int, measured: int) -> bool:
    """Whether an estimate of ``component`` is within its accuracy target."""
    if not isinstance(component, str) or component not in ACCURACY_TARGETS:
        raise _bad("component")(f"must be one of {', '.join(ACCURACY_TARGETS)}", component)
    estimated = integer(estimated, _bad("estimated"))
    measured = integer(measured, _bad("measured"))
    kind, limit = ACCURACY_TARGETS[component]
    error = abs(estimated - measured)
    if kind == "abs":
        return error <= limit
    return error <= limit * max(measured, 1)


class MemoryModelError(CodedError):
    """A llama.cpp memory estimate was asked for settings llama.cpp refuses or that make
    no sense. ``code`` is stable: ``QuantizedVCacheNeedsFlashAttention``,
    ``InvalidMemorySettings``."""

    codes = ("QuantizedVCacheNeedsFlashAttention", "InvalidMemorySettings")


def _pad(value: int, to: int) -> int:
    return -(-value // to) * to


# llama-hparams.h: the most blocks llama.cpp loads (load_hparams asserts it).
LLAMA_MAX_LAYERS = 512
# llama.cpp's own limits on its settings (docs/sources.md §2): llama-server reads -c, -np,
# -ub and -b as 32-bit integers, and llama_context refuses more than 256 sequences.
LLAMA_MAX_INT = 2**31 - 1
LLAMA_MAX_SEQ = 256
SETTING_MAXIMUMS = {"context_length": LLAMA_MAX_INT, "parallel": LLAMA_MAX_SEQ,
                    "ubatch": LLAMA_MAX_INT, "batch": LLAMA_MAX_INT}


def _bad(name: str, limit: str = "") -> Fail:
    return lambda problem, value: MemoryModelError(
        "InvalidMemorySettings",
        f"{name}: {problem}{limit if problem.startswith('must be at most') else ''} "
        f"(got {shown(value)})", field=name, value=value)


def _cache_type(value: Any, name: str) -> str:
    """A KV cache type llama.cpp knows; refused naming the argument it was given as."""
    if not isinstance(value, str) or value not in CACHE_TYPES:
        try:
            check_cache_type(value)
        except CodedError as error:
            raise type(error)(error.code, f"{name}: {error.message}",
                              **{**error.details, "field": name}) from None
    return str(value)


def _model(value: Any) -> LlamaCppModel:
    model: LlamaCppModel = instance(value, LlamaCppModel, _bad("model"), "a LlamaCppModel")
    return model


def _settings(value: Any) -> LlamaCppSettings:
    settings: LlamaCppSettings = instance(value, LlamaCppSettings, _bad("settings"),
                                          "a LlamaCppSettings")
    return settings


def _layer_index(model: LlamaCppModel, index: Any) -> int:
    return integer(index, _bad("index"), maximum=len(model.layers) - 1)


def _check_positive(value: Any, name: str, minimum: int = 1,
                    maximum: int | None = None) -> int:
    limit = " (llama.cpp's limit)" if maximum is not None else ""
    return integer(value, _bad(name, limit), minimum=minimum, maximum=maximum)


def require_flash_attention(cache_type_v: str, flash_attn: bool) -> None:
    """llama.cpp refuses a quantized V cache without flash attention (llama_context)."""
    flash_attn = flag(flash_attn, _bad("flash_attn"))
    _cache_type(cache_type_v, "cache_type_v")
    if not flash_attn and CACHE_TYPES[cache_type_v][0] > 1:
        raise MemoryModelError(
            "QuantizedVCacheNeedsFlashAttention",
            f"V cache type {cache_type_v} is quantized, and llama.cpp refuses it without "
            f"flash attention (\"quantized V cache was requested, but this requires Flash "
            f"Attention\"); turn flash attention on or use an f16/bf16/f32 V cache",
            cache_type_v=cache_type_v, flash_attn=flash_attn)


# --- the model, as llama.cpp lays it out ---------------------------------------------


@dataclass(frozen=True, slots=True)
class LayerLayout:
    """One block: its weights, what it caches per KV cell (K and V rows, and a sparse
    attention's indexer K and V rows) and the f32 recurrent state it keeps per sequence."""

    weight_bytes: int
    key_elements: int
    value_elements: int
    sliding: bool = False
    index_key_elements: int = 0
    index_value_elements: int = 0
    state_elements: int = 0
    compressed_elements: int = 0
    compress_ratio: int = 0


@dataclass(frozen=True, slots=True)
class LlamaCppModel:
    """The facts about a model that decide where llama.cpp puts its bytes."""

    name: str
    architecture: str
    native_context_length: int
    embedding_length: int
    vocab_size: int
    head_count: int
    feed_forward_length: int
    layers: tuple[LayerLayout, ...]
    input_bytes: int
    """Input tensors (token_embd, ...): always host memory."""
    output_bytes: int
    """Every other tensor outside the blocks: on the output (last) device."""
    tied_embedding_bytes: int = 0
    """token_embd's size when the model has no output.weight: a second copy goes to the
    output device."""
    sliding_window: int = 0
    latent_attention: bool = False
    per_sequence_streams: bool = False
    """The caches keep one stream per sequence even with ``--kv-unified`` (DeepSeek-V4)."""
    host_mapped_bytes: int = 0
    """What the host maps of the file in a split: from the first input tensor to the end
    of the last (0: just the input tensors)."""
    graph: GraphModel | None = None
    """The shape of its compute graph (from the GGUF file); None: a plain transformer of
    the widths above."""

    def graph_model(self) -> GraphModel:
        """The compute graph's shape: the file's, else a transformer whose every layer
        projects to ``embedding_length`` queries and to its cached K and V widths, and
        runs a gated feed-forward network of ``feed_forward_length``."""
        if self.graph is not None:
            return self.graph
        blocks = tuple(
            BlockShape(AttentionShape(self.embedding_length, layer.key_elements,
                                      layer.value_elements, self.embedding_length,
                                      max(1, self.head_count), sliding=layer.sliding)
                       if layer.key_elements else None,
                       FeedForwardShape(self.feed_forward_length))
            for layer in self.layers)
        return GraphModel(self.embedding_length, self.vocab_size, blocks)

    @property
    def layer_count(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layers"] = [asdict(layer) for layer in self.layers]
        data["graph"] = self.graph.to_dict() if self.graph is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlamaCppModel:
        values = dict(data)
        values["layers"] = tuple(LayerLayout(**layer) for layer in values["layers"])
        if values.get("graph") is not None:
            values["graph"] = GraphModel.from_dict(values["graph"])
        return cls(**values)


def _aligned(size: int, alignment: int = TENSOR_ALIGNMENT) -> int:
    return _pad(size, alignment)


def model_from_gguf(path: str | Path) -> LlamaCppModel:
    """The llama.cpp layout of the GGUF model at ``path`` (any shard of a split model)."""
    if not isinstance(path, str | Path):
        raise _bad("path")("must be a file path", path)

    from planner.models.gguf_reader import from_gguf, read_shards

    spec = from_gguf(path)  # validates the file and the architecture
    headers = read_shards(path)
    tensors = [tensor for header in headers for tensor in header.tensors]
    return model_from_header(spec.name, headers[0].metadata, tensors, str(headers[0].path))


def model_from_header(name: str, metadata: Mapping[str, Any], tensors: Sequence[Any],
                      where: str = "model") -> LlamaCppModel:
    """The llama.cpp layout of a model from its GGUF metadata and tensor table (entries
    with ``name``, ``type_name`` and ``n_bytes``)."""
    from planner.models.gguf_metadata import GgufMetadata
    from planner.models.gguf_reader import token_embedding
    from planner.models.layer_memory import model_memory

    meta = GgufMetadata.of_model(metadata, where, most_layers=LLAMA_MAX_LAYERS)
    arch, layers_n = meta.architecture, meta.layer_count
    memory = model_memory(meta)
    weights = [0] * layers_n
    input_bytes = output_bytes = 0
    token_embd = None
    has_output = False
    inputs = []
    for position, tensor in enumerate(tensors):
        size = _aligned(tensor.n_bytes)
        match = _BLOCK.match(tensor.name)
        if match is not None:
            weights[int(match[1])] += size
        elif tensor.name.startswith(INPUT_TENSOR_PREFIXES):
            inputs.append(position)
            if tensor.name == "token_embd.weight":
                token_embd = tensor
        else:
            output_bytes += size
            has_output = has_output or tensor.name == "output.weight"
    input_bytes = sum(_aligned(tensors[position].n_bytes) for position in inputs)
    # The host maps the file from its first input tensor to the end of its last
    # (llama_model::load_tensors, CPU_Mapped): tensors stored between them count too.
    mapped = sum(_aligned(tensor.n_bytes)
                 for tensor in tensors[inputs[0]:inputs[-1] + 1]) if inputs else 0
    embedding, vocab = token_embedding(metadata, tensors, arch, where)
    heads = meta.counts_per_layer("attention.head_count", 0)
    ffn = meta.counts_per_layer("feed_forward_length", 4 * embedding)
    tied = _aligned(token_embd.n_bytes) if token_embd is not None and not has_output else 0
    layers = tuple(
        LayerLayout(weights[i], layer.key_elements, layer.value_elements, layer.sliding,
                    layer.index_key_elements, layer.index_value_elements,
                    layer.state_elements, layer.compressed_elements, layer.compress_ratio)
        for i, layer in enumerate(memory.layers))
    return LlamaCppModel(
        name=name, architecture=arch, native_context_length=meta.count("context_length"),
        embedding_length=embedding, vocab_size=vocab, head_count=max(heads),
        feed_forward_length=max(ffn) or 4 * embedding, layers=layers, input_bytes=input_bytes,
        output_bytes=output_bytes, tied_embedding_bytes=tied,
        sliding_window=memory.sliding_window,
        latent_attention=any(layer.key_elements > 0 and layer.value_elements == 0
                             for layer in memory.layers),
        per_sequence_streams=arch == "deepseek4",
        host_mapped_bytes=mapped,
        graph=graph_model(meta, tensors, memory),
    )


# --- settings ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LlamaCppSettings:
    """The llama.cpp options that change memory (llama-server's flag in brackets)."""

    context_length: int  # -c
    cache_type_k: str = DEFAULT_CACHE_TYPE  # -ctk
    cache_type_v: str = DEFAULT_CACHE_TYPE  # -ctv
    parallel: int = 1  # -np
    kv_unified: bool = False  # -kvu
    ubatch: int = DEFAULT_UBATCH  # -ub
    batch: int = DEFAULT_BATCH  # -b
    flash_attn: bool = True  # -fa on|off
    overhead_bytes: int = 0
    """Backend overhead per device (not the host)."""

    def __post_init__(self) -> None:
        for name, maximum in SETTING_MAXIMUMS.items():
            object.__setattr__(self, name, _check_positive(getattr(self, name), name,
                                                           maximum=maximum))
        object.__setattr__(self, "overhead_bytes",
                           integer(self.overhead_bytes, _bad("overhead_bytes"), minimum=0,
                                   maximum=MAX_BYTES))
        for name in ("kv_unified", "flash_attn"):
            object.__setattr__(self, name, flag(getattr(self, name), _bad(name)))
        _cache_type(self.cache_type_k, "cache_type_k")
        _cache_type(self.cache_type_v, "cache_type_v")
        require_flash_attention(self.cache_type_v, self.flash_attn)

    @property
    def n_ctx(self) -> int:
        """Cells of the whole context after llama.cpp's padding (llama_context)."""
        padded = _pad(self.context_length, KV_PADDING)
        if self.kv_unified:
            return padded
        return self.n_ctx_seq * self.parallel

    @property
    def n_ctx_seq(self) -> int:
        padded = _pad(self.context_length, KV_PADDING)
        if self.kv_unified:
            return padded
        return _pad(padded // self.parallel, KV_PADDING)

    @property
    def streams(self) -> int:
        return 1 if self.kv_unified else self.parallel

    @property
    def n_batch(self) -> int:
        return min(self.n_ctx, self.batch)

    @property
    def n_ubatch(self) -> int:
        return min(self.n_batch, self.ubatch)

    def window_cells(self, window: int, unified: bool | None = None) -> int:
        """Cells per stream of the sliding-window cache (llama_kv_cache_iswa); ``unified``:
        whether that cache is unified (default: ``kv_unified``)."""
        lanes = self.parallel if (self.kv_unified if unified is None else unified) else 1
        return _pad(min(self.n_ctx_seq, window * lanes + self.n_ubatch), KV_PADDING)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the estimate ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """What one device (or the host) holds."""

    device: str
    layer_start: int
    layer_end: int
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_bytes: int
    overhead_bytes: int
    state_bytes: int = 0
    """Recurrent state (llama.cpp's RS buffers)."""

    @property
    def total_bytes(self) -> int:
        return sum(getattr(self, name) for name in COMPONENTS)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_bytes": self.total_bytes}


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    settings: LlamaCppSettings
    devices: tuple[DeviceMemory, ...]
    host: DeviceMemory
    pipeline_parallel: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def totals(self) -> dict[str, int]:
        parts = (*self.devices, self.host)
        totals = {name: sum(getattr(part, name) for part in parts) for name in COMPONENTS}
        totals["total_bytes"] = sum(totals.values())
        return totals

    def frame(self) -> pd.DataFrame:
        """One row per device, then the host: layer range and each component in bytes."""
        rows = [part.to_dict() for part in (*self.devices, self.host)]
        return pd.DataFrame(rows, columns=["device", "layer_start", "layer_end", *KEYS])

    def to_dict(self) -> dict[str, Any]:
        def entry(part: DeviceMemory) -> dict[str, Any]:
            data = part.to_dict()
            del data["device"]
            return {"device": part.device, **data}
        return {
            "settings": self.settings.to_dict(),
            "pipeline_parallel": self.pipeline_parallel,
            "devices": [entry(part) for part in self.devices],
            "host": entry(self.host),
            "totals": self.totals,
            "notes": list(self.notes),
        }


def even_ranges(layer_count: int, devices: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges as even as possible, earlier devices taking the extra."""
    layer_count = integer(layer_count, _bad("layer_count"), minimum=1, maximum=MAX_LAYERS)
    devices = integer(devices, _bad("devices"), minimum=1)
    _check_device_count(layer_count, devices, "devices")
    base, extra = divmod(layer_count, devices)
    ranges, start = [], 0
    for index in range(devices):
        end = start + base + (1 if index < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def _check_device_count(layer_count: int, devices: int, name: str) -> None:
    """Every device runs at least one layer: refuse more devices than layers before any
    range is built (a count of millions would otherwise build millions of ranges)."""
    if devices > layer_count:
        raise MemoryModelError(
            "InvalidMemorySettings",
            f"{name}: {devices:,} devices for the model's {layer_count} layers; each device "
            f"runs at least one layer, so use at most {layer_count}",
            field=name, value=devices)


def _shown_counts(counts: Sequence[Any], limit: int = 8) -> str:
    """The first few counts of a list that may be very long, for a message."""
    head = ", ".join(repr(c) for c in list(counts[:limit]))
    return f"[{head}, ... {len(counts):,} in all]" if len(counts) > limit else f"[{head}]"


def ranges_from_counts(layer_count: int, counts: Sequence[int], *,
                       field: str = "counts") -> list[tuple[int, int]]:
    """The layer ranges of devices running ``counts`` layers each, in order. A refusal
    names the counts ``field`` (as the caller's user gave them: the CLI's
    ``layers_per_device``)."""
    layer_count = integer(layer_count, _bad("layer_count"), minimum=1, maximum=MAX_LAYERS)
    if isinstance(counts, str | bytes) or not isinstance(counts, Sequence):
        raise _bad(field)("must be a list of layer counts", counts)
    _check_device_count(layer_count, len(counts), field)
    if not all(is_integral(c) and c >= 1 for c in counts) or sum(counts) != layer_count:
        raise MemoryModelError(
            "InvalidMemorySettings",
            f"{field}: layers per device {_shown_counts(counts)} must be positive and add "
            f"up to the model's {layer_count} layers", field=field,
            value=_shown_counts(counts))
    counts = [int(count) for count in counts]
    ranges, start = [], 0
    for count in counts:
        ranges.append((start, start + count))
        start += count
    return ranges


def layer_kv_bytes(model: LlamaCppModel, index: int, settings: LlamaCppSettings) -> int:
    """KV bytes llama.cpp allocates for one layer: its K and V rows, a sparse attention's
    indexer rows and a compressed attention's caches. Without flash attention V is stored
    transposed and every layer's V row is padded to the widest (llama_kv_cache,
    TAG_V_CACHE_VARIABLE)."""
    layer = _model(model).layers[_layer_index(model, index)]
    _settings(settings)
    unified = settings.kv_unified and not model.per_sequence_streams
    streams = 1 if unified else settings.parallel
    cells = (settings.window_cells(model.sliding_window, unified) if layer.sliding
             else settings.n_ctx_seq) * streams
    value = layer.value_elements
    if value and not runs_flash_attention(model, settings):
        value = max(other.value_elements for other in model.layers)
    size = 0
    for elements, cache_type in ((layer.key_elements, settings.cache_type_k),
                                 (value, settings.cache_type_v),
                                 (layer.index_key_elements, settings.cache_type_k),
                                 (layer.index_value_elements, settings.cache_type_v)):
        if elements:
            size += _aligned(row_bytes(cache_type, elements) * cells)
    if layer.compressed_elements:
        # llama_kv_cache_dsv4: max(1, ceil(cells / ratio)) padded to 256, per sequence.
        compressed = _pad(max(1, -(-settings.n_ctx_seq // layer.compress_ratio)), KV_PADDING)
        size += _aligned(row_bytes(settings.cache_type_k, layer.compressed_elements)
                         * compressed * streams)
    return size


# Architectures llama.cpp runs without flash attention whatever -fa says
# (llama_init_from_model: "flash_attn is not compatible with Grok - forcing off").
NO_FLASH_ATTENTION = frozenset({"grok"})


def runs_flash_attention(model: LlamaCppModel, settings: LlamaCppSettings) -> bool:
    """Whether llama.cpp runs the model's attention with flash attention."""
    _model(model)
    return _settings(settings).flash_attn and model.architecture not in NO_FLASH_ATTENTION


def layer_state_bytes(model: LlamaCppModel, index: int, settings: LlamaCppSettings) -> int:
    """Recurrent state llama.cpp allocates for one layer (llama_memory_recurrent): f32 R
    and S rows for each of ``max(1, parallel)`` sequences, whatever the context."""
    elements = _model(model).layers[_layer_index(model, index)].state_elements
    _settings(settings)
    return _aligned(elements * 4 * max(1, settings.parallel)) if elements else 0


def device_compute_bytes(model: LlamaCppModel, settings: LlamaCppSettings,
                         ranges: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """The compute buffer of each device running ``ranges`` and of the host, derived from
    the model's graph (:mod:`planner.model_graphs`): the larger of llama.cpp's prompt
    graph (a ubatch of tokens and outputs) and generation graph, allocated the way ggml
    does it. With no ranges, the host runs everything (the list is empty). Over two or
    more devices the scheduler keeps every input and every tensor a device reads from
    another one :data:`SCHED_MAX_COPIES` times (pipeline parallelism)."""
    ranges = _checked_ranges(_model(model), ranges)
    return _device_compute_bytes(model, _settings(settings), tuple(ranges))


def _checked_ranges(model: LlamaCppModel, ranges: Any) -> list[tuple[int, int]]:
    """``ranges`` as ``(start, end)`` pairs, contiguous, in order, each one layer or
    more and covering every layer of ``model`` (or none: the host alone)."""
    layer_count = model.layer_count
    if isinstance(ranges, str | bytes) or not isinstance(ranges, Sequence) or any(
            isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2
            for pair in ranges):
        raise _bad("ranges")("must be a list of (start, end) layer ranges", ranges)
    _check_device_count(layer_count, len(ranges), "ranges")
    checked = []
    expected = 0
    for start, end in ranges:
        if (not (is_integral(start) and is_integral(end)) or int(start) != expected
                or int(end) <= int(start)):
            raise MemoryModelError(
                "InvalidMemorySettings",
                f"layer ranges {shown(ranges)} must be contiguous, in order and non-empty",
                field="ranges", value=shown(ranges))
        expected = int(end)
        checked.append((int(start), int(end)))
    if checked and expected != layer_count:
        raise MemoryModelError(
            "InvalidMemorySettings",
            f"layer ranges {checked} cover {expected} of {layer_count} layers",
            field="ranges", value=checked)
    return checked


@lru_cache(maxsize=256)
def _device_compute_bytes(model: LlamaCppModel, settings: LlamaCppSettings,
                          ranges: tuple[tuple[int, int], ...]) -> tuple[list[int], int]:
    devices = len(ranges)
    if devices:
        layer_backends = [index for index, (start, end) in enumerate(ranges)
                          for _ in range(start, end)]
        output, host, backends = devices - 1, devices, devices + 1
    else:
        layer_backends, output, host, backends = None, 0, 0, 1
    sizes = compute_buffers(
        model.graph_model(), n_ubatch=settings.n_ubatch, n_kv=settings.n_ctx_seq,
        n_kv_swa=settings.window_cells(model.sliding_window) if model.sliding_window else 0,
        flash_attn=runs_flash_attention(model, settings), n_seqs=max(1, settings.parallel),
        layer_backends=layer_backends, output_backend=output, input_backend=host,
        backends=backends, copies=SCHED_MAX_COPIES if devices > 1 else 1)
    return list(sizes[:devices]), sizes[host]


def stage_compute_bytes(model: LlamaCppModel, settings: LlamaCppSettings) -> tuple[int, int]:
    """What a plan of two or more stages charges for compute before it knows the stages:
    the compute buffer of a pipeline stage before the last (the largest of a first stage
    of every layer but the last, which copies in the host's inputs and reads every kind
    of attention mask, a first stage of one layer, and a middle stage of every layer but
    the first and the last) and that of the output stage (the last layer and the output
    head)."""
    count = _model(model).layer_count
    if count < 2:
        devices, _ = device_compute_bytes(model, settings, [(0, count)])
        return devices[0], devices[0]
    first, _ = device_compute_bytes(model, settings, [(0, count - 1), (count - 1, count)])
    if count == 2:
        return first[0], first[1]
    devices, _ = device_compute_bytes(model, settings, [(0, 1), (1, count - 1),
                                                        (count - 1, count)])
    return max(first[0], devices[0], devices[1]), max(first[1], devices[2])


def estimate(model: LlamaCppModel, settings: LlamaCppSettings,
             ranges: Sequence[tuple[int, int]] | None = None,
             devices: int | None = None) -> MemoryEstimate:
    """Per-device memory of ``model`` split over devices by ``ranges`` (contiguous, in
    order, covering every layer). ``devices=0`` is the host alone; ``devices=D`` without
    ranges splits the layers evenly over D devices."""
    layer_count = _model(model).layer_count
    _settings(settings)
    if ranges is None:
        count = 1 if devices is None else _check_positive(devices, "devices", minimum=0)
        _check_device_count(layer_count, count, "devices")
        ranges = [] if count == 0 else even_ranges(layer_count, count)
    ranges = _checked_ranges(model, ranges)
    output_buffer = _aligned(model.vocab_size * max(1, settings.parallel) * 4)
    notes: list[str] = []
    if settings.flash_attn and not runs_flash_attention(model, settings):
        notes.append(f"llama.cpp runs {model.architecture} without flash attention "
                     f"whatever -fa says")
    computes, host_compute = device_compute_bytes(model, settings, ranges)
    if not ranges:
        everything = range(layer_count)
        weights = (sum(layer.weight_bytes for layer in model.layers) + model.input_bytes
                   + model.output_bytes)
        host = DeviceMemory(
            "host", 0, layer_count, weights,
            sum(layer_kv_bytes(model, i, settings) for i in everything),
            host_compute, output_buffer, 0,
            sum(layer_state_bytes(model, i, settings) for i in everything))
        return MemoryEstimate(settings, (), host, False, tuple(notes))
    pipeline = len(ranges) > 1
    parts = []
    for index, (start, end) in enumerate(ranges):
        last = index == len(ranges) - 1
        layers = range(start, end)
        weights = sum(model.layers[i].weight_bytes for i in layers)
        if last:
            weights += model.output_bytes + model.tied_embedding_bytes
        parts.append(DeviceMemory(
            f"device-{index}", start, end, weights,
            sum(layer_kv_bytes(model, i, settings) for i in layers),
            computes[index], 0, settings.overhead_bytes,
            sum(layer_state_bytes(model, i, settings) for i in layers)))
    host = DeviceMemory("host", 0, 0, max(model.input_bytes, model.host_mapped_bytes), 0,
                        host_compute, output_buffer, 0)
    if model.tied_embedding_bytes:
        notes.append("the output head is tied to token_embd: the last device holds a "
                     "second copy of it, the host the first")
    if pipeline:
        notes.append(f"pipeline parallelism: the scheduler keeps {SCHED_MAX_COPIES} copies "
                     f"of each stage's inputs")
    return MemoryEstimate(settings, tuple(parts), host, pipeline, tuple(notes))


# --- planning with llama.cpp's memory (memory_model="llamacpp") --------------------------


@dataclass(frozen=True, slots=True)
class LlamaCppCosts:
    """What a plan with ``memory_model="llamacpp"`` charges each layer and each node.

    Per layer: its weights and KV cache as llama.cpp allocates them at the context (one
    unified cache for ``lanes`` lanes, as ``planner launch`` runs it; the sliding-window
    cache sized for ``lanes``, the most the search tries). The last layer, always on the
    last stage, also carries the output head (and a tied ``token_embd``'s second copy)
    and the output device's compute buffer. Per node: its backend overhead and the
    compute buffer of a pipeline stage before the last, reserved on every node (so a
    last stage is charged both, on the safe side). A plan of one stage is costed as
    llama.cpp runs it, on one device without pipeline parallelism (:meth:`for_stages`):
    the last layer carries that device's compute buffer and nodes reserve only their
    overhead, so the plan charges what llama.cpp allocates there.
    """

    model: LlamaCppModel
    cache_type_k: str = DEFAULT_CACHE_TYPE
    cache_type_v: str = DEFAULT_CACHE_TYPE
    flash_attn: bool = True
    ubatch: int = DEFAULT_UBATCH
    lanes: int = DEFAULT_PARALLEL_LANES
    overhead_bytes: tuple[tuple[str, int], ...] = ()
    """``(node_id, bytes)``: each node's backend overhead (0 for nodes not listed)."""
    one_device: bool = False
    """Costs of a plan of one stage (:meth:`for_stages`): llama.cpp runs one device
    without pipeline parallelism, so the last layer carries that device's whole compute
    buffer (no copies of its inputs) and nodes reserve only their overhead."""

    def __post_init__(self) -> None:
        _model(self.model)
        if isinstance(self.overhead_bytes, str | bytes) or not isinstance(
                self.overhead_bytes, Sequence | Mapping) or not all(
                isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2
                for pair in (self.overhead_bytes.items() if isinstance(
                    self.overhead_bytes, Mapping) else self.overhead_bytes)):
            raise _bad("overhead_bytes")("must be (node id, bytes) pairs",
                                         self.overhead_bytes)
        object.__setattr__(self, "lanes", _check_positive(self.lanes, "lanes",
                                                          maximum=LLAMA_MAX_SEQ))
        object.__setattr__(self, "ubatch", _check_positive(self.ubatch, "ubatch"))
        object.__setattr__(self, "flash_attn", flag(self.flash_attn, _bad("flash_attn")))
        object.__setattr__(self, "one_device", flag(self.one_device, _bad("one_device")))
        self.settings(4096)  # the cache types, ubatch and flash attention are valid
        object.__setattr__(self, "overhead_bytes", tuple(sorted(
            (str(node), _check_positive(size, f"overhead_bytes.{node}", minimum=0))
            for node, size in dict(self.overhead_bytes).items())))

    @property
    def layer_count(self) -> int:
        return self.model.layer_count

    def settings(self, context_length: int, lanes: int | None = None) -> LlamaCppSettings:
        """The llama-server settings of a plan at ``context_length`` with ``lanes``
        parallel sequences (default :attr:`lanes`), as ``planner launch`` runs it."""
        return LlamaCppSettings(
            context_length=context_length, cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v, parallel=self.lanes if lanes is None else lanes,
            kv_unified=True, ubatch=self.ubatch, flash_attn=self.flash_attn)

    # -- the memory rule the planner costs layers and nodes with ------------------------
    name: ClassVar[str] = "llamacpp"

    def check(self, request: Any) -> None:
        if self.layer_count != request.layer_count:
            raise InvalidInput("memory_rule", f"describes {self.layer_count} layers but "
                               f"layer_count is {request.layer_count}",
                               value=self.layer_count)

    def layer_costs(self, request: Any, context_length: int, lanes: int) -> LayerCosts:
        """Each layer's weights, KV cache and recurrent state as llama.cpp allocates them
        at the context with ``lanes`` sequences (the sliding-window cache and the
        recurrent state grow with the lanes); the last layer's ``other`` is the output
        head and the output device's compute buffer."""
        settings = self.settings(context_length, lanes)
        model = self.model
        count = model.layer_count
        other = [0] * count
        if self.one_device:
            compute = device_compute_bytes(model, settings, [(0, count)])[0][0]
        else:
            compute = stage_compute_bytes(model, settings)[1]
        other[count - 1] = model.output_bytes + model.tied_embedding_bytes + compute
        return LayerCosts(
            weights=tuple(layer.weight_bytes for layer in model.layers),
            kv=tuple(layer_kv_bytes(model, index, settings) for index in range(count)),
            state=tuple(layer_state_bytes(model, index, settings) for index in range(count)),
            other=tuple(other))

    def node_reserves(self, request: Any, context_length: int,
                      lanes: int) -> dict[str, int]:
        """Per node: its backend overhead and the compute buffer of a pipeline stage
        before the last."""
        compute = self._stage_compute_bytes(context_length, lanes)
        overheads = dict(self.overhead_bytes)
        return {node.node_id: overheads.get(node.node_id, 0) + compute
                for node in request.nodes}

    def _stage_compute_bytes(self, context_length: int, lanes: int | None = None) -> int:
        if self.one_device:
            return 0  # the last layer carries the one device's compute buffer
        return stage_compute_bytes(self.model, self.settings(context_length, lanes))[0]

    def for_stages(self, count: int) -> LlamaCppCosts:
        """The costs of a plan of ``count`` stages: one stage runs on one device, without
        pipeline parallelism's copies (:attr:`one_device`); more stages, with them."""
        one = count == 1
        return self if one == self.one_device else replace(self, one_device=one)

    def lanes_matter(self, request: Any) -> bool:
        # The sliding-window cache, the recurrent state and the compute buffers that read
        # them are sized per sequence; the planner searches each lane count whose costs
        # differ.
        return True

    def layer_bytes(self, context_length: int) -> tuple[int, ...]:
        return self.layer_costs(None, context_length, self.lanes).totals

    def kv_bytes(self, context_length: int, layer_start: int, layer_end: int) -> int:
        """KV cache of layers ``[layer_start, layer_end)`` at the context."""
        return sum(self.layer_costs(None, context_length, self.lanes).kv[layer_start:layer_end])

    def reserve_bytes(self, node_id: str, context_length: int) -> int:
        return (dict(self.overhead_bytes).get(node_id, 0)
                + self._stage_compute_bytes(context_length))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model.to_dict(),
                "cache_type_k": self.cache_type_k,
                "cache_type_v": self.cache_type_v, "flash_attn": self.flash_attn,
                "ubatch": self.ubatch, "lanes": self.lanes,
                "overhead_bytes": dict(self.overhead_bytes),
                **({"one_device": True} if self.one_device else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlamaCppCosts:
        values = dict(data)
        values.pop("name", None)  # the rule's name, as the request's dict form gives it
        values["model"] = LlamaCppModel.from_dict(values["model"])
        values["overhead_bytes"] = tuple(dict(values.get("overhead_bytes") or {}).items())
        return cls(**values)


def node_overheads(nodes: Sequence[Any], node_kinds: Mapping[str, str] | None = None,
                   catalog: Sequence[Any] | None = None,
                   backend_overheads: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each node's llama.cpp backend overhead, from its catalog kind in ``data/gpus.toml``
    (:func:`planner.models.gpus.node_gpu_kind`; ``node_kinds`` are the kinds nodes name,
    as a fleet file's ``gpu`` gives them); nodes of unknown kind are left out (overhead
    0)."""
    from planner.models import load_backend_overheads, load_gpu_catalog
    from planner.models.gpus import GpuModel, node_gpu_kinds
    from planner.planning import NodeBudget

    if isinstance(nodes, str | bytes) or not isinstance(nodes, Sequence) or not all(
            isinstance(node, NodeBudget) for node in nodes):
        raise _bad("nodes")("must be a list of NodeBudget", nodes)
    for name, mapping in (("node_kinds", node_kinds), ("backend_overheads", backend_overheads)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise _bad(name)("must be a mapping", mapping)
    if catalog is not None and (isinstance(catalog, str | bytes)
                                or not isinstance(catalog, Sequence)
                                or not all(isinstance(gpu, GpuModel) for gpu in catalog)):
        raise _bad("catalog")("must be a list of GpuModel", catalog)

    catalog = load_gpu_catalog() if catalog is None else catalog
    defaults = load_backend_overheads() if backend_overheads is None else backend_overheads
    return {node_id: gpu.llamacpp_overhead(defaults)
            for node_id, gpu in node_gpu_kinds(nodes, catalog, node_kinds).items()
            if gpu is not None}


def costs_from_gguf(path: str | Path, *, kv_cache_type: str = DEFAULT_CACHE_TYPE,
                    nodes: Sequence[Any] = (), node_kinds: Mapping[str, str] | None = None,
                    lanes: int = DEFAULT_PARALLEL_LANES, flash_attn: bool = True) -> LlamaCppCosts:
    """:class:`LlamaCppCosts` for the GGUF model at ``path`` on ``nodes``."""
    kv_cache_type = _cache_type(kv_cache_type, "kv_cache_type")
    return LlamaCppCosts(model_from_gguf(path), cache_type_k=kv_cache_type,
                         cache_type_v=kv_cache_type, flash_attn=flash_attn, lanes=lanes,
                         overhead_bytes=tuple(node_overheads(nodes, node_kinds).items()))
