"""The report's tables as plain text cells, shared by every text renderer.

Cells are unescaped text: each renderer escapes them for its own format, so HTML,
Markdown and the command line all show the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from planner._validate import inert_json, inert_text
from planner._validate import spreadsheet_safe as spreadsheet_safe  # the one CSV cell rule
from planner.performance import ESTIMATE_NOTE
from planner.planning import STAGE_PART_NAMES
from planner.planning.nodesets import node_set_text
from planner.reports.content import ReportContent
from planner.targets import tpot_verdicts
from planner.units import format_bandwidth, format_bytes, format_milliseconds, layer_range


@dataclass(frozen=True, slots=True)
class TextTable:
    """Column headers and rows of text cells; ``align`` is ``"l"`` or ``"r"`` per column."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"headers": list(self.headers), "rows": [list(r) for r in self.rows],
                "align": list(self.align)}


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> TextTable:
    return TextTable(tuple(headers), tuple(tuple(r) for r in rows), tuple(align))


def size(value: int | None) -> str:
    return "—" if value is None else format_bytes(value)


def _optional(value: Any, unit: str = "") -> str:
    return "—" if value is None else f"{value}{unit}"


def _met(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _judged_by(content: ReportContent) -> str:
    """Which estimate judged the plan's TPOT target (planner.targets.plan_tpot_target_met)."""
    if content.tpot_target_met is None:
        return ""
    if content.estimate is not None and content.estimate.get("available"):
        return " (by the speed estimate)"
    return " (by the network estimate: no speed estimate)"


def model_rows(content: ReportContent) -> list[tuple[str, str]]:
    """``(label, value)`` pairs describing the model."""
    model = content.model
    source = {"preset": f"preset {model['reference']}", "gguf": f"GGUF file {model['reference']}",
              "numbers": "numbers given directly"}[model["kind"]]
    if model.get("file_bytes") is not None:
        source += f", run from a file of {size(model['file_bytes'])}"
    rows = [
        ("model", model["name"]),
        ("from", source),
    ]
    if model["architecture"]:
        rows.append(("architecture", model["architecture"]))
    if model["kv_cache_type"]:
        rows.append(("KV cache type", model["kv_cache_type"]))
    rows += [
        ("native context", f"{model['native_context_length']:,} tokens"),
        ("context floor", f"{model['context_floor']:,} tokens"),
        ("layers", f"{model['layer_count']:,}"),
        ("weights", f"{size(model['model_weight_bytes'])} "
                    f"({model['model_weight_bytes']:,} B)"),
        ("per-layer weights", "exact, per layer" if model["exact_layer_weights"]
         else f"even split, {size(model['largest_layer_weight_bytes'])} per layer"),
        ("KV cache per token", f"{size(model['kv_bytes_per_token'])} "
                               f"({model['kv_bytes_per_token']:,} B, all layers)"),
    ]
    return rows


def planning_rows(content: ReportContent) -> list[tuple[str, str]]:
    planning = content.planning
    return [
        ("minimum nodes", str(planning["minimum_nodes"])),
        ("context override", _optional(planning["context_length_override"])),
        ("parallel lanes override", _optional(planning["parallel_lanes_override"])),
        ("decode TPOT target", _optional(planning["target_decode_tpot_ms"], " ms")),
        ("latency-aware planning", "on" if planning["latency_aware"] else
         "off (no node has a latency)"),
        *((("nodes without a latency", note),)
          if (note := planning.get("unknown_latency")) else ()),
    ]


def _reserves(content: ReportContent) -> bool:
    return any(node.get("memory_rule_reserve_bytes") for node in content.nodes)


def node_intro(content: ReportContent) -> str:
    """What the node table shows, in words."""
    text = ("Usable bytes, step by step: detected VRAM, capped at the max VRAM, minus the "
            "runtime headroom")
    if _reserves(content):
        text += (", minus what llama.cpp reserves on the node at the plan's context and "
                 "lanes (its backend overhead and a stage's compute buffer)")
    return text + " (never below 0)."


def node_table(content: ReportContent) -> TextTable:
    """Each node's usable bytes, step by step: detected -> cap -> headroom (-> the memory
    rule's reserve) -> usable, as the stage table's usable."""
    reserves = _reserves(content)
    rows = []
    for node in content.nodes:
        cap = node["max_vram_bytes"]
        reserve = (size(node.get("memory_rule_reserve_bytes") or 0),) if reserves else ()
        rows.append((
            node["node_id"],
            size(node["detected_vram_bytes"]),
            "none" if cap is None else size(cap),
            size(node["capped_vram_bytes"]),
            size(node["runtime_headroom_bytes"]),
            *reserve,
            size(node["usable_vram_bytes"]),
            _optional(node["stage_transfer_latency_ms"], " ms"),
            node["stage_id"] or "unused",
        ))
    reserve_header = ("− llama.cpp reserve",) if reserves else ()
    return _table(("node", "detected VRAM", "max VRAM cap", "after cap", "− headroom",
                   *reserve_header, "= usable", "latency", "stage"), rows,
                  "lrrrr" + "r" * len(reserve_header) + "rrl")


def _ms(value: Any) -> str:
    return "—" if value is None else format_milliseconds(value, estimated=True)


def _estimated(content: ReportContent) -> bool:
    return bool(content.estimate and content.estimate.get("available"))


def estimate_rows(content: ReportContent) -> list[tuple[str, str]]:
    """``(label, value)`` pairs of the plan's speed and cost ESTIMATE, or why there is
    none; every label says it is an estimate."""
    estimate = content.estimate
    if estimate is None:
        return []
    if not estimate.get("available"):
        return [("estimate", f"not available: {estimate['reason']}")]
    cost, per_million = estimate["cost_per_hour_usd"], estimate["cost_per_million_tokens_usd"]
    return [
        ("estimated TPOT",
         f"{format_milliseconds(estimate['estimated_tpot_ms'], estimated=True)} per token"),
        ("estimated tokens/s", f"{estimate['tokens_per_s']:,.1f} over "
                               f"{estimate['parallel_lanes']} lanes"),
        ("estimated cost per hour", "—" if cost is None else f"USD {cost:,.2f}"),
        ("estimated cost per million tokens",
         "—" if per_million is None else f"USD {per_million:,.2f}"),
        *((("estimated time to fill the context", _ms(fill)),) if (
            fill := estimate.get("estimated_context_fill_ms")) is not None else ()),
        *((("estimated time to first token",
            f"{_ms(ttft)} for {estimate['prompt_tokens']:,} prompt tokens"),) if (
            ttft := estimate.get("ttft_ms")) is not None else ()),
        ("estimate basis", (f"{efficiency:.0%} of peak memory bandwidth" if (
            efficiency := estimate.get("bandwidth_efficiency")) is not None else
            "calibrated on published llama.cpp measurements")
         + f", links {format_bandwidth(estimate['link_bandwidth_bytes_per_s'])}"),
        *(("estimate note", note) for note in estimate["notes"]),
    ]


STAGE_PARTS = (("state_bytes", STAGE_PART_NAMES["state_bytes"]),
               ("other_bytes", STAGE_PART_NAMES["other_bytes"]))
"""Parts of a stage beyond its weights and KV cache, named as the memory figure names
them: shown where some stage has them."""


def shown_stage_parts(stages: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, str]],
                                                                    bool]:
    """Which of :data:`STAGE_PARTS` some stage has, and whether some node gives up a
    reserve before its layers (``reserved_bytes``: llama.cpp's rule)."""
    parts = [(key, name) for key, name in STAGE_PARTS if any(s.get(key) for s in stages)]
    return parts, any(stage.get("reserved_bytes") for stage in stages)


