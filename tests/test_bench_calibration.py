"""``planner calibrate``: llama-bench's output in its four forms read back, hostile output
refused by name, a fit that recovers a known calibration and measures its own error, and
``--calibration`` on speed, plan, size, verify and the workbench, whose estimates then say
they use the user's own measurements."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import assert_user_error
from test_cli import run as run_planner

from planner.limits import MAX_BENCH_BYTES
from planner.llamacpp.bench import (
    fit_calibration,
    run_estimate,
    run_shape,
    usable_runs,
)
from planner.llamacpp.bench_output import (
    FLASH_ATTN_AUTO_BUILD,
    BenchError,
    BenchRun,
    parse_bench,
)
from planner.models import GpuModel, load_gpu_catalog, load_preset
from planner.models.gpus import catalog_kind
from planner.performance import (
    FUSED_MOE_BUILD,
    MMQ_DEFAULT_BUILD,
    KindCalibration,
    PerformanceError,
    load_calibration,
    read_calibration,
    set_calibration,
    shipped_calibration,
    use_calibration,
)

ROOT = Path(__file__).resolve().parent.parent
MESH = ROOT / "validation" / "results" / "mesh"
PRESET = "gpt-oss-20b"


def recorded(name: str) -> tuple[BenchRun, ...]:
    return parse_bench((MESH / name).read_text(), name)


# -- reading llama-bench's output -------------------------------------------------------------


def test_the_recorded_json_and_markdown_of_one_run_are_the_same_tests() -> None:
    from_json, from_md = recorded("bench.json"), recorded("bench.md")
    assert [run.test for run in from_json] == [run.test for run in from_md]
    assert {run.phase for run in from_json} == {"prefill", "decode"}
    for a, b in zip(from_json, from_md, strict=True):
        assert round(a.tokens_per_s, 2) == b.tokens_per_s
        assert abs(a.model_bytes - b.model_bytes) < 0.01 * 2**20  # markdown rounds MiB
    kept, skipped = usable_runs([*from_json, *from_md], load_preset(PRESET))
    # Of another model than the one given, all are left out; of the same, once each.
    assert not kept and len(skipped) == len(from_json) + len(from_md)


def test_the_recorded_csv_is_a_second_run_of_the_same_tests() -> None:
    assert [run.test for run in recorded("bench.csv")] == [
        run.test for run in recorded("bench.json")]


MARKDOWN = "\n".join([
    "llama_model_loader: loaded meta data",
    "| model                  |       size |     params | backend | ngl | n_ubatch |"
    "            test |                  t/s |",
    "| ---------------------- | ---------: | ---------: | ------- | --: | -------: |"
    " --------------: | -------------------: |",
    *[f"| llama 8B Q4_K - Medium |   4.58 GiB |     8.03 B | CUDA    |  99 | {ubatch:>8} |"
      f" {test:>15} | {rate:>20} |" for ubatch, test, rate in (
          (512, "pp512", "4871.44 ± 12.98"), (256, "pp512 @ d4096", "3000.00 ± 1.00"),
          (512, "pp64+tg32", "400.00 ± 2.00"), (512, "tg128 @ d512", "130.12 ± 0.54"))],
    "",
    "build: b11434 (11434)",
]) + "\n"


def test_markdown_with_extra_columns_depths_and_mixed_tests() -> None:
    runs = parse_bench(MARKDOWN, "x.md")
    assert [(r.test, r.phase, r.depth, r.ubatch) for r in runs] == [
        ("pp512", "prefill", 0, 512), ("pp512 @ d4096", "prefill", 4096, 256),
        ("pp64+tg32", "mixed", 0, 512), ("tg128 @ d512", "decode", 512, 512)]
    assert runs[0].model_bytes == round(4.58 * 2**30) and runs[0].backend == "CUDA"
    assert runs[0].tokens_per_s == 4871.44 and runs[0].stddev_tokens_per_s == 12.98


@pytest.mark.parametrize(("stated", "flash_attn"), [
    (1, True), (0, False), (-1, None), (True, True), (False, False), ("auto", None),
    ("on", True), ("off", False)])
def test_a_run_states_its_build_and_flash_attention(stated: object,
                                                     flash_attn: bool | None) -> None:
    """llama-bench's JSON states the build and flash attention (-1: llama.cpp's own
    choice); a build of 0 is llama-bench knowing none."""
    row = {"n_prompt": 512, "n_gen": 0, "avg_ts": 900.0, "build_number": 6550,
           "flash_attn": stated}
    (run,) = parse_bench(json.dumps([row]), "x.json")
    assert (run.build, run.flash_attn) == (6550, flash_attn)
    (unknown,) = parse_bench(json.dumps([{**row, "build_number": 0}]), "x.json")
    assert unknown.build is None
    assert run.to_dict()["build"] == 6550 and run.to_dict()["flash_attn"] == flash_attn


def test_a_run_states_its_threads_and_is_estimated_on_that_many_cores() -> None:
    """llama-bench's ``n_threads`` (JSON, CSV) and ``threads`` (markdown, printed for the
    CPU backend) reach the run's estimate: on the CPU backend, its cores that compute."""
    row = {"n_prompt": 512, "n_gen": 0, "avg_ts": 90.0, "n_threads": 8}
    (run,) = parse_bench(json.dumps([row]), "x.json")
    assert run.threads == 8 and run.to_dict()["threads"] == 8
    (unstated,) = parse_bench(json.dumps([{**row, "n_threads": ""}]), "x.json")
    assert unstated.threads is None
    text = ("| model | size | backend | threads | test | t/s |\n"
            "| --- | --: | --- | --: | --: | --: |\n"
            "| m | 4.58 GiB | CPU | 4 | pp512 | 51.00 ± 0.20 |\n")
    (table,) = parse_bench(text, "x.md")
    assert table.threads == 4
    spec = load_preset(PRESET)
    cpu = GpuModel("Sixteen cores", 64 * 2**30, id="sixteen-cores", backend="cpu",
                   memory_type="ddr", memory_bandwidth_bytes_per_s=96 * 10**9,
                   core_count=16, boost_clock_mhz=5000, simd_width_bits=512)
    shape, calibration = run_shape(spec, cpu), shipped_calibration()
    prompt = replace(table, model=spec.name, model_bytes=spec.model_weight_bytes)
    four = run_estimate(prompt, shape, calibration)
    every = run_estimate(replace(prompt, threads=None), shape, calibration)
    assert four is not None and every is not None and 3.0 < every / four <= 4.0
    assert run_estimate(replace(prompt, threads=16), shape, calibration) == every


