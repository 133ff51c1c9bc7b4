"""A model's :class:`~planner.models.spec.ModelSpec` built from its GGUF file's header and
tensor table (read by :mod:`planner.models.gguf_file`; no tensor data is read).

Where the weights are counted:

- ``model_weight_bytes`` is the size of every tensor in the model, all shards together;
- ``layer_weight_bytes[j]`` is the size of the ``blk.j.*`` tensors, plus the tensors
  outside the blocks: input-side ones (``token_embd*``, ``position_embd``, ``token_types``,
  ``per_layer_token_embd``) are added to the first layer, every other one (``output``,
  ``output_norm``, rope tables, ...) to the last layer. ``sum(layer_weight_bytes) ==
  model_weight_bytes``. The notes give the sizes moved; llama.cpp keeps the token
  embedding in host memory, so counting it on the first stage is conservative;
- ``active_weight_bytes`` is what one decode step reads (see :func:`active_weight_bytes`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from planner._validate import integer, is_integral
from planner.limits import DEFAULT_CACHE_TYPE, MAX_LAYERS
from planner.models.gguf_file import (
    SHARD_NAME,
    SkippedValue,
    TensorEntry,
    invalid_key,
    read_shards,
)
from planner.models.kv_cache import KvLayout, check_cache_type, layout_from_gguf
from planner.models.spec import ModelError, ModelSpec
from planner.units import format_bytes

BLOCK_TENSOR = re.compile(r"^blk\.(?P<layer>\d+)\.")
INPUT_TENSOR_PREFIXES = ("token_embd", "position_embd", "token_types", "per_layer_token_embd")


def _required(metadata: Mapping[str, Any], key: str, where: Path) -> Any:
    value = metadata.get(key)
    if value is None:
        raise ModelError("MissingGgufKey", f"{where}: GGUF key {key!r} is missing",
                         file=str(where), key=key)
    return value


def _positive(metadata: Mapping[str, Any], key: str, where: Path) -> int:
    return integer(_required(metadata, key, where), invalid_key(where, key), minimum=1)


def _check_layer_count(layer_count: int, key: str, where: Path) -> None:
    """A block count is used to size per-layer tables: bound it before that."""
    if layer_count > MAX_LAYERS:
        raise ModelError("InvalidGguf", f"{where}: GGUF key {key!r} declares "
                         f"{layer_count:,} layers; the planner handles at most "
                         f"{MAX_LAYERS:,}", file=str(where), key=key)


def layer_weights(tensors: Iterable[TensorEntry], layer_count: int,
                  where: Path) -> tuple[tuple[int, ...], int, int]:
    """Per-layer bytes with the non-block tensors folded in, plus the bytes moved to the
    first and to the last layer."""
    per_layer = [0] * layer_count
    to_first = 0
    to_last = 0
    for tensor in tensors:
        match = BLOCK_TENSOR.match(tensor.name)
        if match is not None:
            layer = int(match["layer"])
            if layer >= layer_count:
                raise ModelError(
                    "InvalidGguf",
                    f"{where}: tensor {tensor.name!r} belongs to layer {layer}, but the model "
                    f"declares {layer_count} layers",
                    file=str(where), tensor=tensor.name,
                )
            per_layer[layer] += tensor.n_bytes
        elif tensor.name.startswith(INPUT_TENSOR_PREFIXES):
            to_first += tensor.n_bytes
        else:
            to_last += tensor.n_bytes
    per_layer[0] += to_first
    per_layer[-1] += to_last
    return tuple(per_layer), to_first, to_last


def from_gguf(path: str | Path, kv_cache_type: str = DEFAULT_CACHE_TYPE) -> ModelSpec:
    """Planner inputs for the GGUF model at ``path`` (any shard of a split model)."""
    check_cache_type(kv_cache_type)
    headers = read_shards(path)
    first = headers[0]
    where = first.path
    metadata = first.metadata
    architecture = _required(metadata, "general.architecture", where)
    if not isinstance(architecture, str) or not architecture:
        raise ModelError("InvalidGguf", f"{where}: GGUF key 'general.architecture' must be a "
                         f"name (got {architecture!r})", file=str(where),
                         key="general.architecture")
    layer_count = _positive(metadata, f"{architecture}.block_count", where)
    _check_layer_count(layer_count, f"{architecture}.block_count", where)
    native_context = _positive(metadata, f"{architecture}.context_length", where)
    layout = layout_from_gguf(architecture, metadata, layer_count, str(where))
    table = layout.table()
    table_types = [cache_type for cache_type, _ in table]
    if kv_cache_type not in table_types:
        raise ModelError(
            "IncompatibleKvCacheType",
            f"{where}: this model's cache rows cannot be stored as {kv_cache_type}; "
            f"possible: {', '.join(table_types)}",
            file=str(where), kv_cache_type=kv_cache_type,
        )
    tensors = [tensor for header in headers for tensor in header.tensors]
    if not tensors:
        raise ModelError("InvalidGguf", f"{where}: the model has no tensors", file=str(where))
    per_layer, to_first, to_last = layer_weights(tensors, layer_count, where)
    total = sum(tensor.n_bytes for tensor in tensors)
    if total == 0:
        raise ModelError("InvalidGguf", f"{where}: the model's {len(tensors)} tensors hold no "
                         "elements", file=str(where))
    notes = [
        f"model_weight_bytes counts all {len(tensors)} tensors; tensors outside the blocks "
        f"are counted in layer_weight_bytes: {format_bytes(to_first)} of input tensors "
        f"(token_embd, which llama.cpp keeps in host memory) in layer 0 and "
        f"{format_bytes(to_last)} of output tensors (output, output_norm) in layer "
        f"{layer_count - 1}",
        *layout.notes,
    ]
    if len(headers) > 1:
        notes.insert(0, f"split model: {len(headers)} shards read as one")
    name = metadata.get("general.name")
    if not isinstance(name, str) or not name.strip():
        match = SHARD_NAME.match(where.name)
        name = match["prefix"] if match else where.stem
    table_dict = dict(table)
    active_bytes, active_note = active_weight_bytes(metadata, architecture, tensors, where)
    notes.append(active_note)
    hidden = metadata.get(f"{architecture}.embedding_length")
    return ModelSpec(
        name=name,
        architecture=architecture,
        layer_count=layer_count,
        native_context_length=native_context,
        model_weight_bytes=total,
        layer_weight_bytes=per_layer,
        kv_bytes_per_token=table_dict[kv_cache_type],
        kv_cache_type=kv_cache_type,
        kv_cache_table=table,
        source=str(where),
        notes=tuple(notes),
        hidden_size=_count(hidden),
        active_weight_bytes=active_bytes,
        layer_kv_table=_layer_kv_table(layout, table_types),
        layer_state_bytes_per_sequence=layout.layer_state_bytes_per_sequence(),
        **_speed_fields(metadata, architecture, tensors),
        **dict(layout.attention),
    )


def _elements(tensor: TensorEntry) -> int:
    count = 1
    for size in tensor.shape:
        count *= size
    return count if tensor.shape else 0


def _speed_fields(metadata: Mapping[str, Any], architecture: str,
                  tensors: Iterable[TensorEntry]) -> dict[str, int | None]:
    """What the speed estimate reads beyond bytes: the parameters (all, and those one
    token computes with: the routed experts' tensors ``experts_used / expert_count`` of
    theirs, an input embedding none, a token looking its row up), the experts, the routed
    experts' bytes, the token embeddings' (``None`` when ``token_embd`` is also the
    output head: no ``output.weight``, so every decoded token multiplies by it whole) and
    the output head's parameters (``output.weight``, else the tied ``token_embd``), which
    a prompt multiplies for its output tokens only."""
    tensors = list(tensors)
    count = _count(metadata.get(f"{architecture}.expert_count"))
    used = _count(metadata.get(f"{architecture}.expert_used_count"))
    routed = count is not None and used is not None and used <= count
    tied = not any(t.name == "output.weight" for t in tensors)
    embedding = [t for t in tensors if t.name.startswith(INPUT_TENSOR_PREFIXES)
                 and not (tied and t.name == "token_embd.weight")]
    experts = [t for t in tensors if ROUTED_EXPERT_TENSOR.match(t.name)]
    total = sum(_elements(t) for t in tensors)
    active = total - sum(_elements(t) for t in embedding)
    if routed and count is not None and used is not None:
        expert_elements = sum(_elements(t) for t in experts)
        active -= expert_elements - expert_elements * used // count
    token_embd = [t for t in embedding if t.name.startswith("token_embd")]
    head = [t for t in tensors
            if t.name == ("token_embd.weight" if tied else "output.weight")]
    return {"parameter_count": total or None, "active_parameter_count": active or None,
            "expert_count": count if routed else None,
            "experts_used": used if routed else None,
            "token_embedding_bytes": sum(t.n_bytes for t in token_embd) or None,
            "routed_expert_bytes": sum(t.n_bytes for t in experts) if routed else 0,
            "routed_expert_parameters": (sum(_elements(t) for t in experts) if routed
                                         else 0),
            "output_head_parameters": sum(_elements(t) for t in head) or None}


def _layer_kv_table(layout: KvLayout, cache_types: list[str]
                    ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Per-layer KV bytes per token for each cache type, where the layers differ (a
    uniform model keeps the design's even share)."""
    entries = []
    for cache_type in cache_types:
        sizes = layout.layer_bytes_per_token(cache_type)
        if sizes is not None and len(set(sizes)) > 1:
            entries.append((cache_type, sizes))
    return tuple(entries)


