"""Model specs read from tiny real GGUF files written with gguf.GGUFWriter.

Tensor sizes are worked out by hand from the ggml block sizes: F32 4 bytes per value,
F16 2, Q8_0 34 bytes per 32 values, Q4_0 18 per 32, Q4_K 144 per 256, Q6_K 210 per 256.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quant_shape_to_byte_shape

from planner.models import ModelError, ModelSpec, describe_model, from_gguf

# (name, (rows, columns), type): columns is the contiguous (ggml ne[0]) dimension.
Tensor = tuple[str, tuple[int, int], str]


def add_metadata(writer: GGUFWriter, metadata: Mapping[str, Any],
                 uint64_keys: Collection[str] = ()) -> None:
    """Text as a string, a list as an array, a number as a uint32 (a uint64 for the keys
    in ``uint64_keys``)."""
    for key, value in metadata.items():
        if key in uint64_keys:
            writer.add_uint64(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_uint32(key, value)


def write_gguf(path: Path, arch: str, metadata: dict[str, Any], tensors: Sequence[Tensor],
               split_max_tensors: int = 0) -> None:
    writer = GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    add_metadata(writer, metadata)
    for name, shape, type_name in tensors:
        if type_name == "F32":
            writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
        elif type_name == "F16":
            writer.add_tensor(name, np.zeros(shape, dtype=np.float16))
        else:
            quant = GGMLQuantizationType[type_name]
            byte_shape = quant_shape_to_byte_shape(shape, quant)
            writer.add_tensor(name, np.zeros(byte_shape, dtype=np.uint8), raw_dtype=quant)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_metadata(layers: int = 4, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "general.name": "Tiny Llama",
        "llama.block_count": layers,
        "llama.context_length": 8192,
        "llama.embedding_length": 256,
        "llama.attention.head_count": 8,
        "llama.attention.head_count_kv": [4, 2, 0, 1][:layers] if layers <= 4 else 2,
        "llama.attention.key_length": 32,
        "llama.attention.value_length": 64,
    }
    data.update(extra)
    return data


def llama_tensors(layers: int = 4) -> list[Tensor]:
    tensors: list[Tensor] = [("token_embd.weight", (100, 256), "F16")]
    for layer in range(layers):
        tensors += [
            (f"blk.{layer}.attn_norm.weight", (1, 256), "F32"),
            (f"blk.{layer}.attn_q.weight", (256, 256), "Q8_0"),
            (f"blk.{layer}.attn_k.weight", (64, 256), "Q4_0"),
            (f"blk.{layer}.ffn_up.weight", (512, 256), "Q4_K"),
            (f"blk.{layer}.ffn_down.weight", (256, 512), "Q6_K"),
        ]
    tensors += [("output_norm.weight", (1, 256), "F32"), ("output.weight", (100, 256), "Q8_0")]
    return tensors


TOKEN_EMBD = 100 * 256 * 2
OUTPUT = 256 * 4 + 100 * 256 // 32 * 34
BLOCK = (
    256 * 4                         # attn_norm, F32
    + 256 * 256 // 32 * 34          # attn_q, Q8_0
    + 64 * 256 // 32 * 18           # attn_k, Q4_0
    + 512 * 256 // 256 * 144        # ffn_up, Q4_K
    + 256 * 512 // 256 * 210        # ffn_down, Q6_K
)
# K rows 32 x heads, V rows 64 x heads, heads per layer 4, 2, 0, 1.
KV_ELEMENTS = (32 + 64) * (4 + 2 + 0 + 1)


@pytest.fixture
def llama_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-llama.gguf"
    write_gguf(path, "llama", llama_metadata(), llama_tensors())
    return path


def test_reads_architecture_layers_and_context(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    assert spec.name == "Tiny Llama"
    assert spec.architecture == "llama"
    assert spec.layer_count == 4
    assert spec.native_context_length == 8192
    assert spec.source == str(llama_file)


def test_weight_bytes_per_layer_and_in_total(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    assert BLOCK == 1024 + 69632 + 9216 + 73728 + 107520
    assert spec.layer_weight_bytes == (TOKEN_EMBD + BLOCK, BLOCK, BLOCK, BLOCK + OUTPUT)
    assert spec.model_weight_bytes == TOKEN_EMBD + 4 * BLOCK + OUTPUT
    assert sum(spec.layer_weight_bytes) == spec.model_weight_bytes
    placement = spec.notes[0]
    assert "in layer 0" in placement and "in layer 3" in placement


def test_kv_bytes_per_token_for_each_cache_type(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    assert spec.kv_cache_type == "f16"
    assert spec.kv_bytes_per_token == KV_ELEMENTS * 2 == 1344
    table = spec.kv_bytes_per_token_by_type
    assert table["q8_0"] == KV_ELEMENTS // 32 * 34 == 714
    assert table["q4_0"] == KV_ELEMENTS // 32 * 18
    assert table["f32"] == KV_ELEMENTS * 4
    quantized = from_gguf(llama_file, kv_cache_type="q8_0")
    assert quantized.kv_cache_type == "q8_0"
    assert quantized.kv_bytes_per_token == 714
    assert spec.with_kv_cache_type("q8_0") == quantized


def test_planning_fields_drop_into_a_request(llama_file: Path) -> None:
    fields = from_gguf(llama_file).planning_fields()
    assert fields == {
        "native_context_length": 8192,
        "layer_count": 4,
        "model_weight_bytes": TOKEN_EMBD + 4 * BLOCK + OUTPUT,
        "layer_weight_bytes": [TOKEN_EMBD + BLOCK, BLOCK, BLOCK, BLOCK + OUTPUT],
        "kv_bytes_per_token": 1344,
        # The layers' own KV (their head counts differ; one layer keeps none).
        "layer_kv_bytes_per_token": [768, 384, 0, 192],
        "layer_state_bytes_per_sequence": None,
    }


def test_spec_round_trips_through_plain_data(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    data = json.loads(json.dumps(spec.to_dict()))
    assert ModelSpec.from_dict(data) == spec
    assert data["kv_bytes_per_token_by_type"]["q8_0"] == 714
    assert hash(spec) == hash(ModelSpec.from_dict(data))


def test_describe_model_shows_the_numbers(llama_file: Path) -> None:
    text = describe_model(from_gguf(llama_file))
    assert "Tiny Llama" in text
    assert "llama" in text
    assert "8,192 tokens" in text
    assert "1,344 B per token" in text
    assert f"{TOKEN_EMBD + 4 * BLOCK + OUTPUT:,} B" in text
    assert "q8_0 714" in text


def test_head_sizes_default_to_embedding_over_heads(tmp_path: Path) -> None:
    path = tmp_path / "defaults.gguf"
    metadata = llama_metadata(2)
    del metadata["llama.attention.key_length"], metadata["llama.attention.value_length"]
    write_gguf(path, "llama", metadata, llama_tensors(2))
    # 256 / 8 = 32 per head; KV heads 4 and 2.
    assert from_gguf(path).kv_bytes_per_token == 2 * 32 * (4 + 2) * 2


def test_name_falls_back_to_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "unnamed-model.gguf"
    metadata = llama_metadata()
    del metadata["general.name"]
    write_gguf(path, "llama", metadata, llama_tensors())
    assert from_gguf(path).name == "unnamed-model"


# --- split files ---------------------------------------------------------------------

def test_split_model_reads_as_one_from_any_shard(tmp_path: Path, llama_file: Path) -> None:
    base = tmp_path / "split" / "tiny.gguf"
    base.parent.mkdir()
    tensors = llama_tensors()
    write_gguf(base, "llama", llama_metadata(), tensors, split_max_tensors=12)
    shards = sorted(base.parent.glob("*.gguf"))
    assert [p.name for p in shards] == [
        "tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf",
    ]
    single = from_gguf(llama_file)
    for shard in shards:
        spec = from_gguf(shard)
        assert spec.source == str(shards[0])
        assert spec.model_weight_bytes == single.model_weight_bytes
        assert spec.layer_weight_bytes == single.layer_weight_bytes
        assert spec.kv_bytes_per_token == single.kv_bytes_per_token
        assert spec.notes[0] == "split model: 2 shards read as one"


def test_split_model_with_a_missing_shard_names_it(tmp_path: Path) -> None:
    base = tmp_path / "tiny.gguf"
    write_gguf(base, "llama", llama_metadata(), llama_tensors(), split_max_tensors=12)
    missing = tmp_path / "tiny-00002-of-00002.gguf"
    missing.unlink()
    with pytest.raises(ModelError) as caught:
        from_gguf(tmp_path / "tiny-00001-of-00002.gguf")
    assert caught.value.code == "MissingGgufShard"
    assert str(missing) in str(caught.value)


def test_renamed_shard_cannot_find_its_siblings(tmp_path: Path) -> None:
    base = tmp_path / "tiny.gguf"
    write_gguf(base, "llama", llama_metadata(), llama_tensors(), split_max_tensors=12)
    renamed = tmp_path / "renamed.gguf"
    (tmp_path / "tiny-00001-of-00002.gguf").rename(renamed)
    with pytest.raises(ModelError) as caught:
        from_gguf(renamed)
    assert caught.value.code == "MissingGgufShard"
    assert "renamed.gguf" in str(caught.value)


# --- architectures with special caches -------------------------------------------------

def test_latent_attention_file(tmp_path: Path) -> None:
    path = tmp_path / "mla.gguf"
    metadata = {
        "deepseek2.block_count": 2,
        "deepseek2.context_length": 163840,
        "deepseek2.embedding_length": 256,
        "deepseek2.attention.head_count": 4,
        "deepseek2.attention.head_count_kv": 1,
        "deepseek2.attention.key_length": 576,
        "deepseek2.attention.value_length": 512,
        "deepseek2.attention.key_length_mla": 192,
        "deepseek2.attention.value_length_mla": 128,
        "deepseek2.attention.kv_lora_rank": 512,
    }
    tensors: list[Tensor] = [("blk.0.attn_kv_a_mqa.weight", (576, 256), "Q8_0"),
                             ("blk.1.attn_kv_a_mqa.weight", (576, 256), "Q8_0")]
    write_gguf(path, "deepseek2", metadata, tensors)
    spec = from_gguf(path, kv_cache_type="q8_0")
    assert spec.kv_bytes_per_token == 2 * 576 // 32 * 34
    assert spec.kv_bytes_per_token_by_type["f16"] == 2 * 576 * 2
    assert spec.layer_weight_bytes == (576 * 256 // 32 * 34,) * 2


def test_sliding_window_file(tmp_path: Path) -> None:
    path = tmp_path / "oss.gguf"
    metadata = {
        "gpt-oss.block_count": 4,
        "gpt-oss.context_length": 131072,
        "gpt-oss.embedding_length": 256,
        "gpt-oss.attention.head_count": 8,
        "gpt-oss.attention.head_count_kv": 2,
        "gpt-oss.attention.key_length": 64,
        "gpt-oss.attention.value_length": 64,
        "gpt-oss.attention.sliding_window": 128,
    }
    tensors: list[Tensor] = [(f"blk.{i}.attn_q.weight", (64, 256), "F16") for i in range(4)]
    write_gguf(path, "gpt-oss", metadata, tensors)
    spec = from_gguf(path)
    # Layers 1 and 3 are full attention: 2 layers x (K + V) x 2 heads x 64 x 2 bytes.
    assert spec.kv_bytes_per_token == 2 * 2 * 128 * 2
    assert any("sliding window" in note for note in spec.notes)


def test_multi_token_prediction_block_has_weights_but_no_cache(tmp_path: Path) -> None:
    path = tmp_path / "glm.gguf"
    metadata = {
        "glm4moe.block_count": 3,
        "glm4moe.context_length": 131072,
        "glm4moe.embedding_length": 256,
        "glm4moe.attention.head_count": 8,
        "glm4moe.attention.head_count_kv": 2,
        "glm4moe.attention.key_length": 32,
        "glm4moe.attention.value_length": 32,
        "glm4moe.nextn_predict_layers": 1,
    }
    tensors: list[Tensor] = [(f"blk.{i}.attn_q.weight", (32, 256), "F16") for i in range(3)]
    write_gguf(path, "glm4moe", metadata, tensors)
    spec = from_gguf(path)
    assert spec.layer_count == 3
    assert spec.layer_weight_bytes == (32 * 256 * 2,) * 3
    assert spec.kv_bytes_per_token == 2 * 2 * 64 * 2


# --- refusals --------------------------------------------------------------------------

def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("hello, this is text\n")
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert caught.value.code == "NotGguf"
    assert str(path) in str(caught.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelError) as caught:
        from_gguf(empty)
    assert caught.value.code == "NotGguf"
    with pytest.raises(ModelError) as caught:
        from_gguf(tmp_path / "absent.gguf")
    assert caught.value.code == "GgufNotFound"
    assert "absent.gguf" in str(caught.value)


def test_every_truncation_is_reported_not_raised_from_the_reader(tmp_path: Path) -> None:
    whole = tmp_path / "small.gguf"
    write_gguf(whole, "llama", llama_metadata(2), [
        ("token_embd.weight", (4, 32), "F16"),
        ("blk.0.attn_q.weight", (32, 32), "Q8_0"),
        ("blk.1.attn_q.weight", (32, 32), "Q4_0"),
        ("output.weight", (4, 32), "F32"),
    ])
    data = whole.read_bytes()
    assert from_gguf(whole).model_weight_bytes == 4 * 32 * 2 + 32 * 34 + 32 * 18 + 4 * 32 * 4
    cut = tmp_path / "cut.gguf"
    codes = set()
    for length in range(1, len(data)):
        cut.write_bytes(data[:length])
        with pytest.raises(ModelError) as caught:
            from_gguf(cut)
        assert str(cut) in str(caught.value)
        codes.add(caught.value.code)
    assert codes == {"TruncatedGguf"}


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "no-context.gguf"
    metadata = llama_metadata()
    del metadata["llama.context_length"]
    write_gguf(path, "llama", metadata, llama_tensors())
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert caught.value.code == "MissingGgufKey"
    assert caught.value.details == {"file": str(path), "key": "llama.context_length"}
    assert "llama.context_length" in str(caught.value) and str(path) in str(caught.value)


def test_only_an_architecture_llama_cpp_does_not_know_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "mamba9.gguf"
    write_gguf(path, "mamba9", {"mamba9.block_count": 2, "mamba9.context_length": 4096},
               [("blk.0.ssm_in.weight", (32, 32), "F32")])
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert caught.value.code == "UnsupportedArchitecture"
    assert "'mamba9'" in str(caught.value) and "llama.cpp does not know" in str(caught.value)


def test_a_recurrent_model_keeps_state_per_sequence_and_no_kv(tmp_path: Path) -> None:
    """mamba: every layer keeps llama.cpp's R row ((d_conv - 1) x (d_inner + 2 x groups x
    d_state)) and S row (d_state x d_inner) of f32 per sequence, and no KV cache."""
    path = tmp_path / "mamba.gguf"
    write_gguf(path, "mamba", {
        "mamba.block_count": 2, "mamba.context_length": 4096, "mamba.embedding_length": 64,
        "mamba.ssm.conv_kernel": 4, "mamba.ssm.inner_size": 128, "mamba.ssm.state_size": 16,
        "mamba.ssm.time_step_rank": 4}, [("blk.0.ssm_in.weight", (32, 32), "F32")])
    spec = from_gguf(path)
    assert spec.kv_bytes_per_token == 0
    per_layer = (3 * 128 + 16 * 128) * 4
    assert spec.layer_state_bytes_per_sequence == (per_layer, per_layer)


def test_tensor_of_an_undeclared_layer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "extra.gguf"
    write_gguf(path, "llama", llama_metadata(2), [("blk.5.attn_q.weight", (32, 32), "F32")])
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert caught.value.code == "InvalidGguf"
    assert "blk.5.attn_q.weight" in str(caught.value)


def test_cache_type_the_rows_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "narrow.gguf"
    metadata = llama_metadata(2, **{"llama.attention.key_length": 8,
                                    "llama.attention.value_length": 8})
    write_gguf(path, "llama", metadata, llama_tensors(2))
    # K rows of 8 x 4 heads = 32 fit q8_0 blocks, but 8 x 2 heads = 16 do not.
    with pytest.raises(ModelError) as caught:
        from_gguf(path, kv_cache_type="q8_0")
    assert caught.value.code == "IncompatibleKvCacheType"
    assert from_gguf(path).kv_bytes_per_token == 2 * 8 * (4 + 2) * 2
    with pytest.raises(ModelError) as caught:
        from_gguf(path, kv_cache_type="q2")
    assert caught.value.code == "UnknownKvCacheType"


def test_with_kv_cache_type_refuses_types_it_does_not_know(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    with pytest.raises(ModelError) as caught:
        spec.with_kv_cache_type("q3_k")
    assert caught.value.code == "UnknownKvCacheType"
    assert "q8_0" in str(caught.value)


def test_spec_invariants_are_checked() -> None:
    good = dict(name="m", architecture="llama", layer_count=2, native_context_length=4096,
                model_weight_bytes=10, layer_weight_bytes=(4, 6), kv_bytes_per_token=8,
                kv_cache_type="f16", kv_cache_table=(("f16", 8), ("q8_0", 4)), source="s")
    assert ModelSpec(**good).layer_weight_bytes == (4, 6)
    for change, field_name in [
        ({"layer_weight_bytes": (4, 5)}, "layer_weight_bytes"),
        ({"layer_weight_bytes": (10,)}, "layer_weight_bytes"),
        ({"kv_bytes_per_token": 4}, "kv_bytes_per_token"),
        ({"kv_cache_type": "q4_0"}, "kv_cache_type"),
        ({"layer_count": 0}, "layer_count"),
        ({"model_weight_bytes": -1}, "model_weight_bytes"),
    ]:
        with pytest.raises(ModelError) as caught:
            ModelSpec(**{**good, **change})
        assert caught.value.code == "InvalidModelSpec"
        assert caught.value.details["field"] == field_name
    with pytest.raises(ModelError) as caught:
        ModelSpec.from_dict({**ModelSpec(**good).to_dict(), "colour": "red"})
    assert caught.value.details["field"] == "colour"


# --- bytes read per token -----------------------------------------------------------------

def _moe(path: Path, *, used: int | None = 2, tied: bool = False,
         extra: Sequence[tuple[str, tuple[int, ...], str]] = ()) -> None:
    """Two qwen3moe blocks of 8 routed experts (Q4_0) beside shared F16 tensors."""
    import gguf_files as g

    kvs = [g.string("general.architecture", "qwen3moe")]
    for key, value in (("block_count", 2), ("context_length", 4096),
                       ("embedding_length", 64), ("attention.head_count", 2),
                       ("attention.head_count_kv", 1), ("attention.key_length", 32),
                       ("attention.value_length", 32), ("expert_count", 8),
                       *((("expert_used_count", used),) if used is not None else ())):
        kvs.append(g.u32(f"qwen3moe.{key}", value))
    tensors: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (64, 100), "F16")]
    for layer in range(2):
        tensors += [(f"blk.{layer}.attn_q.weight", (64, 64), "F16"),
                    (f"blk.{layer}.ffn_gate_inp.weight", (64, 8), "F32"),
                    (f"blk.{layer}.ffn_gate_exps.weight", (64, 32, 8), "Q4_0"),
                    (f"blk.{layer}.ffn_down_exps.weight", (32, 64, 8), "Q4_0")]
    tensors += list(extra)
    if not tied:
        tensors.append(("output.weight", (64, 100), "F16"))
    path.write_bytes(g.gguf(kvs, tensors))


EMBD = 64 * 100 * 2
SHARED_BLOCK = 64 * 64 * 2 + 64 * 8 * 4
EXPERTS_BLOCK = 2 * 64 * 32 * 8 // 32 * 18


def test_a_token_reads_the_shared_tensors_and_its_experts(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    _moe(path)
    spec = from_gguf(path)
    assert spec.model_weight_bytes == 2 * EMBD + 2 * (SHARED_BLOCK + EXPERTS_BLOCK)
    # The output head and the blocks' shared tensors whole, 2 of 8 experts, one row of
    # token_embd (none counted).
    assert spec.active_weight_bytes == EMBD + 2 * SHARED_BLOCK + 2 * EXPERTS_BLOCK * 2 // 8
    assert any("2 experts per token" in note for note in spec.notes)


def test_a_tied_embedding_is_read_whole_as_the_output_head(tmp_path: Path) -> None:
    path = tmp_path / "tied.gguf"
    _moe(path, tied=True)
    assert from_gguf(path).active_weight_bytes == (
        EMBD + 2 * SHARED_BLOCK + 2 * EXPERTS_BLOCK * 2 // 8)


def test_a_tensor_of_fewer_experts_than_used_is_read_whole(tmp_path: Path) -> None:
    # grovemoe's chunk experts: each ffn_*_chexps stacks 2 experts; 2 are used of them.
    path = tmp_path / "chunks.gguf"
    _moe(path, extra=[("blk.0.ffn_up_chexps.weight", (64, 32, 2), "Q4_0")])
    chunk = 64 * 32 * 2 // 32 * 18
    assert from_gguf(path).active_weight_bytes == (
        EMBD + 2 * SHARED_BLOCK + 2 * EXPERTS_BLOCK * 2 // 8 + chunk)


def test_routed_experts_without_experts_used_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "unused.gguf"
    _moe(path, used=None)
    with pytest.raises(ModelError) as caught:
        from_gguf(path)
    assert caught.value.code == "MissingGgufKey"
    assert "'qwen3moe.expert_used_count'" in caught.value.message
    assert "blk.0.ffn_gate_exps.weight" in caught.value.message


def test_a_dense_model_reads_every_weight_but_the_embedding_rows(llama_file: Path) -> None:
    spec = from_gguf(llama_file)
    assert spec.active_weight_bytes == spec.model_weight_bytes - TOKEN_EMBD


def test_speed_fields_count_parameters_experts_and_embeddings(tmp_path: Path) -> None:
    """Parameters from each tensor's bytes and block layout; the routed experts' tensors
    count experts_used / expert_count of their parameters for a token, and the token
    embeddings (one row looked up) none."""
    path = tmp_path / "moe.gguf"
    tensors: list[Tensor] = [
        ("token_embd.weight", (100, 256), "F16"),          # 25,600 parameters
        ("blk.0.attn_q.weight", (256, 256), "Q8_0"),       # 65,536
        ("blk.0.ffn_up_exps.weight", (8 * 64, 256), "Q4_0"),  # 131,072 in 8 experts
        ("output.weight", (100, 256), "Q8_0"),             # 25,600
    ]
    write_gguf(path, "llama", llama_metadata(1, **{"llama.expert_count": 8,
                                                   "llama.expert_used_count": 2}), tensors)
    spec = from_gguf(path)
    assert spec.parameter_count == 25_600 + 65_536 + 131_072 + 25_600
    assert spec.active_parameter_count == 65_536 + 131_072 * 2 // 8 + 25_600
    assert (spec.expert_count, spec.experts_used) == (8, 2)
    assert spec.token_embedding_bytes == 25_600 * 2
    assert spec.output_head_parameters == 25_600  # output.weight
    dense = tmp_path / "dense.gguf"
    write_gguf(dense, "llama", llama_metadata(1), tensors[:2] + tensors[3:])
    plain = from_gguf(dense)
    assert plain.expert_count is None and plain.experts_used is None
    assert plain.active_parameter_count == 65_536 + 25_600
    # No output tensor: the head is the embeddings, multiplied whole by every token.
    tied = tmp_path / "tied.gguf"
    write_gguf(tied, "llama", llama_metadata(1), tensors[:2])
    shared = from_gguf(tied)
    assert shared.token_embedding_bytes is None
    assert shared.active_parameter_count == 25_600 + 65_536
    assert shared.output_head_parameters == 25_600  # the tied token_embd
