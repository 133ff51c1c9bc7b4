"""The sizing report: the question, the cheapest fleets, the Pareto front and the chart,
as self-contained HTML, Markdown or JSON (format by file name). Speeds and token costs are
estimates and say so."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import planner
from planner.fleet import FleetFileError, write_text_atomic
from planner.reports.markdown import md_text
from planner.reports.tables import TextTable
from planner.reports.tables import html_text as escape
from planner.sizing import PRICE_KIND_TEXT, SizedFleet, SizingResult
from planner.units import format_milliseconds

SIZING_REPORT_SUFFIXES = (".html", ".htm", ".md", ".json")


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def fleet_table(fleets: Sequence[SizedFleet]) -> TextTable:
    """Fleets as text cells, cheapest first; the estimated TTFT only where the targets
    give a prompt size (its column is the time to first token of that prompt)."""
    ttft = any(fleet.estimated_ttft_ms is not None for fleet in fleets)
    headers = ("rank", "fleet", "nodes", "cost_per_hour_usd", "context_length",
               "stage_count", "parallel_lanes", "estimated_tpot_ms",
               *(("estimated_ttft_ms",) if ttft else ()), "tokens_per_s",
               "estimated_context_fill_s", "cost_per_million_tokens_usd",
               "failures_tolerated")
    rows = tuple(
        (str(rank), fleet.label, str(fleet.node_count), f"{fleet.cost_per_hour_usd:,.2f}",
         f"{fleet.plan.context_length:,}", str(fleet.plan.stage_count),
         str(fleet.plan.parallel_lanes), _number(fleet.estimated_tpot_ms, 1),
         *((_number(fleet.estimated_ttft_ms, 1),) if ttft else ()),
         _number(fleet.tokens_per_s, 1),
         _number(None if (fill := fleet.estimated_context_fill_ms) is None else fill / 1000, 1),
         _number(fleet.cost_per_million_tokens_usd, 2), str(fleet.failures_tolerated))
        for rank, fleet in enumerate(fleets, 1))
    return TextTable(headers, rows, ("r", "l", *("r",) * (len(headers) - 2)))


def question_rows(result: SizingResult, model_name: str) -> list[tuple[str, str]]:
    targets = result.targets
    tpot = targets.target_decode_tpot_ms
    return [
        ("model", model_name),
        ("minimum context", f"{result.minimum_context:,} tokens"),
        ("minimum lanes", str(targets.minimum_lanes)),
        ("minimum nodes", str(max(targets.minimum_nodes, 1))),
        ("TPOT target",
         "none" if tpot is None else f"{format_milliseconds(tpot)} (estimated TPOT)"),
        ("TTFT target", "none" if targets.target_ttft_ms is None else
         f"{format_milliseconds(targets.target_ttft_ms)} for a "
         f"{targets.prompt_tokens or 0:,}-token prompt "
         "(estimated TTFT)"),
        ("failures tolerated", str(targets.failures_tolerated)),
        ("kinds", ", ".join(result.kinds)),
        ("prices", PRICE_KIND_TEXT[result.price_kind]),
        ("plans evaluated", f"{result.plans_evaluated:,}"),
    ]


def answer_text(result: SizingResult) -> str:
    best = result.cheapest
    tpot = best.estimated_tpot_ms
    fill = best.estimated_context_fill_ms
    ttft = best.estimated_ttft_ms
    prompt = result.targets.prompt_tokens
    speed = "" if tpot is None else (
        f", estimated TPOT {format_milliseconds(tpot, estimated=True)}, "
        f"{best.tokens_per_s:,.1f} tokens/s"
        + ("" if ttft is None or prompt is None else
           f", first token of a {prompt:,}-token prompt in "
           f"{format_milliseconds(ttft, estimated=True)}")
        + ("" if fill is None else
           f", filling the context takes {format_milliseconds(fill, estimated=True)}"))
    return (f"Cheapest at {result.price_kind} prices: {best.label} at USD "
            f"{best.cost_per_hour_usd:,.2f} per hour, "
            f"context {best.plan.context_length:,} over {best.plan.stage_count} stages"
            f"{speed}.")


def _notes(result: SizingResult) -> list[str]:
    return [*result.estimate_notes, *result.notes]


def render_markdown(result: SizingResult, title: str, model_name: str) -> str:
    cell = md_text

    def table(data: TextTable) -> list[str]:
        lines = ["| " + " | ".join(cell(h) for h in data.headers) + " |",
                 "|" + "|".join("---:" if a == "r" else "---" for a in data.align) + "|"]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in data.rows]
        return lines

    lines = [f"# {cell(title)}", "", cell(answer_text(result)), "", "## Question", "",
             "| | |", "|---|---|"]
    lines += [f"| {cell(k)} | {cell(v)} |" for k, v in question_rows(result, model_name)]
    lines += ["", "## Cheapest fleets", "", *table(fleet_table(result.fleets)), "",
              "## Pareto front (cost per hour, context, estimated TPOT)", "",
              *table(fleet_table(result.pareto)), "", "## Notes", ""]
    lines += [f"- {cell(note)}" for note in _notes(result)]
    return "\n".join(lines) + "\n"


def render_json(result: SizingResult, title: str, model_name: str) -> str:
    return json.dumps({"title": title, "model": model_name, "tool_version": planner.__version__,
                       **result.to_dict()}, indent=2, ensure_ascii=False) + "\n"


def _html_table(data: TextTable, table_id: str) -> str:
    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(f'<{tag}{" class=r" if a == "r" else ""}>{escape(c)}</{tag}>'
                       for c, a in zip(row, data.align, strict=True))

    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in data.rows)
    return (f'<table id="{table_id}"><thead><tr>{cells("th", data.headers)}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def render_html(result: SizingResult, title: str, model_name: str) -> str:
    from planner.figures.sizing import sizing_figure

    chart = sizing_figure(result).to_html(full_html=False, include_plotlyjs=True,
                                          div_id="sizing-figure",
                                          config={"displaylogo": False, "responsive": True})
    facts = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>"
                    for k, v in question_rows(result, model_name))
    notes = "".join(f"<li>{escape(note)}</li>" for note in _notes(result))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;"
        "padding:0 1rem;color:#222}table{border-collapse:collapse;margin:.5rem 0 1rem;"
        "font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .55rem}"
        "th{background:#f5f5f5;text-align:left}.r{text-align:right}</style></head><body>",
        f'<h1 id="title">{escape(title)}</h1>',
        f'<p id="answer">{escape(answer_text(result))}</p>',
        '<h2>Question</h2>', f'<table id="question-table"><tbody>{facts}</tbody></table>',
        "<h2>Cheapest fleets</h2>", _html_table(fleet_table(result.fleets), "fleets-table"),
        "<h2>Pareto front</h2>", f'<div class="figure">{chart}</div>',
        _html_table(fleet_table(result.pareto), "pareto-table"),
        f'<h2>Notes</h2><ul id="notes">{notes}</ul>', "</body></html>", ""])


def render_sizing(result: SizingResult, fmt: str, *, title: str | None = None,
                  model_name: str = "model") -> str:
    """The sizing report as text in ``fmt`` (``html``, ``md`` or ``json``)."""
    title = title or f"Sizing {model_name}"
    key = "." + fmt.lower().lstrip(".")
    if key in (".html", ".htm"):
        return render_html(result, title, model_name)
    if key == ".md":
        return render_markdown(result, title, model_name)
    if key == ".json":
        return render_json(result, title, model_name)
    raise FleetFileError("UnsupportedFormat", f"reports are .html, .md or .json (got {fmt!r})")


def write_sizing_report(result: SizingResult, path: str | Path, *, title: str | None = None,
                        model_name: str = "model") -> Path:
    """Write the report to ``path`` (format by extension), atomically."""
    destination = Path(path)
    text = render_sizing(result, destination.suffix or "none", title=title,
                         model_name=model_name)
    write_text_atomic(destination, text)
    return destination

