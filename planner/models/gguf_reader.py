"""Planner inputs read from a GGUF file's header and tensor table.

Only the metadata and the tensor table are read, memory-mapped through
``gguf.GGUFReader``; no tensor data is touched. A split model (``name-00001-of-00003.gguf``)
is read as one model from any of its shards.

Where the weights are counted:

- ``model_weight_bytes`` is the size of every tensor in the model, all shards together;
- ``layer_weight_bytes[j]`` is the size of the ``blk.j.*`` tensors, plus the tensors
  outside the blocks: input-side ones (``token_embd*``, ``position_embd``, ``token_types``,
  ``per_layer_token_embd``) are added to the first layer, every other one (``output``,
  ``output_norm``, rope tables, ...) to the last layer. ``sum(layer_weight_bytes) ==
  model_weight_bytes``. The notes give the sizes moved; llama.cpp keeps the token
  embedding in host memory, so counting it on the first stage is conservative.
"""

from __future__ import annotations

import mmap
import operator
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from planner._validate import Fail, integer, is_integral, shown
from planner.limits import DEFAULT_CACHE_TYPE, MAX_LAYERS
from planner.models.kv_cache import KvLayout, check_cache_type, layout_from_gguf
from planner.models.spec import ModelError, ModelSpec
from planner.units import format_bytes

GGUF_MAGIC = b"GGUF"
SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
BLOCK_TENSOR = re.compile(r"^blk\.(?P<layer>\d+)\.")
INPUT_TENSOR_PREFIXES = ("token_embd", "position_embd", "token_types", "per_layer_token_embd")
# Parse failures of the gguf reader that mean it ran off the end of the file.
_CORRUPT_MARKERS = ("magic", "version", "unknown/unhandled", "is not a valid", "duplicate",
                    "alignment")


# GGUF value types (the spec's gguf_type) and the bytes of each scalar one.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_READABLE_VERSIONS = (2, 3)
# Real files nest arrays at most once or twice; deeper nesting is a hostile file, and
# the gguf reader would recurse once per level.
MAX_ARRAY_DEPTH = 8
# ggml tensors have at most 4 dimensions.
MAX_TENSOR_DIMS = 8
# The smallest encodings: a key/value (empty key, a u8) and a tensor entry (empty name,
# no dimensions, type, offset); any count above size // these cannot be in the file.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8


class _LayoutWalk:
    """A bounds-checked walk over a GGUF header, before the gguf reader sees the file.

    Every count and length is checked against the bytes left in the file before it is
    used, and array nesting is bounded, so a hostile header is refused in time linear in
    the file's header, without allocating what it declares.
    """

    def __init__(self, path: Path, data: mmap.mmap | bytes, order: str) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.order = order

    def fail(self, code: str, problem: str, **details: Any) -> ModelError:
        return ModelError(code, f"{self.path}: {problem}", file=str(self.path), **details)

    def need(self, offset: int, count: int, what: str) -> None:
        if count > self.size - offset:
            raise self.fail(
                "TruncatedGguf",
                f"{what} needs {count:,} bytes at offset {offset:,}, but the file has "
                f"{max(0, self.size - offset):,} left (truncated download, or a corrupt "
                f"length field)", offset=offset)

    def unsigned(self, offset: int, width: int, what: str) -> int:
        self.need(offset, width, what)
        code = "I" if width == 4 else "Q"
        return int(struct.unpack_from(self.order + code, self.data, offset)[0])

    def count(self, offset: int, count: int, item_bytes: int, what: str) -> None:
        """Refuse ``count`` items of at least ``item_bytes`` each that cannot fit."""
        left = max(0, self.size - offset)
        if count > left // item_bytes:
            raise self.fail(
                "TruncatedGguf",
                f"{what} declares {count:,} items, but the {left:,} bytes left in the file "
                f"hold at most {left // item_bytes:,} (a corrupt length field)", offset=offset)

    def string(self, offset: int, what: str) -> int:
        length = self.unsigned(offset, 8, what)
        self.need(offset + 8, length, what)
        return offset + 8 + length

    def value(self, offset: int, kind: int, what: str, depth: int = 0) -> int:
        if kind in _SCALAR_BYTES:
            self.need(offset, _SCALAR_BYTES[kind], what)
            return offset + _SCALAR_BYTES[kind]
        if kind == _STRING:
            return self.string(offset, what)
        if kind != _ARRAY:
            raise self.fail("InvalidGguf", f"{what} has unknown value type {kind}")
        if depth >= MAX_ARRAY_DEPTH:
            raise self.fail("InvalidGguf", f"{what} nests arrays more than "
                            f"{MAX_ARRAY_DEPTH} deep")
        item_kind = self.unsigned(offset, 4, what)
        length = self.unsigned(offset + 4, 8, what)
        offset += 12
        if item_kind in _SCALAR_BYTES:
            self.count(offset, length, _SCALAR_BYTES[item_kind], what)
            return offset + length * _SCALAR_BYTES[item_kind]
        if item_kind not in (_STRING, _ARRAY):
            raise self.fail("InvalidGguf", f"{what} is an array of unknown type {item_kind}")
        # A string takes at least its 8-byte length, an array its 12-byte type and length.
        self.count(offset, length, 8 if item_kind == _STRING else 12, what)
        for _ in range(length):
            offset = self.value(offset, item_kind, what, depth + 1)
        return offset

    def walk(self) -> None:
        tensor_count = self.unsigned(8, 8, "the tensor count")
        kv_count = self.unsigned(16, 8, "the metadata count")
        self.count(24, kv_count, _MIN_KV_BYTES, "the metadata table")
        offset = 24
        for index in range(kv_count):
            end = self.string(offset, f"metadata key {index}")
            key = bytes(self.data[offset + 8:end][:200]).decode("utf-8", "replace")
            what = f"GGUF key {key!r}"
            kind = self.unsigned(end, 4, what)
            offset = self.value(end + 4, kind, what)
        self.count(offset, tensor_count, _MIN_TENSOR_BYTES, "the tensor table")
        for index in range(tensor_count):
            what = f"tensor {index}"
            offset = self.string(offset, what)
            dims = self.unsigned(offset, 4, what)
            if dims > MAX_TENSOR_DIMS:
                raise self.fail("InvalidGguf", f"{what} declares {dims:,} dimensions "
                                f"(ggml tensors have at most 4)")
            offset += 4 + 8 * dims + 4 + 8
            self.need(offset, 0, what)