def stage_table(content: ReportContent) -> TextTable:
    estimated = _estimated(content)
    parts, reserved = shown_stage_parts(content.stages)
    rows = []
    for stage in content.stages:
        extra = ((_ms(stage.get("stage_read_ms")), _ms(stage.get("hop_ms")))
                 if estimated else ())
        rows.append((
            stage["stage_id"],
            stage["node_id"],
            layer_range(stage["layer_start"], stage["layer_end"]),
            str(stage["layer_count"]),
            size(stage["parameter_bytes"]),
            size(stage["kv_cache_bytes"]),
            *(size(stage[key]) for key, _ in parts),
            size(stage["used_bytes"]),
            *((size(stage["reserved_bytes"]),) if reserved else ()),
            size(stage["usable_vram_bytes"]),
            size(stage["remaining_bytes"]),
            *extra,
        ))
    extra_headers = ("est. read", "est. hop") if estimated else ()
    headers = ("stage", "node", "layers", "count", "weights", "KV cache",
               *(name for _, name in parts), "used",
               *((STAGE_PART_NAMES["reserved_bytes"],) if reserved else ()), "usable",
               "remaining",
               *extra_headers)
    return _table(headers, rows, "ll" + "r" * (len(headers) - 2))


def plan_facts(content: ReportContent) -> list[tuple[str, str]]:
    plan = content.plan
    if plan is None:
        return []
    return [
        ("context length", f"{plan['context_length']:,} tokens"),
        ("parallel lanes", str(plan["parallel_lanes"])),
        ("stages", str(len(plan["stages"]))),
        ("estimated decode network time",
         _optional(plan["estimated_decode_network_ms_per_token"], " ms per token")),
        ("TPOT target met", _met(content.tpot_target_met)
         + _judged_by(content)),
        ("memory model", memory_model_text(content)),
    ]


