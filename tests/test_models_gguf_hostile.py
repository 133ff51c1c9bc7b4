"""Hostile GGUF headers: every declared count is checked against the file before use.

Files are written with ``gguf.GGUFWriter`` where it can express the case, and byte by
byte (little-endian GGUF v3) where it cannot: an array longer than the file, arrays
nested a thousand deep, counts of 2**63.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf_files as g
import pytest
from gguf import GGUFWriter

from planner.cli import main
from planner.limits import MAX_GGUF_KEYS, MAX_GGUF_TENSORS
from planner.llamacpp import model_from_gguf
from planner.models import ModelError, from_gguf
from planner.models.gguf_file import (
    SkippedValue,
    read_header,
)
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


def test_an_array_of_a_billion_strings(tmp_path: Path) -> None:
    path = tmp_path / "array-strings.gguf"
    path.write_bytes(gguf_bytes([kv("a", ARRAY, struct.pack("<IQ", STRING, 10**9))]))
    assert read_error(path).code == "TruncatedGguf"


@pytest.mark.parametrize("depth", [1, 1000])
def test_arrays_of_arrays_are_refused_as_llama_cpp_refuses_them(tmp_path: Path,
                                                                depth: int) -> None:
    # llama.cpp's gguf.cpp: "key 'x' has invalid GGUF type 9"; no recursion here either.
    path = tmp_path / "nested.gguf"
    inner = struct.pack("<IQ", U32, 2) + struct.pack("<II", 1, 2)
    payload = struct.pack("<IQ", ARRAY, 1) * depth + inner
    path.write_bytes(gguf_bytes([kv("general.nested", ARRAY, payload)]))
    error = read_error(path)
    assert error.code == "InvalidGguf"
    assert "'general.nested' is an array of arrays" in error.message


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


# --- the rest of llama.cpp's reader's checks (ggml/src/gguf.cpp) --------------------------

TINY = [g.string("general.architecture", "llama")]


def _refused(tmp_path: Path, data: bytes, *words: str, code: str = "InvalidGguf") -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    error = read_error(path)
    assert error.code == code, error.message
    for word in words:
        assert word in error.message


def test_a_key_written_twice(tmp_path: Path) -> None:
    _refused(tmp_path, g.gguf([*TINY, g.u32("x", 1), g.u32("x", 2)]), "'x' appears twice")


def test_an_empty_key(tmp_path: Path) -> None:
    _refused(tmp_path, g.gguf([*TINY, g.u32("", 1)]), "metadata key 1 is empty")


def test_a_tensor_name_ggml_cannot_hold(tmp_path: Path) -> None:
    _refused(tmp_path, g.gguf(TINY, [("t" * 64, (32,), "F32")]),
             "tensor 0's name is 64 bytes long", "at most 63")


def test_a_tensor_name_written_twice(tmp_path: Path) -> None:
    _refused(tmp_path, g.gguf(TINY, [("t", (32,), "F32"), ("t", (32,), "F32")]),
             "tensor 1 ('t'): the name appears twice")


def test_a_row_that_is_not_whole_blocks(tmp_path: Path) -> None:
    _refused(tmp_path, g.gguf(TINY, [("t", (48, 2), "Q8_0")]),
             "48 elements per row, not a multiple of its block size 32")


def _header_only(kvs: list[bytes], tensors: list[tuple[str, tuple[int, ...], int, int]]) -> bytes:
    """A header whose tensor table says anything (no data section)."""
    infos = b"".join(g.text(name) + struct.pack("<I", len(shape))
                     + b"".join(struct.pack("<Q", d) for d in shape)
                     + struct.pack("<IQ", type_id, offset)
                     for name, shape, type_id, offset in tensors)
    return b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos


def test_more_elements_than_ggml_counts(tmp_path: Path) -> None:
    _refused(tmp_path, _header_only(TINY, [("t", (2**40, 2**40), 0, 0)]),
             "more elements than ggml can count")


def test_an_unknown_tensor_type(tmp_path: Path) -> None:
    # Q4_2 (4) was removed from ggml.
    _refused(tmp_path, _header_only(TINY, [("t", (32,), 4, 0)]),
             "tensor 0 ('t') has unknown ggml type 4")


def test_a_dimension_beyond_int64(tmp_path: Path) -> None:
    _refused(tmp_path, _header_only(TINY, [("t", (2**63,), 0, 0)]),
             "dimension of 9,223,372,036,854,775,808 elements")


def test_tensors_out_of_order(tmp_path: Path) -> None:
    data = _header_only(TINY, [("a", (8,), 0, 32), ("b", (8,), 0, 0)]) + b"\0" * 128
    _refused(tmp_path, data, "tensor 'a' starts at data offset 32; llama.cpp expects 0")


def test_tensor_data_past_the_end_of_the_file(tmp_path: Path) -> None:
    data = g.gguf(TINY, [("a", (8,), "F32"), ("b", (64,), "F32")])
    _refused(tmp_path, data[:-1], "tensor 'b'", "truncated download", code="TruncatedGguf")


@pytest.mark.parametrize(("alignment", "words"), [
    (g.kv("general.alignment", g.U64, struct.pack("<Q", 64)), "must be a uint32"),
    (g.u32("general.alignment", 0), "must be a power of two (got 0)"),
    (g.u32("general.alignment", 48), "must be a power of two (got 48)"),
])
def test_an_alignment_llama_cpp_refuses(tmp_path: Path, alignment: bytes, words: str) -> None:
    _refused(tmp_path, g.gguf([*TINY, alignment], [("t", (8,), "F32")]),
             "'general.alignment'", words)


def test_more_keys_than_the_planner_reads(tmp_path: Path) -> None:
    kvs = [g.kv(f"k{i}", g.U8, b"\0") for i in range(MAX_GGUF_KEYS + 1)]
    _refused(tmp_path, g.gguf(kvs), "65,537 keys", "at most 65,536")


def test_more_tensors_than_the_planner_reads(tmp_path: Path) -> None:
    entry = g.text("") + struct.pack("<IIQ", 0, 0, 0)
    data = (b"GGUF" + struct.pack("<IQQ", 3, MAX_GGUF_TENSORS + 1, 0)
            + entry * (MAX_GGUF_TENSORS + 1))
    _refused(tmp_path, data, "262,145 tensors", "at most 262,144")


def test_an_array_longer_than_llama_cpp_reads(tmp_path: Path) -> None:
    # 2**30 + 1 one-byte items need a file of a GiB: a sparse one costs no disk.
    path = tmp_path / "sparse.gguf"
    with path.open("wb") as handle:
        handle.write(gguf_bytes([kv("a", ARRAY, struct.pack("<IQ", U8, 2**30 + 1))]))
        handle.truncate(2**30 + 100)
    error = read_error(path)
    assert error.code == "InvalidGguf"
    assert "1,073,741,825 items; llama.cpp reads at most 1,073,741,824" in error.message


# --- values stepped over: bounded time and memory (make bench times them) ---------------

@pytest.mark.parametrize("key", ["general.junk", "tokenizer.ggml.tokens"])
def test_two_million_one_byte_strings_are_stepped_over(tmp_path: Path, key: str) -> None:
    path = tmp_path / "strings.gguf"
    path.write_bytes(g.gemma3(vocab=2_000_000 if key.startswith("tokenizer") else 256,
                              extra=[g.one_byte_strings(key, 2_000_000)]))
    assert path.stat().st_size > 18_000_000
    assert from_gguf(path).layer_count == 6
    value = read_header(path).metadata[key]
    assert value == SkippedValue("array of string", 2_000_000)


def test_a_string_array_past_the_end_is_refused(tmp_path: Path) -> None:
    data = g.gguf([*TINY, g.one_byte_strings("general.junk", 1000)])
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:-3])
    error = read_error(path)
    assert error.code == "TruncatedGguf" and "'general.junk'" in error.message


def test_a_value_stepped_over_is_named_where_it_is_used(tmp_path: Path) -> None:
    path = tmp_path / "layers.gguf"
    many = g.kv("gemma3.attention.head_count_kv", ARRAY,
                struct.pack("<IQ", U32, 2**20) + b"\0" * 4 * 2**20)
    path.write_bytes(g.gemma3(extra=[many], without={"gemma3.attention.head_count_kv"}))
    error = read_error(path)
    assert "gemma3.attention.head_count_kv" in error.message
    assert "<array of uint32 of 1,048,576 items, not read>" in error.message


# --- the token embedding: the width and the vocabulary --------------------------------------

def _memory_error(path: Path) -> ModelError:
    with pytest.raises(ModelError) as caught:
        model_from_gguf(path)
    assert str(path) in caught.value.message
    return caught.value


@pytest.mark.parametrize(("data", "words"), [
    (g.gemma3(embedding=0, embd_row=32, embd_type="Q8_0"),
     "'gemma3.embedding_length' must be at least 1 (got 0)"),
    (g.gemma3(embedding=16, embd_row=32, embd_type="Q8_0"),
     "tensor 'token_embd.weight' has shape [32, 256], but GGUF key "
     "'gemma3.embedding_length' is 16"),
    (g.gemma3(extra=[g.u32("gemma3.vocab_size", 0)]),
     "'gemma3.vocab_size' must be at least 1 (got 0)"),
    (g.gemma3(extra=[g.one_byte_strings("tokenizer.ggml.tokens", 300)]),
     "'token_embd.weight' has 256 rows, but 'tokenizer.ggml.tokens' holds 300 tokens"),
    (g.gemma3(extra=[g.one_byte_strings("tokenizer.ggml.tokens", 0)]),
     "'tokenizer.ggml.tokens' holds no tokens"),
    (g.gemma3(extra=[g.u32("tokenizer.ggml.tokens", 5)]),
     "'tokenizer.ggml.tokens' must be an array of strings (got 5)"),
])
def test_the_token_embedding_is_checked_as_llama_cpp_checks_it(
        tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "embedding.gguf"
    path.write_bytes(data)
    error = _memory_error(path)
    assert error.code == "InvalidGguf" and words in error.message


def test_the_vocabulary_is_the_tokenizer_s_then_the_key_then_the_table(tmp_path: Path) -> None:
    cases = [(g.gemma3(), 256), (g.gemma3(extra=[g.u32("gemma3.vocab_size", 256)]), 256),
             (g.gemma3(embedding=16, embd_row=16, embd_type="F16", vocab=100), 100),
             (g.gemma3(extra=[g.one_byte_strings("tokenizer.ggml.tokens", 256)]), 256)]
    for index, (data, vocab) in enumerate(cases):
        path = tmp_path / f"vocab-{index}.gguf"
        path.write_bytes(data)
        assert model_from_gguf(path).vocab_size == vocab


def test_no_vocabulary_anywhere_is_named(tmp_path: Path) -> None:
    data = g.gemma3().replace(b"token_embd.weight", b"token_embx.weight")
    path = tmp_path / "novocab.gguf"
    path.write_bytes(data)
    error = _memory_error(path)
    assert error.code == "MissingGgufKey" and "the vocabulary size is unknown" in error.message


@pytest.mark.parametrize("command", ["memory", "plan", "launch", "report"])
@pytest.mark.parametrize("embedding", [0, 16])
def test_a_bad_embedding_length_is_refused_by_every_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
        embedding: int) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(g.gemma3(embedding=embedding, embd_row=32, embd_type="Q8_0"))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[model]\ngguf = "{model}"\n\n[[nodes]]\nid = "a"\nvram = "8 GiB"\n')
    args = {"memory": ["memory", str(model), "--context", "4096"],
            "plan": ["plan", str(fleet), "--memory-model", "llamacpp"],
            "launch": ["launch", str(fleet), "--memory-model", "llamacpp"],
            "report": ["report", str(fleet), "--memory-model", "llamacpp", "-o",
                       str(tmp_path / "report.html")]}[command]
    assert main(args) == 2
    stderr = capsys.readouterr().err
    assert "unexpected error" not in stderr
    assert "InvalidGguf" in stderr and "gemma3.embedding_length" in stderr


def test_inspect_names_a_device_as_not_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "/dev/zero"]) == 2
    assert capsys.readouterr().err.strip() == "planner: NotGguf: /dev/zero: not a regular file"


def test_a_string_array_whose_length_runs_past_any_offset_is_refused(tmp_path: Path) -> None:
    """A string of 2**64 - 1 bytes inside an array: the walk stops at the file's end
    instead of stepping on to an offset no file has (an OverflowError before)."""
    huge = g.kv("general.junk", ARRAY, struct.pack("<IQQ", STRING, 2, 2**64 - 1) + b"x" * 16)
    path = tmp_path / "huge-string.gguf"
    path.write_bytes(g.gguf([*TINY, huge]))
    error = read_error(path)
    assert error.code == "TruncatedGguf" and "'general.junk'" in error.message


def _unreadable_gguf(folder: Path, kind: str) -> Path:
    """A path named ``*.gguf`` that is no GGUF model: each way a file can fail to be one."""
    import os

    path = folder / f"{kind}.gguf"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "magic-only":
        path.write_bytes(b"GGUF")
    elif kind == "wrong-version":
        path.write_bytes(b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    elif kind == "junk":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "text":
        path.write_text("hello, I am a text file\n")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-loop":
        path.symlink_to(path.name)
    elif kind in ("dev-zero", "dev-null"):
        path.symlink_to(f"/dev/{kind[4:]}")
    elif kind == "dangling-link":
        path.symlink_to(folder / "nowhere.gguf")
    return path


@pytest.mark.parametrize("kind", ["empty", "magic-only", "wrong-version", "junk", "text",
                                  "folder", "fifo", "link-loop", "dev-zero", "dev-null",
                                  "dangling-link"])
def test_speed_names_a_bad_gguf_file_with_the_code_inspect_gives(
        tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _unreadable_gguf(tmp_path, kind)
    assert main(["inspect", str(path)]) == 2
    said = capsys.readouterr().err.strip()
    code = said.split(": ")[1]
    assert code in ("NotGguf", "GgufNotFound", "TruncatedGguf", "InvalidGguf",
                    "UnsupportedGgufVersion"), said
    assert main(["speed", str(path), "--gpu", "h100-sxm-80gb"]) == 2
    assert capsys.readouterr().err.strip() == said
