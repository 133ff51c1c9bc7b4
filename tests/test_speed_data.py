"""The speed calibration's data files (validation/speed/): every measurement row (of
measurements.csv, and of unseen.csv, the runs of sources no fit has seen) names a GPU kind
and a model that are described, cites where it was published, and says how it was run;
every GPU kind cites its memory bandwidth."""

from __future__ import annotations

import csv
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from planner.llamacpp.bench_output import FLASH_ATTN_AUTO_BUILD

HERE = Path(__file__).resolve().parents[1] / "validation" / "speed"
BACKENDS = ("CUDA", "ROCm", "Vulkan", "Metal", "CPU", "SYCL")
# The files of rows, and the splits each may name: measurements.csv's rows are fitted and
# cross-validated; unseen.csv's are estimated by the shipped calibration only.
SPLITS = {"measurements.csv": ("fit", "holdout", "cv", "excluded"),
          "unseen.csv": ("unseen", "excluded")}
# What one measurement is: the same values twice are one row entered twice.
IDENTITY = ("gpu_kind", "gpu_count", "backend", "model", "quant", "file_size_published",
            "test", "tokens", "depth", "lanes", "ubatch", "flash_attn", "build",
            "source_url", "tokens_per_s")


def _rows(name: str = "measurements.csv") -> list[dict[str, str]]:
    with (HERE / name).open(newline="") as handle:
        return [{**row, "file": name} for row in csv.DictReader(handle)]


def _table(name: str, key: str) -> dict[str, dict[str, Any]]:
    with (HERE / name).open("rb") as handle:
        return {entry["id"]: entry for entry in tomllib.load(handle)[key]}


@pytest.fixture(scope="module", params=sorted(SPLITS))
def rows(request: pytest.FixtureRequest) -> list[dict[str, str]]:
    """The rows of each file in turn."""
    return _rows(request.param)


@pytest.fixture(scope="module")
def measurements() -> list[dict[str, str]]:
    """The rows the calibration is fitted and cross-validated on."""
    return _rows()


def test_every_row_names_a_described_gpu_and_model(rows: list[dict[str, str]]) -> None:
    gpus, models = _table("gpus.toml", "gpu"), _table("models.toml", "model")
    assert {r["gpu_kind"] for r in rows} - gpus.keys() == set()
    assert {r["model"] for r in rows} - models.keys() == set()
    for row in rows:
        assert row["memory_type"] == gpus[row["gpu_kind"]]["memory_type"], row["row_id"]
        assert row["gpu_vendor"] == gpus[row["gpu_kind"]]["vendor"], row["row_id"]
        on_cpu = gpus[row["gpu_kind"]]["backend"] == "cpu"
        assert (row["backend"] == "CPU") == on_cpu, row["row_id"]


def test_every_row_says_where_and_how_it_was_run(rows: list[dict[str, str]]) -> None:
    for row in rows:
        where = f"row {row['row_id']}"
        assert row["source_url"].startswith("https://"), where
        assert row["source_detail"] and row["source_id"], where
        assert re.fullmatch(r"[a-z0-9-]+", row["source_id"]), where
        assert row["backend"] in BACKENDS, where
        assert re.fullmatch(r"20(2[3-9])-(0[1-9]|1[0-2])", row["build_date"]), where
        assert row["build_number"] == "" or int(row["build_number"]) > 0, where
        assert row["build"], where
        assert float(row["tokens_per_s"]) > 0, where
        assert int(row["file_bytes"]) > 0 and int(row["gpu_count"]) >= 1, where
        assert row["flash_attn"] in ("0", "1"), where
        assert int(row["ubatch"]) >= 1 and int(row["lanes"]) >= 1, where
        assert row["split"] in SPLITS[row["file"]], where
        # The CPU backend's threads (llama-bench's -t), as its post states them.
        if row["backend"] == "CPU":
            assert int(row["threads"]) >= 1, where
            assert f"{row['threads']} threads" in row["source_detail"], where
        else:
            assert row["threads"] == "", where
        assert (row["split"] == "excluded") == bool(row["excluded_because"]), where


def test_test_names_agree_with_tokens_depth_and_phase(rows: list[dict[str, str]]) -> None:
    for row in rows:
        where = f"row {row['row_id']}"
        if row["test"].startswith("batched"):
            assert row["phase"] == "decode" and f"B={row['lanes']}" in row["test"], where
            continue
        found = re.fullmatch(r"(pp|tg)(\d+)(?: @ d(\d+))?", row["test"])
        assert found, where
        assert row["phase"] == ("prefill" if found[1] == "pp" else "decode"), where
        assert int(row["tokens"]) == int(found[2]), where
        assert int(row["depth"]) == int(found[3] or 0), where
        assert row["lanes"] == "1", where


