"""Planner inputs read from a GGUF file's header and tensor table.

One bounded walk reads the header (ggml's GGUF format, ``docs/gguf.md`` in ggml), makes
the checks llama.cpp's own reader makes (``ggml/src/gguf.cpp``), and builds only what
the planner may use: every scalar, short strings, and small arrays outside
``tokenizer.*``. Longer values are stepped over: an array of numbers in one seek, an
array of strings one length at a time, so a 262,144-token vocabulary costs a loop over
its lengths and no objects. A value stepped over is a :class:`SkippedValue` that
says what it was. No tensor data is read. A split model (``name-00001-of-00003.gguf``)
is read as one model from any of its shards.

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
from planner.limits import (
    DEFAULT_CACHE_TYPE,
    GGUF_BUILD_BUDGET_BYTES,
    MAX_GGUF_KEY_BYTES,
    MAX_GGUF_KEYS,
    MAX_GGUF_TENSORS,
    MAX_LAYERS,
)
from planner.models.kv_cache import KvLayout, check_cache_type, layout_from_gguf
from planner.models.spec import ModelError, ModelSpec
from planner.units import format_bytes

GGUF_MAGIC = b"GGUF"
SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
BLOCK_TENSOR = re.compile(r"^blk\.(?P<layer>\d+)\.")
INPUT_TENSOR_PREFIXES = ("token_embd", "position_embd", "token_types", "per_layer_token_embd")
READABLE_VERSIONS = (2, 3)

# GGUF value types (gguf_type) and the struct code of each scalar one.
_SCALAR_CODES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
VALUE_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32",
                    5: "int32", 6: "float32", 7: "bool", 8: "string", 9: "array",
                    10: "uint64", 11: "int64", 12: "float64"}

# ggml types a tensor may have: name, elements per block, bytes per block (ggml.c's
# type_traits at llama.cpp b11434; types 4, 5 and 31-33, 36-38 were removed from GGUF).
GGML_TYPES: Mapping[int, tuple[str, int, int]] = MappingProxyType({
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
    42: ("Q2_0", 64, 18),
})

# Limits of llama.cpp's reader (gguf.cpp, ggml.h) ...
MAX_STRING_BYTES = 2**30  # GGUF_MAX_STRING_LENGTH
MAX_ARRAY_ITEMS = 2**30  # GGUF_MAX_ARRAY_ELEMENTS
MAX_TENSOR_DIMS = 4  # GGML_MAX_DIMS
MAX_TENSOR_NAME_BYTES = 63  # GGML_MAX_NAME - 1
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
# ... and the planner's own (planner.limits): MAX_GGUF_KEYS, MAX_GGUF_KEY_BYTES,
# MAX_GGUF_TENSORS, and GGUF_BUILD_BUDGET_BYTES, the budget for building strings longer
# than this and the items of arrays outside tokenizer.*:
SHORT_STRING_BYTES = 256
_ITEM_COST = 64  # bytes a built Python number or string costs beside its text
# The smallest encodings: a key/value (empty key, a u8) and a tensor entry (empty name,
# no dimensions, type, offset); any count above size // these cannot be in the file.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SkippedValue:
    """A metadata value the walk stepped over without building it."""

    value_type: str
    """``string``, or ``array of <item type>``."""
    length: int
    """Bytes of a string, items of an array."""

    def __repr__(self) -> str:
        unit = "bytes" if self.value_type == "string" else "items"
        return f"<{self.value_type} of {self.length:,} {unit}, not read>"


@dataclass(frozen=True, slots=True)
class TensorEntry:
    name: str
    type_name: str
    n_bytes: int
    shape: tuple[int, ...] = ()
    """ggml order: ``shape[0]`` is the length of a row (ne[0])."""
    offset: int = 0
    """Where the tensor's data starts within the data section."""


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """One file's metadata (plain Python values or :class:`SkippedValue`) and tensors."""

    path: Path
    metadata: Mapping[str, Any]
    tensors: tuple[TensorEntry, ...]
    version: int = 3
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0
    """Where the data section starts in the file."""


