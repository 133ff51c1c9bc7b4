"""Model presets: planner inputs for published models, each number cited.

One TOML file per model in ``data/models/``. A preset states the published architecture
facts (layers, native context, KV heads and head sizes, or the latent-attention ranks, or
the sliding-window layout) and the weight bytes with how they were obtained; the KV bytes
per token for every cache type are computed from the facts with the same formula as for a
GGUF file. A preset may pin the figure for one cache type (``[kv.stated]``) when a source
it reproduces states a different number; it must say why.

File layout::

    id = "llama-3.1-70b"                 # matched case-insensitively, as is ``name``
    name = "Llama-3.1-70B-Instruct"
    architecture = "llama"               # llama.cpp's GGUF architecture name

    [config]                             # the model's published config
    source = "<url>"
    layer_count = 80                     # blocks in the GGUF
    native_context_length = 131072
    hidden_size = 8192                   # optional: embedding width (hidden_size)

    [attention]
    kind = "full"                        # or "mla" or "sliding_window"
    kv_layer_count = 80                  # layers that keep a KV cache
    head_count = 64                      # query heads (optional: the speed estimate's)
    kv_head_count = 8                    # full / sliding_window
    key_length = 128
    value_length = 128
    # mla:            kv_lora_rank, rope_head_dim
    # sliding_window: sliding_window, full_attention_layer_count

    [weights]
    bytes = 74963313152
    method = "estimate"                  # or "file_size" or "design"
    quantisation = "Q8_0"
    source = "<where the number comes from>"
    [[weights.parts]]                    # estimate = sum(ceil(parameters * bits / 8))
    parameters = 70553706496
    bits_per_weight = 8.5

    [[weights.parts]]                    # optional keys of a part:
    what = "routed experts"
    parameters = 64_424_509_440
    bits_per_weight = 8.5
    role = "routed_experts"              # "shared" (default), "routed_experts" or
                                         # "input_embedding"
    layers = ["3-60"]                    # blocks the part is spread over (ints, "a-b"
                                         # ranges, "all"); "input" / "output" for the
                                         # tensors outside the blocks

    [experts]                            # mixture of experts only
    expert_count = 256                   # routed experts per layer
    experts_used = 8                     # routed experts each token runs
    source = "<config.json>"

    [metadata]                           # instead of [attention]: the GGUF metadata
    attention.head_count = 16            # llama.cpp's converter writes for the config
    ssm.conv_kernel = 4                  # (keys without the architecture prefix)

    [kv]
    default_cache_type = "f16"
    [kv.stated.q8_0]                     # optional
    bytes_per_token = 131072
    reason = "..."

``[metadata]`` describes what ``[attention]`` cannot: a hybrid (attention KV on some
layers, recurrent state on the others), a sparse-attention indexer cache, per-layer head
counts. The per-layer KV and recurrent state then come from the same reading of the
metadata as for a GGUF file (:mod:`planner.models.layer_memory`); ``block_count``,
``context_length`` and ``embedding_length`` are taken from ``[config]``.

A preset whose weights are an estimate states each part's role: one decode step reads a
shared part whole, ``experts_used / expert_count`` of a routed-experts part and one row of
an input embedding (counted as none), the same rule as for a GGUF file's tensors. When
every part names its ``layers``, the preset also gives each layer's weight bytes (the
input parts in layer 0, the output parts in the last layer, as for a GGUF file).

The data directory is the package ``planner.data`` (the repository's ``data/``;
``PLANNER_DATA_DIR`` overrides it).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from importlib.resources import files
from pathlib import Path
from typing import Any

from planner._validate import Fail, integer, number
from planner.limits import MAX_ATTENTION_HEADS, MAX_ATTENTION_WIDTH, MAX_CONTEXT
from planner.models.kv_cache import (
    CACHE_TYPES,
    KvLayout,
    check_cache_type,
    full_attention_layout,
    latent_attention_layout,
    layout_from_gguf,
    sliding_window_layout,
)
from planner.models.spec import ModelError, ModelSpec

DATA_DIR_ENV = "PLANNER_DATA_DIR"
WEIGHT_METHODS = ("estimate", "file_size", "design")
ATTENTION_KINDS = ("full", "mla", "sliding_window")


def data_dir() -> Path:
    """The data directory: ``$PLANNER_DATA_DIR``, else the data shipped in the package
    (``planner.data``, which is the repository's ``data/``)."""
    override = os.environ.get(DATA_DIR_ENV)
    path = Path(override) if override else Path(str(files("planner.data")))
    if not path.is_dir():
        origin = f"${DATA_DIR_ENV}" if override else "the installed package"
        raise ModelError(
            "MissingDataDir",
            f"data directory {path} (from {origin}) does not exist; set {DATA_DIR_ENV} to the "
            f"folder holding models/ and gpus.toml",
            path=str(path),
        )
    return path


def presets_dir() -> Path:
    path = data_dir() / "models"
    if not path.is_dir():
        raise ModelError("MissingDataDir", f"preset directory {path} does not exist",
                         path=str(path))
    return path


class _Table:
    """Typed reads from one TOML table, with errors naming the file and the field."""

    def __init__(self, data: Any, where: str, prefix: str = "") -> None:
        self.where = where
        self.prefix = prefix
        if not isinstance(data, Mapping):
            raise self.error("", "must be a table", data)
        self.data = data

    def error(self, key: str, problem: str, value: Any = None) -> ModelError:
        field_name = f"{self.prefix}{key}" or "(file)"
        shown = f" (got {value!r})" if value is not None else ""
        return ModelError("InvalidPreset", f"{self.where}: {field_name} {problem}{shown}",
                          file=self.where, field=field_name)

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "must be a non-empty string", value)
        return value

    def fail(self, key: str) -> Fail:
        return lambda problem, value: self.error(key, problem, value)

    def positive(self, key: str) -> int:
        return integer(self.data.get(key), self.fail(key), minimum=1)

    def number(self, key: str) -> Fraction:
        return Fraction(str(number(self.data.get(key), self.fail(key), above=0)))

    def table(self, key: str) -> _Table:
        if key not in self.data:
            raise self.error(key, "is missing")
        return _Table(self.data[key], self.where, f"{self.prefix}{key}.")

    def tables(self, key: str) -> list[_Table]:
        value = self.data.get(key)
        if not isinstance(value, list) or not value:
            raise self.error(key, "must be a non-empty array of tables", value)
        return [_Table(item, self.where, f"{self.prefix}{key}[{index}].")
                for index, item in enumerate(value)]

    def only(self, *allowed: str) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"is not a known field; expected {', '.join(allowed)}")