def _check_layout(path: Path) -> None:
    """Refuse a header whose counts or lengths do not fit in the file (see _LayoutWalk)."""
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ModelError("TruncatedGguf", f"{path}: the file ends inside the GGUF "
                             "version", file=str(path))
        little = struct.unpack("<I", head[4:8])[0]
        order = ">" if little & 0xFFFF == 0 else "<"
        if struct.unpack(order + "I", head[4:8])[0] not in _READABLE_VERSIONS:
            return  # the reader names the unsupported version
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _LayoutWalk(path, data, order).walk()


@dataclass(frozen=True, slots=True)
class TensorEntry:
    name: str
    type_name: str
    n_bytes: int


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """One file's metadata (as plain Python values) and tensor table."""

    path: Path
    metadata: Mapping[str, Any]
    tensors: tuple[TensorEntry, ...]


def _check_magic(path: Path) -> None:
    if not path.exists():
        raise ModelError("GgufNotFound", f"{path}: no such file", file=str(path))
    if not path.is_file():
        raise ModelError("NotGguf", f"{path}: not a regular file", file=str(path))
    with path.open("rb") as handle:
        magic = handle.read(4)
    if len(magic) < 4:
        if GGUF_MAGIC.startswith(magic) and magic:
            raise ModelError("TruncatedGguf", f"{path}: file ends inside the GGUF magic",
                             file=str(path))
        raise ModelError("NotGguf", f"{path}: file is empty or too short to be GGUF",
                         file=str(path))
    if magic != GGUF_MAGIC:
        raise ModelError(
            "NotGguf", f"{path}: not a GGUF file (starts with {magic!r}, expected b'GGUF')",
            file=str(path),
        )


def _field_value(field: Any) -> Any:
    value = field.contents()
    if hasattr(value, "item"):
        value = value.item()
    return value


def read_header(path: Path) -> GgufHeader:
    """Parse one GGUF file's header and tensor table (memory-mapped).

    Parsing a large vocabulary takes seconds, so headers are cached per file path, size
    and modification time.
    """
    try:
        _check_magic(path)
        status = path.stat()
        return _read_header_cached(path, status.st_size, status.st_mtime_ns)
    except OSError as error:
        # No read permission, or a file that exists but cannot be read (/proc/self/mem,
        # a failing disk): the user can act on the reason, not on a traceback.
        reason = error.strerror or type(error).__name__
        raise ModelError("UnreadableGguf", f"{path}: cannot be read: {reason}",
                         file=str(path), reason=reason) from None