def test_markdown_states_the_build_under_its_table_and_flash_attention_in_fa() -> None:
    text = ("| model | size | test | t/s | fa |\n| --- | --: | --: | --: | -: |\n"
            "| m | 4.58 GiB | pp512 | 4871.44 ± 12.98 | 0 |\n"
            "| m | 4.58 GiB | tg128 | 150.10 ± 0.20 | 1 |\n\nbuild: 1a2b3c4d (6550)\n")
    runs = parse_bench(text, "x.md")
    assert [(r.build, r.flash_attn) for r in runs] == [(6550, False), (6550, True)]


def test_a_table_without_an_fa_column_ran_llama_bench_s_default_of_its_build() -> None:
    """llama-bench's markdown prints ``fa`` only where the setting differs from its
    default, which was off until pull request 23714 made it auto (on) from b9437: a table
    without the column is estimated without flash attention before b9437, with it from
    b9437 and where no build is stated (a current build)."""
    spec, kind = load_preset(PRESET), kind_4090()
    shape, calibration = run_shape(spec, kind), shipped_calibration()
    table = ("| model | size | test | t/s |\n| --- | --: | --: | --: |\n"
             "| m | 4.58 GiB | tg128 @ d16384 | 50.00 ± 0.20 |\n")
    for build, flash_attn in ((FLASH_ATTN_AUTO_BUILD - 1, False),
                              (FLASH_ATTN_AUTO_BUILD, True), (None, True)):
        line = "" if build is None else f"\nbuild: 1a2b3c4d ({build})\n"
        (run,) = parse_bench(table + line, "x.md")
        assert run.flash_attn is None and run.ran_flash_attn is flash_attn
        deep = replace(run, model=spec.name, model_bytes=spec.model_weight_bytes)
        assert run_estimate(deep, shape, calibration) == run_estimate(
            replace(deep, flash_attn=flash_attn), shape, calibration), build


def test_a_run_is_estimated_at_its_own_build_and_flash_attention() -> None:
    """A run of an older build or without flash attention is estimated so, not as a
    current build with flash attention (what its factors then measure)."""
    spec, kind = load_preset(PRESET), kind_4090()
    shape, calibration = run_shape(spec, kind), shipped_calibration()
    deep = BenchRun("x:1", spec.name, spec.model_weight_bytes, 0, 128, 16384, 1.0)
    with_fa = run_estimate(deep, shape, calibration)
    assert run_estimate(replace(deep, flash_attn=True), shape, calibration) == with_fa
    assert run_estimate(replace(deep, flash_attn=False), shape, calibration) != with_fa
    decode = replace(deep, depth=0)
    fused = run_estimate(decode, shape, calibration)
    assert run_estimate(replace(decode, build=FUSED_MOE_BUILD["cuda"] - 1), shape,
                        calibration) < fused
    prompt = BenchRun("x:2", spec.name, spec.model_weight_bytes, 512, 0, 0, 1.0)
    assert (run_estimate(replace(prompt, build=MMQ_DEFAULT_BUILD - 1), shape, calibration)
            < run_estimate(prompt, shape, calibration))


@pytest.mark.parametrize(("text", "words"), [
    ("", "not llama-bench output"),
    ("hello,world\n1,2\n", "not llama-bench output"),
    ("[1, 2]", "a list of objects"),
    ('[{"n_prompt": 1, "n_gen": 0}]', "no avg_ts"),
    ('[{"n_prompt": -1, "n_gen": 0, "avg_ts": 5}]', "n_prompt must be a whole number"),
    ('[{"n_prompt": 1e400, "n_gen": 0, "avg_ts": 5}]', "n_prompt must be a whole number"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": NaN}]', "avg_ts must be a number"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 1e300}]', "avg_ts must be a number"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 0}]', "a test that ran"),
    ('[{"n_prompt": 0, "n_gen": 0, "avg_ts": 3}]', "a test of no tokens"),
    ('[{"n_prompt": true, "n_gen": 0, "avg_ts": 3}]', "n_prompt must be a whole number"),
    ("[" * 100_000, "not llama-bench's JSON"),
    ("| model | test | t/s |\n| --- | --- | --- |\n| m | pp1 | fast |\n", "is not"),
    ("| model | test | t/s |\n| --- | --- | --- |\n| m | xx1 | 1 ± 1 |\n", "is not ppN"),
    ("| model | test | t/s |\n| --- | --- | --- |\n| m | pp1 |\n", "2 cells where"),
    ("| model | t/s |\n| m | 1 |\n", "without a test column"),
    ("n_prompt,n_gen,avg_ts\n\u0661,0,5\n", "n_prompt must be a whole number"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "flash_attn": "maybe"}]',
     "flash_attn must be on, off or auto"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "flash_attn": 2}]',
     "flash_attn must be on, off or auto"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "build_number": "b6550"}]',
     "build_number must be a whole number"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "build_number": 10000000}]',
     "build_number must be a whole number"),
    ("| model | test | t/s | fa |\n| --- | --- | --- | --- |\n| m | pp1 | 1 ± 1 | 3 |\n",
     "flash_attn must be on, off or auto"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "n_threads": 0}]',
     "n_threads must be a whole number from 1 to 512 (got 0)"),
    ('[{"n_prompt": 4, "n_gen": 0, "avg_ts": 3, "n_threads": 513}]',
     "n_threads must be a whole number from 1 to 512 (got 513)"),
    ("| model | test | t/s | threads |\n| --- | --- | --- | --- |\n| m | pp1 | 1 ± 1 | x |\n",
     "n_threads must be a whole number"),
])
def test_output_that_is_not_llama_benchs_is_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(BenchError) as caught:
        parse_bench(text, "x")
    assert caught.value.code == "InvalidBench" and words in caught.value.message