def estimate_bytes(parts: list[tuple[int, Fraction]]) -> int:
    """Bytes of weights stored at the given bits per weight, part by part, rounded up."""
    total = 0
    for parameters, bits in parts:
        size = parameters * bits / 8
        total += size.numerator // size.denominator + (size.denominator != 1)
    return total


def _layout(attention: _Table, layer_count: int) -> KvLayout:
    layout = _attention_layout(attention, layer_count)
    kv_layers = len(layout.context_layers) + len(layout.window_layers)
    if kv_layers == layer_count:
        return layout
    note = (f"only {kv_layers} of the {layer_count} layers keep a KV cache (llama.cpp gives "
            f"the multi-token-prediction layers none)")
    return replace(layout, notes=(*layout.notes, note))


def _attention_layout(attention: _Table, layer_count: int) -> KvLayout:
    kind = attention.text("kind")
    kv_layers = attention.positive("kv_layer_count")
    if kv_layers > layer_count:
        raise attention.error("kv_layer_count", f"exceeds config.layer_count {layer_count}",
                              kv_layers)
    # Query heads: the speed estimate's attention width (optional; the cache needs none).
    heads = (integer(attention.data["head_count"], attention.fail("head_count"), minimum=1,
                     maximum=MAX_ATTENTION_HEADS) if attention.has("head_count") else None)
    if kind == "mla":
        attention.only("kind", "kv_layer_count", "kv_lora_rank", "rope_head_dim",
                       "head_count")
        rank, rope = attention.positive("kv_lora_rank"), attention.positive("rope_head_dim")
        return replace(latent_attention_layout(kv_layers, rank, rope), attention=(
            ("attention_heads", heads), ("head_size", rank + rope), ("kv_heads", 1),
            ("kv_lora_rank", rank), ("rope_head_size", rope)))
    if kind not in ATTENTION_KINDS:
        raise attention.error("kind", f"must be one of {', '.join(ATTENTION_KINDS)}", kind)
    windowed = kind == "sliding_window"
    attention.only("kind", "kv_layer_count", "kv_head_count", "key_length", "value_length",
                   "head_count", *(("sliding_window", "full_attention_layer_count")
                                   if windowed else ()))
    kv_heads, key_length = attention.positive("kv_head_count"), attention.positive("key_length")
    full = full_attention_layout(kv_layers, kv_heads, key_length,
                                 attention.positive("value_length"))
    if heads is not None and kv_heads > heads:
        raise attention.error("kv_head_count", f"exceeds head_count {heads}", kv_heads)
    if heads is not None and heads * key_length > MAX_ATTENTION_WIDTH:
        raise attention.error("key_length", f"times head_count {heads} exceeds "
                              f"{MAX_ATTENTION_WIDTH:,}", key_length)
    shape = (("attention_heads", heads), ("head_size", key_length), ("kv_heads", kv_heads))
    if not windowed:
        return replace(full, attention=shape)
    full_layers = attention.positive("full_attention_layer_count")
    if full_layers > kv_layers:
        raise attention.error("full_attention_layer_count",
                              f"exceeds kv_layer_count {kv_layers}", full_layers)
    is_window = [index >= full_layers for index in range(kv_layers)]
    window = integer(attention.data.get("sliding_window"), attention.fail("sliding_window"),
                     minimum=1, maximum=MAX_CONTEXT)
    layout = sliding_window_layout(full.context_layers, is_window, window)
    return replace(layout, attention=(*shape, ("sliding_window", window),
                                      ("sliding_window_layers", kv_layers - full_layers)))


