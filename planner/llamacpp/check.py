"""The estimator against llama.cpp's recorded runs of every architecture (make validate's
validation/results/archs/, one file per model): each recorded model rebuilt from its GGUF
header,
estimated on the host alone and split as it ran, compared device by device and component
by component with :data:`ACCURACY_TARGETS`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from planner._validate import integer
from planner.llamacpp.estimate import MemoryEstimate, estimate
from planner.llamacpp.layout import model_from_header
from planner.llamacpp.settings import LlamaCppSettings, MemoryModelError, _bad

_MIB = 1024 * 1024
# How close an estimate must come to what llama.cpp allocated, per device and component:
# ("abs", bytes) or ("rel", share of the measured figure). `make validate` and the tests
# of the recorded runs both judge with these.
ACCURACY_TARGETS: dict[str, tuple[str, float]] = {
    "weights_bytes": ("abs", 0.05 * _MIB),
    "kv_bytes": ("abs", 0.05 * _MIB),
    "state_bytes": ("abs", 0.05 * _MIB),
    "output_bytes": ("abs", 0.05 * _MIB),
    "compute_bytes": ("rel", 0.10),
    "total_bytes": ("rel", 0.05),
}


def within_target(component: str, estimated: int, measured: int) -> bool:
    """Whether an estimate of ``component`` is within its accuracy target."""
    if not isinstance(component, str) or component not in ACCURACY_TARGETS:
        raise _bad("component")(f"must be one of {', '.join(ACCURACY_TARGETS)}", component)
    estimated = integer(estimated, _bad("estimated"))
    measured = integer(measured, _bad("measured"))
    kind, limit = ACCURACY_TARGETS[component]
    error = abs(estimated - measured)
    if kind == "abs":
        return error <= limit
    return error <= limit * max(measured, 1)


CHECKED = ("weights_bytes", "kv_bytes", "state_bytes", "compute_bytes", "output_bytes",
           "total_bytes")

# The recorded models whose compute buffer (or total) misses its target on some device of
# a run, each with what the graph model lacks (or that it is not found yet). Every other
# model meets the target on every device; the tests hold both to it.
KNOWN_MISSES: dict[str, str] = {
}


@dataclass(frozen=True, slots=True)
class Comparison:
    """One component of one device of one recorded run."""

    file: str
    architecture: str
    run: str
    device: str
    component: str
    estimated_bytes: int
    measured_bytes: int

    @property
    def within_target(self) -> bool:
        return within_target(self.component, self.estimated_bytes, self.measured_bytes)


def load_record(path: str | Path) -> dict[str, Any]:
    """The run's settings and every model's record, from the folder ``validate`` wrote."""
    folder = Path(path)
    run = json.loads((folder / "run.json").read_text())
    models = [json.loads((folder / f"{Path(name).stem}.json").read_text())
              for name in run["files"]]
    record: dict[str, Any] = {**run, "models": models}
    return record


def _parts(result: MemoryEstimate) -> dict[str, Any]:
    parts = {f"device-{i}": part for i, part in enumerate(result.devices)}
    parts["host"] = result.host
    return parts


def compare_model(entry: Mapping[str, Any], settings: LlamaCppSettings
                  ) -> Iterator[Comparison]:
    """Every component of every device of the model's recorded runs, estimated today."""
    header = entry["header"]
    model = model_from_header(entry["file"], header["metadata"], _tensors(header),
                              entry["file"])
    runs: list[tuple[str, Any, list[tuple[int, int]] | None]] = [
        ("host", entry.get("host"), None)]
    if entry.get("split"):
        split_ranges = [(start, end) for start, end in entry["split"]["ranges"]]
        runs.append(("split", entry["split"], split_ranges))
    for run_name, run, ranges in runs:
        if not run or run.get("error") or not run.get("memory"):
            continue
        result = estimate(model, settings, ranges, devices=0 if ranges is None else None)
        yield from _compare(entry["file"], entry["architecture"], run_name, result, run)


def _compare(file: str, architecture: str, run_name: str, result: MemoryEstimate,
             run: Mapping[str, Any]) -> Iterator[Comparison]:
    """Every component of every device of one run (``run["memory"]``: device ->
    component -> bytes), against ``result``."""
    for device, part in _parts(result).items():
        measured = run["memory"].get(device, {})
        for component in CHECKED:
            if component == "total_bytes":
                ours = part.total_bytes - part.overhead_bytes
                got = sum(measured.values())
            else:
                ours, got = getattr(part, component), measured.get(component, 0)
            if component != "total_bytes" and not ours and not got:
                continue
            yield Comparison(file, architecture, run_name, device, component, ours, got)