@lru_cache(maxsize=32)
def _read_header_cached(path: Path, size: int, mtime_ns: int) -> GgufHeader:
    from gguf import GGUFReader

    _check_layout(path)
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, IndexError, KeyError, OverflowError, TypeError) as exc:
        text = str(exc)
        lowered = text.lower()
        if "version" in lowered and "handle" in lowered:
            raise ModelError("UnsupportedGgufVersion", f"{path}: {text}",
                             file=str(path)) from None
        if any(marker in lowered for marker in _CORRUPT_MARKERS):
            raise ModelError("InvalidGguf", f"{path}: malformed GGUF header: {text}",
                             file=str(path)) from None
        raise ModelError(
            "TruncatedGguf",
            f"{path}: the file ends before the header, tensor table or tensor data it "
            f"declares (truncated download, or a corrupt length field)",
            file=str(path), reader_error=text,
        ) from None
    metadata: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key.startswith("tokenizer."):
            continue
        try:
            metadata[key] = _field_value(field)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ModelError("InvalidGguf", f"{path}: GGUF key {key!r} cannot be read: {exc}",
                             file=str(path), key=key) from None
    tensors = tuple(
        TensorEntry(tensor.name, tensor.tensor_type.name, int(tensor.n_bytes))
        for tensor in reader.tensors
    )
    return GgufHeader(path=path, metadata=MappingProxyType(metadata), tensors=tensors)


def _split_count(header: GgufHeader) -> int:
    count = header.metadata.get("split.count")
    if count is None:
        return 1
    return integer(count, _bad_key(header.path, "split.count"), minimum=1)


def read_shards(path: str | Path) -> list[GgufHeader]:
    """The headers of a model's shards in order, given any one of them."""
    given_path = Path(path)
    given = read_header(given_path)
    count = _split_count(given)
    if count == 1:
        return [given]
    match = SHARD_NAME.match(given_path.name)
    if match is None or int(match["count"]) != count:
        raise ModelError(
            "MissingGgufShard",
            f"{given_path}: the file is shard of a {count}-part split model but its name does "
            f"not follow NAME-0000i-of-{count:05d}.gguf, so the other shards cannot be found",
            file=str(given_path),
        )
    shard_paths = [
        given_path.with_name(f"{match['prefix']}-{index:05d}-of-{count:05d}.gguf")
        for index in range(1, count + 1)
    ]
    missing = [str(p) for p in shard_paths if not p.exists()]
    if missing:
        raise ModelError(
            "MissingGgufShard",
            f"{given_path}: split model of {count} shards is missing {', '.join(missing)}",
            file=str(given_path), missing=missing,
        )
    headers = [given if p == given_path else read_header(p) for p in shard_paths]
    for index, header in enumerate(headers):
        number = header.metadata.get("split.no")
        if number != index or _split_count(header) != count:
            raise ModelError(
                "InvalidGguf",
                f"{header.path}: expected shard {index} of {count}, the file says shard "
                f"{number!r} of {header.metadata.get('split.count')!r}",
                file=str(header.path), key="split.no",
            )
    declared = headers[0].metadata.get("split.tensors.count")
    found = sum(len(header.tensors) for header in headers)
    if declared is not None and declared != found:
        raise ModelError(
            "InvalidGguf",
            f"{headers[0].path}: the split declares {declared} tensors but its {count} shards "
            f"hold {found}",
            file=str(headers[0].path), key="split.tensors.count",
        )
    return headers


def _required(metadata: Mapping[str, Any], key: str, where: Path) -> Any:
    value = metadata.get(key)
    if value is None:
        raise ModelError("MissingGgufKey", f"{where}: GGUF key {key!r} is missing",
                         file=str(where), key=key)
    return value


def _positive(metadata: Mapping[str, Any], key: str, where: Path) -> int:
    return integer(_required(metadata, key, where), _bad_key(where, key), minimum=1)


def _bad_key(where: Path, key: str) -> Fail:
    return lambda problem, value: ModelError(
        "InvalidGguf", f"{where}: GGUF key {key!r} {problem} (got {shown(value)})",
        file=str(where), key=key)


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
    active_bytes, active_note = _active_weight_bytes(metadata, architecture, tensors, total)
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
    )


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


def _active_weight_bytes(metadata: Mapping[str, Any], architecture: str,
                         tensors: list[TensorEntry], total: int) -> tuple[int, str]:
    """Weight bytes one decode step reads: every tensor, except that of the stacked expert
    tensors (``*_exps``) only ``expert_used_count / expert_count`` is read."""
    count = _count(metadata.get(f"{architecture}.expert_count"))
    used = _count(metadata.get(f"{architecture}.expert_used_count"))
    expert_bytes = sum(t.n_bytes for t in tensors if "_exps" in t.name)
    if count is None or used is None or expert_bytes == 0 or used >= count:
        return total, "decode reads every weight (no routed experts)"
    share = total - expert_bytes + -(-expert_bytes * used // count)
    return share, (f"decode reads {share:,} of {total:,} weight bytes: {used} of {count} "
                   "experts per token")