PART_ROLES = ("shared", "routed_experts", "input_embedding")
_OUTSIDE = ("input", "output")


@dataclass(frozen=True, slots=True)
class _Part:
    """One part of a preset's weights: its bytes, role and where it lies: the blocks it is
    spread over, ``"input"`` / ``"output"`` for the tensors outside the blocks, or None
    when the preset does not say."""

    size: int
    role: str
    place: tuple[int, ...] | str | None


def _part_place(part: _Table, role: str, layer_count: int) -> tuple[int, ...] | str | None:
    value = part.data.get("layers")
    if value is None:
        return "input" if role == "input_embedding" else None
    if value in _OUTSIDE or value == "all":
        return tuple(range(layer_count)) if value == "all" else value
    if not isinstance(value, list) or not value:
        raise part.error("layers", "must be \"all\", \"input\", \"output\" or a non-empty "
                         "list of block indices and \"a-b\" ranges", value)
    blocks: list[int] = []
    for entry in value:
        if isinstance(entry, str) and entry.count("-") == 1:
            first, _, last = entry.partition("-")
            if not (first.isdecimal() and last.isdecimal()) or int(first) > int(last):
                raise part.error("layers", f"has a bad range {entry!r}", value)
            blocks.extend(range(int(first), int(last) + 1))
        elif isinstance(entry, int) and not isinstance(entry, bool):
            blocks.append(entry)
        else:
            raise part.error("layers", f"has an entry that is not a block or a range: "
                             f"{entry!r}", value)
    if len(set(blocks)) != len(blocks) or not all(0 <= b < layer_count for b in blocks):
        raise part.error("layers", f"must name distinct blocks 0-{layer_count - 1}", value)
    return tuple(blocks)


def _part_role(part: _Table) -> str:
    role = part.text("role") if part.has("role") else "shared"
    if role not in PART_ROLES:
        raise part.error("role", f"must be one of {', '.join(PART_ROLES)}", role)
    return role


