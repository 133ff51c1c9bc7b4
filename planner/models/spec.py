"""What the planner needs to know about a model, and where each number came from.

A :class:`ModelSpec` carries the planning request's names (docs/rules.md §1:
``native_context_length``, ``layer_count``, ``model_weight_bytes``, ``layer_weight_bytes``,
``kv_bytes_per_token``)
beside the architecture, the KV cache type the per-token figure is for, the figure for
every other cache type the spec knows, a source and notes. ``planning_fields()`` drops
straight into a planning request.

Invariants (checked on construction):

- every count and size is a positive integer;
- ``layer_weight_bytes``, when given, has one entry per layer and adds up to
  ``model_weight_bytes``;
- ``kv_bytes_per_token`` is the table's entry for ``kv_cache_type``;
- ``hidden_size`` (the embedding width, for the activations a pipeline hop carries) and
  ``active_weight_bytes`` (the weight bytes one decode step reads: all of them for a dense
  model, the shared weights plus the active experts' share for a mixture of experts), when
  known, are positive; ``active_weight_bytes`` is at most ``model_weight_bytes``;
- the attention shape (:data:`ATTENTION_FIELDS`: query heads, head size, KV heads, the
  sliding window and its layers, latent attention's rank and rotary size), when known, is
  within its bounds (planner.limits), KV heads at most the query heads, the window's
  layers at most the layers, and the window and its layers go together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from planner._validate import Fail, integer, shown, text
from planner.errors import CodedError
from planner.limits import (
    MAX_ATTENTION_HEADS,
    MAX_ATTENTION_WIDTH,
    MAX_BITS_PER_PARAMETER,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_LAYERS,
    MIN_BITS_PER_PARAMETER,
)
from planner.units import format_bytes


class ModelError(CodedError):
    """Model metadata could not be read, derived or found.

    ``code`` is stable: ``NotGguf``, ``TruncatedGguf``, ``InvalidGguf``,
    ``UnsupportedGgufVersion``, ``GgufNotFound``, ``UnreadableGguf``, ``MissingGgufShard``,
    ``MissingGgufKey``, ``UnsupportedArchitecture``, ``UnknownKvCacheType``,
    ``IncompatibleKvCacheType``, ``UnknownPreset``, ``InvalidPreset``, ``MissingDataDir``,
    ``InvalidGpuCatalog``, ``GpuCatalogNotFound``, ``UnknownGpuKind`` or
    ``InvalidModelSpec``. ``details`` holds the file, key or value behind the message.
    """

    codes = (
        "NotGguf",
        "TruncatedGguf",
        "InvalidGguf",
        "UnsupportedGgufVersion",
        "GgufNotFound",
        "UnreadableGguf",
        "MissingGgufShard",
        "MissingGgufKey",
        "UnsupportedArchitecture",
        "UnknownKvCacheType",
        "IncompatibleKvCacheType",
        "UnknownPreset",
        "InvalidPreset",
        "MissingDataDir",
        "InvalidGpuCatalog",
        "GpuCatalogNotFound",
        "UnknownGpuKind",
        "InvalidModelSpec",
    )


def _invalid(field_name: str, problem: str, value: Any) -> ModelError:
    return ModelError(
        "InvalidModelSpec", f"{field_name}: {problem} (got {shown(value)})", field=field_name,
        value=value,
    )


def _fail(field_name: str) -> Fail:
    return lambda problem, value: _invalid(field_name, problem, value)


# Optional whole numbers of a spec, each ``None`` when unknown.
OPTIONAL_COUNTS = ("hidden_size", "active_weight_bytes", "parameter_count",
                   "active_parameter_count", "expert_count", "experts_used",
                   "token_embedding_bytes", "routed_expert_bytes", "routed_expert_parameters",
                   "output_head_parameters")
# A layer's attention as the speed estimate computes it, each ``None`` when unknown and
# each with its bound (planner.limits): query heads and their head size (the key length),
# KV heads, the sliding window and how many layers attend over it only, and latent
# attention's (MLA) cache rank and rotary head size.
ATTENTION_FIELDS = {"attention_heads": MAX_ATTENTION_HEADS, "head_size": MAX_ATTENTION_WIDTH,
                    "kv_heads": MAX_ATTENTION_HEADS, "sliding_window": MAX_CONTEXT,
                    "sliding_window_layers": MAX_LAYERS, "kv_lora_rank": MAX_ATTENTION_WIDTH,
                    "rope_head_size": MAX_ATTENTION_WIDTH}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Planner inputs for one model at one KV cache type.

    ``kv_cache_table`` holds ``(cache_type, bytes_per_token)`` pairs for every cache type
    the spec knows; ``kv_bytes_per_token_by_type`` shows it as a dict. It is a tuple so the
    spec stays hashable.
    """

    name: str
    architecture: str
    layer_count: int
    native_context_length: int
    model_weight_bytes: int
    layer_weight_bytes: tuple[int, ...] | None
    kv_bytes_per_token: int
    kv_cache_type: str
    kv_cache_table: tuple[tuple[str, int], ...]
    source: str
    notes: tuple[str, ...] = ()
    hidden_size: int | None = None
    active_weight_bytes: int | None = None
    layer_kv_table: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``(cache_type, per-layer KV bytes per token)`` where the layers differ (hybrid,
    windowed, MTP or reused-cache layers); each entry adds up to that type's figure."""
    layer_state_bytes_per_sequence: tuple[int, ...] | None = None
    """Each layer's recurrent state per sequence (llama.cpp's R and S rows), if any."""
    # What the speed estimate needs beyond bytes (planner.performance): the weights'
    # parameter count and the share one token computes with, the routed experts (a
    # mixture of experts: ``expert_count`` per layer, ``experts_used`` per token, and the
    # bytes of all of them), and the token-embedding bytes, of which decode reads one row
    # per token.
    parameter_count: int | None = None
    active_parameter_count: int | None = None
    expert_count: int | None = None
    experts_used: int | None = None
    token_embedding_bytes: int | None = None
    routed_expert_bytes: int | None = None
    # The routed experts' parameters, all of them: their share of the parameters one
    # token computes with, where experts and the rest are stored at different precisions
    # (their bytes alone would misplace it).
    routed_expert_parameters: int | None = None
    # The output head's parameters (``output.weight``, or the token embeddings where they
    # are tied to it), of those one token computes with: a prompt multiplies the head for
    # its output tokens only (planner.performance.computes_every_output).
    output_head_parameters: int | None = None
    # The attention shape (:data:`ATTENTION_FIELDS`), from the GGUF metadata or the
    # preset's config: the compute and cache reads of attention depend on it.
    attention_heads: int | None = None
    head_size: int | None = None
    kv_heads: int | None = None
    sliding_window: int | None = None
    sliding_window_layers: int | None = None
    kv_lora_rank: int | None = None
    rope_head_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("name", "architecture", "source"):
            text(getattr(self, name), _fail(name))
        for name in ("layer_count", "native_context_length", "model_weight_bytes"):
            object.__setattr__(self, name, integer(getattr(self, name), _fail(name), minimum=1))
        # A recurrent model (mamba, rwkv) keeps no KV cache: 0 bytes per token.
        object.__setattr__(self, "kv_bytes_per_token", integer(
            self.kv_bytes_per_token, _fail("kv_bytes_per_token"), minimum=0))
        if self.layer_weight_bytes is not None:
            if not isinstance(self.layer_weight_bytes, tuple):
                raise _invalid("layer_weight_bytes", "must be a tuple or None",
                               self.layer_weight_bytes)
            if len(self.layer_weight_bytes) != self.layer_count:
                raise _invalid(
                    "layer_weight_bytes",
                    f"needs one entry per layer ({self.layer_count}), has "
                    f"{len(self.layer_weight_bytes)}",
                    len(self.layer_weight_bytes),
                )
            object.__setattr__(self, "layer_weight_bytes", tuple(
                integer(size, _fail(f"layer_weight_bytes[{index}]"))
                for index, size in enumerate(self.layer_weight_bytes)))
            total = sum(self.layer_weight_bytes)
            if total != self.model_weight_bytes:
                raise _invalid(
                    "layer_weight_bytes",
                    f"adds up to {total:,} but model_weight_bytes is "
                    f"{self.model_weight_bytes:,}",
                    total,
                )
        if not isinstance(self.kv_cache_table, tuple) or not self.kv_cache_table:
            raise _invalid("kv_cache_table", "must be a non-empty tuple of (type, bytes)",
                           self.kv_cache_table)
        seen: set[str] = set()
        entries = []
        for entry in self.kv_cache_table:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise _invalid("kv_cache_table", "entries must be (type, bytes) pairs", entry)
            cache_type, size = entry
            text(cache_type, _fail("kv_cache_table type"))
            entries.append((cache_type, integer(size, _fail(f"kv_cache_table[{cache_type}]"),
                                                minimum=0)))
            if cache_type in seen:
                raise _invalid("kv_cache_table", "lists a cache type twice", cache_type)
            seen.add(cache_type)
        object.__setattr__(self, "kv_cache_table", tuple(entries))
        table = dict(self.kv_cache_table)
        if self.kv_cache_type not in table:
            raise _invalid("kv_cache_type", f"is not in the table ({', '.join(table)})",
                           self.kv_cache_type)
        if table[self.kv_cache_type] != self.kv_bytes_per_token:
            raise _invalid(
                "kv_bytes_per_token",
                f"differs from the table's {table[self.kv_cache_type]:,} for "
                f"{self.kv_cache_type}",
                self.kv_bytes_per_token,
            )
        if not isinstance(self.notes, tuple) or not all(isinstance(n, str) for n in self.notes):
            raise _invalid("notes", "must be a tuple of strings", self.notes)
        for name in OPTIONAL_COUNTS:
            if getattr(self, name) is not None:
                # Routed expert bytes may be 0 (a dense model says so); the rest are counts.
                object.__setattr__(self, name, integer(
                    getattr(self, name), _fail(name),
                    minimum=0 if name.startswith("routed_expert") else 1))
        active = self.active_weight_bytes
        if active is not None and active > self.model_weight_bytes:
            raise _invalid("active_weight_bytes",
                           f"exceeds model_weight_bytes {self.model_weight_bytes:,}", active)
        if (self.expert_count is None) != (self.experts_used is None):
            raise _invalid("experts_used", "and expert_count go together", self.experts_used)
        if (self.expert_count is not None and self.experts_used is not None
                and self.experts_used > self.expert_count):
            raise _invalid("experts_used", f"exceeds expert_count {self.expert_count}",
                           self.experts_used)
        for smaller, larger in (("active_parameter_count", "parameter_count"),
                                ("token_embedding_bytes", "model_weight_bytes"),
                                ("routed_expert_bytes", "model_weight_bytes"),
                                ("routed_expert_parameters", "parameter_count"),
                                ("output_head_parameters", "active_parameter_count")):
            low, high = getattr(self, smaller), getattr(self, larger)
            if low is not None and high is not None and low > high:
                raise _invalid(smaller, f"exceeds {larger} {high:,}", low)
        self._check_attention()
        self._check_layer_costs(table)

    def _check_attention(self) -> None:
        for name, most in ATTENTION_FIELDS.items():
            if getattr(self, name) is not None:
                object.__setattr__(self, name, integer(getattr(self, name), _fail(name),
                                                       minimum=1, maximum=most))
        heads, size = self.attention_heads, self.head_size
        if heads is not None and size is not None and heads * size > MAX_ATTENTION_WIDTH:
            raise _invalid("head_size", f"times attention_heads {heads:,} exceeds "
                           f"{MAX_ATTENTION_WIDTH:,}", size)
        if heads is not None and self.kv_heads is not None and self.kv_heads > heads:
            raise _invalid("kv_heads", f"exceeds attention_heads {heads:,}", self.kv_heads)
        windowed = self.sliding_window_layers
        if (self.sliding_window is None) != (windowed is None):
            raise _invalid("sliding_window_layers", "and sliding_window go together",
                           windowed)
        if windowed is not None and windowed > self.layer_count:
            raise _invalid("sliding_window_layers", f"exceeds layer_count "
                           f"{self.layer_count:,}", windowed)
        if self.rope_head_size is not None and self.kv_lora_rank is None:
            raise _invalid("rope_head_size", "is latent attention's and needs kv_lora_rank",
                           self.rope_head_size)

    def _check_layer_costs(self, table: Mapping[str, int]) -> None:
        layer_table = []
        for cache_type, sizes in self.layer_kv_table:
            name = f"layer_kv_table[{cache_type}]"
            if cache_type not in table:
                raise _invalid(name, "names a cache type the KV table lacks", cache_type)
            if not isinstance(sizes, tuple | list) or len(sizes) != self.layer_count:
                raise _invalid(name, f"needs one entry per layer ({self.layer_count})", sizes)
            sizes = tuple(integer(size, _fail(name), minimum=0) for size in sizes)
            if sum(sizes) != table[cache_type]:
                raise _invalid(name, f"adds up to {sum(sizes):,}, not the table's "
                               f"{table[cache_type]:,}", sum(sizes))
            layer_table.append((cache_type, sizes))
        object.__setattr__(self, "layer_kv_table", tuple(layer_table))
        state = self.layer_state_bytes_per_sequence
        if state is not None:
            if not isinstance(state, tuple | list) or len(state) != self.layer_count:
                raise _invalid("layer_state_bytes_per_sequence",
                               f"needs one entry per layer ({self.layer_count})", state)
            object.__setattr__(self, "layer_state_bytes_per_sequence", tuple(
                integer(size, _fail("layer_state_bytes_per_sequence"), minimum=0)
                for size in state))

    @property
    def layer_kv_bytes_per_token(self) -> tuple[int, ...] | None:
        """Each layer's KV bytes per token at ``kv_cache_type``, where layers differ."""
        return dict(self.layer_kv_table).get(self.kv_cache_type)

    @property
    def kv_bytes_per_token_by_type(self) -> dict[str, int]:
        """KV bytes per token (all layers together) for each cache type the spec knows."""
        return dict(self.kv_cache_table)

    def with_kv_cache_type(self, kv_cache_type: str) -> ModelSpec:
        """The same model planned with another KV cache type."""
        table = self.kv_bytes_per_token_by_type
        if kv_cache_type not in table:
            raise ModelError(
                "UnknownKvCacheType",
                f"{self.name} has no KV figure for cache type {kv_cache_type!r}; known: "
                f"{', '.join(table)}",
                kv_cache_type=kv_cache_type,
                known=list(table),
            )
        return replace(self, kv_cache_type=kv_cache_type,
                       kv_bytes_per_token=table[kv_cache_type])

    def stored_in(self, file_bytes: int) -> ModelSpec:
        """The same model stored in ``file_bytes`` bytes, as a GGUF file of other
        precisions than the spec's stores it (a preset's Q8_0 weights in a Q4_K_M file):
        every weight figure (``model_weight_bytes``, each layer's, the bytes one token
        reads, the token embeddings, the routed experts) scaled by ``file_bytes /
        model_weight_bytes``, so each part keeps its share; the parameters, the shape and
        the KV cache do not change. Raises :class:`ModelError` (field ``file_bytes``) for
        a size that is not a whole number of bytes from 1 to :data:`MAX_BYTES`, that
        cannot hold the model's layers, or that stores its parameters outside
        [:data:`MIN_BITS_PER_PARAMETER`, :data:`MAX_BITS_PER_PARAMETER`] bits each."""
        size = integer(file_bytes, _fail("file_bytes"), minimum=1, maximum=MAX_BYTES)
        if self.parameter_count is not None:
            bits = size * 8 / self.parameter_count
            if not MIN_BITS_PER_PARAMETER <= bits <= MAX_BITS_PER_PARAMETER:
                raise _invalid("file_bytes", f"a file of {size:,} bytes cannot hold "
                               f"{self.name}: its {self.parameter_count:,} parameters "
                               f"would be {bits:.3g} bits each, outside "
                               f"[{MIN_BITS_PER_PARAMETER}, {MAX_BITS_PER_PARAMETER}]", size)
        scale = size / self.model_weight_bytes

        def scaled(value: int | None) -> int | None:
            return None if value is None else min(size, max(1, round(value * scale)))

        layers = None
        if self.layer_weight_bytes is not None:
            shares = [max(0, round(weight * scale)) for weight in self.layer_weight_bytes]
            shares[-1] += size - sum(shares)
            if shares[-1] < 0:
                raise _invalid("file_bytes", f"a file of {size:,} bytes cannot hold "
                               f"{self.name}'s layers", size)
            layers = tuple(shares)
        embedding = scaled(self.token_embedding_bytes)
        routed = self.routed_expert_bytes
        note = (f"weights: stored in a file of {format_bytes(size)}, every part scaled from "
                f"its own {format_bytes(self.model_weight_bytes)}")
        return replace(self, model_weight_bytes=size, layer_weight_bytes=layers,
                       notes=(*self.notes, note),
                       active_weight_bytes=scaled(self.active_weight_bytes),
                       token_embedding_bytes=(None if embedding is None or embedding >= size
                                              else embedding),
                       routed_expert_bytes=(None if routed is None
                                            else min(size, round(routed * scale))))

    def planning_fields(self) -> dict[str, Any]:
        """The model's part of a planning request (docs/rules.md §1 names)."""
        return {
            "native_context_length": self.native_context_length,
            "layer_count": self.layer_count,
            "model_weight_bytes": self.model_weight_bytes,
            "layer_weight_bytes": (
                list(self.layer_weight_bytes) if self.layer_weight_bytes is not None else None
            ),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            # Where layers differ (hybrid, windowed or recurrent models), each layer's own;
            # a model that caches nothing per token (mamba, rwkv) states 0 for each layer.
            "layer_kv_bytes_per_token": (
                list(self.layer_kv_bytes_per_token)
                if self.layer_kv_bytes_per_token is not None
                else [0] * self.layer_count if self.kv_bytes_per_token == 0 else None),
            "layer_state_bytes_per_sequence": (
                list(self.layer_state_bytes_per_sequence)
                if self.layer_state_bytes_per_sequence is not None else None),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "architecture": self.architecture,
            "layer_count": self.layer_count,
            "native_context_length": self.native_context_length,
            "model_weight_bytes": self.model_weight_bytes,
            "layer_weight_bytes": (
                list(self.layer_weight_bytes) if self.layer_weight_bytes is not None else None
            ),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_type": self.kv_cache_type,
            "kv_bytes_per_token_by_type": self.kv_bytes_per_token_by_type,
            "source": self.source,
            "notes": list(self.notes),
            "hidden_size": self.hidden_size,
            "active_weight_bytes": self.active_weight_bytes,
            "layer_kv_bytes_per_token_by_type": {
                cache_type: list(sizes) for cache_type, sizes in self.layer_kv_table},
            "layer_state_bytes_per_sequence": (
                list(self.layer_state_bytes_per_sequence)
                if self.layer_state_bytes_per_sequence is not None else None),
            **{name: getattr(self, name) for name in OPTIONAL_COUNTS[2:]},
            **{name: getattr(self, name) for name in ATTENTION_FIELDS},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        if not isinstance(data, Mapping):
            raise _invalid("model spec", "must be a mapping", data)
        required = ("name", "architecture", "layer_count", "native_context_length",
                    "model_weight_bytes", "kv_bytes_per_token", "kv_cache_type",
                    "kv_bytes_per_token_by_type", "source")
        optional = ("layer_weight_bytes", "notes", *OPTIONAL_COUNTS, *ATTENTION_FIELDS,
                    "layer_kv_bytes_per_token_by_type", "layer_state_bytes_per_sequence")
        for key in required:
            if key not in data:
                raise _invalid(key, "is required", None)
        for key in data:
            if key not in required + optional:
                raise _invalid(key, f"unknown field; expected {', '.join(required + optional)}",
                               data[key])
        layers = data.get("layer_weight_bytes")
        if layers is not None and not isinstance(layers, list | tuple):
            raise _invalid("layer_weight_bytes", "must be a list or null", layers)
        table = data["kv_bytes_per_token_by_type"]
        if not isinstance(table, Mapping):
            raise _invalid("kv_bytes_per_token_by_type", "must be a mapping", table)
        notes = data.get("notes", [])
        if not isinstance(notes, list | tuple):
            raise _invalid("notes", "must be a list of strings", notes)
        return cls(
            name=data["name"],
            architecture=data["architecture"],
            layer_count=data["layer_count"],
            native_context_length=data["native_context_length"],
            model_weight_bytes=data["model_weight_bytes"],
            layer_weight_bytes=tuple(layers) if layers is not None else None,
            kv_bytes_per_token=data["kv_bytes_per_token"],
            kv_cache_type=data["kv_cache_type"],
            kv_cache_table=tuple((str(k), v) for k, v in table.items()),
            source=data["source"],
            notes=tuple(notes),
            **{name: data.get(name) for name in OPTIONAL_COUNTS},
            **{name: data.get(name) for name in ATTENTION_FIELDS},
            layer_kv_table=_layer_table(data.get("layer_kv_bytes_per_token_by_type") or {}),
            layer_state_bytes_per_sequence=(
                tuple(data["layer_state_bytes_per_sequence"])
                if data.get("layer_state_bytes_per_sequence") is not None else None),
        )


def _layer_table(data: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if not isinstance(data, Mapping):
        raise _invalid("layer_kv_bytes_per_token_by_type", "must be a mapping", data)
    return tuple((str(key), tuple(value) if isinstance(value, list | tuple) else value)
                 for key, value in data.items())


def _bytes(value: int) -> str:
    return f"{format_bytes(value)} ({value:,} B)"


def describe_model(spec: ModelSpec) -> str:
    """A multi-line, human-readable summary of a model spec."""
    lines = [
        f"{spec.name}",
        f"  architecture          {spec.architecture}",
        f"  source                {spec.source}",
        f"  layers                {spec.layer_count}",
        f"  native context        {spec.native_context_length:,} tokens",
        f"  weights               {_bytes(spec.model_weight_bytes)}",
    ]
    if spec.layer_weight_bytes is not None:
        sizes = spec.layer_weight_bytes
        lines.append(
            f"  per-layer weights     min {format_bytes(min(sizes))}, "
            f"max {format_bytes(max(sizes))}, first {format_bytes(sizes[0])}, "
            f"last {format_bytes(sizes[-1])}"
        )
    else:
        lines.append("  per-layer weights     not known; planned as an even split")
    lines.append(
        f"  KV cache              {spec.kv_cache_type}: {spec.kv_bytes_per_token:,} B per token "
        f"({_bytes(spec.kv_bytes_per_token * spec.native_context_length)} at native context)"
    )
    per_layer = spec.layer_kv_bytes_per_token
    if per_layer is not None and 0 in per_layer:
        lines.append(f"  KV layers             {sum(1 for size in per_layer if size)} of "
                     f"{spec.layer_count} layers grow with the context")
    state = spec.layer_state_bytes_per_sequence
    if state is not None and any(state):
        lines.append(f"  recurrent state       {sum(1 for size in state if size)} of "
                     f"{spec.layer_count} layers, {_bytes(sum(state))} per sequence, "
                     f"whatever the context")
    if spec.active_weight_bytes is not None and \
            spec.active_weight_bytes != spec.model_weight_bytes:
        lines.append(f"  read per token        {_bytes(spec.active_weight_bytes)}")
    others = ", ".join(
        f"{cache_type} {size:,}" for cache_type, size in spec.kv_cache_table
        if cache_type != spec.kv_cache_type
    )
    if others:
        lines.append(f"  other cache types     {others} (B per token)")
    if spec.notes:
        lines.append("  notes")
        lines.extend(f"    - {note}" for note in spec.notes)
    return "\n".join(lines)
