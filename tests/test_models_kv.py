"""KV bytes per token: cache-type rows, layouts, and llama.cpp's per-architecture rules.

Every expected number is worked out by hand in the test from llama.cpp's allocation formula:
``row(t, n) = n / block(t) * block_bytes(t)`` summed over K and V of each cached layer.
"""

from __future__ import annotations

from typing import Any

import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from planner.models import ModelError
from planner.models.kv_cache import (
    CACHE_TYPES,
    KvLayout,
    LayerCache,
    full_attention_layout,
    latent_attention_layout,
    layout_from_gguf,
    row_bytes,
    sliding_window_layout,
)


def test_cache_type_blocks_agree_with_the_gguf_package() -> None:
    for name, (block, block_bytes) in CACHE_TYPES.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]] == (block, block_bytes)


@pytest.mark.parametrize(
    ("cache_type", "expected"),
    [
        ("f32", 1024 * 4),
        ("f16", 1024 * 2),
        ("bf16", 1024 * 2),
        ("q8_0", 1024 // 32 * 34),
        ("q4_0", 1024 // 32 * 18),
        ("q4_1", 1024 // 32 * 20),
        ("q5_0", 1024 // 32 * 22),
        ("q5_1", 1024 // 32 * 24),
        ("iq4_nl", 1024 // 32 * 18),
    ],
)
def test_row_bytes_of_a_1024_element_row(cache_type: str, expected: int) -> None:
    assert row_bytes(cache_type, 1024) == expected


def test_row_that_does_not_fill_whole_blocks_is_refused() -> None:
    with pytest.raises(ModelError) as caught:
        row_bytes("q8_0", 100)
    assert caught.value.code == "IncompatibleKvCacheType"
    assert "100" in str(caught.value) and "q8_0" in str(caught.value)


def test_unknown_cache_type_lists_the_known_ones() -> None:
    with pytest.raises(ModelError) as caught:
        row_bytes("q3_k", 1024)
    assert caught.value.code == "UnknownKvCacheType"
    assert "q8_0" in str(caught.value) and "f16" in str(caught.value)


def test_qwen3_coder_480b_from_the_formula() -> None:
    layout = full_attention_layout(layers=62, kv_heads=8, key_length=128, value_length=128)
    assert layout.bytes_per_token("q8_0") == 2 * 1024 * 34 // 32 * 62 == 134_912
    assert layout.bytes_per_token("f16") == 62 * 2 * 1024 * 2 == 253_952
    assert layout.bytes_per_token("q4_0") == 62 * 2 * 1024 // 32 * 18 == 71_424
    # No cache type gives the design's 131072.
    assert 131_072 not in dict(layout.table()).values()


def test_table_skips_types_the_rows_cannot_be_stored_in() -> None:
    # Rows of 48 elements fill no whole 32-element block.
    layout = full_attention_layout(layers=2, kv_heads=3, key_length=16, value_length=16)
    table = dict(layout.table())
    assert table == {"f32": 2 * 2 * 48 * 4, "f16": 2 * 2 * 48 * 2, "bf16": 2 * 2 * 48 * 2}


def test_latent_attention_caches_one_row_and_no_v() -> None:
    layout = latent_attention_layout(layers=61, kv_lora_rank=512, rope_dim=64)
    assert layout.bytes_per_token("f16") == 61 * 576 * 2 == 70_272
    assert layout.bytes_per_token("q8_0") == 61 * 576 // 32 * 34 == 37_332
    assert "no V cache" in layout.notes[0]


def test_sliding_window_layers_add_nothing_per_token() -> None:
    full = full_attention_layout(layers=36, kv_heads=8, key_length=64, value_length=64)
    is_window = [index % 2 == 0 for index in range(36)]
    layout = sliding_window_layout(full.context_layers, is_window, sliding_window=128)
    per_layer_f16 = 2 * 512 * 2
    assert layout.bytes_per_token("f16") == 18 * per_layer_f16 == 36_864
    # 128 x 4 lanes + 512 = 1024 cells, already a multiple of 256.
    assert layout.window_cells() == 1024
    assert layout.window_cache_bytes("f16") == 18 * per_layer_f16 * 1024 == 37_748_736
    assert layout.window_cells(parallel_lanes=1, micro_batch=100) == 256
    assert "sliding window" in layout.notes[0] and "1,024 cells" in layout.notes[0]


def test_layout_without_window_layers_has_no_window_cache() -> None:
    layout = KvLayout(context_layers=(LayerCache(32, 32),))
    assert layout.window_cells() == 0
    assert layout.window_cache_bytes("f16") == 0


# --- per-architecture rules on metadata -------------------------------------------------

def _meta(arch: str, layers: int, **keys: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        f"{arch}.block_count": layers,
        f"{arch}.embedding_length": 256,
        f"{arch}.attention.head_count": 8,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.attention.key_length": 32,
        f"{arch}.attention.value_length": 32,
    }
    for key, value in keys.items():
        full_key = f"{arch}.{key.replace('__', '.')}"
        if value is None:
            data.pop(full_key, None)
        else:
            data[full_key] = value
    return data


# One layer of the default metadata: K and V rows of 2 heads x 32 = 64 elements each.
LAYER_F16 = 2 * 64 * 2


def _layout(arch: str, layers: int, **keys: Any) -> KvLayout:
    return layout_from_gguf(arch, _meta(arch, layers, **keys), layers, "model.gguf")


def test_plain_architecture_caches_every_layer() -> None:
    layout = _layout("qwen3", 5)
    assert layout.bytes_per_token("f16") == 5 * LAYER_F16
    assert layout.window_layers == ()


def test_per_layer_kv_heads_including_attention_free_layers() -> None:
    layout = _layout("deci", 4, attention__head_count_kv=[2, 0, 1, 4])
    # K and V rows of 32 x heads per layer.
    assert layout.bytes_per_token("f16") == 2 * 2 * 32 * (2 + 0 + 1 + 4)


def test_head_size_defaults_to_embedding_over_heads() -> None:
    layout = _layout("llama", 3, attention__key_length=None, attention__value_length=None)
    # 256 / 8 heads = 32, the same as the explicit default metadata.
    assert layout.bytes_per_token("f16") == 3 * LAYER_F16


def test_kv_heads_default_to_query_heads() -> None:
    layout = _layout("llama", 2, attention__head_count_kv=None)
    assert layout.bytes_per_token("f16") == 2 * 2 * (8 * 32) * 2


def test_gemma3_keeps_one_full_layer_in_six() -> None:
    layout = _layout("gemma3", 12, attention__sliding_window=512)
    # llama.cpp's pattern 6: layers 5 and 11 are full attention.
    assert len(layout.context_layers) == 2
    assert len(layout.window_layers) == 10
    assert layout.bytes_per_token("f16") == 2 * LAYER_F16
    assert layout.sliding_window == 512


def test_gemma3_without_a_window_is_all_full_attention() -> None:
    layout = _layout("gemma3", 12)
    assert len(layout.context_layers) == 12


def test_gemma2_window_defaults_to_4096() -> None:
    layout = _layout("gemma2", 4)
    assert layout.sliding_window == 4096
    assert len(layout.context_layers) == 2


def test_gpt_oss_needs_its_window_size() -> None:
    with pytest.raises(ModelError) as caught:
        _layout("gpt-oss", 4)
    assert caught.value.code == "MissingGgufKey"
    assert "gpt-oss.attention.sliding_window" in str(caught.value)
    assert "model.gguf" in str(caught.value)


def test_llama4_chunks_three_layers_in_four_unless_the_window_is_zero() -> None:
    chunked = _layout("llama4", 8)
    assert chunked.sliding_window == 8192
    assert len(chunked.context_layers) == 2
    plain = _layout("llama4", 8, attention__sliding_window=0)
    assert len(plain.context_layers) == 8


def test_smallthinker_starts_with_a_dense_layer() -> None:
    layout = _layout("smallthinker", 8, attention__sliding_window=4096)
    # dense first, period 4: layers 0 and 4 are full attention.
    assert len(layout.context_layers) == 2
    assert layout.sliding_window == 4096


def test_exaone4_interleaves_windows_only_in_the_64_layer_model() -> None:
    assert len(_layout("exaone4", 64).context_layers) == 16
    assert len(_layout("exaone4", 30, attention__sliding_window=4096).context_layers) == 30


def test_phi3_window_is_ignored_as_llama_cpp_does_and_says_so() -> None:
    layout = _layout("phi3", 4, attention__sliding_window=2047)
    assert len(layout.context_layers) == 4
    assert any("does not apply" in note for note in layout.notes)


def test_nextn_layers_get_no_cache() -> None:
    layout = _layout("glm4moe", 4, nextn_predict_layers=1)
    assert layout.bytes_per_token("f16") == 3 * LAYER_F16
    assert any("multi-token-prediction" in note for note in layout.notes)


def test_deepseek2_latent_attention_from_gguf_keys() -> None:
    layout = _layout(
        "deepseek2", 3,
        attention__head_count_kv=1, attention__key_length=576, attention__value_length=512,
        attention__key_length_mla=192, attention__value_length_mla=128,
        attention__kv_lora_rank=512,
    )
    assert layout.bytes_per_token("f16") == 3 * 576 * 2
    assert any("MLA" in note for note in layout.notes)


def test_deepseek2_without_mla_keys_caches_full_heads() -> None:
    layout = _layout("deepseek2", 3, attention__head_count_kv=4, attention__key_length=192,
                     attention__value_length=128)
    assert layout.bytes_per_token("f16") == 3 * (4 * 192 + 4 * 128) * 2
    assert any("predates" in note for note in layout.notes)


@pytest.mark.parametrize("arch", ["mamba9", "clip", "llama-5"])
def test_unsupported_architectures_are_refused_by_name(arch: str) -> None:
    """Only what llama.cpp cannot run as a language model is refused (clip is its vision
    encoder)."""
    with pytest.raises(ModelError) as caught:
        _layout(arch, 4)
    assert caught.value.code == "UnsupportedArchitecture"
    assert repr(arch) in str(caught.value)
    assert caught.value.details["architecture"] == arch


def test_per_layer_array_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ModelError) as caught:
        _layout("llama", 4, attention__head_count_kv=[2, 2])
    assert caught.value.code == "InvalidGguf"
    assert "llama.attention.head_count_kv" in str(caught.value)


def test_missing_head_count_names_the_key() -> None:
    with pytest.raises(ModelError) as caught:
        _layout("llama", 4, attention__head_count=None)
    assert caught.value.code == "MissingGgufKey"
    assert caught.value.details["key"] == "llama.attention.head_count"


def test_missing_embedding_length_only_matters_without_head_sizes() -> None:
    assert _layout("llama", 2, embedding_length=None).bytes_per_token("f16") == 2 * LAYER_F16
    with pytest.raises(ModelError) as caught:
        _layout("llama", 2, embedding_length=None, attention__key_length=None)
    assert caught.value.details["key"] == "llama.embedding_length"


def test_a_model_with_no_cached_layer_is_refused() -> None:
    with pytest.raises(ModelError) as caught:
        _layout("llama", 2, attention__head_count_kv=0)
    assert caught.value.code == "InvalidGguf"
    assert "no layer with a KV cache" in caught.value.message


def test_a_hybrid_places_kv_on_attention_layers_and_state_on_the_rest() -> None:
    """qwen3next without attention.recurrent_layers: every full_attention_interval-th
    layer is attention, the others gated-delta-net layers holding llama.cpp's R row
    ((d_conv - 1) x (d_inner + 2 x groups x d_state)) and S row (d_state x d_inner)."""
    layout = _layout("qwen3next", 8, full_attention_interval=4, ssm__conv_kernel=4,
                     ssm__inner_size=64, ssm__state_size=16, ssm__group_count=2)
    assert layout.layer_bytes_per_token("f16") == (0, 0, 0, LAYER_F16, 0, 0, 0, LAYER_F16)
    assert layout.bytes_per_token("f16") == 2 * LAYER_F16
    state = (3 * (64 + 2 * 2 * 16) + 16 * 64) * 4
    assert layout.layer_state_bytes_per_sequence() == (state, state, state, 0) * 2


def test_sparse_attention_keeps_an_indexer_cache_beside_the_latent_one() -> None:
    """deepseek32: one 576-element latent row (no V) and one indexer key head of
    attention.indexer.key_length per layer and cell."""
    layout = _layout("deepseek32", 2, attention__head_count_kv=1, attention__key_length=576,
                     attention__value_length=512, attention__key_length_mla=192,
                     attention__value_length_mla=128, attention__indexer__key_length=128)
    assert layout.bytes_per_token("f16") == 2 * (576 + 128) * 2


def test_gemma3n_layers_past_twenty_reuse_an_earlier_cache() -> None:
    layout = _layout("gemma3n", 22, attention__sliding_window=512)
    per_layer = layout.layer_bytes_per_token("f16")
    assert per_layer is not None and per_layer[20:] == (0, 0)
    assert len(layout.context_layers) + len(layout.window_layers) == 20


def test_a_pooled_indexer_keeps_its_raw_and_pooled_keys_in_one_row() -> None:
    """glm5-next's k-pool indexer caches key | gate | pooled rows of
    attention.indexer.key_length each, with no V (llama_memory_hybrid_idx); without a
    k-pool, the key alone."""
    common = {"attention__head_count_kv": [1, 0], "attention__key_length": 512,
              "attention__value_length": 512, "attention__key_length_mla": 192,
              "attention__value_length_mla": 128, "attention__indexer__key_length": 128,
              "kda__head_dim": 128, "ssm__conv_kernel": 4}
    pooled = _layout("glm5-next", 2, attention__indexer__kpool=4, **common)
    assert pooled.layer_bytes_per_token("f16") == ((512 + 3 * 128) * 2, 0)
    plain = _layout("glm5-next", 2, attention__indexer__kpool=0, **common)
    assert plain.layer_bytes_per_token("f16") == ((512 + 128) * 2, 0)


def test_compressed_attention_grows_by_its_ratio_and_keeps_compressor_state() -> None:
    """deepseek4: a K-only window cache on every layer; a CSA layer (ratio 4) adds a
    compressed K cache and a lightning-indexer cache of one cell per 4 tokens, an HCA
    layer (ratio 128) a compressed K cache of one cell per 128 tokens; the compressors keep
    a kv and a score plane in f32 per sequence."""
    layout = _layout("deepseek4", 4, attention__head_count_kv=1, attention__key_length=64,
                     attention__sliding_window=32, attention__indexer__key_length=128,
                     attention__compress_ratios=[0, 0, 4, 128])
    assert layout.layer_bytes_per_token("f16") == (0, 0, (64 + 128) * 2 // 4,
                                                  -(-64 * 2 // 128))
    csa = 2 * 8 * (2 * 64) + 2 * 8 * (2 * 128)
    hca = 2 * 128 * 64
    assert layout.layer_state_bytes_per_sequence() == (0, 0, csa * 4, hca * 4)
    assert len(layout.window_layers) == 4
