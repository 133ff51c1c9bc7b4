"""A GGUF file read as llama.cpp reads it: the header, the metadata, the tensor table
and the shards of a split model, no tensor data.

One bounded walk reads the header (ggml's GGUF format, ``docs/gguf.md`` in ggml), makes
the checks llama.cpp's own reader makes (``ggml/src/gguf.cpp``), and builds only what
the planner may use: every scalar, short strings, and small arrays outside
``tokenizer.*``. Longer values are stepped over: an array of numbers in one seek, an
array of strings one length at a time, so a 262,144-token vocabulary costs a loop over
its lengths and no objects. A value stepped over is a :class:`SkippedValue` that
says what it was. A split model (``name-00001-of-00003.gguf``) is read as one model from
any of its shards (:func:`read_shards`).

What the planner makes of a header, the :class:`~planner.models.spec.ModelSpec`, is built
in :mod:`planner.models.gguf_spec`.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from planner._validate import Fail, integer, shown
from planner.limits import (
    GGUF_BUILD_BUDGET_BYTES,
    MAX_GGUF_KEY_BYTES,
    MAX_GGUF_KEYS,
    MAX_GGUF_TENSORS,
)
from planner.models.spec import ModelError

GGUF_MAGIC = b"GGUF"
SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
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
    return integer(count, invalid_key(header.path, "split.count"), minimum=1)


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



def invalid_key(where: Path, key: str) -> Fail:
    """How a bad value of GGUF key ``key`` in file ``where`` is refused."""
    return lambda problem, value: ModelError(
        "InvalidGguf", f"{where}: GGUF key {key!r} {problem} (got {shown(value)})",
        file=str(where), key=key)