def _weights(weights: _Table, layer_count: int) -> tuple[int, list[_Part], str]:
    weights.only("bytes", "method", "quantisation", "source", "parts")
    size = weights.positive("bytes")
    method = weights.text("method")
    if method not in WEIGHT_METHODS:
        raise weights.error("method", f"must be one of {', '.join(WEIGHT_METHODS)}", method)
    quantisation = weights.text("quantisation")
    source = weights.text("source")
    parts: list[_Part] = []
    if method == "estimate":
        for part in weights.tables("parts"):
            part.only("parameters", "bits_per_weight", "what", "role", "layers")
            role = _part_role(part)
            part_bytes = estimate_bytes([(part.positive("parameters"),
                                          part.number("bits_per_weight"))])
            parts.append(_Part(part_bytes, role, _part_place(part, role, layer_count)))
        expected = sum(part.size for part in parts)
        if expected != size:
            raise weights.error("bytes", f"does not match its parts: parameters x bits / 8 "
                                f"gives {expected:,}", size)
        note = f"weights: ESTIMATE for {quantisation} (parameters x bits per weight): {source}"
    else:
        note = (f"weights: {quantisation} GGUF file size: {source}" if method == "file_size"
                else f"weights: {quantisation}, the design's figure: {source}")
        if not weights.has("parts"):
            return size, [_Part(size, "shared", None)], note
        # A stated total with no bits per part: the parts share it by parameters, so the
        # roles still split it.
        tables = weights.tables("parts")
        counts = []
        for part in tables:
            part.only("parameters", "what", "role")
            counts.append(part.positive("parameters"))
        total = sum(counts)
        shares = [size * count // total for count in counts]
        shares[0] += size - sum(shares)
        parts = [_Part(share, _part_role(part), None)
                 for share, part in zip(shares, tables, strict=True)]
    return size, parts, note


def _layer_weights(parts: list[_Part], layer_count: int) -> tuple[int, ...] | None:
    """Each block's weight bytes when every part says where it lies: a part spread evenly
    over its blocks (the first ones taking the remainder), input parts in block 0 and
    output parts in the last block, as for a GGUF file."""
    if any(part.place is None for part in parts):
        return None
    sizes = [0] * layer_count
    for part in parts:
        if part.place == "input":
            sizes[0] += part.size
        elif part.place == "output":
            sizes[-1] += part.size
        else:
            blocks = part.place
            assert isinstance(blocks, tuple)
            share, extra = divmod(part.size, len(blocks))
            for index, block in enumerate(blocks):
                sizes[block] += share + (1 if index < extra else 0)
    return tuple(sizes)


def _speed_fields(root: _Table, parts: list[_Part]) -> dict[str, int | None]:
    """What the speed estimate reads beyond bytes (``planner.performance``): the
    parameters (all, and those one token computes with: shared parts whole, routed
    experts ``experts_used / expert_count``, the input embedding not at all, a token only
    looking its row up), the routed experts' parameters and bytes, the input
    embedding's bytes, and the output head's parameters (the parts placed outside the
    blocks that a token computes with: the head and its norm at the output, the tied
    token embeddings at the input), which a prompt multiplies for its output tokens
    only. Parameters
    are known when the weights have parts: each states its parameters, whether its bytes
    are estimated from them or share a stated total."""
    weights = root.table("weights")
    experts = root.table("experts") if root.has("experts") else None
    used = (experts.positive("experts_used"), experts.positive("expert_count")) if (
        experts is not None) else None
    found: dict[str, int | None] = {
        "routed_expert_bytes": sum(p.size for p in parts if p.role == "routed_experts"),
        "token_embedding_bytes": sum(p.size for p in parts if p.role == "input_embedding")
        or None,
        "expert_count": None if used is None else used[1],
        "experts_used": None if used is None else used[0],
    }
    if weights.has("parts"):
        total = active = routed = head = 0.0
        for part, placed in zip(weights.tables("parts"), parts, strict=True):
            count = part.positive("parameters")
            role = _part_role(part)
            total += count
            if role == "routed_experts" and used is not None:
                active += count * used[0] / used[1]
                routed += count
            elif role != "input_embedding":
                active += count
                # The output head: the part at the output, or the token embeddings at
                # the input where they are shared with it (an input embedding of its
                # own has that role).
                head += count if placed.place in _OUTSIDE else 0
        found.update(parameter_count=round(total), active_parameter_count=round(active),
                     routed_expert_parameters=round(routed),
                     output_head_parameters=round(head) or None)
    return found


def _active_weights(root: _Table, weight_bytes: int, parts: list[_Part]) -> tuple[int, str]:
    """Weight bytes one decode step reads: a shared part whole, ``ceil(bytes x used /
    count)`` of a routed-experts part and nothing of an input embedding (one row per
    token); a dense model without roles reads every weight."""
    routed = sum(part.size for part in parts if part.role == "routed_experts")
    embedding = sum(part.size for part in parts if part.role == "input_embedding")
    shared = weight_bytes - routed - embedding
    if not root.has("experts"):
        if routed:
            raise root.error("experts", "is missing, but a weight part holds routed experts")
        active = shared
        read = (f"decode reads {active:,} weight bytes: every weight but the input "
                f"embedding, read one row per token" if embedding else
                f"decode reads {active:,} weight bytes: every weight (dense model)")
        return active, read
    experts = root.table("experts")
    experts.only("expert_count", "experts_used", "source")
    count = experts.positive("expert_count")
    used = experts.positive("experts_used")
    if used > count:
        raise experts.error("experts_used", f"exceeds expert_count {count}", used)
    if not routed:
        raise experts.error("", "is given, but no weight part has role \"routed_experts\"")
    routed_read = sum(-(-part.size * used // count) for part in parts
                      if part.role == "routed_experts")
    active = shared + routed_read
    return active, (f"decode reads {active:,} weight bytes: {shared:,} of shared weights "
                    f"whole and {routed_read:,} of the routed experts' {routed:,} ({used} of "
                    f"{count} experts per token); the input embedding is read one row per "
                    f"token ({experts.text('source')})")


def _metadata_layout(metadata: _Table, architecture: str, config: _Table,
                     layer_count: int, where: str) -> KvLayout:
    """The KV layout llama.cpp builds from the GGUF metadata the preset states."""
    keys = {f"{architecture}.{key}": value for key, value in _flatten(metadata.data)}
    for key, value in (("block_count", layer_count),
                       ("context_length", config.positive("native_context_length")),
                       ("embedding_length", config.positive("hidden_size"))):
        if f"{architecture}.{key}" in keys:
            raise metadata.error(key, "comes from [config]; leave it out")
        keys[f"{architecture}.{key}"] = value
    keys["general.architecture"] = architecture
    try:
        return layout_from_gguf(architecture, keys, layer_count, where)
    except ModelError as exc:
        raise ModelError("InvalidPreset", f"{where}: [metadata]: {exc.message}",
                         file=where, field="metadata") from None


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """TOML's dotted keys as GGUF keys (``attention.head_count``)."""
    entries: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            entries.extend(_flatten(value, f"{prefix}{key}."))
        else:
            entries.append((f"{prefix}{key}", value))
    return entries


def _kv(kv: _Table, layout: KvLayout) -> tuple[str, tuple[tuple[str, int], ...], list[str]]:
    kv.only("default_cache_type", "stated")
    default = kv.text("default_cache_type")
    try:
        check_cache_type(default)
    except ModelError as exc:
        raise kv.error("default_cache_type", exc.message, default) from None
    table = dict(layout.table())
    notes = []
    if kv.has("stated"):
        stated = kv.table("stated")
        for cache_type in stated.data:
            if cache_type not in CACHE_TYPES:
                raise stated.error(cache_type, f"is not a cache type ({', '.join(CACHE_TYPES)})")
            entry = stated.table(cache_type)
            entry.only("bytes_per_token", "reason")
            size = entry.positive("bytes_per_token")
            reason = entry.text("reason")
            formula = table.get(cache_type)
            table[cache_type] = size
            notes.append(
                f"KV at {cache_type} is the stated {size:,} B/token (the formula gives "
                f"{formula:,}): {reason}" if formula is not None else
                f"KV at {cache_type} is the stated {size:,} B/token: {reason}"
            )
    if default not in table:
        raise kv.error("default_cache_type", "cannot store this model's cache rows", default)
    return default, tuple(table.items()), notes


def _parse(path: Path) -> tuple[str, ModelSpec]:
    where = str(path)
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError("InvalidPreset", f"{where}: not valid TOML: {exc}",
                         file=where) from None
    root = _Table(raw, where)
    root.only("id", "name", "architecture", "config", "attention", "metadata", "weights",
              "experts", "kv")
    preset_id = root.text("id")
    if preset_id != path.stem:
        raise root.error("id", f"must match the file name {path.stem!r}", preset_id)
    architecture = root.text("architecture")
    config = root.table("config")
    config.only("source", "layer_count", "native_context_length", "hidden_size")
    layer_count = config.positive("layer_count")
    if root.has("attention") == root.has("metadata"):
        raise root.error("attention", "or [metadata] (not both) must describe the cache")
    if root.has("metadata"):
        layout = _metadata_layout(root.table("metadata"), architecture, config, layer_count,
                                  where)
    else:
        layout = _layout(root.table("attention"), layer_count)
    weight_bytes, parts, weight_note = _weights(root.table("weights"), layer_count)
    active_bytes, active_note = _active_weights(root, weight_bytes, parts)
    default, table, kv_notes = _kv(root.table("kv"), layout)
    layer_kv = []
    for cache_type, _ in table:
        sizes = layout.layer_bytes_per_token(cache_type)
        if sizes is not None and sum(sizes) == dict(table)[cache_type]:
            layer_kv.append((cache_type, sizes))
    spec = ModelSpec(
        name=root.text("name"),
        architecture=architecture,
        layer_count=layer_count,
        native_context_length=config.positive("native_context_length"),
        model_weight_bytes=weight_bytes,
        layer_weight_bytes=_layer_weights(parts, layer_count),
        kv_bytes_per_token=dict(table)[default],
        kv_cache_type=default,
        kv_cache_table=table,
        source=f"preset {preset_id} (models/{path.name}); architecture: "
               f"{config.text('source')}",
        notes=(weight_note, active_note, *kv_notes, *layout.notes),
        hidden_size=config.positive("hidden_size") if config.has("hidden_size") else None,
        active_weight_bytes=active_bytes,
        layer_kv_table=tuple(layer_kv),
        layer_state_bytes_per_sequence=layout.layer_state_bytes_per_sequence(),
        **_speed_fields(root, parts),
        **dict(layout.attention),
    )
    return preset_id, spec


def _load_all() -> dict[str, ModelSpec]:
    presets: dict[str, ModelSpec] = {}
    for path in sorted(presets_dir().glob("*.toml")):
        preset_id, spec = _parse(path)
        presets[preset_id] = spec
    return presets


def list_presets() -> list[str]:
    """The ids of every preset, sorted."""
    return sorted(path.stem for path in presets_dir().glob("*.toml"))


def preset_id(name: str) -> str:
    """The id of the preset whose id or display name is ``name`` (case-insensitive):
    ``"Llama 3.1 70B"`` and ``"llama-3.1-70b"`` are one preset."""
    wanted = name.strip().casefold()
    # An id names its file: no need to read them all; a display name needs them all.
    for path in sorted(presets_dir().glob("*.toml")):
        if path.stem.casefold() == wanted:
            return path.stem
    presets = _load_all()
    for found, spec in presets.items():
        if wanted in (found.casefold(), spec.name.casefold()):
            return found
    known = ", ".join(f"{found} ({spec.name})" for found, spec in presets.items())
    raise ModelError("UnknownPreset", f"no preset named {name!r}; known: {known}",
                     name=name, known=list(presets))


def load_preset(name: str, kv_cache_type: str | None = None) -> ModelSpec:
    """The preset whose id or display name is ``name`` (case-insensitive)."""
    spec = _parse(presets_dir() / f"{preset_id(name)}.toml")[1]
    return spec if kv_cache_type is None else spec.with_kv_cache_type(kv_cache_type)
