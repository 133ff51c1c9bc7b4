"""The speed estimate against published llama.cpp measurements (validation/speed/): the
data set is whole and cited, the shipped calibration's held-out error is what the
estimator gives today, and that error stays within bounds. A change to
planner.performance that moves any held-out error fails here until the calibration is
refitted (``python validation/speed/calibration.py``) and docs/speed.md updated."""

from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation" / "speed"))

import calibration as speed_calibration  # noqa: E402

from planner.performance import (  # noqa: E402
    HeldOutError,
    PerformanceError,
    SpeedCalibration,
    load_calibration,
)

README = ROOT / "README.md"
SPEED_PAGE = ROOT / "docs" / "speed.md"
# Median absolute error on held-out rows: at most 15 % for decode and prefill, overall
# and per memory type.
BOUNDS = {(phase, memory_type): 0.15 for phase in ("decode", "prefill")
          for memory_type in ("all", "gddr", "hbm", "lpddr")}


@pytest.fixture(scope="module")
def rows() -> list[speed_calibration.Row]:
    return speed_calibration.load_rows()


def test_the_data_set_is_whole_and_every_row_cited() -> None:
    with speed_calibration.MEASUREMENTS.open(newline="") as handle:
        raw = list(csv.DictReader(handle))
    assert len(raw) >= 60
    for row in raw:
        assert row["source_url"].startswith("https://"), row["row_id"]
        assert row["build"] and row["test"] and float(row["tokens_per_s"]) > 0
        assert row["split"] in ("fit", "holdout", "cv", "excluded")
        assert (row["split"] == "excluded") == bool(row["excluded_because"])
    used = [r for r in raw if r["split"] != "excluded"]
    kinds = {(r["memory_type"], r["phase"]) for r in used}
    gpu_kinds = {(m, p) for m in ("gddr", "hbm", "lpddr") for p in ("decode", "prefill")}
    assert kinds - gpu_kinds == {("ddr", "decode"), ("ddr", "prefill")}
    assert gpu_kinds <= kinds
    counts = {int(r["gpu_count"]) for r in used}
    assert {1, 2, 4, 6, 8} <= counts
    multi = [r for r in used if int(r["gpu_count"]) > 1]
    assert sum(r["phase"] == "prefill" for r in multi) >= 20
    assert sum(r["split"] == "holdout" for r in multi) >= 20
    assert any(int(r["lanes"]) > 1 for r in used)


def test_every_gpu_and_model_figure_is_cited(rows: list[speed_calibration.Row]) -> None:
    for row in rows:
        assert row.gpu.memory_bandwidth_source and row.gpu.memory_type in (
            "gddr", "hbm", "lpddr")
        assert (row.gpu.fp16_tflops is None) == (row.gpu.fp16_tflops_source is None)
        assert row.model["source"].startswith("https://huggingface.co/")


def test_the_shipped_held_out_error_is_what_the_estimator_gives(
        rows: list[speed_calibration.Row]) -> None:
    shipped = load_calibration()
    recomputed = speed_calibration.held_out_errors(rows, shipped)
    assert [(e.phase, e.memory_type, e.rows) for e in recomputed] == [
        (e.phase, e.memory_type, e.rows) for e in shipped.held_out]
    for now, then in zip(recomputed, shipped.held_out, strict=True):
        assert now.median_abs_error == pytest.approx(then.median_abs_error, abs=5e-4), now


@pytest.mark.parametrize(("phase", "memory_type"), sorted(BOUNDS))
def test_held_out_error_within_bounds(rows: list[speed_calibration.Row], phase: str,
                                      memory_type: str) -> None:
    errors = {(e.phase, e.memory_type): e
              for e in speed_calibration.held_out_errors(rows, load_calibration())}
    entry: HeldOutError = errors[(phase, memory_type)]
    assert entry.rows >= 10
    assert entry.median_abs_error <= BOUNDS[(phase, memory_type)], entry