def _pad(value: int, to: int) -> int:
    return -(-value // to) * to


class _Walk:
    """The bounds-checked walk over one GGUF header.

    Every count and length is checked against the bytes left in the file before it is
    used, so a hostile header is refused in time linear in the header's size, without
    allocating what it declares.
    """

    def __init__(self, path: Path, data: mmap.mmap, order: str) -> None:
        self.path = path
        self.data = data
        self.size = len(data)
        self.order = order
        self.u32 = struct.Struct(order + "I").unpack_from
        self.u64 = struct.Struct(order + "Q").unpack_from
        self.budget = GGUF_BUILD_BUDGET_BYTES

    def fail(self, code: str, problem: str, **details: Any) -> ModelError:
        return ModelError(code, f"{self.path}: {problem}", file=str(self.path), **details)

    def invalid(self, problem: str, **details: Any) -> ModelError:
        return self.fail("InvalidGguf", problem, **details)

    def need(self, offset: int, count: int, what: str) -> None:
        if count > self.size - offset:
            raise self.fail(
                "TruncatedGguf",
                f"{what} needs {count:,} bytes at offset {offset:,}, but the file has "
                f"{max(0, self.size - offset):,} left (truncated download, or a corrupt "
                f"length field)", offset=offset)

    def fits(self, offset: int, count: int, item_bytes: int, what: str) -> None:
        """Refuse ``count`` items of at least ``item_bytes`` each that cannot fit."""
        left = max(0, self.size - offset)
        if count > left // item_bytes:
            raise self.fail(
                "TruncatedGguf",
                f"{what} declares {count:,} items, but the {left:,} bytes left in the file "
                f"hold at most {left // item_bytes:,} (a corrupt length field)", offset=offset)

    def unsigned(self, offset: int, width: int, what: str) -> int:
        self.need(offset, width, what)
        return int((self.u32 if width == 4 else self.u64)(self.data, offset)[0])

    def string(self, offset: int, what: str) -> int:
        """The offset of a string's text; its end is ``offset + 8 + length``."""
        length = self.unsigned(offset, 8, what)
        self.need(offset + 8, length, what)
        if length > MAX_STRING_BYTES:
            raise self.invalid(f"{what} is a string of {length:,} bytes; llama.cpp reads at "
                               f"most {MAX_STRING_BYTES:,}")
        return length

    def name(self, offset: int, what: str, longest: int, holds: str) -> tuple[str, int]:
        """A key's or a tensor's name, and where it ends."""
        length = self.string(offset, what)
        if length > longest:
            raise self.invalid(f"{what} is {length:,} bytes long; {holds} at most {longest:,}")
        return self.text(offset + 8, length), offset + 8 + length

    def text(self, offset: int, length: int) -> str:
        return self.data[offset:offset + length].decode("utf-8", "replace")

    def skip_strings(self, offset: int, count: int, what: str) -> tuple[int, int]:
        """Step over ``count`` strings: their end and the bytes of their text."""
        data, u64, size, start = self.data, self.u64, self.size, offset
        try:
            for _ in range(count):
                offset += 8 + u64(data, offset)[0]
                if offset > size:
                    break
        except struct.error:
            offset = size + 1
        if offset > size:
            raise self.fail("TruncatedGguf", f"{what}: its strings run past the end of the "
                            f"file (truncated download, or a corrupt length field)")
        return offset, offset - start - 8 * count

    def array(self, offset: int, key: str, what: str) -> tuple[Any, int]:
        item_type = self.unsigned(offset, 4, what)
        count = self.unsigned(offset + 4, 8, what)
        offset += 12
        if item_type == _ARRAY:
            raise self.invalid(f"{what} is an array of arrays, which llama.cpp does not read",
                               key=key)
        if item_type not in VALUE_TYPE_NAMES:
            raise self.invalid(f"{what} is an array of unknown value type {item_type}",
                               key=key)
        code = _SCALAR_CODES.get(item_type)
        item_bytes = 8 if code is None else struct.calcsize(code)
        self.fits(offset, count, item_bytes, what)
        if count > MAX_ARRAY_ITEMS:
            raise self.invalid(f"{what} declares {count:,} items; llama.cpp reads at most "
                               f"{MAX_ARRAY_ITEMS:,}", key=key)
        skipped = SkippedValue(f"array of {VALUE_TYPE_NAMES[item_type]}", count)
        build = not key.startswith("tokenizer.")
        if code is not None:
            end = offset + count * item_bytes
            if not build or count * _ITEM_COST > self.budget:
                return skipped, end
            self.budget -= count * _ITEM_COST
            return list(struct.unpack_from(f"{self.order}{count}{code}", self.data,
                                           offset)), end
        end, text_bytes = self.skip_strings(offset, count, what)
        cost = text_bytes + count * _ITEM_COST
        if not build or cost > self.budget:
            return skipped, end
        self.budget -= cost
        items = []
        for _ in range(count):
            length = self.u64(self.data, offset)[0]
            items.append(self.text(offset + 8, length))
            offset += 8 + length
        return items, end

    def value(self, offset: int, kind: int, key: str, what: str) -> tuple[Any, int]:
        code = _SCALAR_CODES.get(kind)
        if code is not None:
            width = struct.calcsize(code)
            self.need(offset, width, what)
            return struct.unpack_from(self.order + code, self.data, offset)[0], offset + width
        if kind == _STRING:
            length = self.string(offset, what)
            end = offset + 8 + length
            if length <= SHORT_STRING_BYTES:
                return self.text(offset + 8, length), end
            if length + _ITEM_COST > self.budget:
                return SkippedValue("string", length), end
            self.budget -= length + _ITEM_COST
            return self.text(offset + 8, length), end
        if kind == _ARRAY:
            return self.array(offset, key, what)
        raise self.invalid(f"{what} has unknown value type {kind}", key=key)

    def metadata(self, offset: int, count: int) -> tuple[dict[str, Any], int, int]:
        """The key/value pairs, where they end, and the key type of general.alignment."""
        self.fits(offset, count, _MIN_KV_BYTES, "the metadata table")
        if count > MAX_GGUF_KEYS:
            raise self.invalid(f"the metadata table declares {count:,} keys; the planner "
                               f"reads at most {MAX_GGUF_KEYS:,} (real models have dozens)")
        values: dict[str, Any] = {}
        alignment_type = -1
        for index in range(count):
            key, offset = self.name(offset, f"metadata key {index}", MAX_GGUF_KEY_BYTES,
                                    "the planner reads keys")
            if not key:
                raise self.invalid(f"metadata key {index} is empty")
            what = f"GGUF key {key[:200]!r}"
            if key in values:
                raise self.invalid(f"{what} appears twice", key=key)
            kind = self.unsigned(offset, 4, what)
            if key == "general.alignment":
                alignment_type = kind
            values[key], offset = self.value(offset + 4, kind, key, what)
        return values, offset, alignment_type

    def alignment(self, values: Mapping[str, Any], alignment_type: int) -> int:
        if alignment_type == -1:
            return DEFAULT_ALIGNMENT
        value = values["general.alignment"]
        if alignment_type != 4:
            raise self.invalid(f"GGUF key 'general.alignment' must be a uint32 (got a "
                               f"{VALUE_TYPE_NAMES.get(alignment_type, alignment_type)})",
                               key="general.alignment")
        if value == 0 or value & (value - 1):
            raise self.invalid(f"GGUF key 'general.alignment' must be a power of two (got "
                               f"{value})", key="general.alignment")
        return int(value)

    def tensor(self, offset: int, index: int, names: set[str]) -> tuple[TensorEntry, int]:
        name, offset = self.name(offset, f"tensor {index}'s name", MAX_TENSOR_NAME_BYTES,
                                 "ggml names hold")
        what = f"tensor {index} ({name!r})"
        if name in names:
            raise self.invalid(f"{what}: the name appears twice", tensor=name)
        names.add(name)
        dims = self.unsigned(offset, 4, what)
        if dims > MAX_TENSOR_DIMS:
            raise self.invalid(f"{what} declares {dims:,} dimensions (ggml tensors have at "
                               f"most {MAX_TENSOR_DIMS})", tensor=name)
        self.need(offset + 4, 8 * dims + 12, what)
        shape = struct.unpack_from(f"{self.order}{dims}Q", self.data, offset + 4)
        offset += 4 + 8 * dims
        elements = 1
        for size in shape:
            if size > _INT64_MAX:
                raise self.invalid(f"{what} has a dimension of {size:,} elements",
                                   tensor=name)
            elements *= size
        if elements > _INT64_MAX:
            raise self.invalid(f"{what} of shape {list(shape)} has more elements than "
                               f"ggml can count", tensor=name)
        type_id = self.u32(self.data, offset)[0]
        if type_id not in GGML_TYPES:
            raise self.invalid(f"{what} has unknown ggml type {type_id}", tensor=name)
        type_name, block, block_bytes = GGML_TYPES[type_id]
        row = shape[0] if shape else 1
        if row % block:
            raise self.invalid(f"{what} of type {type_name} has {row:,} elements per row, "
                               f"not a multiple of its block size {block}", tensor=name)
        data_offset = self.u64(self.data, offset + 4)[0]
        entry = TensorEntry(name, type_name, elements // block * block_bytes, tuple(shape),
                            data_offset)
        return entry, offset + 12

    def tensors(self, offset: int, count: int) -> tuple[list[TensorEntry], int]:
        self.fits(offset, count, _MIN_TENSOR_BYTES, "the tensor table")
        if count > MAX_GGUF_TENSORS:
            raise self.invalid(f"the tensor table declares {count:,} tensors; the planner "
                               f"reads at most {MAX_GGUF_TENSORS:,} (real models have a few "
                               f"thousand)")
        entries: list[TensorEntry] = []
        names: set[str] = set()
        for index in range(count):
            entry, offset = self.tensor(offset, index, names)
            entries.append(entry)
        return entries, offset

    def header(self, version: int) -> GgufHeader:
        tensor_count = self.unsigned(8, 8, "the tensor count")
        kv_count = self.unsigned(16, 8, "the metadata count")
        values, offset, alignment_type = self.metadata(24, kv_count)
        entries, offset = self.tensors(offset, tensor_count)
        alignment = self.alignment(values, alignment_type)
        data_offset = _pad(offset, alignment)
        expected = 0
        for entry in entries:
            # llama.cpp requires the tensors packed in order, each padded to the alignment.
            if entry.offset != expected:
                raise self.invalid(f"tensor {entry.name!r} starts at data offset "
                                   f"{entry.offset:,}; llama.cpp expects {expected:,} (the "
                                   f"tensors packed in order at {alignment}-byte alignment)",
                                   tensor=entry.name)
            end = data_offset + entry.offset + entry.n_bytes
            if end > self.size:
                raise self.fail(
                    "TruncatedGguf",
                    f"tensor {entry.name!r}'s data ends at byte {end:,}, but the file has "
                    f"{self.size:,} (truncated download)", tensor=entry.name)
            expected += _pad(entry.n_bytes, alignment)
        return GgufHeader(path=self.path, metadata=MappingProxyType(values),
                          tensors=tuple(entries), version=version, alignment=alignment,
                          data_offset=data_offset)


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


def read_header(path: Path) -> GgufHeader:
    """Read one GGUF file's header and tensor table (see the module's docstring).

    Headers are cached per file path, size and modification time.
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
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ModelError("TruncatedGguf", f"{path}: the file ends inside the GGUF "
                             "version", file=str(path))
        # A version whose low half is zero was written in the other byte order.
        little = struct.unpack("<I", head[4:8])[0]
        order = ">" if little & 0xFFFF == 0 else "<"
        version = struct.unpack(order + "I", head[4:8])[0]
        if version not in READABLE_VERSIONS:
            raise ModelError("UnsupportedGgufVersion",
                             f"{path}: GGUF version {version} cannot be read (readable: "
                             f"{', '.join(map(str, READABLE_VERSIONS))})",
                             file=str(path), version=version)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _Walk(path, data, order).header(version)


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
    experts' bytes and the token embeddings' (``None`` when ``token_embd`` is also the
    output head: no ``output.weight``, so every token multiplies by it whole)."""
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
    return {"parameter_count": total or None, "active_parameter_count": active or None,
            "expert_count": count if routed else None,
            "experts_used": used if routed else None,
            "token_embedding_bytes": sum(t.n_bytes for t in token_embd) or None,
            "routed_expert_bytes": sum(t.n_bytes for t in experts) if routed else 0}


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