def test_a_file_too_large_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(BenchError) as caught:
        parse_bench("x" * (MAX_BENCH_BYTES + 1), "big")
    assert "more than" in caught.value.message


def _plain(run: BenchRun) -> None:
    assert run.prompt_tokens or run.decode_tokens
    assert math.isfinite(run.tokens_per_s) and run.tokens_per_s > 0
    assert run.phase in ("prefill", "decode", "mixed")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_gives_runs_or_a_named_error(text: str) -> None:
    try:
        runs = parse_bench(text, "r")
    except BenchError as error:
        assert error.code in BenchError.codes
        return
    for run in runs:
        _plain(run)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_recorded_output_mutated_gives_runs_or_a_named_error(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["bench.json", "bench.md", "bench.csv"]))
    text = list((MESH / name).read_text())
    for _ in range(data.draw(st.integers(1, 6))):
        where = data.draw(st.integers(0, len(text)))
        text[where:where + data.draw(st.integers(0, 5))] = data.draw(st.text(max_size=5))
    try:
        runs = parse_bench("".join(text), name)
    except BenchError as error:
        assert error.code in BenchError.codes
        return
    for run in runs:
        _plain(run)


# -- the fit -------------------------------------------------------------------------------------


def kind_4090() -> GpuModel:
    return catalog_kind(load_gpu_catalog(), "rtx-4090")


def synthetic_runs(spec, kind, truth) -> list[BenchRun]:
    """Runs whose speeds are exactly what ``truth`` estimates."""
    shape = run_shape(spec, kind)
    tests = [(512, 0, 0), (2048, 0, 0), (0, 128, 0), (0, 128, 8192), (0, 32, 0)]
    runs = []
    for index, (prompt, decode, depth) in enumerate(tests, 1):
        run = BenchRun(f"synthetic:{index}", spec.name, spec.model_weight_bytes, prompt,
                       decode, depth, 1.0)
        runs.append(replace(run, tokens_per_s=run_estimate(run, shape, truth)))
    return runs


def scaled(calibration, kind: str, read: float, compute: float):
    """``calibration`` with ``kind``'s own factors: what a fit should find again."""
    return replace(calibration, kinds={kind: KindCalibration(read_factor=read,
                                                             compute_factor=compute)},
                   source="truth")


def test_the_fit_recovers_a_calibration_it_did_not_see() -> None:
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    truth = scaled(base, kind.kind, 0.8, 0.6)
    fit = fit_calibration(synthetic_runs(spec, kind, truth), spec, kind, base)
    assert (fit.kind, fit.backend) == ("rtx-4090", "cuda")
    assert fit.scales["decode"] == pytest.approx(0.8, rel=1e-3)
    assert fit.scales["prefill"] == pytest.approx(0.6, rel=1e-3)
    # Each run estimated by a fit without it: the model is exact here, so is the estimate.
    own = fit.calibration.kinds["rtx-4090"]
    assert (own.read_factor, own.compute_factor) == (fit.scales["decode"],
                                                     fit.scales["prefill"])
    assert own.decode_error is not None and own.decode_error < 1e-3
    assert own.prefill_error is not None and own.prefill_error < 1e-3
    assert (own.decode_runs, own.prefill_runs) == (3, 2)
    # Every other figure is the base's, and no other kind has factors of its own.
    assert fit.calibration.backends == base.backends
    assert fit.calibration.cross_validated == base.cross_validated
    assert set(fit.calibration.kinds) == {"rtx-4090"}


def test_the_error_stated_is_the_runs_left_out() -> None:
    """Runs off the model by +-10 % in turn: each left out is estimated about 10 % off,
    and the median of those is the error the calibration states."""
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    runs = synthetic_runs(spec, kind, base)
    noisy = [replace(run, tokens_per_s=run.tokens_per_s * factor)
             for run, factor in zip(runs, (1.1, 0.9, 1.1, 0.9, 1.1), strict=True)]
    fit = fit_calibration(noisy, spec, kind, base)
    own = fit.calibration.kinds["rtx-4090"]
    for phase in ("decode", "prefill"):
        found = own.error(phase)
        assert found is not None and 0.05 < found[0] < 0.3, (phase, found)
    note = fit.calibration.own_error_note(["rtx-4090", "h100-sxm"])
    assert note.startswith("Uses your own measurements for rtx-4090")
    assert f"decode {own.decode_error:.0%} over 3 runs" in note
    assert fit.calibration.own_error_note(["h100-sxm"]) == ""


def test_one_run_a_phase_is_nothing_to_calibrate() -> None:
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    runs = synthetic_runs(spec, kind, base)
    with pytest.raises(BenchError) as caught:
        fit_calibration([runs[0], runs[2]], spec, kind, base)
    assert caught.value.code == "NothingToCalibrate"
    assert "the only prefill run" in caught.value.message