def compare_record(record: Mapping[str, Any]) -> list[Comparison]:
    settings = LlamaCppSettings(**record["settings"])
    return [row for entry in record["models"] for row in compare_model(entry, settings)]


def family(architecture: str) -> str:
    """The family an architecture belongs to, for the summary table."""
    for prefix in ("qwen", "gemma", "deepseek", "glm", "granite", "llama", "phi", "mamba",
                   "rwkv", "arwkv", "nemotron", "minimax", "kimi", "bailing", "exaone",
                   "falcon", "hunyuan", "hy_", "ernie", "lfm", "olmo", "plamo", "cohere",
                   "command", "starcoder", "jina", "bert", "nomic", "t5", "llada", "mistral",
                   "dots", "jais", "gpt", "minicpm", "internlm", "baichuan", "chatglm"):
        if architecture.startswith(prefix):
            return {"arwkv": "rwkv", "hy_": "hunyuan", "command": "cohere", "jina": "bert",
                    "nomic": "bert", "chatglm": "glm", "gpt": "gpt"}.get(prefix, prefix)
    return architecture


_GROUPS = {"weights": ("weights_bytes", "output_bytes"),
           "KV + state": ("kv_bytes", "state_bytes"),
           "compute": ("compute_bytes",), "total": ("total_bytes",)}


