"""``planner speed``, run as a real process, and its agreement with the calibration path
(validation/speed) on the same model, GPU and split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_cli import assert_user_error, run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation" / "speed"))

import calibration as speed_calibration  # noqa: E402

from planner.fleet import fleet_to_toml, parse_fleet_toml  # noqa: E402
from planner.performance import FUSED_MOE_BUILD, load_calibration  # noqa: E402

KEYS = {"estimate", "model", "gpu", "gpus", "context", "lanes", "settings", "tpot_ms",
        "tokens_per_s",
        "prompt_tokens", "ttft_ms", "prefill_tokens_per_s", "cost_per_hour_usd",
        "cost_per_million_tokens_usd", "terms", "notes"}


def _json(*args: str) -> dict:
    done = run("speed", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_json_gives_decode_prefill_and_the_terms() -> None:
    found = _json("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "2", "--context", "8k",
                  "--prompt-tokens", "2048")
    assert set(found) == KEYS and found["estimate"] is True
    assert found["tokens_per_s"] == pytest.approx(1000 / found["tpot_ms"])
    assert found["prefill_tokens_per_s"] == pytest.approx(2048 * 1000 / found["ttft_ms"])
    assert len(found["terms"]["stages"]) == 2
    assert found["notes"][0].startswith("Estimated, not measured")
    assert "cross-validated" in found["notes"][1]
    # More lanes: more tokens per second, each step slower.
    four = _json("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "2", "--context", "8k",
                 "--lanes", "4")
    assert four["tokens_per_s"] > found["tokens_per_s"] and four["tpot_ms"] > found["tpot_ms"]
    # A longer cache slows decode.
    long = _json("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "2", "--context", "64k")
    assert long["tpot_ms"] > found["tpot_ms"]


def test_a_split_prefills_a_long_prompt_faster_not_a_short_one() -> None:
    def ttft(gpus: str, prompt: str) -> float:
        return _json("llama-3.1-70b", "--gpu", "h200-141gb", "--gpus", gpus,
                     "--context", "16k", "--prompt-tokens", prompt)["ttft_ms"]
    assert ttft("4", "512") >= ttft("1", "512")
    assert ttft("4", "16384") < 0.6 * ttft("1", "16384")


def test_human_output_is_labelled_an_estimate() -> None:
    done = run("speed", "gpt-oss-120b", "--gpu", "rtx-4090", "--gpus", "4")
    assert done.returncode == 0, done.stderr
    assert "ESTIMATE" in done.stdout and "time to first token" in done.stdout
    assert "Median error on published measurements of GPUs and sources" in done.stdout


def test_a_kind_without_fp16_throughput_is_estimated_at_a_stated_stand_in(
        tmp_path: Path) -> None:
    """Apple states no FP16 figure for the M3 Ultra, only its GPU cores (60 in the 256GB
    kind's configuration, 80 in the 512GB's): its prefill is estimated from its cores at
    Apple's measured rate per lane, in proportion to them, and the notes say so, quoting
    that stand-in's own error. A kind that states neither is estimated from its
    bandwidth at the measured Apple GPUs' FLOPs per byte, and says that."""
    args = ("llama-3.1-70b", "--context", "4k", "--prompt-tokens", "4096")
    sixty = _json(*args, "--gpu", "m3-ultra-256gb")
    eighty = _json(*args, "--gpu", "m3-ultra-512gb")
    assert sixty["ttft_ms"] is not None and eighty["ttft_ms"] is not None
    assert 1.2 < sixty["ttft_ms"] / eighty["ttft_ms"] < 80 / 60 + 1e-9
    assert "FP16 throughput from shaders at their vendor's measured rate per lane" in sixty[
        "notes"][1]
    assert any("states no fp16_tflops" in note and "no clock stated" in note
               for note in sixty["notes"])
    bare = tmp_path / "bare.toml"
    bare.write_text('[[gpu]]\nid = "mac"\nname = "A Mac"\nvendor = "Apple"\n'
                    'memory = "192 GiB"\nbackend = "metal"\nmemory_type = "lpddr"\n'
                    "memory_bandwidth_bytes_per_s = 819000000000\n")
    found = _json(*args, "--gpu", "mac", "--catalog", str(bare))
    assert found["ttft_ms"] is not None and found["prefill_tokens_per_s"] > 0
    assert any("states no fp16_tflops" in note and "memory bandwidth" in note
               for note in found["notes"])
    assert "FP16 throughput from memory bandwidth" in found["notes"][1]