@pytest.mark.parametrize(("stated", "kept"), [
    ("CUDA", True), ("CUDA,BLAS", True), ("BLAS,CUDA", True), ("RPC", True),
    ("", True), ("CANN", True), ("CPU", False), ("BLAS", False), ("Vulkan", False),
    ("ROCm", False), ("Metal,BLAS", False)])
def test_runs_of_another_backend_than_the_kinds_are_left_out(stated: str,
                                                            kept: bool) -> None:
    """llama-bench's backend column names where a run computed. CPU runs fitted to an RTX
    4090 scaled its CUDA figures by 0.14 (decode) and 0.0045 (prefill), and the fit
    reported a small error: a calibration silently of another device. A run on a backend
    the kind does not run is left out and says which; RPC (whose server runs either) and
    names the estimate does not know are kept."""
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    runs = [replace(run, backend=stated) for run in synthetic_runs(spec, kind, base)]
    found, skipped = usable_runs(runs, spec, "cuda")
    assert len(found) == (len(runs) if kept else 0)
    if not kept:
        assert all(f"ran on llama.cpp's {stated} backend, not the kind's cuda" in why
                   for _, why in skipped)
        with pytest.raises(BenchError) as caught:
            fit_calibration(runs, spec, kind, base)
        assert caught.value.code == "NothingToCalibrate"
        assert f"ran on llama.cpp's {stated} backend, not the kind's cuda" in (
            caught.value.message)


def test_a_kind_stating_no_backend_is_said_to_be_taken_to_run_its_stand_in() -> None:
    """The reason named "the kind's cuda" for a kind whose catalog states no backend, where
    cuda is only the backend such a kind is taken to run."""
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    runs = [replace(run, backend="Vulkan") for run in synthetic_runs(spec, kind, base)]
    with pytest.raises(BenchError) as caught:
        fit_calibration(runs, spec, replace(kind, backend=None), base)
    assert ("ran on llama.cpp's Vulkan backend, not cuda, which a kind stating no backend "
            "is taken to run") in caught.value.message


def test_calibrate_names_runs_of_another_backend(tmp_path: Path) -> None:
    """The same, as `planner calibrate` says it: CPU runs given for a CUDA kind."""
    bench = tmp_path / "cpu.md"
    bench.write_text(
        "| model | size | backend | threads | test | t/s |\n| --- | --: | --- | --: | --: | --: |\n"
        + "".join(f"| llama 8B Q8_0 | 7.95 GiB | CPU | 16 | {test} | {rate} ± 0.10 |\n"
                  for test, rate in (("pp128", 60), ("pp512", 55), ("tg32", 12),
                                     ("tg128", 11.5))))
    result = run_planner("calibrate", bench, "--gpu", "rtx-4090", "--model", "llama-3.1-8b",
                         "-o", tmp_path / "out.toml")
    assert_user_error(result, 2, "ran on llama.cpp's CPU backend, not the kind's cuda")
    assert not (tmp_path / "out.toml").exists()


def test_the_recorded_runs_fit_better_than_the_shipped_calibration() -> None:
    """The loopback runs of make validate, on the kind its catalog measured: the fitted
    estimates are closer to every recorded run, in the log of their ratio, than the
    shipped calibration's."""
    from planner.models import from_gguf  # noqa: F401 - the GGUF is not needed: the layout is

    fit = json.loads((MESH / "calibrate.json").read_text())
    runs = fit["runs"]
    assert runs and {run["phase"] for run in runs} == {"prefill", "decode"}

    def misfit(key: str) -> float:
        return sum(math.log(run[key] / run["measured_tokens_per_s"]) ** 2 for run in runs)

    assert misfit("fitted_tokens_per_s") < misfit("base_tokens_per_s")
    assert {e["phase"] for e in fit["errors"]} == {"prefill", "decode"}
    written = read_calibration(MESH / "calibration.toml")
    assert set(written.kinds) == {fit["kind"]}
    for error in fit["errors"]:
        stated = written.kinds[fit["kind"]].error(error["phase"])
        assert stated == (error["median_abs_error"], error["runs"])


# -- the calibration in effect ------------------------------------------------------------------


def test_a_calibration_is_in_effect_in_its_block_only() -> None:
    mine = read_calibration(MESH / "calibration.toml")
    assert load_calibration() is shipped_calibration()
    with use_calibration(mine):
        assert load_calibration() is mine
        with use_calibration(None):
            assert load_calibration() is mine
    assert load_calibration() is shipped_calibration()
    set_calibration(mine)
    try:
        assert load_calibration() is mine
    finally:
        set_calibration(None)
    assert load_calibration() is shipped_calibration()


def test_a_calibration_file_that_cannot_be_used_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    shipped = (ROOT / "planner" / "data" / "speed-calibration.toml").read_text()
    for text in ("not toml [", "[weight_efficiency]\n'gddr/cuda' = 2.0\n",
                 shipped + "\n[kinds.rtx-4090]\nread_factor = -1\n",
                 shipped + "\n[kinds.rtx-4090]\nspeed = 2\n"):
        bad.write_text(text)
        with pytest.raises(PerformanceError) as caught:
            read_calibration(bad)
        assert caught.value.code == "InvalidCalibration" and str(bad) in caught.value.message


