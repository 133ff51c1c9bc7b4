"""Hostile GGUF headers: every declared count is checked against the file before use.

Files are written with ``gguf.GGUFWriter`` where it can express the case, and byte by
byte (little-endian GGUF v3) where it cannot: an array longer than the file, arrays
nested a thousand deep, counts of 2**63.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from gguf import GGUFWriter

from planner.models import ModelError, from_gguf
from tests.test_models_gguf import Tensor, add_metadata, llama_metadata, write_gguf

U8, U32, STRING, ARRAY = 0, 4, 8, 9
SMALL_TENSORS: list[Tensor] = [("token_embd.weight", (4, 32), "F16"),
                               ("blk.0.attn_q.weight", (32, 32), "Q8_0"),
                               ("blk.1.attn_q.weight", (32, 32), "Q4_0"),
                               ("output.weight", (4, 32), "F32")]


def gguf_bytes(kvs: list[bytes], tensors: list[bytes] = (), *, tensor_count: int | None = None,
               kv_count: int | None = None) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if tensor_count is None
                                 else tensor_count, len(kvs) if kv_count is None else kv_count)
    return head + b"".join(kvs) + b"".join(tensors)


def text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, payload: bytes) -> bytes:
    return text(key) + struct.pack("<I", kind) + payload


def read_error(path: Path) -> ModelError:
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert str(path) in caught.value.message
    return caught.value


@pytest.mark.parametrize("block_count", [10**7, 10**9])
def test_a_huge_block_count_is_refused_before_anything_is_sized_by_it(
        tmp_path: Path, block_count: int) -> None:
    path = tmp_path / "many-layers.gguf"
    write_gguf(path, "llama", llama_metadata(2, **{"llama.block_count": block_count}),
               SMALL_TENSORS)
    assert path.stat().st_size < 17 * 1024
    error = read_error(path)
    assert error.code == "InvalidGguf"
    assert "llama.block_count" in error.message and f"{block_count:,} layers" in error.message


def test_a_block_count_of_two_to_the_63_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    writer = GGUFWriter(path, "llama")
    add_metadata(writer, llama_metadata(2, **{"llama.block_count": 2**63}),
                 uint64_keys={"llama.block_count"})
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    error = read_error(path)
    assert error.code == "InvalidGguf" and "9,223,372,036,854,775,808 layers" in error.message


def test_an_array_of_a_billion_items_in_49_bytes(tmp_path: Path) -> None:
    path = tmp_path / "array.gguf"
    data = gguf_bytes([kv("a", ARRAY, struct.pack("<IQ", U8, 10**9))])
    assert len(data) == 49
    path.write_bytes(data)
    error = read_error(path)
    assert error.code == "TruncatedGguf"
    assert "1,000,000,000 items" in error.message and "'a'" in error.message


def test_an_array_of_a_billion_strings_or_arrays(tmp_path: Path) -> None:
    for kind in (STRING, ARRAY):
        path = tmp_path / f"array-{kind}.gguf"
        path.write_bytes(gguf_bytes([kv("a", ARRAY, struct.pack("<IQ", kind, 10**9))]))
        assert read_error(path).code == "TruncatedGguf"


def test_deeply_nested_arrays_are_refused_without_recursing(tmp_path: Path) -> None:
    path = tmp_path / "nested.gguf"
    payload = struct.pack("<IQ", ARRAY, 1) * 1000 + struct.pack("<IQ", U8, 0)
    path.write_bytes(gguf_bytes([kv("deep", ARRAY, payload)]))
    error = read_error(path)
    assert error.code == "InvalidGguf" and "nests arrays" in error.message


def test_a_little_nesting_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "nested-ok.gguf"
    inner = struct.pack("<IQ", U32, 2) + struct.pack("<II", 1, 2)
    nested = kv("general.nested", ARRAY, struct.pack("<IQ", ARRAY, 2) + inner + inner)
    path.write_bytes(gguf_bytes([nested]))
    # The walk accepts it; the model is refused later for what it lacks, by name.
    assert read_error(path).code == "MissingGgufKey"


@pytest.mark.parametrize(("counts", "what"), [
    ({"kv_count": 2**63}, "metadata table"),
    ({"kv_count": 10**9}, "metadata table"),
    ({"tensor_count": 2**64 - 1}, "tensor table"),
])
def test_counts_beyond_the_file_are_refused(tmp_path: Path, counts: dict[str, int],
                                            what: str) -> None:
    path = tmp_path / "counts.gguf"
    path.write_bytes(gguf_bytes([kv("general.architecture", STRING, text("llama"))],
                                **counts))
    error = read_error(path)
    assert error.code == "TruncatedGguf" and what in error.message


def test_a_string_longer_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "string.gguf"
    path.write_bytes(gguf_bytes([kv("general.name", STRING, struct.pack("<Q", 2**63) + b"x")]))
    error = read_error(path)
    assert error.code == "TruncatedGguf" and "'general.name'" in error.message


def test_a_tensor_with_too_many_dimensions(tmp_path: Path) -> None:
    path = tmp_path / "dims.gguf"
    tensor = text("blk.0.w") + struct.pack("<I", 2**31) + b"\0" * 16
    path.write_bytes(gguf_bytes([kv("general.architecture", STRING, text("llama"))], [tensor]))
    error = read_error(path)
    assert error.code == "InvalidGguf" and "2,147,483,648 dimensions" in error.message


def test_an_unknown_value_type(tmp_path: Path) -> None:
    path = tmp_path / "type.gguf"
    path.write_bytes(gguf_bytes([kv("general.odd", 99, b"\0" * 8)]))
    assert read_error(path).code == "InvalidGguf"


def test_a_big_endian_header_is_walked_in_its_byte_order(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    head = b"GGUF" + struct.pack(">IQQ", 3, 0, 1)
    key = struct.pack(">Q", 1) + b"a" + struct.pack(">IIQ", ARRAY, U8, 10**9)
    path.write_bytes(head + key)
    assert read_error(path).code == "TruncatedGguf"


def test_a_file_that_exists_but_cannot_be_read() -> None:
    # /proc/self/mem is a regular file whose first page is not mapped: reading fails.
    error = read_error(Path("/proc/self/mem"))
    assert error.code == "UnreadableGguf"
    assert error.message == "/proc/self/mem: cannot be read: Input/output error"
