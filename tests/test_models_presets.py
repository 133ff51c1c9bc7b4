"""Presets of published models and the GPU catalog, checked against their own cited facts.

The KV figures are recomputed here from each file's architecture facts with llama.cpp's
formula, independently of planner.models.kv_cache.
"""

from __future__ import annotations

import json
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from planner.models import (
    ModelError,
    ModelSpec,
    data_dir,
    list_presets,
    load_backend_overheads,
    load_gpu_catalog,
    load_preset,
)

DATA = Path(__file__).resolve().parent / "data"
REQUIRED_PRESETS = {
    "qwen3-coder-480b-a35b", "qwen3-235b-a22b", "llama-3.1-70b", "llama-3.1-405b",
    "deepseek-v3", "gpt-oss-120b", "mixtral-8x22b", "glm-4.5",
    # The models people deploy now, hybrids among them.
    "qwen3-next-80b-a3b", "qwen3.5-35b-a3b", "deepseek-v3.2", "kimi-k2", "glm-4.6",
    "llama-4-scout", "llama-4-maverick", "gpt-oss-20b", "nemotron-nano-9b-v2",
    # The model most llama.cpp measurements run (planner speed's help names it).
    "llama-3.1-8b",
}
# Presets that state the cache as GGUF metadata ([metadata]) rather than [attention].
METADATA_PRESETS = {
    "qwen3-next-80b-a3b", "qwen3.5-35b-a3b", "deepseek-v3.2", "kimi-k2", "glm-4.6",
    "llama-4-scout", "llama-4-maverick", "gpt-oss-20b", "nemotron-nano-9b-v2",
}
# Bytes per element of each KV cache type: block bytes over block elements.
ELEMENT_BYTES = {
    "f32": Fraction(4), "f16": Fraction(2), "bf16": Fraction(2),
    "q8_0": Fraction(34, 32), "q5_1": Fraction(24, 32), "q5_0": Fraction(22, 32),
    "q4_1": Fraction(20, 32), "q4_0": Fraction(18, 32), "iq4_nl": Fraction(18, 32),
}
SPEC_PLANNING_FIELDS = {"native_context_length", "layer_count", "model_weight_bytes",
                        "layer_weight_bytes", "kv_bytes_per_token"}
PER_LAYER_FIELDS = {"layer_weight_bytes", "layer_kv_bytes_per_token",
                    "layer_state_bytes_per_sequence"}


def preset_file(preset_id: str) -> dict[str, Any]:
    with (data_dir() / "models" / f"{preset_id}.toml").open("rb") as handle:
        return tomllib.load(handle)


def formula_kv(attention: dict[str, Any], cache_type: str) -> int:
    """K+V elements cached per token, summed over the layers whose cache grows, in bytes."""
    if attention["kind"] == "mla":
        elements = attention["kv_layer_count"] * (
            attention["kv_lora_rank"] + attention["rope_head_dim"])
    else:
        layers = attention.get("full_attention_layer_count", attention["kv_layer_count"])
        elements = layers * attention["kv_head_count"] * (
            attention["key_length"] + attention["value_length"])
    size = elements * ELEMENT_BYTES[cache_type]
    assert size.denominator == 1
    return int(size)


def test_required_presets_are_listed() -> None:
    assert set(list_presets()) >= REQUIRED_PRESETS
    assert list_presets() == sorted(list_presets())


@pytest.mark.parametrize("preset_id", sorted(REQUIRED_PRESETS))
def test_every_preset_loads_with_positive_numbers(preset_id: str) -> None:
    spec = load_preset(preset_id)
    assert isinstance(spec, ModelSpec)
    fields = spec.planning_fields()
    assert set(fields) == SPEC_PLANNING_FIELDS | PER_LAYER_FIELDS
    layers = fields["layer_weight_bytes"]
    assert layers is None or (len(layers) == spec.layer_count
                              and sum(layers) == spec.model_weight_bytes)
    for key in ("layer_kv_bytes_per_token", "layer_state_bytes_per_sequence"):
        assert fields[key] is None or len(fields[key]) == spec.layer_count, key
    kv = fields["layer_kv_bytes_per_token"]
    assert kv is None or sum(kv) == fields["kv_bytes_per_token"]
    for key in SPEC_PLANNING_FIELDS - PER_LAYER_FIELDS:
        assert isinstance(fields[key], int) and fields[key] > 0, key
    assert all(size > 0 for size in spec.kv_bytes_per_token_by_type.values())
    assert spec.notes and spec.notes[0].startswith("weights:")
    assert "huggingface.co" in spec.source