def test_no_measurement_is_entered_twice() -> None:
    rows = [row for name in SPLITS for row in _rows(name)]
    counts = Counter(tuple(row[key] for key in IDENTITY) for row in rows)
    assert [key for key, count in counts.items() if count > 1] == []
    assert len({row["row_id"] for row in rows}) == len(rows)


def test_every_gpu_cites_its_bandwidth_and_throughput_figures() -> None:
    """A kind without a published FP16 matrix figure gives what a fallback is derived
    from: a GPU its shader count (and clock where stated), a CPU its cores and SIMD width."""
    for kind, gpu in _table("gpus.toml", "gpu").items():
        assert gpu["memory_bandwidth_bytes_per_s"] > 0, kind
        assert "http" in gpu["memory_bandwidth_source"] or "whitepaper" in \
            gpu["memory_bandwidth_source"], kind
        if "fp16_tflops" in gpu:
            assert gpu["fp16_tflops_source"], kind
        if gpu["backend"] == "cpu":
            assert gpu["memory_type"] in ("ddr", "lpddr"), kind
            assert gpu["core_count"] > 0 and gpu["simd_width_bits"] in (128, 256, 512), kind
            assert gpu["core_source"], kind
            assert "shader_count" not in gpu, kind
            continue
        assert gpu["memory_type"] in ("gddr", "hbm", "lpddr"), kind
        assert "fp16_tflops" in gpu or "shader_count" in gpu, kind
        if "shader_count" in gpu or "boost_clock_mhz" in gpu:
            assert gpu["shader_source"], kind


def test_models_give_the_shapes_the_estimate_reads() -> None:
    for name, model in _table("models.toml", "model").items():
        assert model["source"].startswith("https://huggingface.co/"), name
        for key in ("parameter_count", "layer_count", "hidden_size", "vocab_size",
                    "attention_width", "kv_bytes_per_layer_token"):
            assert model[key] > 0, (name, key)
        experts = {key for key in ("expert_count", "experts_used", "expert_parameters")
                   if key in model}
        assert experts in (set(), {"expert_count", "experts_used", "expert_parameters"}), name
        if experts:
            assert model["experts_used"] < model["expert_count"], name
            assert model["expert_parameters"] < model["parameter_count"], name
        if "sliding_window" in model:
            assert 0 < model["sliding_layer_count"] < model["layer_count"], name


def test_the_set_is_wide_enough_to_hold_out_whole_sources(
        measurements: list[dict[str, str]]) -> None:
    usable = [row for row in measurements if not row["excluded_because"]]
    per_source = Counter(row["source_id"] for row in usable)
    assert len([s for s, count in per_source.items() if count >= 20]) >= 8, per_source
    per_backend = Counter(row["backend"] for row in usable)
    assert all(per_backend[b] >= 30 for b in ("CUDA", "ROCm", "Vulkan", "Metal")), per_backend
    assert per_backend["CPU"] >= 35, per_backend
    assert len({row["source_id"] for row in usable if row["backend"] == "CPU"}) >= 2
    assert len({row["gpu_kind"] for row in usable if row["backend"] != "CPU"}) >= 30
    assert {row["flash_attn"] for row in usable} == {"0", "1"}
    years = {row["build_date"][:4] for row in usable}
    assert {"2024", "2025", "2026"} <= years


# The reasons docs/speed.md counts, each by a phrase its rows' excluded_because holds.
EXCLUSION_REASONS = {"F16 prompt-processing runs below half": "F16 prompt processing below half",
                     "held back by their host": "limit of the Raspberry Pi 5 host",
                     "whose repetitions spread over a quarter": "spread of the repetitions",
                     "run through llama.cpp's BLAS backend": "llama.cpp's BLAS backend",
                     "run with the GPU's clock locked": "clock locked",
                     "measured on an unmerged pull request's": "unmerged PR",
                     "prompts run on a build with rocWMMA": "rocWMMA flash attention",
                     "prompts run with the GPU's matrix cores turned off":
                         "matrix cores turned off"}