def run_summary(rows: list[Comparison]) -> str:
    """A Markdown table: for the run on one device and the split over two, how many
    models meet each target on every device (the host's included)."""
    lines = ["| run | models | weights | KV + state | compute | total |",
             "|---|---|---|---|---|---|"]
    for run, label in (("host", "one device (CPU)"), ("split", "split over two rpc-servers")):
        mine = [row for row in rows if row.run == run]
        files = {row.file for row in mine}
        cells = [label, str(len(files))]
        for components in _GROUPS.values():
            keyed: dict[str, bool] = {}
            for row in mine:
                if row.component in components:
                    keyed[row.file] = keyed.get(row.file, True) and row.within_target
            cells.append(f"{sum(keyed.values())}/{len(keyed)}" if keyed else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family_summary(rows: list[Comparison]) -> str:
    """A Markdown table: per architecture family, how many recorded device runs meet each
    target (weights, KV cache and recurrent state, compute, total)."""
    families: dict[str, list[Comparison]] = {}
    for row in rows:
        families.setdefault(family(row.architecture), []).append(row)
    lines = ["| family | models | weights | KV + state | compute | total |",
             "|---|---|---|---|---|---|"]
    for name in sorted(families):
        mine = families[name]
        cells = [name, str(len({row.file for row in mine}))]
        for components in _GROUPS.values():
            # One device of one run counts as meeting a target when every one of its
            # components in the group does.
            keyed: dict[tuple[str, str, str], bool] = {}
            for row in mine:
                if row.component in components:
                    key = (row.file, row.run, row.device)
                    keyed[key] = keyed.get(key, True) and row.within_target
            met = sum(keyed.values())
            cells.append(f"{met}/{len(keyed)}" if keyed else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def miss_summary(rows: list[Comparison]) -> str:
    """A Markdown table of the known misses: each model's furthest estimate from the
    measured compute buffer and total (estimated / measured, on the device and run where
    it is furthest) and the reason."""
    lines = ["| model | compute (estimated / measured) | total | reason |",
             "|---|---|---|---|"]

    def furthest(mine: list[Comparison], component: str) -> str:
        pairs = [row for row in mine if row.component == component and row.measured_bytes]
        row = max(pairs, key=lambda r: abs(r.estimated_bytes / r.measured_bytes - 1))
        return (f"{row.estimated_bytes / row.measured_bytes:.2f} "
                f"({row.run}, {row.device})")

    for file, reason in sorted(KNOWN_MISSES.items()):
        mine = [row for row in rows if row.file == file]
        if not mine:
            continue
        lines.append(f"| `{file.removesuffix('.gguf')}` | {furthest(mine, 'compute_bytes')} "
                     f"| {furthest(mine, 'total_bytes')} | {reason} |")
    if len(lines) == 2:
        return "None: every recorded model meets both targets on every device of both runs."
    return "\n".join(lines)


# -- the grid of settings (validation/results/grid/) ------------------------------------


@dataclass(frozen=True, slots=True)
class GridRun:
    """One recorded run of the grid: a model at one row of the design, what llama.cpp
    allocated per device compared with the estimate (``rows``), or the refusal of
    llama.cpp (``refused``) beside the estimate's (``estimate_refused``)."""

    file: str
    architecture: str
    row: int
    settings: Mapping[str, Any]
    rows: tuple[Comparison, ...]
    refused: str = ""
    estimate_refused: str = ""

    def meets(self, components: tuple[str, ...]) -> bool:
        """Every device within target for ``components`` (a refusal both made counts as
        met; one only llama.cpp or only the estimate made, as missed)."""
        if self.refused or self.estimate_refused:
            return bool(self.refused and self.estimate_refused)
        return all(row.within_target for row in self.rows if row.component in components)


def load_grid(path: str | Path) -> dict[str, Any]:
    """The grid's record: ``run.json`` (the design, the models and where their headers
    are), every run of ``runs.jsonl`` and each model's header."""
    folder = Path(path)
    root = folder.parents[2]
    run = json.loads((folder / "run.json").read_text())
    headers = {name: json.loads((root / info["header"]).read_text())["header"]
               for name, info in run["models"].items()}
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    record: dict[str, Any] = {**run, "headers": headers, "runs": runs}
    return record


def _tensors(header: Mapping[str, Any]) -> list[SimpleNamespace]:
    """A recorded tensor table: name, type, bytes and, where recorded, the shape."""
    return [SimpleNamespace(name=entry[0], type_name=entry[1], n_bytes=entry[2],
                            **({"shape": tuple(entry[3])} if len(entry) > 3 else {}))
            for entry in header["tensors"]]


def compare_grid(record: Mapping[str, Any]) -> list[GridRun]:
    """Every recorded run of the grid against the estimate today."""
    rows = record["design"]["rows"]
    models = {}
    for name, header in record["headers"].items():
        models[name] = (header["metadata"]["general.architecture"],
                        model_from_header(name, header["metadata"], _tensors(header), name))
    results = []
    for entry in record["runs"]:
        arch, model = models[entry["file"]]
        row = rows[entry["row"]]
        ranges = [(start, end) for start, end in entry["ranges"]] if "ranges" in entry \
            else None
        refused = ""
        try:
            settings = LlamaCppSettings(**{k: v for k, v in row.items() if k != "devices"})
            result = estimate(model, settings, ranges, devices=0 if ranges is None else None)
        except MemoryModelError as error:
            refused = f"{error.code}: {error.message}"
        compared: list[Comparison] = []
        if not refused and not entry.get("error"):
            run = {"memory": entry["memory"]}
            compared = list(_compare(entry["file"], arch, f"row {entry['row']}", result,
                                     run))
        results.append(GridRun(entry["file"], arch, entry["row"], row, tuple(compared),
                               entry.get("error", ""), refused))
    return results


def grid_summary(runs: list[GridRun], factors: Mapping[str, Sequence[Any]]) -> str:
    """A Markdown table: for each value of each setting of the grid, its runs and how many
    meet each target on every device (a run llama.cpp refused counts as met when the
    estimate refuses it too)."""
    names = {"devices": "devices", "context_length": "context", "ubatch": "ubatch",
             "parallel": "lanes", "kv_unified": "unified cache", "cache_type_k": "K cache",
             "cache_type_v": "V cache", "flash_attn": "flash attention"}
    lines = ["| setting | value | runs | weights | KV + state | compute | total |",
             "|---|---|---|---|---|---|---|"]

    def cells(mine: list[GridRun]) -> list[str]:
        return [str(len(mine))] + [f"{sum(run.meets(components) for run in mine)}"
                                   for components in _GROUPS.values()]

    lines.append("| all | | " + " | ".join(cells(runs)) + " |")
    for factor, levels in factors.items():
        for level in levels:
            shown = {True: "on", False: "off"}.get(level, level) \
                if isinstance(level, bool) else level
            mine = [run for run in runs if run.settings[factor] == level]
            lines.append(f"| {names.get(factor, factor)} | {shown} | "
                         + " | ".join(cells(mine)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m planner.llamacpp.check [RECORD]``: the tables docs/llamacpp.md shows, for
    the recorded runs in RECORD (validation/results/archs by default; the grid's table for
    validation/results/grid), estimated today."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else Path("validation") / "results" / "archs"
    if (folder / "runs.jsonl").exists():
        record = load_grid(folder)
        print(grid_summary(compare_grid(record), record["design"]["factors"]))
        return 0
    rows = compare_record(load_record(folder))
    print(run_summary(rows), family_summary(rows), miss_summary(rows), sep="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