@pytest.mark.parametrize("preset_id", sorted(REQUIRED_PRESETS - METADATA_PRESETS))
def test_kv_per_token_agrees_with_the_architecture_facts(preset_id: str) -> None:
    raw = preset_file(preset_id)
    stated = raw["kv"].get("stated", {})
    spec = load_preset(preset_id)
    for cache_type, size in spec.kv_bytes_per_token_by_type.items():
        expected = formula_kv(raw["attention"], cache_type)
        if cache_type in stated:
            assert size == stated[cache_type]["bytes_per_token"]
            assert len(stated[cache_type]["reason"]) > 40
            assert abs(size - expected) / expected < 0.05
            assert any(f"formula gives {expected:,}" in note for note in spec.notes)
        else:
            assert size == expected, cache_type
    assert raw["attention"]["kv_layer_count"] <= raw["config"]["layer_count"]


@pytest.mark.parametrize("preset_id", sorted(REQUIRED_PRESETS))
def test_estimated_weights_are_parameters_times_bits(preset_id: str) -> None:
    weights = preset_file(preset_id)["weights"]
    assert weights["method"] in {"estimate", "file_size", "design"}
    assert weights["source"] and weights["quantisation"]
    if weights["method"] != "estimate":
        return
    total = 0
    for part in weights["parts"]:
        size = Fraction(part["parameters"]) * Fraction(str(part["bits_per_weight"])) / 8
        total += -(-size.numerator // size.denominator)
    assert weights["bytes"] == total
    assert "ESTIMATE" in load_preset(preset_id).notes[0]


def test_published_architecture_facts() -> None:
    facts = {
        "qwen3-coder-480b-a35b": (62, 262_144, 253_952),
        "qwen3-235b-a22b": (94, 262_144, 94 * 2 * 4 * 128 * 2),
        "llama-3.1-70b": (80, 131_072, 80 * 2 * 8 * 128 * 2),
        "llama-3.1-405b": (126, 131_072, 126 * 2 * 8 * 128 * 2),
        "deepseek-v3": (61, 163_840, 61 * (512 + 64) * 2),
        "gpt-oss-120b": (36, 131_072, 18 * 2 * 8 * 64 * 2),
        "mixtral-8x22b": (56, 65_536, 56 * 2 * 8 * 128 * 2),
        "glm-4.5": (93, 131_072, 92 * 2 * 8 * 128 * 2),
        # Hybrids: only the full-attention layers (one in four, the MTP block none) cache.
        "qwen3-next-80b-a3b": (49, 262_144, 12 * 2 * 2 * 256 * 2),
        "qwen3.5-35b-a3b": (41, 262_144, 10 * 2 * 2 * 256 * 2),
        # Latent attention: one 576-element row per layer; DSA adds a 128-element key.
        "deepseek-v3.2": (62, 163_840, 61 * (576 + 128) * 2),
        "kimi-k2": (61, 131_072, 61 * 576 * 2),
        "glm-4.6": (93, 202_752, 92 * 2 * 8 * 128 * 2),
        # Chunked (8192) on 3 layers in 4, sliding (128) on every other layer: only the
        # full-attention layers grow with the context.
        "llama-4-scout": (48, 10_485_760, 12 * 2 * 8 * 128 * 2),
        "llama-4-maverick": (48, 1_048_576, 12 * 2 * 8 * 128 * 2),
        "gpt-oss-20b": (24, 131_072, 12 * 2 * 8 * 64 * 2),
        "nemotron-nano-9b-v2": (56, 131_072, 4 * 2 * 8 * 128 * 2),
    }
    for preset_id, (layers, context, kv_f16) in facts.items():
        spec = load_preset(preset_id)
        assert spec.layer_count == layers, preset_id
        assert spec.native_context_length == context, preset_id
        assert spec.kv_bytes_per_token_by_type["f16"] == kv_f16, preset_id


NEMOTRON_PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"


def test_hybrid_presets_cost_each_layer() -> None:
    """A hybrid's attention layers carry KV per token and its recurrent layers a fixed
    state per sequence (llama.cpp's f32 R and S rows), worked here from the configs."""
    qwen = load_preset("qwen3-next-80b-a3b")
    # Gated delta-net: R = (conv 4 - 1) x (value dim 4096 + 2 x 16 key heads x 128),
    # S = 128 x 4096, in f32.
    state = ((4 - 1) * (4096 + 2 * 16 * 128) + 128 * 4096) * 4
    full = [i for i in range(48) if (i + 1) % 4 == 0]
    assert qwen.layer_state_bytes_per_sequence == tuple(
        0 if i in full or i == 48 else state for i in range(49))
    assert qwen.layer_kv_bytes_per_token == tuple(
        2 * 2 * 256 * 2 if i in full else 0 for i in range(49))
    nemotron = load_preset("nemotron-nano-9b-v2")
    # Mamba-2: R = 3 x (10240 + 2 x 8 groups x 128), S = 128 x 10240, in f32.
    mamba = (3 * (10240 + 2 * 8 * 128) + 128 * 10240) * 4
    assert nemotron.layer_state_bytes_per_sequence == tuple(
        mamba if kind == "M" else 0 for kind in NEMOTRON_PATTERN)
    assert nemotron.layer_kv_bytes_per_token == tuple(
        2 * 8 * 128 * 2 if kind == "*" else 0 for kind in NEMOTRON_PATTERN)
    q8 = nemotron.with_kv_cache_type("q8_0")
    assert q8.layer_kv_bytes_per_token == tuple(
        2 * 8 * 128 // 32 * 34 if kind == "*" else 0 for kind in NEMOTRON_PATTERN)
    dsa = load_preset("deepseek-v3.2")
    assert dsa.layer_kv_bytes_per_token == (*((576 + 128) * 2,) * 61, 0)
    assert dsa.layer_state_bytes_per_sequence is None


def _raw_parts(preset_id: str) -> list[dict[str, Any]]:
    return preset_file(preset_id)["weights"]["parts"]


def _part_bytes(part: dict[str, Any]) -> int:
    size = Fraction(part["parameters"]) * Fraction(str(part["bits_per_weight"])) / 8
    return -(-size.numerator // size.denominator)


@pytest.mark.parametrize("preset_id", sorted(REQUIRED_PRESETS - {"qwen3-coder-480b-a35b"}))
def test_active_bytes_read_shared_weights_whole_and_the_used_experts(preset_id: str) -> None:
    """A token reads the shared tensors whole, experts_used / expert_count of the routed
    experts and one row of the input embedding (none counted): the GGUF reader's rule."""
    raw = preset_file(preset_id)
    spec = load_preset(preset_id)
    parts = _raw_parts(preset_id)
    shared = sum(_part_bytes(p) for p in parts if p.get("role", "shared") == "shared")
    routed = [_part_bytes(p) for p in parts if p.get("role") == "routed_experts"]
    if "experts" in raw:
        used, count = raw["experts"]["experts_used"], raw["experts"]["expert_count"]
        assert routed
        expected = shared + sum(-(-size * used // count) for size in routed)
    else:
        assert not routed
        expected = shared
    assert spec.active_weight_bytes == expected
    assert any(f"decode reads {expected:,} weight bytes" in note for note in spec.notes)


def test_a_moe_reads_more_than_its_parameter_share() -> None:
    """gpt-oss-120b keeps its shared tensors at 16 bits and its experts at 4.25: a token
    reads far more than 5.1/117 of the bytes."""
    spec = load_preset("gpt-oss-120b")
    share = spec.model_weight_bytes * 51 // 1170
    assert spec.active_weight_bytes > 1.5 * share


@pytest.mark.parametrize("preset_id", sorted(REQUIRED_PRESETS))
def test_per_layer_weights_follow_the_parts(preset_id: str) -> None:
    """Where every part says where it lies, each block carries its share of each part;
    the input embedding is in block 0 and the output head in the last block."""
    spec = load_preset(preset_id)
    parts = _raw_parts(preset_id) if "parts" in preset_file(preset_id)["weights"] else []
    if not parts or any("layers" not in p and p.get("role") != "input_embedding"
                        for p in parts):
        assert spec.layer_weight_bytes is None
        return
    expected = [0] * spec.layer_count
    for part in parts:
        size = _part_bytes(part)
        where = part.get("layers", "input")
        if where in ("input", "output"):
            expected[0 if where == "input" else -1] += size
            continue
        blocks: list[int] = []
        for entry in (range(spec.layer_count) if where == "all" else where):
            if isinstance(entry, str):
                first, last = map(int, entry.split("-"))
                blocks.extend(range(first, last + 1))
            else:
                blocks.append(entry)
        for index, block in enumerate(blocks):
            expected[block] += size // len(blocks) + (index < size % len(blocks))
    assert spec.layer_weight_bytes == tuple(expected)


def test_qwen_480b_reproduces_the_design_inputs() -> None:
    spec = load_preset("qwen3-coder-480b-a35b")
    assert spec.kv_cache_type == "q8_0"
    assert spec.planning_fields() == {
        "native_context_length": 262_144,
        "layer_count": 62,
        "model_weight_bytes": 315_680_000_000,
        "layer_weight_bytes": None,
        "kv_bytes_per_token": 131_072,
        "layer_kv_bytes_per_token": None,
        "layer_state_bytes_per_sequence": None,
    }
    scenarios = json.loads((DATA / "planner_seed_scenarios.json").read_text())
    qwen_rows = [row for row in scenarios if row["name"].startswith("qwen480b")]
    assert qwen_rows
    for row in qwen_rows:
        request = row["input"]
        for key, value in spec.planning_fields().items():
            if key in request:
                assert request[key] == value, (row["name"], key)


def test_lookup_by_id_or_display_name_ignores_case() -> None:
    by_id = load_preset("LLAMA-3.1-70B")
    assert by_id == load_preset("llama-3.1-70b-instruct")
    assert by_id == load_preset("  Llama-3.1-70B-Instruct ")
    quantized = load_preset("deepseek-v3", kv_cache_type="q8_0")
    assert quantized.kv_bytes_per_token == 61 * 576 // 32 * 34


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ModelError) as caught:
        load_preset("gpt-5")
    assert caught.value.code == "UnknownPreset"
    message = str(caught.value)
    assert "'gpt-5'" in message
    for preset_id in REQUIRED_PRESETS:
        assert preset_id in message


def test_unknown_cache_type_for_a_preset() -> None:
    with pytest.raises(ModelError) as caught:
        load_preset("glm-4.5", kv_cache_type="q2_k")
    assert caught.value.code == "UnknownKvCacheType"


# --- the data directory ------------------------------------------------------------------

def test_data_dir_is_the_repository_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_DATA_DIR", raising=False)
    assert data_dir() == (Path(__file__).resolve().parents[1] / "data").resolve()


def test_missing_data_dir_names_the_path(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    absent = tmp_path / "nowhere"
    monkeypatch.setenv("PLANNER_DATA_DIR", str(absent))
    with pytest.raises(ModelError) as caught:
        list_presets()
    assert caught.value.code == "MissingDataDir"
    assert str(absent) in str(caught.value)


MINIMAL_PRESET = """
id = "tiny"
name = "Tiny Model"
architecture = "llama"
[config]
source = "https://example.org/config.json"
layer_count = 4
native_context_length = 8192
[attention]
kind = "full"
kv_layer_count = 4
kv_head_count = 2
key_length = 64
value_length = 64
[weights]
bytes = 1000
method = "file_size"
quantisation = "Q8_0"
source = "tiny-Q8_0.gguf, 1000 bytes"
[kv]
default_cache_type = "q8_0"
"""


def _data_dir_with(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    path = models / "tiny.toml"
    path.write_text(text)
    monkeypatch.setenv("PLANNER_DATA_DIR", str(tmp_path))
    return path


def test_data_dir_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _data_dir_with(tmp_path, MINIMAL_PRESET, monkeypatch)
    assert list_presets() == ["tiny"]
    spec = load_preset("Tiny Model")
    assert spec.kv_bytes_per_token == 4 * 2 * 2 * 64 // 32 * 34
    assert spec.model_weight_bytes == 1000
    assert spec.notes[0] == "weights: Q8_0 GGUF file size: tiny-Q8_0.gguf, 1000 bytes"


@pytest.mark.parametrize(
    ("edit", "field_name"),
    [
        (("layer_count = 4", "layer_count = 0"), "config.layer_count"),
        (('kind = "full"', 'kind = "linear"'), "attention.kind"),
        (("kv_layer_count = 4", "kv_layer_count = 5"), "attention.kv_layer_count"),
        (('method = "file_size"', 'method = "guess"'), "weights.method"),
        (('default_cache_type = "q8_0"', 'default_cache_type = "q3"'),
         "kv.default_cache_type"),
        (('id = "tiny"', 'id = "small"'), "id"),
        (("key_length = 64", "key_len = 64"), "attention.key_len"),
    ],
)
def test_invalid_preset_names_file_and_field(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, edit: tuple[str, str],
        field_name: str) -> None:
    path = _data_dir_with(tmp_path, MINIMAL_PRESET.replace(*edit), monkeypatch)
    with pytest.raises(ModelError) as caught:
        load_preset("tiny")
    assert caught.value.code == "InvalidPreset"
    assert caught.value.details["field"] == field_name
    assert str(path) in str(caught.value)


def test_estimate_that_does_not_match_its_parts_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = MINIMAL_PRESET.replace('method = "file_size"', 'method = "estimate"') + """
[[weights.parts]]
parameters = 1000
bits_per_weight = 8.5
"""
    # 1000 x 8.5 / 8 = 1062.5, rounded up to 1063, not the stated 1000.
    path = _data_dir_with(tmp_path, text, monkeypatch)
    with pytest.raises(ModelError) as caught:
        load_preset("tiny")
    assert caught.value.details["field"] == "weights.bytes"
    assert "1,063" in str(caught.value)
    path.write_text(text.replace("bytes = 1000\n", "bytes = 1063\n", 1))
    assert load_preset("tiny").model_weight_bytes == 1063


HYBRID_PRESET = """
id = "tiny"
name = "Tiny Hybrid"
architecture = "qwen3next"
[config]
source = "https://example.org/config.json"
layer_count = 4
native_context_length = 8192
hidden_size = 64
[metadata]
attention.head_count = 4
attention.head_count_kv = 2
attention.key_length = 32
attention.value_length = 32
full_attention_interval = 2
ssm.conv_kernel = 4
ssm.state_size = 16
ssm.group_count = 2
ssm.time_step_rank = 4
ssm.inner_size = 64
expert_count = 4
expert_used_count = 1
[weights]
bytes = 4000
method = "estimate"
quantisation = "F16"
source = "parts"
[[weights.parts]]
what = "embedding"
role = "input_embedding"
parameters = 400
bits_per_weight = 16
[[weights.parts]]
what = "head"
parameters = 400
bits_per_weight = 16
layers = "output"
[[weights.parts]]
what = "blocks"
parameters = 600
bits_per_weight = 16
layers = ["0-1", 3, 2]
[[weights.parts]]
what = "experts"
role = "routed_experts"
parameters = 600
bits_per_weight = 16
layers = "all"
[experts]
expert_count = 4
experts_used = 1
source = "config"
[kv]
default_cache_type = "f16"
"""


def test_a_hybrid_preset_from_its_metadata(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    _data_dir_with(tmp_path, HYBRID_PRESET, monkeypatch)
    spec = load_preset("tiny")
    # Layers 1 and 3 are full attention (interval 2); 0 and 2 keep the state.
    assert spec.layer_kv_bytes_per_token == (0, 2 * 2 * 32 * 2, 0, 2 * 2 * 32 * 2)
    state = ((4 - 1) * (64 + 2 * 2 * 16) + 16 * 64) * 4
    assert spec.layer_state_bytes_per_sequence == (state, 0, state, 0)
    assert spec.kv_bytes_per_token == 2 * 2 * 2 * 32 * 2
    # 800 B embedding in block 0, 800 B head in block 3, 1200 B over 4 blocks, 1200 B of
    # experts over 4 blocks.
    assert spec.layer_weight_bytes == (800 + 300 + 300, 600, 600, 800 + 600)
    # Shared: head 800 + blocks 1200; experts 1200 x 1/4; embedding none.
    assert spec.active_weight_bytes == 800 + 1200 + 300


@pytest.mark.parametrize(
    ("edit", "field_name"),
    [
        (('role = "routed_experts"', 'role = "experts"'), "weights.parts[3].role"),
        (('layers = ["0-1", 3, 2]', 'layers = ["0-1", 1]'), "weights.parts[2].layers"),
        (('layers = ["0-1", 3, 2]', 'layers = ["2-1"]'), "weights.parts[2].layers"),
        (('layers = ["0-1", 3, 2]', 'layers = [4]'), "weights.parts[2].layers"),
        (('layers = ["0-1", 3, 2]', 'layers = "middle"'), "weights.parts[2].layers"),
        (("experts_used = 1", "experts_used = 5"), "experts.experts_used"),
        (('role = "routed_experts"\n', ""), "experts."),
        (("[experts]\nexpert_count = 4\nexperts_used = 1\nsource = \"config\"\n", ""),
         "experts"),
        (("[metadata]\n", "[metadata]\nblock_count = 4\n"), "metadata.block_count"),
        (("ssm.inner_size = 64", "ssm.inner_size = -1"), "metadata"),
        (("[kv]", "[attention]\nkind = \"full\"\n[kv]"), "attention"),
    ],
)
def test_invalid_hybrid_preset_names_the_field(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, edit: tuple[str, str],
        field_name: str) -> None:
    assert edit[0] in HYBRID_PRESET
    _data_dir_with(tmp_path, HYBRID_PRESET.replace(*edit), monkeypatch)
    with pytest.raises(ModelError) as caught:
        load_preset("tiny")
    assert caught.value.code == "InvalidPreset"
    assert caught.value.details["field"] == field_name


def test_a_stated_total_is_shared_by_parameters(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """A file size or the design's figure has no bits per part: its parts share it by
    parameters, so the active bytes still follow the roles."""
    text = MINIMAL_PRESET + """
[[weights.parts]]
what = "shared"
parameters = 300
[[weights.parts]]
what = "experts"
role = "routed_experts"
parameters = 700
[experts]
expert_count = 7
experts_used = 2
source = "config"
"""
    _data_dir_with(tmp_path, text.replace("[kv]\ndefault", "[kv]\ndefault"), monkeypatch)
    spec = load_preset("tiny")
    assert spec.model_weight_bytes == 1000
    assert spec.active_weight_bytes == 300 + 700 * 2 // 7
    assert spec.layer_weight_bytes is None


# --- GPU catalog -------------------------------------------------------------------------

def test_gpu_catalog_covers_common_accelerators() -> None:
    catalog = {gpu.name: gpu for gpu in load_gpu_catalog()}
    for name, memory in [
        # Data-centre parts: the total the driver reports (nvidia-smi, rocm-smi).
        ("NVIDIA H100 SXM 80GB", 81_559 * 2**20),
        ("NVIDIA H100 PCIe 80GB", 81_559 * 2**20),
        ("NVIDIA H200 141GB", 143_771 * 2**20),
        ("NVIDIA A100 40GB", 40 * 2**30),
        ("NVIDIA A100 80GB", 80 * 2**30),
        ("NVIDIA L40S", 46_068 * 2**20),
        ("NVIDIA GeForce RTX 3090", 24 * 2**30),
        ("NVIDIA GeForce RTX 4090", 24 * 2**30),
        ("NVIDIA GeForce RTX 5090", 32 * 2**30),
        ("AMD Instinct MI300X", 205_822_885_888),
    ]:
        assert catalog[name].memory_bytes == memory, name
    assert "HBM3" in catalog["NVIDIA H100 SXM 80GB"].note
    assert "HBM2e" in catalog["NVIDIA H100 PCIe 80GB"].note


def test_llamacpp_backend_overheads_per_gpu_kind(tmp_path: Path) -> None:
    defaults = load_backend_overheads()
    assert defaults["cuda"] == 457 * 2**20 and defaults["metal"] == 512 * 2**20
    assert defaults["rpc"] == 0
    catalog = {gpu.name: gpu for gpu in load_gpu_catalog()}
    assert catalog["NVIDIA H100 SXM 80GB"].llamacpp_overhead(defaults) == 457 * 2**20
    assert catalog["Apple M2 Ultra 192GB"].llamacpp_overhead(defaults) == 512 * 2**20
    own = tmp_path / "gpus.toml"
    own.write_text('[[gpu]]\nname = "X"\nvendor = "V"\nmemory_bytes = 1024\nnote = "n"\n'
                   'backend = "cuda"\nllamacpp_overhead_bytes = 300\n'
                   '[llamacpp.backend_overhead_bytes]\ncuda = 7\n')
    assert load_gpu_catalog(own)[0].llamacpp_overhead(load_backend_overheads(own)) == 300
    bad = tmp_path / "bad.toml"
    bad.write_text('[[gpu]]\nname = "X"\nvendor = "V"\nmemory_bytes = 1024\nnote = "n"\n'
                   'backend = "cudda"\n')
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(bad)
    assert caught.value.details["field"] == "backend"


def test_apple_entries_use_the_metal_working_set_not_total_ram() -> None:
    with (data_dir() / "gpus.toml").open("rb") as handle:
        raw = tomllib.load(handle)["gpu"]
    apple = [entry for entry in raw if entry["vendor"] == "Apple"]
    assert {entry["name"] for entry in apple} >= {"Apple M2 Ultra 192GB",
                                                  "Apple M3 Ultra 512GB"}
    catalog = {gpu.name: gpu for gpu in load_gpu_catalog()}
    for entry in apple:
        assert entry["memory_bytes"] < entry["unified_memory_bytes"]
        assert catalog[entry["name"]].memory_bytes == entry["memory_bytes"]
        assert "working-set" in catalog[entry["name"]].note
    assert catalog["Apple M2 Ultra 192GB"].memory_bytes == 144 * 2**30


def test_gpu_round_trip_and_unique_names() -> None:
    catalog = load_gpu_catalog()
    assert len({gpu.name for gpu in catalog}) == len(catalog)
    for gpu in catalog:
        assert gpu.memory_bytes > 0 and gpu.vendor and gpu.note
        assert type(gpu).from_dict(gpu.to_dict()) == gpu


def test_gpu_catalog_with_a_duplicate_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    entry = ('[[gpu]]\nname = "X"\nvendor = "V"\nmemory_bytes = 1024\nnote = "n"\n')
    (tmp_path / "gpus.toml").write_text(entry + entry)
    monkeypatch.setenv("PLANNER_DATA_DIR", str(tmp_path))
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog()
    assert caught.value.code == "InvalidGpuCatalog"
    assert "X" in str(caught.value)


def test_apple_budget_must_match_its_fraction(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    (tmp_path / "gpus.toml").write_text(
        '[[gpu]]\nname = "M"\nvendor = "Apple"\nmemory_bytes = 1000\n'
        'unified_memory_bytes = 2000\nworking_set_fraction = 0.75\nnote = "n"\n')
    monkeypatch.setenv("PLANNER_DATA_DIR", str(tmp_path))
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog()
    assert caught.value.details["field"] == "memory_bytes"
    assert "1500" in str(caught.value)


def test_presets_state_the_figures_the_speed_estimate_reads() -> None:
    moe = load_preset("gpt-oss-120b")
    assert (moe.expert_count, moe.experts_used) == (128, 4)
    assert moe.parameter_count == 116_829_156_672
    # Shared parts whole, the routed experts (matrices and biases) 4 of 128, the input
    # embedding (vocab 201,088 x hidden 2,880) not at all: the model card's 5.1B.
    routed = 114_661_785_600 + 39_813_120
    embedding = 201_088 * 2_880
    assert moe.active_parameter_count == round(
        moe.parameter_count - embedding - routed + routed * 4 / 128)
    assert moe.active_parameter_count == pytest.approx(5.1e9, rel=0.01)
    assert moe.routed_expert_bytes == -(-114_661_785_600 * 17 // 32) + 39_813_120 * 2
    assert moe.token_embedding_bytes == embedding * 2
    # Its output head (vocab x hidden) and norm at the output.
    assert moe.output_head_parameters == embedding + 2_880
    # Gemma 3's head is its token embeddings, tied at the input, with the norm at the
    # output.
    assert load_preset("gemma-3-12b").output_head_parameters == 262_208 * 3_840 + 3_840
    dense = load_preset("llama-3.1-70b")
    assert dense.expert_count is None and dense.routed_expert_bytes == 0
    assert dense.parameter_count == 70_553_706_496
    assert ModelSpec.from_dict(moe.to_dict()) == moe


@pytest.mark.parametrize(("preset_id", "hidden"), [("llama-3.1-70b", 8192),
                                                     ("llama-3.1-405b", 16384)])
def test_an_untied_llama_looks_up_its_token_embeddings(preset_id: str, hidden: int) -> None:
    """Llama 3.1's input embedding (vocab 128,256 x hidden) is not its output head: a
    token reads one row of it, so a decode step reads and computes with every weight but
    those (as llama.cpp does, and as the published runs are estimated)."""
    spec = load_preset(preset_id)
    embedding = 128_256 * hidden
    assert spec.token_embedding_bytes == embedding * 17 // 16  # Q8_0: 8.5 bits
    assert spec.active_parameter_count == spec.parameter_count - embedding
    assert spec.layer_weight_bytes is not None
    # The input embedding with the first layer, the output head with the last.
    assert spec.layer_weight_bytes[0] > spec.layer_weight_bytes[1] + embedding
    assert spec.layer_weight_bytes[-1] > spec.layer_weight_bytes[1] + embedding


def test_a_preset_of_stated_bytes_shared_by_parameters_counts_its_parameters() -> None:
    """The design's Qwen 480B states its bytes and shares them over parts by their
    parameters: those parameters are the model's (480,154,875,392 from config.json), so
    its prefill can be estimated like any other preset's."""
    spec = load_preset("qwen3-coder-480b-a35b")
    assert spec.parameter_count == 480_154_875_392
    routed = 468_084_326_400
    embedding = 933_494_784
    assert spec.active_parameter_count == round(
        spec.parameter_count - embedding - routed + routed * 8 / 160)


def test_a_spec_refuses_more_experts_used_than_there_are() -> None:
    data = load_preset("gpt-oss-120b").to_dict()
    with pytest.raises(ModelError) as error:
        ModelSpec.from_dict({**data, "experts_used": 129})
    assert error.value.details["field"] == "experts_used"
    with pytest.raises(ModelError):
        ModelSpec.from_dict({**data, "expert_count": None})


def test_a_recurrent_model_with_no_kv_cache_plans() -> None:
    """A mamba model caches nothing per token (kv_bytes_per_token 0) and keeps its state
    per sequence: its planning fields say each layer's KV is 0, so it plans."""
    import planner

    layers = 4
    spec = ModelSpec(name="mamba", architecture="mamba", layer_count=layers,
                     native_context_length=8192, model_weight_bytes=layers * 2**20,
                     layer_weight_bytes=(2**20,) * layers, kv_bytes_per_token=0,
                     kv_cache_type="f16", kv_cache_table=(("f16", 0),), source="test",
                     layer_state_bytes_per_sequence=(268288,) * layers)
    fields = spec.planning_fields()
    assert fields["layer_kv_bytes_per_token"] == [0] * layers
    plan = planner.plan_topology({**fields, "nodes": [
        {"node_id": "a", "detected_vram_bytes": 64 * 2**20}]})
    assert plan.stage_count == 1 and plan.context_length == 8192
