"""What llama.cpp allocates on each device of a layer split, component by component
(:func:`estimate`): the weights, the KV cache and recurrent state, the compute buffer,
the output buffer and the backend overhead of each device and of the host."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd

from planner._validate import instance, integer, is_integral, shown
from planner.limits import MAX_LAYERS
from planner.llamacpp.graph import compute_buffers, family_of
from planner.llamacpp.layout import LlamaCppModel, _aligned
from planner.llamacpp.settings import (
    KV_PADDING,
    LlamaCppSettings,
    MemoryModelError,
    _bad,
    _check_positive,
    _pad,
)
from planner.models.kv_cache import row_bytes

COMPONENTS = ("weights_bytes", "kv_bytes", "state_bytes", "compute_bytes", "output_bytes",
              "overhead_bytes")
KEYS = (*COMPONENTS, "total_bytes")
# ggml-backend.cpp: GGML_SCHED_MAX_COPIES, the input copies kept for pipeline parallelism.
SCHED_MAX_COPIES = 4


def _model(value: Any) -> LlamaCppModel:
    model: LlamaCppModel = instance(value, LlamaCppModel, _bad("model"), "a LlamaCppModel")
    return model


def _settings(value: Any) -> LlamaCppSettings:
    settings: LlamaCppSettings = instance(value, LlamaCppSettings, _bad("settings"),
                                          "a LlamaCppSettings")
    return settings


def _layer_index(model: LlamaCppModel, index: Any) -> int:
    return integer(index, _bad("index"), maximum=len(model.layers) - 1)


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


def runs_flash_attention(model: LlamaCppModel, settings: LlamaCppSettings) -> bool:
    """Whether llama.cpp runs the model's attention with flash attention: as -fa says,
    but off for a family llama.cpp runs without it (:attr:`Family.flash_attention`)."""
    family = family_of(_model(model).architecture)
    return _settings(settings).flash_attn and (family is None or family.flash_attention)


def layer_state_bytes(model: LlamaCppModel, index: int, settings: LlamaCppSettings) -> int:
    """Recurrent state llama.cpp allocates for one layer (llama_memory_recurrent): f32 R
    and S rows for each of ``max(1, parallel)`` sequences, whatever the context."""
    elements = _model(model).layers[_layer_index(model, index)].state_elements
    _settings(settings)
    return _aligned(elements * 4 * max(1, settings.parallel)) if elements else 0


def device_compute_bytes(model: LlamaCppModel, settings: LlamaCppSettings,
                         ranges: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """The compute buffer of each device running ``ranges`` and of the host, derived from
    the model's graph (:mod:`planner.llamacpp.graph`): the larger of llama.cpp's prompt
    graph (a ubatch of tokens and outputs) and generation graph, allocated the way ggml
    does it. With no ranges, the host runs everything (the list is empty). Over two or
    more devices the scheduler keeps every input and every tensor a device reads from
    another one :data:`SCHED_MAX_COPIES` times (pipeline parallelism)."""
    ranges = _checked_ranges(_model(model), ranges)
    return _device_compute_bytes(model, _settings(settings), tuple(ranges))


def _checked_ranges(model: LlamaCppModel, ranges: Any) -> list[tuple[int, int]]:
    """``ranges`` as ``(start, end)`` pairs, contiguous, in order, each one layer or
    more and covering every layer of ``model`` (or none: the host alone). The last of
    two or more devices may hold no block: the output layer alone (llama.cpp's
    ``--tensor-split`` counts the output layer as one more)."""
    layer_count = model.layer_count
    if isinstance(ranges, str | bytes) or not isinstance(ranges, Sequence) or any(
            isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2
            for pair in ranges):
        raise _bad("ranges")("must be a list of (start, end) layer ranges", ranges)
    output_alone = len(ranges) > 1 and ranges[-1][0] == ranges[-1][1]
    _check_device_count(layer_count + output_alone, len(ranges), "ranges")
    checked = []
    expected = 0
    for index, (start, end) in enumerate(ranges):
        empty_allowed = output_alone and index == len(ranges) - 1
        if (not (is_integral(start) and is_integral(end)) or int(start) != expected
                or int(end) < int(start) + (0 if empty_allowed else 1)):
            raise MemoryModelError(
                "InvalidMemorySettings",
                f"layer ranges {shown(ranges)} must be contiguous, in order and non-empty "
                f"(the last of two or more may hold the output layer alone)",
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
        n_outputs=settings.n_outputs_max,
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
