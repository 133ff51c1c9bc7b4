"""The one parser of llama.cpp's logs: what a real llama-server run printed (recorded by
``make validate``, validation/results/mesh/) read back exactly, and hostile text (random,
mutated, huge numbers, nan, a file too large or no file at all) read without an error
other than a named one, and without a figure that is not a plain number."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.llamacpp import log as llamacpp_log
from planner.llamacpp.log import (
    HOST,
    MIB,
    LogError,
    Measured,
    Timing,
    parse_log,
    read_log,
    rpc_location,
)

ROOT = Path(__file__).resolve().parent.parent
MESH = ROOT / "validation" / "results" / "mesh"
LOG = MESH / "llama-server.log"


@pytest.fixture(scope="module")
def recorded() -> Measured:
    return read_log(LOG)


def test_the_recorded_llama_server_log_has_every_device_and_the_host(
        recorded: Measured) -> None:
    launch = __import__("json").loads((MESH / "launch.json").read_text())
    expected = {stage["address"] if not stage.get("rpc_device") else
                f"{stage['address']}/{stage['rpc_device']}" for stage in launch["stages"]}
    assert set(recorded.memory) == expected | {HOST}
    for device, parts in recorded.memory.items():
        assert parts["weights_bytes"] > 0
        assert parts["compute_bytes"] > 0
        assert device == HOST or parts["kv_bytes"] > 0
    # A server's second device is its own entry: the buffers of RPC1[...] are not added
    # to those of RPC0[...] of the same server.
    assert any("/" in device for device in recorded.memory)


def test_the_recorded_log_states_its_settings_and_layers(recorded: Measured) -> None:
    plan = __import__("json").loads((MESH / "plan.json").read_text())
    lanes = plan["parallel_lanes"]
    assert recorded.settings["n_seq_max"] == lanes
    assert recorded.settings["n_ctx"] == plan["context_length"]
    assert recorded.settings["flash_attn"] == "enabled"
    assert recorded.settings["kv_unified"] is True
    assert recorded.settings["cache_type_k"] == recorded.settings["cache_type_v"] == "f16"
    layers = plan["stages"][-1]["layer_end"]
    assert sorted(recorded.layer_devices) == list(range(layers + 1))


def test_each_request_is_one_timing_pair(recorded: Measured) -> None:
    run = __import__("json").loads((MESH / "run.json").read_text())
    assert len(recorded.timings) == len(run["prompts_words"])
    assert all(t.decode_tokens == run["decode_tokens"] for t in recorded.timings)
    assert all(t.prompt_tokens > 0 and t.prompt_ms > 0 and t.decode_ms > 0
               for t in recorded.timings)
    assert recorded.decode_ms_per_token == pytest.approx(
        sum(t.decode_ms for t in recorded.timings) / recorded.decode_tokens)


LINES = "\n".join([
    "llama_model_loader: loaded meta data with 40 key-value pairs",
    "load_tensors:   CPU_Mapped model buffer size =   170.00 MiB",
    "load_tensors: RPC0[10.0.0.7:50052] model buffer size =    53.73 MiB",
    "load_tensors: RPC1[10.0.0.7:50052] model buffer size =     3.81 MiB",
    "llama_context: n_ctx                 = 4096",
    "llama_context: flash_attn            = disabled",
    "llama_kv_cache: RPC0[10.0.0.7:50052] KV buffer size =    64.00 MiB",
    "llama_kv_cache: size =   64.00 MiB (  4096 cells,   3 layers,  1/1 seqs), "
    "K (q8_0):   32.00 MiB, V (f16):   32.00 MiB",
    "llama_perf_context_print: prompt eval time =     100.00 ms /    20 tokens "
    "(    5.00 ms per token,   200.00 tokens per second)",
    "llama_perf_context_print:        eval time =     300.00 ms /     6 runs   "
    "(   50.00 ms per token,    20.00 tokens per second)",
]) + "\n"


def test_llama_cli_lines_and_a_servers_second_device() -> None:
    measured = parse_log(LINES)
    assert measured.memory == {
        HOST: {"weights_bytes": 170 * MIB},
        "10.0.0.7:50052": {"weights_bytes": round(53.73 * MIB), "kv_bytes": 64 * MIB},
        "10.0.0.7:50052/1": {"weights_bytes": round(3.81 * MIB)}}
    assert rpc_location("10.0.0.7:50052/1") == ("10.0.0.7:50052", 1)
    assert rpc_location("10.0.0.7:50052") == ("10.0.0.7:50052", 0)
    assert rpc_location(HOST) is None
    assert measured.timings == (Timing(20, 100.0, 6, 300.0),)
    assert measured.prefill_tokens_per_s == 200.0
    assert measured.decode_ms_per_token == 50.0
    assert measured.settings == {"n_ctx": 4096, "flash_attn": "disabled",
                                 "cache_type_k": "q8_0", "cache_type_v": "f16"}


def test_only_the_last_load_counts() -> None:
    # llama.cpp's --fit loads the model once to measure it, then again for real.
    measured = parse_log(LINES + LINES.replace("53.73", "10.00"))
    assert measured.memory["10.0.0.7:50052"]["weights_bytes"] == round(10 * MIB)


@pytest.mark.parametrize("figure", ["nan", "inf", "-nan", "1e309", "9" * 40, "12.3.4",
                                    "0x10", "\u0661\u0662"])
def test_a_figure_that_is_no_plain_number_is_not_read(figure: str) -> None:
    text = (f"load_tensors: RPC0[h:1] model buffer size = {figure} MiB\n"
            f"prompt eval time = {figure} ms / 5 tokens (1.0 ms per token, 1.0 tokens "
            f"per second)\n       eval time = 10.00 ms / {figure} tokens\n"
            f"llama_context: n_ctx = {figure}\n")
    measured = parse_log(text)
    assert "h:1" not in measured.memory
    assert "n_ctx" not in measured.settings
    for timing in measured.timings:
        assert math.isfinite(timing.prompt_ms) and math.isfinite(timing.decode_ms)


def _check(measured: Measured) -> None:
    for parts in measured.memory.values():
        assert all(isinstance(v, int) and 0 <= v < 10**16 * MIB for v in parts.values())
    for timing in measured.timings:
        assert timing.prompt_tokens >= 0 and timing.decode_tokens >= 0
        assert math.isfinite(timing.prompt_ms) and math.isfinite(timing.decode_ms)
    for value in (measured.prefill_tokens_per_s, measured.decode_ms_per_token):
        assert value is None or math.isfinite(value)
    assert set(measured.settings) <= {"n_ctx", "n_ctx_seq", "n_seq_max", "n_batch",
                                      "n_ubatch", "flash_attn", "kv_unified",
                                      "cache_type_k", "cache_type_v"}


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_random_text_parses_to_plain_figures(text: str) -> None:
    _check(parse_log(text))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_recorded_log_mutated_parses_to_plain_figures(data: st.DataObject) -> None:
    lines = LOG.read_text().splitlines()
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    picked = [line for line in lines if "buffer size" in line or "eval time" in line
              or "llama_context: n_" in line]
    for _ in range(data.draw(st.integers(1, 8))):
        index = rng.randrange(len(picked))
        line = list(picked[index])
        where = rng.randrange(len(line))
        line[where:where + rng.randint(0, 4)] = data.draw(st.text(max_size=6))
        picked[index] = "".join(line)
    _check(parse_log("\n".join(picked)))


def test_a_log_too_large_is_refused_before_it_is_read(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llamacpp_log, "MAX_LOG_BYTES", 1000)
    big = tmp_path / "big.log"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(LogError) as caught:
        read_log(big)
    assert caught.value.code == "UnreadableLog" and "1,001 bytes" in caught.value.message


def test_no_file_a_folder_or_a_pipe_is_a_named_error(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    for path in (tmp_path / "missing.log", tmp_path, fifo):
        with pytest.raises(LogError) as caught:
            read_log(path)
        assert caught.value.code == "UnreadableLog"


def test_bytes_that_are_not_utf8_are_read_around(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"\xff\xfe" + LINES.encode())
    assert read_log(log).memory == parse_log(LINES).memory


def test_the_compute_buffers_the_context_frees_are_read_to_four_decimals(
        recorded: Measured) -> None:
    """llama-server stopped frees its context, which logs each compute buffer again with
    four decimals: those are kept, a server's second device's under its own key."""
    import re

    exact = {}
    for match in re.finditer(r"~llama_context:\s+(\S+) compute buffer size is\s+([0-9.]+) MiB",
                             LOG.read_text()):
        name, mib = match[1], float(match[2])
        rpc = re.fullmatch(r"RPC(\d+)\[(.+)\]", name)
        key = HOST if rpc is None else rpc[2] if rpc[1] == "0" else f"{rpc[2]}/{rpc[1]}"
        exact[key] = round(mib * MIB)
    assert len(exact) == len(recorded.memory)
    assert {key: parts["compute_bytes"] for key, parts in recorded.memory.items()} == exact