def test_docs_count_the_rows_left_out(measurements: list[dict[str, str]]) -> None:
    """docs/speed.md's counts of the rows left out, by reason, and of those used are the
    data's."""
    rows = measurements
    text = " ".join((HERE.parents[1] / "docs" / "speed.md").read_text().split())
    stated = re.search(r"Of its ([\d,]+) rows, ([\d,]+) are left out of every fit, each "
                       r"saying why in `excluded_because`: (.*?); the other ([\d,]+) are used",
                       text)
    assert stated, "docs/speed.md no longer counts the rows left out"
    total, left_out, reasons, used = stated.groups()
    excluded = [row["excluded_because"] for row in rows if row["excluded_because"]]
    assert (int(total.replace(",", "")), int(left_out.replace(",", "")),
            int(used.replace(",", ""))) == (len(rows), len(excluded), len(rows) - len(excluded))
    counted = 0
    for phrase, marker in EXCLUSION_REASONS.items():
        said = re.search(rf"(\d+) {phrase}", reasons)
        assert said, f"docs/speed.md does not count the rows {phrase}"
        found = sum(marker in reason for reason in excluded)
        assert int(said[1]) == found, f"{said[0]}: the data has {found}"
        counted += found
    assert counted == len(excluded), "a row is left out for a reason docs/speed.md does not count"




def test_the_unseen_rows_are_of_sources_no_fit_has_seen(
        measurements: list[dict[str, str]]) -> None:
    """unseen.csv's runs come from people and harnesses that no row of measurements.csv
    names (a thread it cites may hold them, posted by others), from five sources or more,
    and take row ids after its last, which they keep when they join it."""
    unseen = _rows("unseen.csv")
    assert not {r["source_id"] for r in unseen} & {r["source_id"] for r in measurements}
    assert len({r["source_id"] for r in unseen}) >= 5
    last = max(int(r["row_id"]) for r in measurements)
    assert sorted(int(r["row_id"]) for r in unseen) == list(range(last + 1,
                                                                  last + 1 + len(unseen)))


def _build_of(row: dict[str, str]) -> int | None:
    return int(row["build_number"]) if row["build_number"] else None


def test_a_table_without_an_fa_column_ran_llama_bench_s_default(
        rows: list[dict[str, str]]) -> None:
    """A row whose table printed no fa column ran flash attention at the default of its
    build: off before b9437, auto (on, every backend here supports it) from it; and a
    row of a build from b9437 recorded off says where its post stated so."""
    for row in rows:
        where, build = f"row {row['row_id']}", _build_of(row)
        auto = (build >= FLASH_ATTN_AUTO_BUILD if build is not None
                else row["build_date"] > "2026-06")
        if "no fa column" in row["source_detail"]:
            assert row["flash_attn"] == ("1" if auto else "0"), where
        if build is not None and build >= FLASH_ATTN_AUTO_BUILD and row["flash_attn"] == "0":
            assert re.search(r"-fa 0|fa column 0|fa 0\b", row["source_detail"]), where


def test_a_row_whose_post_gives_its_command_records_the_command_s_settings(
        rows: list[dict[str, str]]) -> None:
    """A table trimmed of its fa and n_ubatch columns says nothing of them, but the
    llama-bench command its post gives does: the row records ``-fa 1`` and ``-ub N``
    as the command gives them, not llama-bench's defaults."""
    command = re.compile(r"llama-bench [^;()]*")
    checked = 0
    for row in rows:
        for given in command.findall(row["source_detail"]):
            where = f"row {row['row_id']}: {given}"
            if re.search(r"-fa 1\b", given):
                assert row["flash_attn"] == "1", where
                checked += 1
            ubatch = re.search(r"-ub (\d+)\b", given)
            if ubatch:
                assert row["ubatch"] == ubatch[1], where
    if rows[0]["file"] == "measurements.csv":
        assert checked >= 14


def _bare(name: str) -> str:
    return re.sub(r"\s+\d+\s*GB$", "", name)


def test_a_gpu_the_shipped_catalog_lists_is_described_as_the_catalog_does() -> None:
    """The calibration fits the figures an estimate reads: a GPU that planner/data's
    catalog also lists (the same name, memory size aside) has the catalog's id and the
    same memory type, backend, bandwidth and FP16 figure, so that a user's estimate of
    it computes with what its error was measured on."""
    from planner.models import load_gpu_catalog

    shipped = {_bare(gpu.name): gpu for gpu in load_gpu_catalog()}
    matched = 0
    for kind, gpu in _table("gpus.toml", "gpu").items():
        twin = shipped.get(_bare(gpu["name"]))
        if twin is None:
            continue
        matched += 1
        assert kind == twin.kind, (kind, twin.kind)
        assert (gpu["memory_type"], gpu["backend"], gpu["memory_bandwidth_bytes_per_s"],
                gpu.get("fp16_tflops")) == (twin.memory_type, twin.backend,
                                            twin.memory_bandwidth_bytes_per_s,
                                            twin.fp16_tflops), kind
    assert matched >= 5