def test_a_fleet_file_with_numbers_and_speed_fields(tmp_path: Path) -> None:
    fleet = tmp_path / "moe.toml"
    fleet.write_text(
        '[model]\nnative_context_length = 32768\nlayer_count = 24\n'
        'model_weight_bytes = "12 GiB"\nkv_bytes_per_token = 49152\nhidden_size = 2880\n'
        'active_weight_bytes = "2 GiB"\nparameter_count = 21000000000\n'
        "expert_count = 32\nexperts_used = 4\n\n"
        '[[nodes]]\nid = "gpu"\nvram = "24 GiB"\n')
    document = parse_fleet_toml(fleet.read_text())
    assert document.model.numbers["expert_count"] == 32
    assert parse_fleet_toml(fleet_to_toml(document)).model == document.model
    one = _json(str(fleet), "--gpu", "rtx-4090")
    eight = _json(str(fleet), "--gpu", "rtx-4090", "--lanes", "8")
    assert one["ttft_ms"] is not None
    # Eight lanes read more distinct experts: each step is slower than one lane's.
    assert eight["tpot_ms"] > 1.2 * one["tpot_ms"]
    bad = tmp_path / "bad.toml"
    bad.write_text(fleet.read_text().replace("experts_used = 4\n", ""))
    assert_user_error(run("speed", str(bad), "--gpu", "rtx-4090"), 2, "experts_used")