def test_the_fit_rows_fit_and_the_split_is_honest(rows: list[speed_calibration.Row]) -> None:
    """The fit is no better on held-out rows than on the rows it saw by more than chance:
    both are close, and no held-out row was used by the fit."""
    calibration = load_calibration()
    fitted = [abs(speed_calibration.error(r, calibration)) for r in rows
              if r.split == "fit" and speed_calibration.usable(r)]
    held = [abs(speed_calibration.error(r, calibration)) for r in rows
            if r.split == "holdout" and speed_calibration.usable(r)]
    assert statistics.median(fitted) <= 0.15
    assert abs(statistics.median(held) - statistics.median(fitted)) <= 0.05
    ids = {r.row_id for r in rows}
    assert len(ids) == len(rows)


@pytest.mark.parametrize("page", [README, SPEED_PAGE], ids=["README.md", "docs/speed.md"])
def test_readme_publishes_the_error_by_memory_type(rows: list[speed_calibration.Row],
                                                   page: Path) -> None:
    table = "\n".join(speed_calibration.summary_lines(rows, load_calibration()))
    assert table in page.read_text(), (
        f"{page.relative_to(ROOT)}'s speed calibration table is out of date; it should read:\n"
        + table)


@pytest.mark.slow
def test_refitting_reproduces_the_shipped_calibration(rows: list[speed_calibration.Row]
                                                      ) -> None:
    shipped = load_calibration()
    refit = speed_calibration.fit(rows)
    for name in ("weight_efficiency", "kv_efficiency", "compute_efficiency",
                 "attention_efficiency", "layer_ms", "hop_ms", "quantized_compute_factor",
                 "half_rate_tokens", "staging_bytes_per_parameter", "attention_score_bytes",
                 "activation_bytes"):
        assert getattr(refit, name) == pytest.approx(dict(getattr(shipped, name)),
                                                     rel=1e-3, abs=1e-3), name


# ---------------------------------------------------------------- each term, on the rows


def _row(rows: list[speed_calibration.Row], row_id: int) -> speed_calibration.Row:
    return next(r for r in rows if r.row_id == row_id)


def _gain(rows: list[speed_calibration.Row], one: int, many: int,
          calibration: Any = None) -> tuple[float, float]:
    """Measured and estimated tokens/s of row ``many`` (B lanes) over row ``one``."""
    calibration = calibration or load_calibration()
    first, other = _row(rows, one), _row(rows, many)
    measured = other.tokens_per_s / first.tokens_per_s
    estimated = (speed_calibration.predict_ms(first, calibration) / first.lanes) / (
        speed_calibration.predict_ms(other, calibration) / other.lanes)
    return measured, estimated


def _lane_pairs(rows: list[speed_calibration.Row], lanes: int
                ) -> list[tuple[speed_calibration.Row, speed_calibration.Row]]:
    """(one lane, ``lanes`` lanes) llama-batched-bench rows of each mixture of experts at
    each prompt size."""
    batched = [r for r in rows if r.test.startswith("batched") and r.model.get("expert_count")]
    return [(one, many) for many in batched if many.lanes == lanes
            for one in batched if one.lanes == 1 and one.model is many.model
            and one.depth == many.depth]


def _gain_misses(pairs: list[tuple[speed_calibration.Row, speed_calibration.Row]],
                 calibration: Any) -> list[float]:
    """Estimated over measured gain of the second row of each pair over the first."""
    misses = []
    for one, many in pairs:
        measured = (many.tokens_per_s / one.tokens_per_s)
        estimated = ((speed_calibration.predict_ms(one, calibration) / one.lanes)
                     / (speed_calibration.predict_ms(many, calibration) / many.lanes))
        misses.append(estimated / measured - 1)
    return misses


