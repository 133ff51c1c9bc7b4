"""Fuzz: any GGUF header either reads or raises a ModelError (a CodedError), quickly.

Headers are built from GGUF's own parts (version, counts, keys of every value type,
arrays with honest or lying lengths, nested arrays, tensor entries), then possibly cut
short or with a byte changed, so that most examples get deep into the reader.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path

import gguf_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import CodedError
from planner.llamacpp import LlamaCppSettings, estimate, model_from_gguf
from planner.models import from_gguf

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_KEYS = st.sampled_from(["general.architecture", "general.name", "llama.block_count",
                         "llama.context_length", "llama.embedding_length",
                         "llama.attention.head_count", "llama.attention.head_count_kv",
                         "general.alignment", "split.count", "tokenizer.ggml.tokens",
                         "x"])
_COUNTS = st.one_of(st.integers(0, 4), st.sampled_from([10**7, 10**9, 2**32, 2**63, 2**64 - 1]))
_NAMES = st.one_of(st.sampled_from(["llama", "blk.0.attn_q.weight", "token_embd.weight"]),
                   st.text(max_size=8))


def _string(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw


@st.composite
def _value(draw: st.DrawFn, depth: int = 0) -> tuple[int, bytes]:
    kind = draw(st.sampled_from([*_SCALARS, 8, 9] if depth < 3 else [*_SCALARS, 8]))
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        size = struct.calcsize(fmt)
        return kind, draw(st.binary(min_size=size, max_size=size))
    if kind == 8:
        return kind, _string(draw(_NAMES))
    items = draw(st.lists(_value(depth + 1), max_size=3))
    item_kind = items[0][0] if items else draw(st.sampled_from([0, 4, 8, 9]))
    same = [payload for k, payload in items if k == item_kind]
    count = draw(st.one_of(st.just(len(same)), _COUNTS))
    return kind, struct.pack("<IQ", item_kind, count) + b"".join(same)


@st.composite
def _header(draw: st.DrawFn) -> bytes:
    kvs = []
    for key in draw(st.lists(_KEYS, max_size=6)):
        kind, payload = draw(_value())
        kvs.append(_string(key) + struct.pack("<I", kind) + payload)
    tensors = []
    for _ in range(draw(st.integers(0, 3))):
        dims = draw(st.lists(st.integers(0, 2**64 - 1) | st.integers(1, 64), max_size=5))
        tensors.append(_string(draw(_NAMES)) + struct.pack("<I", len(dims))
                       + b"".join(struct.pack("<Q", d) for d in dims)
                       + struct.pack("<IQ", draw(st.integers(0, 40)), draw(st.integers(0, 64))))
    kv_count = draw(st.one_of(st.just(len(kvs)), _COUNTS))
    tensor_count = draw(st.one_of(st.just(len(tensors)), _COUNTS))
    version = draw(st.sampled_from([3, 3, 3, 2, 1, 4, 3 << 24]))
    data = (b"GGUF" + struct.pack("<IQQ", version, tensor_count, kv_count) + b"".join(kvs)
            + b"".join(tensors) + draw(st.binary(max_size=64)))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    if data and draw(st.booleans()):
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data


_FOLDER = Path(tempfile.mkdtemp(prefix="planner-fuzz-gguf-"))
_NUMBER = itertools.count()


@FUZZ
@given(_header())
def test_any_header_reads_or_is_refused_by_name(data: bytes) -> None:
    # A new name each time: headers are cached by path, size and modification time.
    path = _FOLDER / f"fuzz-{next(_NUMBER)}.gguf"
    path.write_bytes(data)
    try:
        from_gguf(path)
    except CodedError as error:
        assert error.code and str(path) in error.message
    finally:
        path.unlink()


_INTS = st.one_of(st.integers(0, 70), st.sampled_from([2**31, 2**32 - 1, 10**7]))


@st.composite
def _model(draw: st.DrawFn) -> bytes:
    """A well-formed llama file whose numbers are arbitrary: past the header walk, into
    the layer count, the KV cache rules and the tensor table."""
    layers = draw(st.integers(1, 4))
    metadata = [("general.architecture", 8, _string("llama"))]
    for key in ("block_count", "context_length", "embedding_length",
                "attention.head_count", "attention.head_count_kv", "attention.key_length",
                "attention.value_length"):
        if draw(st.integers(0, 5)):
            value = draw(st.one_of(st.just(layers), _INTS))
            kind = draw(st.sampled_from([4, 10, 5, 8]))
            payload = (_string(str(value)) if kind == 8
                       else struct.pack(_SCALARS[kind], min(value, 2**31 - 1)
                                        if kind == 5 else value))
            metadata.append((f"llama.{key}", kind, payload))
    kvs = b"".join(_string(k) + struct.pack("<I", kind) + p for k, kind, p in metadata)
    names = [f"blk.{i}.attn_q.weight" for i in range(draw(st.integers(0, layers + 1)))]
    tensors, offset = b"", 0
    for name in names:
        tensors += _string(name) + struct.pack("<IQIQ", 1, 8, 0, offset)
        offset += 32
    head = b"GGUF" + struct.pack("<IQQ", 3, len(names), len(metadata)) + kvs + tensors
    return head + b"\0" * (-len(head) % 32) + b"\0" * offset


@FUZZ
@given(_model())
def test_any_model_numbers_read_or_are_refused_by_name(data: bytes) -> None:
    path = _FOLDER / f"model-{next(_NUMBER)}.gguf"
    path.write_bytes(data)
    try:
        spec = from_gguf(path)
        assert 1 <= spec.layer_count <= 4096
    except CodedError as error:
        assert error.code and str(path) in error.message
    finally:
        path.unlink()


_SIZES = st.one_of(st.integers(0, 70), st.sampled_from([16, 32, 64, 256, 2**31, 2**32 - 1]))


@st.composite
def _gemma(draw: st.DrawFn) -> bytes:
    """A gemma3 file whose token embedding, vocabulary and tokenizer disagree in every
    way: into the width, vocabulary and memory rules llama.cpp's allocations follow."""
    embedding = draw(_SIZES)
    extra = []
    if draw(st.booleans()):
        extra.append(gguf_files.u32("gemma3.vocab_size", draw(_SIZES)))
    if draw(st.booleans()):
        key = draw(st.sampled_from(["tokenizer.ggml.tokens", "general.junk"]))
        extra.append(gguf_files.one_byte_strings(key, draw(st.integers(0, 300))))
    if draw(st.booleans()):
        extra.append(gguf_files.u32(draw(st.sampled_from(
            ["tokenizer.ggml.tokens", "gemma3.expert_used_count", "gemma3.expert_count"])),
            draw(_SIZES)))
    row = draw(st.one_of(st.just(embedding), st.sampled_from([0, 16, 32, 64])))
    embd_type = draw(st.sampled_from(["F16", "Q8_0", "Q4_0", "F32"]))
    vocab = draw(st.integers(0, 300))
    return gguf_files.gemma3(embedding=min(embedding, 4096), embd_row=min(row, 4096),
                             vocab=vocab, embd_type=embd_type, extra=extra)


@FUZZ
@given(_gemma())
def test_any_token_embedding_is_estimated_or_refused_by_name(data: bytes) -> None:
    path = _FOLDER / f"gemma-{next(_NUMBER)}.gguf"
    path.write_bytes(data)
    try:
        model = model_from_gguf(path)
        assert model.vocab_size > 0 and model.embedding_length > 0
        result = estimate(model, LlamaCppSettings(context_length=1024), devices=2)
        assert all(part.total_bytes >= 0 for part in (*result.devices, result.host))
    except CodedError as error:
        assert error.code and str(path) in error.message
    finally:
        path.unlink()