def _count(value: object) -> int | None:
    """``value`` as a positive count, or None when it is not one."""
    return operator.index(value) if is_integral(value) and operator.index(value) > 0 else None


# The routed experts' stacked tensors, which llama.cpp multiplies with GGML_OP_MUL_MAT_ID
# (llama-arch.cpp): weights, biases and scales whose last dimension is the expert.
ROUTED_EXPERT_TENSOR = re.compile(r"^blk\.\d+\.ffn_(?:gate|up|down|gate_up)_(?:ch)?exps\.")


def active_weight_bytes(metadata: Mapping[str, Any], architecture: str,
                        tensors: Iterable[TensorEntry], where: Path) -> tuple[int | None, str]:
    """Weight bytes one decode step reads, tensor by tensor, and how they were counted.

    Every tensor is read whole, except:

    - a routed experts' tensor (``ffn_{gate,up,down,gate_up}_exps``), which stacks ``E``
      experts along its last dimension: a token reads ``min(experts_used, E)`` of them,
      ``ceil(bytes x min(experts_used, E) / E)``, ``experts_used`` being
      ``{arch}.expert_used_count``;
    - an input embedding (``token_embd``, ``position_embd``, ...), of which a token reads
      one row (``GGML_OP_GET_ROWS``), counted as none; a model without ``output.weight``
      multiplies by ``token_embd`` as its output head, so that one is read whole.

    None when no tensor is read per token (a file of input tables only).
    """
    tensors = list(tensors)
    tied = not any(tensor.name == "output.weight" for tensor in tensors)
    shared = routed_total = routed_read = rows = 0
    used: int | None = None
    for tensor in tensors:
        if ROUTED_EXPERT_TENSOR.match(tensor.name):
            if used is None:
                used = _expert_used_count(metadata, architecture, tensor, where)
            experts = tensor.shape[-1] if tensor.shape else 1
            routed_total += tensor.n_bytes
            if experts:
                routed_read += -(-tensor.n_bytes * min(used, experts) // experts)
        elif tensor.name.startswith(INPUT_TENSOR_PREFIXES) and not (
                tied and tensor.name == "token_embd.weight"):
            rows += tensor.n_bytes
        else:
            shared += tensor.n_bytes
    active = shared + routed_read
    skipped = (f"; input embeddings ({format_bytes(rows)}) are read one row per token"
               if rows else "")
    if routed_total == 0:
        note = f"decode reads {active:,} weight bytes: every weight (no routed experts)"
    else:
        note = (f"decode reads {active:,} weight bytes: {shared:,} of shared tensors whole "
                f"and {routed_read:,} of the routed experts' {routed_total:,} ({used} "
                f"experts per token)")
    return (active or None), note + skipped


def _expert_used_count(metadata: Mapping[str, Any], architecture: str,
                       tensor: TensorEntry, where: Path) -> int:
    key = f"{architecture}.expert_used_count"
    used = metadata.get(key)
    if used is None:
        raise ModelError("MissingGgufKey", f"{where}: GGUF key {key!r} is missing, but "
                         f"tensor {tensor.name!r} holds routed experts (llama.cpp needs the "
                         f"experts used per token)", file=str(where), key=key)
    count = _count(used)
    if count is None:
        raise ModelError("InvalidGguf", f"{where}: GGUF key {key!r} must be a positive "
                         f"integer (got {used!r})", file=str(where), key=key)
    return count


TOKEN_LIST_KEY = "tokenizer.ggml.tokens"
# Draft models whose token_embd has a row per token of the target model's vocabulary
# (llama.cpp's eagle3.cpp: {n_embd, n_target_vocab}).
TARGET_VOCAB_ARCHITECTURES = frozenset({"eagle3"})


def token_embedding(metadata: Mapping[str, Any], tensors: Iterable[Any], architecture: str,
                    where: str | Path) -> tuple[int, int]:
    """The embedding width and the vocabulary llama.cpp builds for the model.

    The width is ``{arch}.embedding_length``. The vocabulary (``llama_vocab::load``) is the
    length of ``tokenizer.ggml.tokens``; for a file without a tokenizer,
    ``{arch}.vocab_size``, else the rows of ``token_embd``. llama.cpp creates
    ``token_embd`` as ``{embedding_length, vocabulary}`` and refuses a file whose tensor
    has another shape, so the planner does too. ``tensors`` are :class:`TensorEntry` or
    records with ``name`` (a record without a ``shape`` is not checked).
    """
    where = Path(where)
    width = _positive(metadata, f"{architecture}.embedding_length", where)
    table = next((tensor for tensor in tensors if tensor.name == "token_embd.weight"), None)
    shape = tuple(getattr(table, "shape", ()))
    if shape and (len(shape) != 2 or shape[0] != width or shape[1] == 0):
        raise ModelError(
            "InvalidGguf", f"{where}: tensor 'token_embd.weight' has shape "
            f"{list(shape)}, but GGUF key '{architecture}.embedding_length' is {width} "
            f"(llama.cpp expects [{width}, vocabulary] and refuses the file)",
            file=str(where), tensor="token_embd.weight")
    tokens = metadata.get(TOKEN_LIST_KEY)
    if tokens is not None:
        if isinstance(tokens, SkippedValue) and tokens.value_type == "array of string":
            count = tokens.length
        elif isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
            count = len(tokens)
        else:
            raise ModelError("InvalidGguf", f"{where}: GGUF key {TOKEN_LIST_KEY!r} must be an "
                             f"array of strings (got {tokens!r})", file=str(where),
                             key=TOKEN_LIST_KEY)
        if count == 0:
            raise ModelError("InvalidGguf", f"{where}: GGUF key {TOKEN_LIST_KEY!r} holds no "
                             "tokens", file=str(where), key=TOKEN_LIST_KEY)
        if shape and shape[1] != count and architecture not in TARGET_VOCAB_ARCHITECTURES:
            raise ModelError(
                "InvalidGguf", f"{where}: tensor 'token_embd.weight' has {shape[1]:,} "
                f"rows, but {TOKEN_LIST_KEY!r} holds {count:,} tokens (llama.cpp expects one "
                f"row per token and refuses the file)", file=str(where),
                tensor="token_embd.weight")
        return width, count
    key = f"{architecture}.vocab_size"
    if key in metadata:
        return width, _positive(metadata, key, where)
    if shape:
        return width, shape[1]
    raise ModelError("MissingGgufKey", f"{where}: the vocabulary size is unknown: no "
                     f"{TOKEN_LIST_KEY!r}, no GGUF key {key!r} and no token_embd tensor",
                     file=str(where), key=key)