def test_two_lanes_of_a_mixture_of_experts_gain_what_was_measured(
        rows: list[speed_calibration.Row]) -> None:
    """llama-batched-bench on a DGX Spark (build 6918): two lanes of gpt-oss-20b,
    gpt-oss-120b and Qwen3-30B-A3B decoded only 1.05-1.19 times as fast as one, at
    512-, 4,096- and 8,192-token prompts, where the experts two tokens reach say about
    1.4: that build ran two tokens' routed experts with its matrix-matrix kernel, at a
    fixed cost per layer (llama.cpp pull request 18958 names the dip at two tokens). With
    that time the estimated gains are within 15 % of the measured ones (7 of the 9 pairs
    held out); with the distinct experts alone they are a quarter too high at the
    median."""
    pairs = _lane_pairs(rows, 2)
    assert len(pairs) == 9
    assert sum(many.split == "holdout" for _, many in pairs) == 7
    calibration = load_calibration()
    misses = _gain_misses(pairs, calibration)
    assert max(abs(m) for m in misses) <= 0.15, misses
    without = _gain_misses(pairs, replace(calibration, expert_batch_ms={}))
    assert statistics.median(without) > 0.2, without


def test_lanes_of_a_mixture_of_experts_read_the_expected_distinct_experts(
        rows: list[speed_calibration.Row], monkeypatch: pytest.MonkeyPatch) -> None:
    """llama-batched-bench on a DGX Spark: four lanes of the mixtures of experts gained
    1.6-1.9 times one lane, the dense Qwen2.5-7B 3.3-3.6 times. The estimate follows
    both within 20 % and 10 %; reading only one token's experts per step would not.
    (From 8 lanes on the mixtures of experts reached fewer experts than even routing
    says: docs/speed.md's known gaps.)"""
    misses = _gain_misses(_lane_pairs(rows, 4), load_calibration())
    assert len(misses) == 9 and max(abs(m) for m in misses) <= 0.2, misses
    for many in range(392, 397):
        measured, estimated = _gain(rows, 391, many)
        assert estimated == pytest.approx(measured, rel=0.1), (many, measured, estimated)
    monkeypatch.setattr(speed_calibration.ModelTraffic, "expert_share",
                        lambda self, tokens: (self.experts_used or 1) / (
                            self.expert_count or 1))
    measured, one_tokens_experts = _gain(rows, 359, 361)
    assert one_tokens_experts > 1.6 * measured


def test_held_out_lanes_stay_within_bounds(rows: list[speed_calibration.Row]) -> None:
    """The held-out llama-batched-bench rows of one to four lanes (mixtures of experts
    and a dense model, 512- to 8,192-token prompts): median absolute error at most 8 %,
    none over 20 %."""
    held = [r for r in rows if r.test.startswith("batched") and r.split == "holdout"
            and r.lanes <= 4]
    assert len(held) >= 25
    errors = [abs(speed_calibration.error(r, load_calibration())) for r in held]
    assert statistics.median(errors) <= 0.08, errors
    assert max(errors) <= 0.20, errors


def test_the_compute_ceiling_caps_large_batches(rows: list[speed_calibration.Row]) -> None:
    """Qwen2.5-7B at 32 lanes on a DGX Spark (row 396): within 15 % with the compute
    term, far too fast as bandwidth alone."""
    row = _row(rows, 396)
    calibration = load_calibration()
    assert abs(speed_calibration.error(row, calibration)) <= 0.15
    bandwidth_only = replace(row, gpu=replace(row.gpu, fp16_tflops=None,
                                              fp16_tflops_source=None))
    assert speed_calibration.error(bandwidth_only, calibration) < -0.3


def test_a_fixed_time_per_layer_slows_a_small_model_on_a_fast_gpu(
        rows: list[speed_calibration.Row]) -> None:
    """Llama 3 8B Q4_K_M on an H100 PCIe (row 169, tg512): within 15 % with the fitted
    time per layer, more than a quarter too fast without it."""
    row = _row(rows, 169)
    calibration = load_calibration()
    assert abs(speed_calibration.error(row, calibration)) <= 0.15
    without = replace(calibration, layer_ms={key: 0.0 for key in calibration.layer_ms})
    assert speed_calibration.error(row, without) < -0.25


def _speedup(rows: list[speed_calibration.Row], slow: int, fast: int,
             calibration: Any) -> float:
    """Estimated tokens/s of row ``fast`` over row ``slow`` (the same prompt)."""
    return (speed_calibration.predict_ms(_row(rows, slow), calibration)
            / speed_calibration.predict_ms(_row(rows, fast), calibration))


