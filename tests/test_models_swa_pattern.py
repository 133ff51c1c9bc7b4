"""``{arch}.attention.sliding_window_pattern`` decides which layers are windowed, as in
llama.cpp's load_swa_pattern: an array holds one flag per layer (true = sliding window),
an integer N makes every N-th layer full attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_models_gguf import write_gguf

from planner.models import ModelError, from_gguf

# One KV head of 64 elements for K and V, at f16: 256 bytes per full-attention layer.
FULL_LAYER_BYTES = (64 + 64) * 2


def _file(tmp_path: Path, arch: str, layers: int, **extra: Any) -> Path:
    metadata: dict[str, Any] = {
        f"{arch}.block_count": layers,
        f"{arch}.context_length": 32768,
        f"{arch}.embedding_length": 256,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 1,
        f"{arch}.attention.key_length": 64,
        f"{arch}.attention.value_length": 64,
        f"{arch}.attention.sliding_window": 512,
    }
    metadata.update({f"{arch}.{key}": value for key, value in extra.items()})
    path = tmp_path / f"{arch}.gguf"
    tensors = [(f"blk.{i}.attn_q.weight", (64, 256), "F16") for i in range(layers)]
    write_gguf(path, arch, metadata, tensors)
    return path


@pytest.mark.parametrize("pattern", [[True, True, False, True, True, False],
                                     [1, 1, 0, 1, 1, 0], 3])
def test_gemma3_pattern_from_the_file(tmp_path: Path, pattern: Any) -> None:
    # The default period for gemma3 is 6 (one full layer of 6); the file says 2 of 6.
    key = "attention.sliding_window_pattern"
    spec = from_gguf(_file(tmp_path, "gemma3", 6, **{key: pattern}))
    assert spec.kv_bytes_per_token == 2 * FULL_LAYER_BYTES


def test_olmo2_with_fewer_layers_than_the_default_period_is_planned(tmp_path: Path) -> None:
    # olmo2's default period is 4: three layers would all be windowed and the file
    # refused; the file's array makes layer 2 full attention.
    path = _file(tmp_path, "olmo2", 3,
                 **{"attention.sliding_window_pattern": [True, True, False]})
    assert from_gguf(path).kv_bytes_per_token == FULL_LAYER_BYTES


def test_cohere2_period_from_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "cohere2", 4, **{"attention.sliding_window_pattern": 2})
    assert from_gguf(path).kv_bytes_per_token == 2 * FULL_LAYER_BYTES


def test_llama4_pattern_from_the_file(tmp_path: Path) -> None:
    # The default (3 chunked of 4) would give one full layer of 8; the file says every
    # second layer is full attention.
    path = _file(tmp_path, "llama4", 8, **{"attention.sliding_window_pattern": 2})
    assert from_gguf(path).kv_bytes_per_token == 4 * FULL_LAYER_BYTES


def test_without_the_key_the_architecture_default_holds(tmp_path: Path) -> None:
    assert from_gguf(_file(tmp_path, "gemma3", 6)).kv_bytes_per_token == FULL_LAYER_BYTES


@pytest.mark.parametrize("pattern", [[True, False], [2, 0, 1, 1, 1, 1]])
def test_a_malformed_pattern_is_refused_by_name(tmp_path: Path, pattern: Any) -> None:
    with pytest.raises(ModelError) as info:
        from_gguf(_file(tmp_path, "gemma3", 6, **{"attention.sliding_window_pattern": pattern}))
    assert info.value.code == "InvalidGguf"
    assert "sliding_window_pattern" in info.value.message