@pytest.mark.parametrize(("args", "named"), [
    (("llama-3.1-70b", "--gpu", "no-such-gpu"), "--gpu"),
    (("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "0"), "--gpus"),
    (("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--context", "lots"), "--context"),
    (("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--lanes", "0"), "--lanes"),
    (("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--gpus", "81"), "--gpus"),
    (("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--kv-cache-type", "q9"), "q9"),
])
def test_bad_input_is_named(args: tuple[str, ...], named: str) -> None:
    assert_user_error(run("speed", *args), 2, named)


def test_the_command_and_the_calibration_agree_on_a_measured_run() -> None:
    """The H100 PCIe row of llama3-70b Q4_K_M on 4 GPUs (tg512): ``planner speed`` on the
    shipped catalog's H100 PCIe gives the calibration's estimate, within the differences
    of their inputs (the command reads the whole cache at the end of the context; the
    calibration at the mean of the run; the preset is Llama 3.1)."""
    rows = speed_calibration.load_rows()
    row = next(r for r in rows if r.gpu.kind == "h100-pcie-80gb" and r.gpu_count == 4
               and r.model["id"] == "llama3-70b" and r.test == "tg512"
               and r.file_bytes < 50 * 2**30)
    expected_ms = speed_calibration.predict_ms(row, load_calibration())
    found = _json("llama-3.1-70b", "--gpu", "h100-pcie-80gb", "--gpus", "4", "--context",
                  "256", "--flash-attn", "off")
    # The same shapes and GPU, other weights (the preset's Q8_0, the file's Q4_K_M): scaled
    # by the bytes, the decode times agree within 15 %.
    preset_bytes = 74963313152
    assert found["tpot_ms"] == pytest.approx(expected_ms * preset_bytes / row.file_bytes,
                                             rel=0.15)


def test_a_shipped_example_fleet_gets_its_prefill_estimated() -> None:
    """The design's Qwen 480B fleet names a preset whose bytes are the design's figure
    shared by parameters: its parameters are known, so its time to first token is."""
    found = _json(str(ROOT / "data" / "fleets" / "qwen480b-5x80.toml"), "--gpu",
                  "h200-141gb", "--gpus", "4", "--prompt-tokens", "2000")
    assert found["ttft_ms"] is not None and found["ttft_ms"] > 0
    assert not any("parameter count is unknown" in note for note in found["notes"])


CARD_CATALOG = ('[[gpu]]\nid = "card"\nname = "Card"\nvendor = "V"\n'
                'memory_bytes = 85899345920\nnote = "n"\n'
                "memory_bandwidth_bytes_per_s = 1000000000000\n"
                'memory_bandwidth_source = "s"\nmemory_type = "hbm"\nbackend = "cuda"\n'
                'fp16_tflops = 200\nfp16_tflops_source = "s"\n')


def _sources(tmp_path: Path) -> dict[str, str]:
    """The same kind of model three ways: a preset, a GGUF file and fleet files (one
    naming the preset, one typing the numbers with the speed fields)."""
    from test_models_gguf import llama_metadata, llama_tensors, write_gguf

    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, "llama", llama_metadata(), llama_tensors())
    named = tmp_path / "named.toml"
    named.write_text('[model]\npreset = "llama-3.1-70b"\n\n[[nodes]]\nid = "n"\n'
                     'vram = "80 GiB"\n')
    numbers = tmp_path / "numbers.toml"
    numbers.write_text(
        '[model]\nnative_context_length = 131072\nlayer_count = 80\n'
        'model_weight_bytes = "70 GiB"\nkv_bytes_per_token = 327680\nhidden_size = 8192\n'
        "parameter_count = 70553706496\n\n"
        '[[nodes]]\nid = "n"\nvram = "80 GiB"\n')
    return {"preset": "llama-3.1-70b", "gguf": str(gguf), "named": str(named),
            "numbers": str(numbers)}


@pytest.mark.parametrize("source", ["preset", "gguf", "named", "numbers"])
def test_every_flag_works_with_every_kind_of_model(tmp_path: Path, source: str) -> None:
    catalog = tmp_path / "cards.toml"
    catalog.write_text(CARD_CATALOG)
    model = _sources(tmp_path)[source]
    gpus = "4" if source != "gguf" else "2"  # the tiny GGUF file has 4 layers
    base = _json(model, "--gpu", "card", "--catalog", str(catalog), "--gpus", gpus,
                 "--context", "4k", "--prompt-tokens", "2048")
    assert set(base) == KEYS and base["gpu"] == "card" and base["gpus"] == int(gpus)
    assert len(base["terms"]["stages"]) == int(gpus)
    for key in ("tpot_ms", "tokens_per_s", "prefill_tokens_per_s", "ttft_ms"):
        assert base[key] is not None and base[key] > 0, key
    assert base["prefill_tokens_per_s"] == pytest.approx(2048 * 1000 / base["ttft_ms"])
    common = (model, "--gpu", "card", "--catalog", str(catalog), "--gpus", gpus)
    longer = _json(*common, "--context", "8k", "--prompt-tokens", "2048")
    assert sum(s["kv_read_bytes"] for s in longer["terms"]["stages"]) > sum(
        s["kv_read_bytes"] for s in base["terms"]["stages"])
    lanes = _json(*common, "--context", "4k", "--prompt-tokens", "2048", "--lanes", "4")
    assert lanes["lanes"] == 4 and lanes["tokens_per_s"] > base["tokens_per_s"]
    prompt = _json(*common, "--context", "4k", "--prompt-tokens", "4096")
    assert prompt["ttft_ms"] > base["ttft_ms"]
    if source == "numbers":
        assert_user_error(run("speed", *common, "--kv-cache-type", "q4_0"), 2,
                          "--kv-cache-type")
    else:
        small = _json(*common, "--context", "4k", "--prompt-tokens", "2048",
                      "--kv-cache-type", "q4_0")
        assert sum(s["kv_read_bytes"] for s in small["terms"]["stages"]) < sum(
            s["kv_read_bytes"] for s in base["terms"]["stages"])


def test_a_catalog_adds_to_the_shipped_kinds_and_replaces_the_same_id(tmp_path: Path) -> None:
    """``--catalog`` adds its kinds to the shipped ones: a shipped kind still runs beside
    the new one, and an entry with a shipped kind's id replaces it."""
    catalog = tmp_path / "cards.toml"
    catalog.write_text(CARD_CATALOG)
    assert _json("llama-3.1-70b", "--gpu", "card", "--catalog", str(catalog))["gpu"] == "card"
    shipped = _json("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--catalog", str(catalog))
    assert shipped["gpu"] == "h100-sxm-80gb"
    slower = tmp_path / "slower.toml"
    slower.write_text(CARD_CATALOG.replace('id = "card"', 'id = "h100-sxm-80gb"').replace(
        "1000000000000", "2000000000000"))
    replaced = _json("llama-3.1-70b", "--gpu", "h100-sxm-80gb", "--catalog", str(slower))
    assert replaced["tpot_ms"] > 1.2 * shipped["tpot_ms"]


def test_an_apple_kind_stating_its_cores_only_says_where_its_fp16_figure_comes_from(
        tmp_path: Path) -> None:
    """An M3 Max typed as Apple states it, 40 GPU cores and no teraflops or clock,
    prefills at its cores' lanes times Apple's measured rate per lane, as fast as the
    same kind stating that figure; the notes say where the figure comes from and quote
    the error measured for such kinds, not the bandwidth stand-in's."""
    entry = ('[[gpu]]\nid = "m3-max"\nname = "Apple M3 Max 40-core GPU"\nvendor = "Apple"\n'
             'memory = "48 GiB"\nbackend = "metal"\nmemory_type = "lpddr"\n'
             "memory_bandwidth_bytes_per_s = 400000000000\n")
    cores = tmp_path / "cores.toml"
    cores.write_text(entry + 'shader_count = 40\nshader_source = "40-core GPU"\n')
    per_lane = load_calibration().fallback_gflops_per_lane["Apple"]
    stated = tmp_path / "stated.toml"
    stated.write_text(entry + f"fp16_tflops = {40 * 128 * per_lane / 1000}\n")
    args = ("gpt-oss-20b", "--gpu", "m3-max", "--context", "4k", "--prompt-tokens", "2048")
    by_cores = _json(*args, "--catalog", str(cores))
    by_figure = _json(*args, "--catalog", str(stated))
    assert by_cores["ttft_ms"] == pytest.approx(by_figure["ttft_ms"], rel=1e-6)
    notes = " ".join(by_cores["notes"])
    assert "taken from its shaders at their vendor's measured rate per lane" in notes
    assert "FP16 throughput from shaders at their vendor's measured rate per lane" in notes
    # A dense model's prompt quotes the error of such kinds; a mixture of experts' the
    # larger of that and the error of mixtures of experts' prompts, and says which.
    lanes = load_calibration().error("prefill", "metal", "lpddr", "lanes")
    dense = " ".join(_json("llama-3.1-8b", *args[1:], "--catalog", str(cores))["notes"])
    assert lanes is not None and f"prefill {lanes.median_abs_error:.0%}" in dense
    assert "mixtures of experts" not in dense
    experts = load_calibration().error("prefill", "metal", "lpddr", "lanes", experts=True)
    assert experts is not None
    if experts.model == "mixtures of experts":
        assert experts.median_abs_error > lanes.median_abs_error
        assert (f"prefill {experts.median_abs_error:.0%} (mixtures of experts on every "
                "backend)") in notes
    else:
        assert experts == lanes and f"prefill {lanes.median_abs_error:.0%}" in notes
        assert "mixtures of experts" not in notes


def test_an_fp32_accumulate_figure_for_a_known_kind_is_refused(tmp_path: Path) -> None:
    """NVIDIA's FP32-accumulate tensor figure for an RTX 4090 is half the FP16-accumulate
    one the catalog asks for: typed in for the shipped kind, it is refused by name."""
    catalog = tmp_path / "half.toml"
    catalog.write_text('[[gpu]]\nid = "rtx-4090"\nname = "RTX 4090"\nmemory = "24 GiB"\n'
                       "memory_bandwidth_bytes_per_s = 1008000000000\nfp16_tflops = 165.2\n"
                       'backend = "cuda"\nmemory_type = "gddr"\n')
    assert_user_error(run("speed", "llama-3.1-70b", "--gpu", "rtx-4090", "--catalog",
                          str(catalog)), 2, "FP32-accumulate")


def test_the_run_settings_change_the_estimate_as_llama_cpp_would() -> None:
    base = ("llama-3.1-70b", "--gpu", "rtx-4090", "--gpus", "4", "--context", "32k",
            "--prompt-tokens", "512")
    found = _json(*base)
    assert found["settings"] == {"backend": None, "flash_attn": True, "ubatch": 512,
                                 "batch": 2048, "depth": 0, "build": None, "threads": None}
    # A prompt after 30,000 cached tokens attends to them: slower than the same at 0.
    deep = _json(*base, "--depth", "30000")
    assert deep["ttft_ms"] > 1.5 * found["ttft_ms"]
    assert deep["settings"]["depth"] == 30000
    # Without flash attention the estimate says so, and charges each score's bytes.
    off = _json(*base, "--depth", "30000", "--flash-attn", "off")
    assert off["settings"]["flash_attn"] is False and off["ttft_ms"] != deep["ttft_ms"]
    # A build before MMQ staged the quantized weights as FP16: a slower prompt.
    assert _json(*base, "--build", "3000")["ttft_ms"] > found["ttft_ms"]
    # A mixture of experts decodes at more operations a layer before its GPU backend
    # fused the router and the expert sums; a dense model is the same either way.
    moe = ("gpt-oss-20b", "--gpu", "rtx-4090", "--context", "4k")
    before = _json(*moe, "--build", str(FUSED_MOE_BUILD["cuda"] - 1))
    assert before["tpot_ms"] > 1.05 * _json(*moe)["tpot_ms"]
    assert _json(*base, "--build", str(FUSED_MOE_BUILD["cuda"] - 1))["tpot_ms"] == (
        found["tpot_ms"])
    # Another backend: its own figures, and its own error quoted.
    vulkan = _json(*base, "--backend", "vulkan")
    assert vulkan["tpot_ms"] != found["tpot_ms"]
    assert "vulkan on gddr memory" in vulkan["notes"][1]
    assert "cuda on gddr memory" in found["notes"][1]
    # On one GPU, micro-batches of 64 tokens read the weights eight times as often as of
    # 512 (on four, they also fill the pipeline: the estimate may gain from them).
    one = ("llama-3.1-70b", "--gpu", "h200-141gb", "--context", "32k", "--prompt-tokens",
           "512")
    assert _json(*one, "--ubatch", "64")["ttft_ms"] > _json(*one)["ttft_ms"]


def test_a_cpu_computes_on_the_cores_its_threads_use(tmp_path: Path) -> None:
    """llama-bench's ``-t``: on the CPU backend a prompt's products run on one core a
    thread, at most every core; a GPU backend's estimate does not change with it, and
    says so."""
    catalog = tmp_path / "cpus.toml"
    catalog.write_text('[[gpu]]\nid = "sixteen-cores"\nname = "A 16-core CPU"\n'
                       'vendor = "AMD"\nmemory = "128 GiB"\nbackend = "cpu"\n'
                       'memory_type = "ddr"\nmemory_bandwidth_bytes_per_s = 96000000000\n'
                       "core_count = 16\nboost_clock_mhz = 5000\nsimd_width_bits = 512\n"
                       '[[gpu]]\nid = "no-clock"\nname = "A CPU stating no clock"\n'
                       'vendor = "Apple"\nmemory = "36 GiB"\nbackend = "cpu"\n'
                       'memory_type = "lpddr"\nmemory_bandwidth_bytes_per_s = 410000000000\n'
                       "core_count = 14\nsimd_width_bits = 128\n"
                       '[[gpu]]\nid = "shaders-only"\nname = "A GPU stating shaders"\n'
                       'vendor = "AMD"\nmemory = "16 GiB"\nbackend = "vulkan"\n'
                       'memory_type = "gddr"\nmemory_bandwidth_bytes_per_s = 640000000000\n'
                       'shader_count = 4096\nboost_clock_mhz = 2970\narchitecture = "rdna4"\n')
    args = ("gemma-3-12b", "--gpu", "sixteen-cores", "--catalog", str(catalog),
            "--context", "4k", "--prompt-tokens", "512")
    every = _json(*args)
    four = _json(*args, "--threads", "4")
    assert four["settings"]["threads"] == 4 and every["settings"]["threads"] is None
    # A prompt's products are most of its time: a quarter of the cores, nearly four
    # times as long; a decode step's products add to its read, so it slows too.
    assert 3.0 < four["ttft_ms"] / every["ttft_ms"] <= 4.0
    assert four["tpot_ms"] > every["tpot_ms"]
    # More threads than cores share the cores' vector units.
    assert _json(*args, "--threads", "64")["ttft_ms"] == every["ttft_ms"]
    gpu = ("gemma-3-12b", "--gpu", "h100-sxm-80gb", "--context", "4k")
    on_gpu = _json(*gpu, "--threads", "4")
    assert on_gpu["ttft_ms"] == _json(*gpu)["ttft_ms"]
    assert any("4 CPU threads do not enter the estimate on the cuda backend" in note
               for note in on_gpu["notes"])
    # A CPU stating no clock computes at a stand-in from its bandwidth, a figure of no
    # cores: the threads leave it, and the notes say so.
    unclocked = ("gemma-3-12b", "--gpu", "no-clock", "--catalog", str(catalog),
                 "--context", "4k", "--prompt-tokens", "512")
    eight = _json(*unclocked, "--threads", "8")
    assert eight["ttft_ms"] == _json(*unclocked)["ttft_ms"]
    assert any("no-clock's FP16 throughput is not taken from its cores and clock, so 8 "
               "threads do not change it" in note for note in eight["notes"])
    for bad in ("0", "513"):
        assert_user_error(run("speed", *args, "--threads", bad), 2,
                          f"--threads: must be from 1 to 512 (got {bad})")


def test_a_preset_takes_the_size_of_the_file_run() -> None:
    """gpt-oss-20b's preset counts its attention at 16 bits (12.82 GiB); the published
    file is 11.27 GiB: with ``--file-size`` the estimate reads that file's bytes."""
    preset = _json("gpt-oss-20b", "--gpu", "rtx-4090")
    sized = _json("gpt-oss-20b", "--gpu", "rtx-4090", "--file-size", "11.27GiB")
    read = sum(s["weight_read_bytes"] for s in sized["terms"]["stages"])
    assert read < sum(s["weight_read_bytes"] for s in preset["terms"]["stages"])
    assert sized["tpot_ms"] < preset["tpot_ms"]


def test_a_fleet_file_s_preset_is_estimated_at_its_file_s_size(tmp_path: Path) -> None:
    """A fleet file's ``file_bytes`` is read as ``--file-size`` is, and ``--file-size``
    given with the fleet file states the size in its place."""
    fleet = tmp_path / "gpt-oss.toml"
    fleet.write_text('[model]\npreset = "gpt-oss-20b"\nfile_bytes = "11.27 GiB"\n\n'
                     '[[nodes]]\nid = "n"\nvram = "24 GiB"\n')
    common = ("--gpu", "rtx-4090")
    sized = _json("gpt-oss-20b", *common, "--file-size", "11.27GiB")
    assert _json(str(fleet), *common)["tpot_ms"] == sized["tpot_ms"]
    assert (_json(str(fleet), *common, "--file-size", "12.82GiB")["tpot_ms"]
            == _json("gpt-oss-20b", *common, "--file-size", "12.82GiB")["tpot_ms"]
            > sized["tpot_ms"])
    assert_user_error(run("speed", str(fleet), *common, "--file-size", "1KB"), 2,
                      "--file-size: a file of 1,000 bytes cannot hold gpt-oss-20b")


@pytest.mark.parametrize(("kind", "backend", "said"), [
    ("rtx-4090", "cpu", "--backend: rtx-4090 is a GPU kind (its backend: cuda): llama.cpp's "
     "cpu backend runs on a CPU, which a catalog kind with backend = \"cpu\" describes "
     "(got 'cpu')"),
    ("shaders-only", "cpu", "--backend: shaders-only is a GPU kind (its backend: vulkan)"),
    ("sixteen-cores", "cuda", "--backend: sixteen-cores is a CPU kind: llama.cpp's cpu "
     "backend is the one it runs (got 'cuda')"),
    ("sixteen-cores", "vulkan", "--backend: sixteen-cores is a CPU kind"),
])
def test_a_kind_is_not_estimated_on_a_backend_of_the_other_kind_of_device(
        tmp_path: Path, kind: str, backend: str, said: str) -> None:
    """A GPU kind on the CPU backend was estimated at the GPU's bandwidth and FLOPS (an RTX
    4090 prefilling 8,812 tokens/s "on the CPU"), and a CPU kind on a GPU backend at its
    cores with a GPU's figures: a silently wrong estimate. Each is refused by the option."""
    catalog = tmp_path / "mine.toml"
    catalog.write_text('[[gpu]]\nid = "sixteen-cores"\nname = "A 16-core CPU"\n'
                       'vendor = "AMD"\nmemory = "128 GiB"\nbackend = "cpu"\n'
                       'memory_type = "ddr"\nmemory_bandwidth_bytes_per_s = 96000000000\n'
                       "core_count = 16\nboost_clock_mhz = 5000\nsimd_width_bits = 512\n"
                       '[[gpu]]\nid = "shaders-only"\nname = "A GPU stating shaders"\n'
                       'vendor = "AMD"\nmemory = "16 GiB"\nbackend = "vulkan"\n'
                       'memory_type = "gddr"\nmemory_bandwidth_bytes_per_s = 640000000000\n'
                       'shader_count = 4096\nboost_clock_mhz = 2970\narchitecture = "rdna4"\n')
    assert_user_error(run("speed", "gemma-3-12b", "--gpu", kind, "--catalog", str(catalog),
                          "--context", "4k", "--backend", backend), 2, said)
    # The same device's own backends stay open to it: a GPU's others, a CPU's own.
    other = {"rtx-4090": "vulkan", "shaders-only": "rocm", "sixteen-cores": "cpu"}[kind]
    assert _json("gemma-3-12b", "--gpu", kind, "--catalog", str(catalog), "--context", "4k",
                 "--backend", other)["tpot_ms"] > 0


@pytest.mark.parametrize(("kind", "backend", "said"), [
    ("rtx-4090", "rocm", "--backend: rtx-4090 is an NVIDIA GPU: llama.cpp's rocm backend "
     "runs on AMD's GPUs only (NVIDIA's run cuda or vulkan; got 'rocm')"),
    ("rtx-4090", "metal", "--backend: rtx-4090 is an NVIDIA GPU: llama.cpp's metal backend "
     "runs on Apple's GPUs only"),
    ("rtx-4090", "sycl", "runs on Intel's GPUs only"),
    ("instinct-mi300x", "cuda", "--backend: instinct-mi300x is an AMD GPU: llama.cpp's cuda "
     "backend runs on NVIDIA's GPUs only (AMD's run rocm or vulkan; got 'cuda')"),
    ("m2-ultra-192gb", "vulkan", None),
    ("instinct-mi300x", "vulkan", None),
])
def test_a_gpu_is_not_estimated_on_another_vendors_backend(
        kind: str, backend: str, said: str | None) -> None:
    """`--gpu rtx-4090 --backend rocm` was estimated, as if llama.cpp's HIP backend ran on
    an NVIDIA card (and an Intel Arc on ROCm, a Radeon on CUDA): an estimate of a run that
    cannot happen. CUDA runs on NVIDIA's GPUs, ROCm on AMD's, Metal on Apple's and SYCL on
    Intel's (llama.cpp b11434's docs/build.md and docs/backend/SYCL.md); Vulkan and RPC on
    any."""
    result = run("speed", "gemma-3-12b", "--gpu", kind, "--context", "4k",
                 "--backend", backend)
    if said is None:
        assert result.returncode == 0, result.stderr
    else:
        assert_user_error(result, 2, said)


@pytest.mark.parametrize("source", ["preset", "gguf", "named"])
def test_a_quantized_v_cache_without_flash_attention_is_refused(tmp_path: Path,
                                                                 source: str) -> None:
    """`--kv-cache-type q4_0 --flash-attn off` was estimated, though llama.cpp refuses a
    quantized V cache without flash attention (`planner memory` refuses it too): an
    estimate of a run that cannot start. A fleet file's own quantized cache type counts
    as the option does."""
    model = _sources(tmp_path)[source]
    gpus = "2" if source == "gguf" else "4"
    common = (model, "--gpu", "rtx-4090", "--gpus", gpus, "--context", "4k")
    if source == "named":
        typed = tmp_path / "typed.toml"
        typed.write_text(Path(model).read_text().replace(
            'preset = "llama-3.1-70b"', 'preset = "llama-3.1-70b"\nkv_cache_type = "q8_0"'))
        assert_user_error(run("speed", str(typed), *common[1:], "--flash-attn", "off"), 2,
                          "--flash-attn", "q8_0", "flash attention")
    assert_user_error(run("speed", *common, "--kv-cache-type", "q4_0", "--flash-attn",
                          "off"), 2, "--flash-attn", "q4_0", "flash attention")
    # Each alone runs, as llama.cpp runs it: a quantized cache with flash attention, and
    # an F16 one without.
    assert _json(*common, "--kv-cache-type", "q4_0", "--flash-attn", "on")["tpot_ms"] > 0
    assert _json(*common, "--kv-cache-type", "f16", "--flash-attn", "off")["tpot_ms"] > 0


@pytest.mark.parametrize("source", ["gguf", "numbers"])
def test_a_file_size_for_a_model_whose_bytes_are_known_is_refused(tmp_path: Path,
                                                                  source: str) -> None:
    """`--file-size` gives a preset the size of the file run. A GGUF file's tensors are
    read from the file, and numbers state model_weight_bytes: `--file-size 1GiB` on
    gemma-3-270m's 236 MiB GGUF silently estimated a model four times its size."""
    model = _sources(tmp_path)[source]
    common = (model, "--gpu", "rtx-4090", "--gpus", "2", "--context", "4k")
    assert_user_error(run("speed", *common, "--file-size", "1GiB"), 2, "--file-size",
                      "GGUF file" if source == "gguf" else "model_weight_bytes")
    fleet = tmp_path / "gguf.toml"
    fleet.write_text(f'[model]\ngguf = "{Path(_sources(tmp_path)["gguf"]).name}"\n\n'
                     '[[nodes]]\nid = "n"\nvram = "80 GiB"\n')
    assert_user_error(run("speed", str(fleet), *common[1:], "--file-size", "1GiB"), 2,
                      "--file-size", "GGUF file")
    assert _json(*common)["tpot_ms"] > 0