def memory_model_text(content: ReportContent) -> str:
    model = (content.memory or {}).get("memory_model", "design")
    if model == "llamacpp":
        return ("llamacpp: what llama.cpp allocates per device (weights, KV cache, compute "
                "buffer, output, backend overhead)")
    return "design: weights + ceil(kv / L) x context per layer"


def plan_charges(stages: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """What the plan charged each stage's node, by stage id: its used bytes and the
    reserve its node gave up (:func:`planner.stage_usage`)."""
    return {str(stage["stage_id"]): int(stage["used_bytes"]) + int(stage["reserved_bytes"])
            for stage in stages}


PLAN_CHARGES_NOTE = (
    "plan charges: what the plan charged the stage's node (its used bytes and the "
    "llama.cpp reserve, as the stage table gives them). Before the last stage that is "
    "what llama.cpp allocates; the last stage is also charged a pipeline stage's "
    "compute buffer, on the safe side. The output head counts among the weights here, "
    "and every compute buffer under compute.")


def memory_table(content: ReportContent) -> TextTable:
    """Under the llamacpp memory model, each stage's components and the host's, and what
    the plan charged each stage (:data:`PLAN_CHARGES_NOTE`)."""
    charged = plan_charges(content.stages)
    rows = []
    for row in (content.memory or {}).get("stages", ()):
        layers = ("—" if row["layer_start"] == row["layer_end"]
                  else layer_range(row["layer_start"], row["layer_end"]))
        planned = charged.get(row["stage_id"])
        rows.append((row["stage_id"], row["node_id"], layers,
                     *(size(row[key]) for key in _MEMORY_KEYS),
                     "—" if planned is None else size(planned)))
    return _table(("stage", "node", "layers", "weights", "KV cache", "compute", "output",
                   "overhead", "total", "plan charges"), rows, "lllrrrrrrr")


_MEMORY_KEYS = ("weights_bytes", "kv_bytes", "compute_bytes", "output_bytes",
                "overhead_bytes", "total_bytes")


def quorum_text(content: ReportContent) -> str:
    quorum = content.quorum
    if quorum is None:
        return "There is no plan, so no startup quorum."
    stages, needed = quorum["planned_stages"], quorum["quorum_requirement"]
    tolerated = quorum["tolerated_failures"]
    return (f"The coordinator needs {needed} of {stages} planned stages to accept its claim "
            f"before loading (quorum = {stages} // 2 + 1), so startup tolerates {tolerated} "
            f"stage failure{'s' if tolerated != 1 else ''}.")


def what_if_table(content: ReportContent) -> TextTable:
    rows = []
    for row in content.failure_what_if:
        if row["ok"]:
            plan = row["plan"]
            outcome = "plan unchanged" if row["unchanged"] else "new plan"
            detail = (f"{len(plan['stages'])} stages, context {plan['context_length']:,}, "
                      f"{plan['parallel_lanes']} lanes: "
                      + ", ".join(stage["node_id"] for stage in plan["stages"]))
        else:
            outcome = f"no plan ({row['error']['code']})"
            detail = row["error"]["message"]
        rows.append((row["lost_node_id"], "yes" if row["in_plan"] else "no", outcome, detail))
    return _table(("lost node", "in plan", "outcome", "plan of the remaining nodes, or why "
                   "none"), rows, "llll")


def candidate_table(content: ReportContent) -> TextTable:
    return candidate_rows_table(content.candidates,
                                content.planning.get("target_decode_tpot_ms"))


def candidate_estimate_note(content: ReportContent) -> str:
    """Under a candidates table whose rows carry the speed estimate: that the ``est.``
    columns are estimates, with the measured error (the plan's estimate's notes); ""
    without such rows."""
    if not any(row.get("estimated_tpot_ms") is not None for row in content.candidates):
        return ""
    notes = (content.estimate or {}).get("notes") or [ESTIMATE_NOTE]
    return "est. columns: " + " ".join(notes[:2])


def candidate_rows_table(records: Sequence[dict[str, Any]],
                         target_decode_tpot_ms: int | None = None) -> TextTable:
    """Candidate records (see :func:`~planner.reports.content.candidate_records`); with
    the speed estimate's columns when the records carry them. "target met" judges the
    fleet's ``target_decode_tpot_ms`` by :func:`planner.targets.tpot_verdicts`."""
    estimated = any(row.get("estimated_tpot_ms") is not None for row in records)
    verdicts = tpot_verdicts(target_decode_tpot_ms,
                             [row.get("estimated_tpot_ms") for row in records],
                             [row["decode_tpot_target_met"] for row in records])
    rows = []
    for row, met in zip(records, verdicts, strict=True):
        fill = row.get("estimated_context_fill_ms")
        extra = (_ms(row.get("estimated_tpot_ms")), _number(row.get("tokens_per_s"), 1),
                 _ms(fill),
                 _number(row.get("cost_per_hour_usd"), 2),
                 _number(row.get("cost_per_million_tokens_usd"), 2)) if estimated else ()
        rows.append((
            f"{row['context_length']:,}",
            str(row["stage_count"]),
            str(row["parallel_lanes"]),
            "yes" if row["feasible"] else "no",
            node_set_text(row["node_ids"]),
            size(row["min_remaining_bytes"]),
            size(row["total_remaining_bytes"]),
            _optional(row["estimated_decode_network_ms_per_token"], " ms"),
            _met(met),
            "yes" if row["selected"] else "no",
            row["reason"] or "",
            *extra,
        ))
    extra_headers = (("est. decode TPOT", "est. tokens/s", "est. context fill",
                      "est. USD/h", "est. USD/M tokens") if estimated else ())
    # With a speed estimate, that is the TPOT; the planner's figure is its network time.
    network = "est. network time" if estimated else "est. TPOT"
    return _table(("context", "stages", "lanes", "fits", "nodes", "min remaining",
                   "total remaining", network, "target met", "selected", "why not",
                   *extra_headers), rows, "rrrllrrrlll" + "r" * len(extra_headers))


def _number(value: Any, digits: int) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def choice_text(content: ReportContent) -> str:
    """One sentence on why the plan has its shape; empty without a plan."""
    return content.choice["summary"] if content.choice else ""


def choice_table(content: ReportContent) -> TextTable:
    """The chosen shape and the best shape at each higher context, with the rule that
    ranked it lower (docs/rules.md §6)."""
    headers = ("shape", "context", "stages", "lanes", "est. TPOT", "target met", "why not")
    rows = []
    if content.choice:
        chosen = content.choice["chosen"]
        options = [("chosen", chosen, "")]
        options += [("higher context", item["option"], item["reason"])
                    for item in content.choice["higher_contexts"]]
        for label, option, reason in options:
            rows.append((label, f"{option['context_length']:,}", str(option["stage_count"]),
                         str(option["parallel_lanes"]),
                         _optional(option["estimated_decode_network_ms_per_token"], " ms"),
                         _met(option["decode_tpot_target_met"]), reason))
    return _table(headers, rows, "lrrrrll")


def warning_lines(content: ReportContent) -> list[str]:
    return [warning["message"] for warning in content.warnings]


def result_text(content: ReportContent) -> str:
    if content.plan is not None:
        return f"Plan found: {content.summary}."
    error = content.error or {}
    return f"No plan ({error.get('code')}): {error.get('message')}"


def terminal_safe(text: str) -> str:
    """``text`` with control characters shown as ``?``: C0 and C1 controls (newlines,
    escape sequences), bidirectional overrides, and lone surrogates (which no terminal
    encoding can print); :func:`planner._validate.inert_text`."""
    return inert_text(text)


def terminal_lines(text: str) -> str:
    """Like :func:`terminal_safe`, but keeping the line breaks of multi-line text."""
    return "\n".join(terminal_safe(line) for line in text.split("\n"))


def html_text(text: str) -> str:
    """``text`` as inert HTML: escaped, with control characters and bidirectional
    overrides shown as ``?`` as on the terminal (line breaks kept)."""
    return escape(terminal_lines(text))


def terminal_json(data: Any) -> str:
    """``data`` as indented JSON for a terminal: non-ASCII text as written, but every
    character :func:`terminal_safe` would replace escaped (``\\u202e``), so it reads back
    as the same data; :func:`planner._validate.inert_json`."""
    return inert_json(json.dumps(data, indent=2, ensure_ascii=False))


def text_table(table: TextTable) -> str:
    """A fixed-width rendering for terminals."""
    rows = [tuple(terminal_safe(cell) for cell in row) for row in table.rows]
    widths = [len(h) for h in table.headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(w) if a == "r" else cell.ljust(w)
                 for cell, w, a in zip(cells, widths, table.align, strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(table.headers), rule, *(line(row) for row in rows)])
