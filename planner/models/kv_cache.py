"""KV cache bytes per token, as llama.cpp allocates them.

For each layer that keeps a cache, llama.cpp allocates one K row of
``key_length * n_head_kv(layer)`` elements and one V row of ``value_length *
n_head_kv(layer)`` elements per cached token, each stored in the cache type's blocks:
``row(t, n) = n / block(t) * block_bytes(t)``. The per-token figure of a model is the sum
over its layers.

Which layers keep a cache, how wide its rows are, which are windowed and what recurrent
state a layer keeps are llama.cpp's rules per architecture, read from the GGUF metadata by
:mod:`planner.models.layer_memory`. This module turns them into bytes:

- latent attention (MLA, ``deepseek2``): one compressed row per layer and no V row;
- sliding-window layers (``gpt-oss``, ``gemma2``/``gemma3``, ``cohere2``, ``llama4``, ...):
  they live in a separate cache of fixed size (about ``window * lanes + micro-batch``
  cells), so they add nothing per token of context; the fixed part is reported in notes;
- multi-token-prediction layers (``glm4moe``, ``bailingmoe2``): loaded but never run, and
  given no cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_PARALLEL_LANES, DEFAULT_UBATCH
from planner.models.spec import ModelError
from planner.units import format_bytes

# (elements per block, bytes per block) for the cache types llama.cpp accepts for
# --cache-type-k / --cache-type-v.
CACHE_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q5_1": (32, 24),
    "q5_0": (32, 22),
    "q4_1": (32, 20),
    "q4_0": (32, 18),
    "iq4_nl": (32, 18),
}

# llama.cpp sizes a sliding-window cache for DEFAULT_PARALLEL_LANES sequences and a
# DEFAULT_UBATCH micro-batch by default, and pads it to 256 cells.
WINDOW_CACHE_PADDING = 256


def check_cache_type(cache_type: str) -> str:
    if not isinstance(cache_type, str) or cache_type not in CACHE_TYPES:
        raise ModelError(
            "UnknownKvCacheType",
            f"unknown KV cache type {cache_type!r}; use one of {', '.join(CACHE_TYPES)}",
            kv_cache_type=cache_type,
            known=list(CACHE_TYPES),
        )
    return cache_type


def row_bytes(cache_type: str, elements: int) -> int:
    """Bytes of one cache row of ``elements`` values stored as ``cache_type``."""
    block, block_bytes = CACHE_TYPES[check_cache_type(cache_type)]
    if elements % block:
        raise ModelError(
            "IncompatibleKvCacheType",
            f"a cache row of {elements} elements cannot be stored as {cache_type} "
            f"(blocks of {block})",
            kv_cache_type=cache_type,
            elements=elements,
        )
    return elements // block * block_bytes


# Recurrent state rows are f32 whatever the KV cache type (create_memory).
STATE_ELEMENT_BYTES = 4


@dataclass(frozen=True, slots=True)
class LayerCache:
    """Elements cached per token by one layer: its K and V rows and, for sparse attention,
    its indexer cache's K and V rows (stored in the same cache types)."""

    key_elements: int
    value_elements: int
    index_key_elements: int = 0
    index_value_elements: int = 0
    compressed_elements: int = 0
    """K elements per cell of a compressed cache holding one cell per ``compress_ratio``
    tokens (DeepSeek-V4)."""
    compress_ratio: int = 0

    def bytes_per_token(self, cache_type: str) -> int:
        return (row_bytes(cache_type, self.key_elements)
                + row_bytes(cache_type, self.value_elements)
                + row_bytes(cache_type, self.index_key_elements)
                + row_bytes(cache_type, self.index_value_elements)
                + self.compressed_bytes_per_token(cache_type))

    def compressed_bytes_per_token(self, cache_type: str) -> int:
        """The compressed cache's bytes per token of context, rounded up."""
        if not self.compressed_elements:
            return 0
        return -(-row_bytes(cache_type, self.compressed_elements) // self.compress_ratio)

    @property
    def compressed_only(self) -> LayerCache:
        """The part of the layer that grows with the context when its main cache is a
        sliding window."""
        return LayerCache(0, 0, 0, 0, self.compressed_elements, self.compress_ratio)


@dataclass(frozen=True, slots=True)
class KvLayout:
    """How a model's KV cache is laid out.

    ``context_layers`` grow with the context; ``window_layers`` sit in a fixed-size
    sliding-window cache of ``sliding_window`` tokens per sequence.
    """

    context_layers: tuple[LayerCache, ...]
    window_layers: tuple[LayerCache, ...] = ()
    sliding_window: int = 0
    notes: tuple[str, ...] = ()
    layers: LayerCaches | None = None
    """Layer by layer (from a GGUF file): each block's cache, window flag and state."""
    attention: tuple[tuple[str, int | None], ...] = ()
    """The attention shape the speed estimate computes with, as ``(field, value)`` pairs
    of :data:`~planner.models.spec.ATTENTION_FIELDS` (empty: not known)."""

    def bytes_per_token(self, cache_type: str) -> int:
        return sum(layer.bytes_per_token(cache_type) for layer in self.context_layers)

    def layer_bytes_per_token(self, cache_type: str) -> tuple[int, ...] | None:
        """Each block's KV bytes per token of context (0 for a block with no cache, a
        recurrent block or a windowed one, whose cache does not grow with the context; a
        windowed block's compressed cache does)."""
        if self.layers is None:
            return None
        return tuple(0 if layer is None else
                     layer.compressed_bytes_per_token(cache_type) if window else
                     layer.bytes_per_token(cache_type)
                     for layer, window in zip(self.layers.layers, self.layers.sliding,
                                              strict=True))

    def layer_state_bytes_per_sequence(self) -> tuple[int, ...] | None:
        """Each block's recurrent state per sequence (f32 R and S rows), or None when no
        block keeps any."""
        if self.layers is None or not any(self.layers.state_elements):
            return None
        return self.layers.state_bytes_per_sequence()

    def table(self) -> tuple[tuple[str, int], ...]:
        """``(cache_type, bytes_per_token)`` for every cache type the rows can be stored in."""
        entries = []
        for cache_type in CACHE_TYPES:
            try:
                size = self.bytes_per_token(cache_type)
                for layer in self.window_layers:
                    layer.bytes_per_token(cache_type)
            except ModelError:
                continue
            entries.append((cache_type, size))
        return tuple(entries)

    def window_cells(self, parallel_lanes: int = DEFAULT_PARALLEL_LANES,
                     micro_batch: int = DEFAULT_UBATCH) -> int:
        if not self.window_layers:
            return 0
        cells = self.sliding_window * parallel_lanes + micro_batch
        return -(-cells // WINDOW_CACHE_PADDING) * WINDOW_CACHE_PADDING

    def window_cache_bytes(self, cache_type: str,
                           parallel_lanes: int = DEFAULT_PARALLEL_LANES,
                           micro_batch: int = DEFAULT_UBATCH) -> int:
        """Fixed bytes of the sliding-window cache (at most this; less for short contexts)."""
        per_cell = sum(layer.bytes_per_token(cache_type) for layer in self.window_layers)
        return per_cell * self.window_cells(parallel_lanes, micro_batch)


def full_attention_layout(layers: int, kv_heads: int, key_length: int,
                          value_length: int) -> KvLayout:
    """Every layer caches K and V for the whole context."""
    layer = LayerCache(key_length * kv_heads, value_length * kv_heads)
    return KvLayout(context_layers=(layer,) * layers)


def latent_attention_layout(layers: int, kv_lora_rank: int, rope_dim: int) -> KvLayout:
    """MLA: one compressed row of ``kv_lora_rank + rope_dim`` per layer, no V row."""
    width = kv_lora_rank + rope_dim
    note = (
        f"latent attention (MLA): llama.cpp caches one {width}-element row per layer "
        f"(kv_lora_rank {kv_lora_rank} + rope {rope_dim}) and no V cache; builds before "
        f"its V-less cache (January 2026) also kept a {kv_lora_rank}-element V row, "
        f"almost doubling the KV memory"
    )
    return KvLayout(context_layers=(LayerCache(width, 0),) * layers, notes=(note,))


def sliding_window_layout(layers: Sequence[LayerCache], is_window: Sequence[bool],
                          sliding_window: int) -> KvLayout:
    """Split layers into context-length caches and fixed sliding-window caches."""
    context = tuple(layer for layer, window in zip(layers, is_window, strict=True)
                    if not window)
    windowed = tuple(layer for layer, window in zip(layers, is_window, strict=True) if window)
    layout = KvLayout(context_layers=context, window_layers=windowed,
                      sliding_window=sliding_window)
    if not windowed:
        return layout
    cells = layout.window_cells()
    default_bytes = layout.window_cache_bytes(DEFAULT_CACHE_TYPE)
    note = (
        f"{len(windowed)} of {len(layers)} layers use a {sliding_window}-token sliding "
        f"window; llama.cpp keeps them in a separate fixed cache of at most {cells:,} cells "
        f"(window x {DEFAULT_PARALLEL_LANES} lanes + {DEFAULT_UBATCH}-token micro-batch, "
        f"padded to {WINDOW_CACHE_PADDING}) = {format_bytes(default_bytes)} at "
        f"{DEFAULT_CACHE_TYPE}, which does "
        f"not grow with the context and is not part of kv_bytes_per_token; keep it in the "
        f"runtime headroom"
    )
    return KvLayout(context_layers=context, window_layers=windowed,
                    sliding_window=sliding_window, notes=(note,))


# --- GGUF metadata ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LayerCaches:
    """Per layer of a GGUF model: what it caches per cell and whether it is windowed."""

    layers: tuple[LayerCache | None, ...]
    """None for a layer llama.cpp gives no KV cache (multi-token-prediction blocks,
    recurrent layers, layers that reuse another's cache)."""
    sliding: tuple[bool, ...]
    sliding_window: int
    notes: tuple[str, ...]
    state_elements: tuple[int, ...] = ()
    """f32 elements of recurrent state (R and S rows) each layer keeps per sequence."""
    attention: tuple[tuple[str, int | None], ...] = ()
    """The attention shape the speed estimate computes with, as ``(field, value)`` pairs
    (:func:`planner.models.layer_memory.attention_shape`)."""

    def state_bytes_per_sequence(self) -> tuple[int, ...]:
        return tuple(STATE_ELEMENT_BYTES * elements for elements in self.state_elements)


def layer_caches_from_gguf(architecture: str, metadata: Mapping[str, Any], layer_count: int,
                           where: str) -> LayerCaches:
    """Each layer's cache as llama.cpp builds it for a GGUF model (every architecture
    llama.cpp knows: :mod:`planner.models.layer_memory`)."""
    from planner.models.gguf_metadata import GgufMetadata
    from planner.models.layer_memory import attention_shape, model_memory

    meta = GgufMetadata(metadata, architecture, layer_count, where)
    memory = model_memory(meta)
    layers = tuple(
        LayerCache(layer.key_elements, layer.value_elements, layer.index_key_elements,
                   layer.index_value_elements, layer.compressed_elements,
                   layer.compress_ratio) if layer.has_kv else None
        for layer in memory.layers)
    return LayerCaches(layers, tuple(layer.sliding for layer in memory.layers),
                       memory.sliding_window, memory.notes,
                       tuple(layer.state_elements for layer in memory.layers),
                       tuple(attention_shape(meta, memory).items()))


def layout_from_gguf(architecture: str, metadata: Mapping[str, Any], layer_count: int,
                     where: str) -> KvLayout:
    """The KV layout llama.cpp builds for a GGUF model.

    ``metadata`` maps full GGUF keys (``qwen3moe.attention.head_count_kv``) to values;
    ``where`` names the file in error messages.
    """
    caches = layer_caches_from_gguf(architecture, metadata, layer_count, where)
    kept = [(layer, flag) for layer, flag in zip(caches.layers, caches.sliding, strict=True)
            if layer is not None]
    if caches.sliding_window:
        # A windowed layer's compressed cache (DeepSeek-V4) still grows with the context.
        windowed = [replace(layer, compressed_elements=0, compress_ratio=0) if flag else layer
                    for layer, flag in kept]
        layout = sliding_window_layout(windowed, [flag for _, flag in kept],
                                       caches.sliding_window)
        compressed = tuple(layer.compressed_only for layer, flag in kept
                           if flag and layer.compressed_elements)
        layout = replace(layout, context_layers=layout.context_layers + compressed)
    else:
        layout = KvLayout(context_layers=tuple(layer for layer, _ in kept))
    return KvLayout(
        context_layers=layout.context_layers,
        window_layers=layout.window_layers,
        sliding_window=layout.sliding_window,
        notes=caches.notes + layout.notes,
        layers=caches,
        attention=caches.attention,
    )