def test_a_ubatchs_activations_keep_an_h100_prefill_from_running_at_its_flops(
        rows: list[speed_calibration.Row]) -> None:
    """Llama 3 8B pp512 on one H100 PCIe against one A100 PCIe, F16 (rows 175, 151) and
    Q4_K_M (171, 147): the H100 measured 1.40x and 1.36x the A100's prompt speed,
    though its dense FP16 figure is 2.4x the A100's, at about the same memory
    bandwidth. The activations a ubatch moves between its kernels are bandwidth-bound
    and take the same time on both: with them the estimated speedups are within 25 %
    of the measured ones; without them the F16 one is more than 40 % too high."""
    calibration = load_calibration()
    without = replace(calibration, activation_bytes={})
    for a100, h100 in ((151, 175), (147, 171)):
        measured = _row(rows, h100).tokens_per_s / _row(rows, a100).tokens_per_s
        assert _speedup(rows, a100, h100, calibration) == pytest.approx(
            measured, rel=0.25), (h100, measured)
    measured = _row(rows, 175).tokens_per_s / _row(rows, 151).tokens_per_s
    assert _speedup(rows, 151, 175, without) > 1.4 * measured


def test_a_calibration_with_impossible_activation_bytes_is_refused() -> None:
    data = load_calibration().to_dict()
    data["activation_bytes"] = {"hbm/cuda": -1.0}
    with pytest.raises(PerformanceError) as raised:
        SpeedCalibration.from_dict(data)
    assert raised.value.code == "InvalidCalibration"
    assert raised.value.details["field"] == "activation_bytes.hbm/cuda"


def test_the_kv_term_follows_the_measured_context_effect(
        rows: list[speed_calibration.Row]) -> None:
    """tg8192 against tg512 of the same GPU, model and split (llama-bench): the
    measured slowdown is followed within 5 % at the median; the cache read as fast as
    the weights (one efficiency for both) misses it by more."""
    pairs = []
    for row in rows:
        if row.phase == "decode" and row.test == "tg8192":
            short = next(r for r in rows if r.test == "tg512" and r.gpu.kind == row.gpu.kind
                         and r.gpu_count == row.gpu_count and r.model is row.model
                         and r.file_bytes == row.file_bytes)
            pairs.append((short, row))
    assert len(pairs) >= 30

    def median_miss(calibration: Any) -> float:
        misses = []
        for short, long in pairs:
            measured = long.tokens_per_s / short.tokens_per_s
            estimated = (speed_calibration.predict_ms(short, calibration)
                         / speed_calibration.predict_ms(long, calibration))
            misses.append(abs(estimated / measured - 1))
        return statistics.median(misses)

    calibration = load_calibration()
    assert median_miss(calibration) <= 0.05
    as_weights = replace(calibration, kv_efficiency=dict(calibration.weight_efficiency))
    assert median_miss(as_weights) > 1.5 * median_miss(calibration)


@pytest.mark.parametrize(("table", "factor", "phase"), [
    ("weight_efficiency", 1.5, "decode"), ("weight_efficiency", 0.6, "decode"),
    ("compute_efficiency", 1.6, "prefill"), ("compute_efficiency", 0.6, "prefill")])
def test_the_bounds_fail_when_the_estimator_drifts(rows: list[speed_calibration.Row],
                                                   table: str, factor: float,
                                                   phase: str) -> None:
    """The bounds above are not loose: an estimator whose efficiencies drift by a
    half breaks at least one of them for that phase. (Any smaller drift fails
    test_the_shipped_held_out_error_is_what_the_estimator_gives until the calibration is
    refitted and its table republished.)"""
    calibration = load_calibration()
    drifted = replace(calibration, **{table: {
        key: min(1.0, value * factor) for key, value in getattr(calibration, table).items()}})
    errors = speed_calibration.held_out_errors(rows, drifted)
    assert any(e.median_abs_error > BOUNDS[(e.phase, e.memory_type)]
               for e in errors if e.phase == phase), errors
