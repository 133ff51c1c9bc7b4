"""GGUF files written byte by byte (little-endian GGUF v3), for the cases gguf's own
writer cannot express or writes too slowly: the hostile inputs the reader must refuse by
name or step over in bounded time and memory. ``make bench`` times the large ones.

Each builder returns the file's bytes; tensors are zero-filled and packed as llama.cpp
expects (in order, each padded to 32 bytes).
"""

from __future__ import annotations

import json
import struct
import tarfile
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
ALIGNMENT = 32
# ggml type id -> (elements per block, bytes per block) for the types written here.
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34),
         "MXFP4": (39, 32, 17)}


def text(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, payload: bytes) -> bytes:
    return text(key) + struct.pack("<I", kind) + payload


def u32(key: str, value: int) -> bytes:
    return kv(key, U32, struct.pack("<I", value))


def string(key: str, value: str) -> bytes:
    return kv(key, STRING, text(value))


def strings(key: str, values: Iterable[bytes], count: int) -> bytes:
    """An array of ``count`` strings."""
    return kv(key, ARRAY, struct.pack("<IQ", STRING, count) + b"".join(map(text, values)))


def one_byte_strings(key: str, count: int) -> bytes:
    """An array of ``count`` one-byte strings, 9 bytes each, built without a loop."""
    return kv(key, ARRAY, struct.pack("<IQ", STRING, count) + text(b"x") * count)


def gguf(kvs: Sequence[bytes], tensors: Sequence[tuple[str, Sequence[int], str]] = (), *,
         tensor_count: int | None = None, kv_count: int | None = None) -> bytes:
    """A GGUF file: ``tensors`` are (name, ggml shape with the row length first, type)."""
    infos, offset, sizes = [], 0, []
    for name, shape, type_name in tensors:
        type_id, block, block_bytes = TYPES[type_name]
        elements = 1
        for size in shape:
            elements *= size
        infos.append(text(name) + struct.pack("<I", len(shape))
                     + b"".join(struct.pack("<Q", size) for size in shape)
                     + struct.pack("<IQ", type_id, offset))
        size = elements // block * block_bytes
        sizes.append(size)
        offset += -(-size // ALIGNMENT) * ALIGNMENT
    head = (b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if tensor_count is None
                                  else tensor_count, len(kvs) if kv_count is None else kv_count)
            + b"".join(kvs) + b"".join(infos))
    if not tensors:
        return head
    head += b"\0" * (-len(head) % ALIGNMENT)
    return head + b"\0" * (offset - (-sizes[-1] % ALIGNMENT))


def gemma3(*, embedding: int = 64, vocab: int = 256, extra: Sequence[bytes] = (),
           embd_row: int | None = None, embd_type: str = "F16",
           without: Collection[str] = ()) -> bytes:
    """A six-layer gemma3 model (the last layer full attention, tied embeddings) with
    ``embedding_length`` ``embedding``, the extra key/values ``extra``, none of the keys
    ``without``, and a ``token_embd`` of ``[embd_row, vocab]`` (``embd_row`` defaults to
    the embedding length)."""
    keys = {"general.architecture": string("general.architecture", "gemma3"),
            "general.name": string("general.name", "tiny")}
    for name, value in (("block_count", 6), ("context_length", 4096),
                        ("embedding_length", embedding), ("attention.head_count", 2),
                        ("attention.head_count_kv", 1), ("attention.key_length", 32),
                        ("attention.value_length", 32), ("attention.sliding_window", 512),
                        ("feed_forward_length", 128)):
        keys[f"gemma3.{name}"] = u32(f"gemma3.{name}", value)
    kvs = [data for key, data in keys.items() if key not in without] + list(extra)
    width = embedding or 32
    row = embedding if embd_row is None else embd_row
    tensors = [("token_embd.weight", (row, vocab), embd_type),
               ("output_norm.weight", (width,), "F32")]
    tensors += [(f"blk.{i}.attn_q.weight", (width, 64), "F16") for i in range(6)]
    return gguf(kvs, tensors)


def value(key: str, item: object) -> bytes:
    """A key/value of the GGUF type a Python value reads back as: bool, a 32-bit unsigned
    integer (64-bit beyond it, signed when negative), a 32-bit float, a string, or an
    array of one of those."""
    def typed(item: object) -> tuple[int, bytes]:
        if isinstance(item, bool):
            return BOOL, struct.pack("<?", item)
        if isinstance(item, int):
            if 0 <= item < 2**32:
                return U32, struct.pack("<I", item)
            return (U64, struct.pack("<Q", item)) if item >= 0 else \
                (I64, struct.pack("<q", item))
        if isinstance(item, float):
            return F32, struct.pack("<f", item)
        if isinstance(item, str):
            return STRING, text(item)
        raise TypeError(f"no GGUF type for {item!r}")

    if isinstance(item, list):
        parts = [typed(entry) for entry in item]
        kind = parts[0][0] if parts else U32
        return kv(key, ARRAY, struct.pack("<IQ", kind, len(parts))
                  + b"".join(payload for _, payload in parts))
    kind, payload = typed(item)
    return kv(key, kind, payload)


def recorded_model(header: dict[str, object]) -> bytes:
    """A GGUF file of a model recorded by ``make validate`` (validation/results/archs/):
    its metadata as recorded and its tensors, zero-filled, each one row of its elements
    (``token_embd`` as ``[embedding_length, rows]``). Every recorded tensor is F32."""
    metadata = dict(header["metadata"])  # type: ignore[call-overload]
    arch = metadata["general.architecture"]
    width = metadata.get(f"{arch}.embedding_length")
    tensors = []
    for name, type_name, n_bytes in header["tensors"]:  # type: ignore[attr-defined]
        assert type_name == "F32", type_name
        elements = n_bytes // 4
        shape = (width, elements // width) if name == "token_embd.weight" and \
            isinstance(width, int) and width and elements % width == 0 else (elements,)
        tensors.append((name, shape, type_name))
    return gguf([value(key, item) for key, item in metadata.items()], tensors)


# The header (everything before the tensor data) of each model llama.cpp b11434's
# test-llama-archs saves, and the file's size: written back and extended with zeros
# (sparse) to its size, a file reads as the saved one does. Recorded with
# ``python tests/test_gguf_file.py --record DIR``.
ARCH_HEADERS = Path(__file__).resolve().parent / "data" / "llama_archs_headers.tar.gz"


def arch_headers() -> dict[str, tuple[bytes, int]]:
    """Each architecture file's header and size, by file name."""
    with tarfile.open(ARCH_HEADERS) as archive:
        member = archive.extractfile("sizes.json")
        assert member is not None
        sizes = json.load(member)
        headers = {}
        for name, size in sizes.items():
            member = archive.extractfile(name)
            assert member is not None
            headers[name] = (member.read(), size)
    return headers


def write_arch_file(folder: Path, name: str, header: bytes, size: int) -> Path:
    """The architecture file ``name`` in ``folder``: its header, then zeros to its size."""
    path = folder / name
    with path.open("wb") as handle:
        handle.write(header)
        handle.truncate(size)
    return path