def cli(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A calibration of the RTX 4090 (gddr/cuda) from synthetic llama-bench JSON."""
    folder = tmp_path_factory.mktemp("calibration")
    spec, kind, base = load_preset(PRESET), kind_4090(), shipped_calibration()
    runs = synthetic_runs(spec, kind, scaled(base, "rtx-4090", 0.7, 0.5))
    rows = [{"model_type": spec.name, "model_size": spec.model_weight_bytes,
             "n_prompt": run.prompt_tokens, "n_gen": run.decode_tokens,
             "n_depth": run.depth, "avg_ts": run.tokens_per_s, "n_ubatch": 512}
            for run in runs]
    (folder / "bench.json").write_text(json.dumps(rows))
    done = cli("calibrate", folder / "bench.json", "--gpu", "rtx-4090", "--model", PRESET,
               "-o", folder / "calibration.toml")
    assert done.returncode == 0, done.stderr
    assert "decode: median error 0.0% over 3 runs" in done.stdout
    again = cli("calibrate", folder / "bench.json", "--gpu", "rtx-4090", "--model", PRESET,
                "-o", folder / "calibration.toml")
    assert again.returncode == 2 and "already exists" in again.stderr
    return folder / "calibration.toml"


def test_a_catalog_adds_its_kinds_to_the_shipped_ones(fitted: Path, tmp_path: Path) -> None:
    """``--catalog`` adds to the shipped kinds, as in every command: runs of a shipped
    kind are fitted with a catalog file that holds only a kind of the user's own."""
    catalog = tmp_path / "mine.toml"
    catalog.write_text('[[gpu]]\nid = "my-card"\nname = "My card"\nvendor = "V"\n'
                       'memory = "16 GiB"\n')
    done = cli("calibrate", fitted.parent / "bench.json", "--gpu", "rtx-4090", "--model",
               PRESET, "--catalog", catalog, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "rtx-4090"


def test_speed_plan_and_size_take_the_calibration(fitted: Path) -> None:
    plain = cli("speed", PRESET, "--gpu", "rtx-4090", "--json")
    mine = cli("speed", PRESET, "--gpu", "rtx-4090", "--json", "--calibration", fitted)
    assert plain.returncode == mine.returncode == 0, mine.stderr
    plain_data, mine_data = json.loads(plain.stdout), json.loads(mine.stdout)
    # Reads at 0.7 of their efficiency and products at 0.5: decode slower, by more than
    # the reads alone at the least, and by at most 1 / 0.5 (its matrix-vector products
    # add to the reads; the fixed times per layer do not scale).
    assert 1.2 * plain_data["tpot_ms"] < mine_data["tpot_ms"] <= plain_data["tpot_ms"] / 0.5
    assert any(note.startswith("Uses your own measurements for rtx-4090")
               for note in mine_data["notes"])
    assert not any("your own" in note for note in plain_data["notes"])
    fleet = ROOT / "data" / "fleets"
    example = sorted(fleet.glob("*.toml"))[0]
    planned = cli("plan", example, "--calibration", fitted)
    assert planned.returncode in (0, 1), planned.stderr
    sizes = [cli("size", PRESET, "--kinds", "rtx-4090", "--json", *extra)
             for extra in ((), ("--calibration", str(fitted)))]
    assert [done.returncode for done in sizes] == [0, 0], sizes[1].stderr
    tpots = [json.loads(done.stdout)["fleets"][0]["estimated_tpot_ms"] for done in sizes]
    assert 1.2 * tpots[0] < tpots[1] <= tpots[0] / 0.5
    broken = cli("speed", PRESET, "--gpu", "rtx-4090", "--calibration", ROOT / "README.md")
    assert broken.returncode == 2 and "InvalidCalibration" in broken.stderr


def test_the_workbench_takes_the_calibration(fitted: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.fleet import parse_fleet_toml
    from planner.workbench.app import CALIBRATION_VARIABLE, Workbench
    from planner.workbench.state import WorkbenchState

    document = parse_fleet_toml(f"""
[model]
preset = "{PRESET}"
[[nodes]]
id = "rtx-4090-00"
vram = "24 GiB"
""")
    monkeypatch.setenv(CALIBRATION_VARIABLE, str(fitted))
    try:
        bench = Workbench(WorkbenchState.from_document(document), fleet_dir=tmp_path,
                          report_dir=tmp_path)
        assert set(load_calibration().kinds) == {"rtx-4090"}
        assert "Uses your own measurements for rtx-4090" in \
            bench._evaluation.estimate_summary()
    finally:
        set_calibration(None)
    monkeypatch.setenv(CALIBRATION_VARIABLE, str(tmp_path / "missing.toml"))
    try:
        Workbench(WorkbenchState.from_document(document), fleet_dir=tmp_path,
                  report_dir=tmp_path)
        assert load_calibration() is shipped_calibration()
    finally:
        set_calibration(None)


# -- the KV cache the runs ran with ---------------------------------------------------------------


def _bench_json(type_k: str | None, type_v: str | None) -> str:
    """llama-bench's JSON of an RTX 4090 running llama-3.1-8b (its tensors' bytes), each
    test with these cache types (``None``: the fields left out)."""
    rows = []
    for prompt, gen, rate in ((128, 0, 9000.0), (512, 0, 11000.0), (0, 32, 120.0),
                              (0, 128, 118.0)):
        row = {"model_type": "llama 8B Q8_0", "model_size": 8_540_770_304,
               "n_prompt": prompt, "n_gen": gen, "n_depth": 4096, "avg_ts": rate,
               "backends": "CUDA", "n_ubatch": 512, "flash_attn": 1, "build_number": 9500}
        if type_k is not None:
            row["type_k"] = type_k
        if type_v is not None:
            row["type_v"] = type_v
        rows.append(row)
    return json.dumps(rows)


def test_a_run_states_its_kv_cache_types() -> None:
    """llama-bench's JSON, CSV and markdown state the K and V cache types (``type_k``,
    ``type_v``; its markdown prints the columns only where they are not its default
    f16)."""
    runs = parse_bench(_bench_json("q8_0", "q4_0"), "b.json")
    assert {(run.cache_type_k, run.cache_type_v) for run in runs} == {("q8_0", "q4_0")}
    assert {(run.cache_type_k, run.cache_type_v)
            for run in parse_bench(_bench_json(None, None), "b.json")} == {(None, None)}
    table = ("| model | size | backend | type_k | type_v | test | t/s |\n"
             "| --- | --: | --- | --: | --: | --: | --: |\n"
             "| llama 8B Q8_0 | 7.95 GiB | CUDA | q8_0 | q8_0 | pp512 | 100.0 ± 1.0 |\n")
    (run,) = parse_bench(table, "b.md")
    assert (run.cache_type_k, run.cache_type_v) == ("q8_0", "q8_0")
    (run,) = parse_bench("| model | size | backend | test | t/s |\n"
                         "| --- | --: | --- | --: | --: |\n"
                         "| llama 8B Q8_0 | 7.95 GiB | CUDA | pp512 | 100.0 ± 1.0 |\n", "b.md")
    assert (run.cache_type_k, run.cache_type_v) == ("f16", "f16")
    with pytest.raises(BenchError, match="type_k"):
        parse_bench(_bench_json("q9_9", "f16"), "b.json")


def test_calibrate_fits_the_runs_at_the_kv_cache_they_ran_with(tmp_path: Path) -> None:
    """Runs of a q8_0 cache were fitted as runs of the model's f16 one (twice the bytes
    each decoded token reads at depth) unless --kv-cache-type said q8_0: a calibration
    silently fitted to another cache. The runs' own cache is now the one estimated, a
    --kv-cache-type that differs leaves them out by name, and a run whose K and V caches
    differ (the estimate takes one type for both) is left out too."""
    bench = tmp_path / "q8.json"
    bench.write_text(_bench_json("q8_0", "q8_0"))
    common = ("calibrate", bench, "--gpu", "rtx-4090", "--model", "llama-3.1-8b", "--json")
    own = json.loads(run_planner(*common).stdout)
    stated = json.loads(run_planner(*common, "--kv-cache-type", "q8_0").stdout)
    assert own["runs"] == stated["runs"] and own["errors"] == stated["errors"]
    assert_user_error(run_planner(*common, "--kv-cache-type", "f16"), 2,
                      "q8_0", "--kv-cache-type")
    mixed = tmp_path / "mixed.json"
    mixed.write_text(_bench_json("q8_0", "f16"))
    assert_user_error(run_planner("calibrate", mixed, "--gpu", "rtx-4090", "--model",
                                  "llama-3.1-8b"), 2, "K cache q8_0", "V cache f16")


# -- runs that computed part of the model on the CPU ---------------------------------------------


def _offload_json(**fields: object) -> str:
    rows = json.loads(_bench_json("f16", "f16"))
    return json.dumps([{**row, **fields} for row in rows])


def test_a_run_states_what_it_kept_on_the_cpu() -> None:
    """llama-bench states the layers it offloaded (``n_gpu_layers``, markdown ``ngl``; a
    negative count is every layer), the layers whose experts it kept on the CPU
    (``n_cpu_moe``) and a KV cache kept on the host (``no_kv_offload``, ``nkvo``)."""
    (run, *_) = parse_bench(_offload_json(n_gpu_layers=20, n_cpu_moe=4, no_kv_offload=True),
                            "b.json")
    assert (run.gpu_layers, run.cpu_moe_layers, run.kv_offload) == (20, 4, False)
    (run, *_) = parse_bench(_offload_json(n_gpu_layers=-1, n_cpu_moe=0, no_kv_offload=False),
                            "b.json")
    assert (run.gpu_layers, run.cpu_moe_layers, run.kv_offload) == (-1, 0, True)
    (run,) = parse_bench("| model | size | backend | ngl | n_cpu_moe | nkvo | test | t/s |\n"
                         "| --- | --: | --- | --: | --: | --: | --: | --: |\n"
                         "| llama 8B Q8_0 | 7.95 GiB | CUDA | 99 | 2 | 1 | pp512 | 100.0 ± 1.0 |\n",
                         "b.md")
    assert (run.gpu_layers, run.cpu_moe_layers, run.kv_offload) == (99, 2, False)
    with pytest.raises(BenchError, match="n_cpu_moe"):
        parse_bench(_offload_json(n_cpu_moe=-3), "b.json")


@pytest.mark.parametrize(("fields", "said"), [
    ({"n_gpu_layers": 20}, "offloaded 20 of the model's 32 layers (-ngl 20;"),
    ({"n_gpu_layers": 32}, "offloaded 32 of the model's 32 layers (-ngl 32;"),
    ({"n_cpu_moe": 4}, "kept the experts of 4 layers on the CPU (-ncmoe 4)"),
    ({"no_kv_offload": True}, "kept the KV cache on the host (-nkvo 1)"),
    ({"tensor_buft_overrides": "blk\\.[0-9]+\\.ffn_.*_exps=CPU"},
     "kept the tensors of blk\\.[0-9]+\\.ffn_.*_exps on the CPU (-ot"),
    ({"devices": "none"}, "ran on no GPU (-dev none)"),
    ({"devices": "CUDA0/CUDA1"}, "split over 2 devices (-dev CUDA0/CUDA1"),
])
def test_runs_that_computed_on_the_cpu_are_left_out_for_a_gpu_kind(
        tmp_path: Path, fields: dict[str, object], said: str) -> None:
    """A run that kept layers, experts or its cache on the CPU (a big model on a small GPU)
    ran at the CPU's speed for that part: fitted to a GPU kind, its factors would scale the
    GPU's efficiencies down by what the CPU cost. It is left out, by name; every layer
    offloaded (-ngl 99, or -1) is used."""
    bench = tmp_path / "b.json"
    bench.write_text(_offload_json(**fields))
    assert_user_error(run_planner("calibrate", bench, "--gpu", "rtx-4090", "--model",
                                  "llama-3.1-8b"), 2, said)
    # Devices named for a run of one of them (-sm none) are one device's run.
    bench.write_text(_offload_json(devices="CUDA0/CUDA1", split_mode="none"))
    assert run_planner("calibrate", bench, "--gpu", "rtx-4090", "--model",
                       "llama-3.1-8b").returncode == 0
    for every in (99, 33, -1):
        bench.write_text(_offload_json(n_gpu_layers=every, n_cpu_moe=0, no_kv_offload=False,
                                       tensor_buft_overrides="none", devices="CUDA1"))
        result = run_planner("calibrate", bench, "--gpu", "rtx-4090", "--model",
                             "llama-3.1-8b", "--json")
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)["runs"]) == 4


def test_a_run_states_its_batch_and_is_estimated_at_it() -> None:
    """llama-bench's ``n_batch`` (``-b``): llama.cpp caps the micro-batch at the batch, so
    a run of ``-b 256 -ub 512`` computed micro-batches of 256 tokens, and is estimated so
    (it was estimated at 512)."""
    shape = run_shape(load_preset("llama-3.1-8b"), kind_4090())
    runs = parse_bench(_offload_json(n_batch=256, n_ubatch=512), "b.json")
    assert {(run.batch, run.ubatch) for run in runs} == {(256, 512)}
    prompt = next(run for run in runs if run.prompt_tokens == 512)
    calibration = load_calibration()
    capped = run_estimate(prompt, shape, calibration)
    assert capped == run_estimate(replace(prompt, batch=None, ubatch=256), shape, calibration)
    assert capped != run_estimate(replace(prompt, batch=None), shape, calibration)
    (run,) = parse_bench("| model | size | backend | n_batch | test | t/s |\n"
                         "| --- | --: | --- | --: | --: | --: |\n"
                         "| llama 8B Q8_0 | 7.95 GiB | CUDA | 1024 | pp512 | 100.0 ± 1.0 |\n",
                         "b.md")
    assert run.batch == 1024


# -- runs on a machine of several GPUs -------------------------------------------------------------


_TWO_3090_LOG = """\
ggml_cuda_init: found 2 CUDA devices:
  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes
  Device 1: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes
| model | size | params | backend | ngl | test | t/s |
| --- | ---: | ---: | --- | --: | ---: | ---: |
| llama 8B Q8_0 | 7.95 GiB | 8.03 B | CUDA | 99 | pp128 | 7000.00 ± 10.00 |
| llama 8B Q8_0 | 7.95 GiB | 8.03 B | CUDA | 99 | pp512 | 9000.00 ± 10.00 |
| llama 8B Q8_0 | 7.95 GiB | 8.03 B | CUDA | 99 | tg32 | 120.00 ± 0.50 |
| llama 8B Q8_0 | 7.95 GiB | 8.03 B | CUDA | 99 | tg128 | 118.00 ± 0.50 |

build: 1a2b3c4d (9500)
"""

# Vulkan's device lines, cut after the fields read (the log goes on: fp16, bf16, warp size,
# shared memory, int dot, matrix cores).
_VULKAN_LOG = """\
ggml_vulkan: Found 2 Vulkan devices:
ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | fp16: 1 | bf16: 0
ggml_vulkan: 1 = AMD Radeon Graphics (RADV RAPHAEL_MENDOCINO) (radv) | uma: 1 | fp16: 1
| model | size | backend | test | t/s |
| --- | ---: | --- | ---: | ---: |
| llama 8B Q8_0 | 7.95 GiB | Vulkan | pp512 | 2000.00 ± 10.00 |
"""


def test_a_run_states_the_gpus_llama_bench_saw() -> None:
    """llama-bench's JSON and CSV list every GPU it saw (``gpu_info``, integrated ones
    too); its markdown does not, but the log before the table names CUDA's and ROCm's
    devices (``Device N: name, ...``) and Vulkan's (``N = name (...) | uma: U``, an
    integrated one uma 1)."""
    rows = json.loads(_bench_json("f16", "f16"))
    rows[0]["gpu_info"] = "NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 3090"
    run = parse_bench(json.dumps(rows), "b.json")[0]
    assert run.gpus == ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090")
    assert parse_bench(_TWO_3090_LOG, "b.md")[0].gpus == ("NVIDIA GeForce RTX 3090",) * 2
    assert parse_bench(_VULKAN_LOG, "b.md")[0].gpus == ("AMD Radeon RX 7900 XTX",)
    assert parse_bench(_bench_json("f16", "f16"), "b.json")[0].gpus == ()


def test_runs_split_over_the_machines_gpus_by_default_are_left_out(tmp_path: Path) -> None:
    """llama.cpp splits a model's layers over every GPU of the machine unless llama-bench
    names one (-dev) or is told -sm none: runs of a machine of two RTX 3090s, run as
    llama-bench runs by default, were fitted as one 3090's, silently. They are left out by
    name; the same machine's runs of one device are used."""
    bench = tmp_path / "two.md"
    bench.write_text(_TWO_3090_LOG)
    result = run_planner("calibrate", bench, "--gpu", "rtx-3090", "--model", "llama-3.1-8b")
    assert_user_error(result, 2, "2 GPUs named NVIDIA GeForce RTX 3090", "-dev")
    bench.write_text(_TWO_3090_LOG.replace("Device 1: NVIDIA GeForce RTX 3090, compute "
                                           "capability 8.6, VMM: yes\n", ""))
    assert run_planner("calibrate", bench, "--gpu", "rtx-3090", "--model",
                       "llama-3.1-8b").returncode == 0
    rows = json.loads(_offload_json(gpu_info="NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 3090"))
    bench = tmp_path / "two.json"
    bench.write_text(json.dumps(rows))
    assert_user_error(run_planner("calibrate", bench, "--gpu", "rtx-3090", "--model",
                                  "llama-3.1-8b"), 2, "2 GPUs named NVIDIA GeForce RTX 3090")
    for one in ({"devices": "CUDA0"}, {"split_mode": "none"}):
        bench.write_text(json.dumps([{**row, **one} for row in rows]))
        result = run_planner("calibrate", bench, "--gpu", "rtx-3090", "--model",
                             "llama-3.1-8b", "--json")
        assert result.returncode == 0, result.stderr
        assert len(json.loads(result.stdout)["runs"]) == 4
    # One GPU seen through two backends (CUDA and Vulkan) is one device.
    bench.write_text(json.dumps([{**row, "backends": "CUDA,Vulkan"} for row in rows]))
    assert run_planner("calibrate", bench, "--gpu", "rtx-3090", "--model",
                       "llama-3.1-8b").returncode == 0


def test_runs_of_a_machine_of_unlike_gpus_are_used_and_said_to_be_unsure(
        tmp_path: Path) -> None:
    """Unlike GPUs in gpu_info may be a discrete one and an integrated one (llama.cpp
    uses the integrated one only without a discrete one) or two discrete ones (it splits
    over both): the runs are used, and the calibration says what to do if more than one
    ran them."""
    rows = json.loads(_offload_json(gpu_info="NVIDIA GeForce RTX 4090, Intel(R) UHD Graphics 770"))
    bench = tmp_path / "mixed.json"
    bench.write_text(json.dumps(rows))
    result = run_planner("calibrate", bench, "--gpu", "rtx-4090", "--model", "llama-3.1-8b",
                         "--json")
    assert result.returncode == 0, result.stderr
    fit = json.loads(result.stdout)
    assert len(fit["runs"]) == 4
    assert any("Intel(R) UHD Graphics 770" in note and "-dev" in note
               for note in fit["notes"]), fit["notes"]


# The markdown a user benching Llama-3.1-8B's common Q4_K_M file prints (llama-bench's
# size column, 4.58 GiB), against the preset's Q8_0 file (7.95 GiB).
Q4_K_M_TABLE = """\
| model                  |     size | params | backend | ngl |  test |            t/s |
| ---------------------- | -------: | -----: | ------- | --: | ----: | -------------: |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA    |  99 | pp128 | 3500.35 ± 9.63 |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA    |  99 | pp512 | 4500.35 ± 9.63 |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA    |  99 |  tg32 |  125.37 ± 4.41 |
| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA    |  99 | tg128 |  120.37 ± 4.41 |

build: 086a63e3a (7340)
"""


def test_a_preset_is_calibrated_at_the_size_of_the_file_benched(tmp_path: Path) -> None:
    """Runs of a preset's model in another file (its Q4_K_M, where the preset is Q8_0)
    were left out saying only that they are not the preset; they now say how to give
    the file benched, and ``--file-size`` (as ``planner speed`` takes it) calibrates the
    preset stored in those bytes, the estimate the runs are fitted against reading them."""
    bench = tmp_path / "bench.md"
    bench.write_text(Q4_K_M_TABLE)
    common = ("calibrate", bench, "--gpu", "rtx-3090", "--model", "llama-3.1-8b")
    refused = cli(*common)
    assert refused.returncode == 2, refused.stdout
    assert "is not Llama-3.1-8B-Instruct of 8,532,152,576" in refused.stderr
    assert "--file-size" in refused.stderr
    sized = cli(*common, "--file-size", "4.58GiB", "--json")
    assert sized.returncode == 0, sized.stderr
    fit = json.loads(sized.stdout)
    assert [run["test"] for run in fit["runs"]] == ["pp128", "pp512", "tg32", "tg128"]
    # The shipped estimate of the 4.58 GiB file decodes faster than of the 7.95 GiB one.
    spec = load_preset("llama-3.1-8b")
    kind = catalog_kind(load_gpu_catalog(), "rtx-3090")
    decode = next(run for run in parse_bench(Q4_K_M_TABLE, "b.md") if run.test == "tg128")
    small = run_estimate(decode, run_shape(spec, kind, round(4.58 * 2**30)),
                         load_calibration())
    large = run_estimate(decode, run_shape(spec, kind), load_calibration())
    assert small is not None and large is not None and small > 1.5 * large
    shipped = next(run for run in fit["runs"] if run["test"] == "tg128")
    assert shipped["base_tokens_per_s"] == pytest.approx(small, rel=1e-6)


@pytest.mark.parametrize(("model", "size", "said"), [
    ("gguf", "4GiB", "GGUF file"),
    ("llama-3.1-8b", "4.58", "no unit"),
    ("llama-3.1-8b", "1KB", "bits each"),
    ("llama-3.1-8b", "1e300", "cannot read"),
])
def test_calibrate_refuses_a_file_size_it_cannot_take(tmp_path: Path, model: str,
                                                       size: str, said: str) -> None:
    bench = tmp_path / "bench.md"
    bench.write_text(Q4_K_M_TABLE)
    if model == "gguf":
        from test_memory import write_gemma_like

        model = str(write_gemma_like(tmp_path))
    result = cli("calibrate", bench, "--gpu", "rtx-3090", "--model", model,
                 "--file-size", size)
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("planner: --file-size: ") and said in result.stderr
    assert "Traceback" not in result.stderr
