"""The report as one self-contained HTML file: tables, plus plotly charts with plotly.js
inlined, so it opens offline. Every user string is HTML-escaped."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from planner.figures.plan import candidates_figure, layer_ranges_figure, memory_figure
from planner.reports.content import ReportContent
from planner.reports.tables import (
    PLAN_CHARGES_NOTE,
    TextTable,
    candidate_estimate_note,
    candidate_table,
    choice_table,
    choice_text,
    estimate_rows,
    memory_table,
    model_rows,
    node_intro,
    node_table,
    plan_facts,
    planning_rows,
    quorum_text,
    result_text,
    stage_table,
    warning_lines,
    what_if_table,
)
from planner.reports.tables import (
    html_text as escape,
)

FIGURE_IDS = ("memory-figure", "layers-figure", "candidates-figure")
"""``id`` of the chart divs, in document order."""

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; color: #222; line-height: 1.4; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2rem; }
.meta { color: #666; font-size: .9rem; }
.result { padding: .6rem .9rem; border-radius: 6px; margin: 1rem 0; }
.result.ok { background: #e9f5ec; border: 1px solid #8fc79c; }
.result.none { background: #fbeaea; border: 1px solid #d88f8f; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .55rem; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f5f5f5; text-align: left; }
td.r, th.r { text-align: right; }
td.r { white-space: nowrap; }
table.facts th { width: 14rem; }
tr.selected td { background: #fff4d6; font-weight: 600; }
.scroll { max-height: 32rem; overflow: auto; }
ul.warnings li { color: #8a4b00; }
.figure { margin: 1rem 0; }
#candidates-table { width: 100%; font-size: .8rem; }
/* The candidates' sixteen columns may use the whole window, not only the text's width. */
#candidates .scroll { width: calc(100vw - 3rem); margin-left: calc((100% - 100vw + 3rem) / 2); }
#candidates-table th, #candidates-table td { padding: .2rem .35rem; }
th.prose, td.prose { min-width: 12rem; }
"""


def _cell(tag: str, text: str, css: str) -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<{tag}{attribute}>{escape(text)}</{tag}>"


PROSE_COLUMNS = frozenset({"why not"})
"""Columns of sentences: kept wide enough to read, where the others give way."""


def _table(table: TextTable, *, table_id: str, selected: Sequence[bool] = ()) -> str:
    if not table.rows:
        return f'<p id="{table_id}" class="empty">(none)</p>'
    classes = ["prose" if header in PROSE_COLUMNS else "r" if align == "r" else ""
               for header, align in zip(table.headers, table.align, strict=True)]
    head = "".join(_cell("th", h, c) for h, c in zip(table.headers, classes, strict=True))
    body = []
    for index, row in enumerate(table.rows):
        marked = ' class="selected"' if index < len(selected) and selected[index] else ""
        cells = "".join(_cell("td", c, css) for c, css in zip(row, classes, strict=True))
        body.append(f"<tr{marked}>{cells}</tr>")
    return (f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _facts(rows: Sequence[tuple[str, str]], *, table_id: str) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table id="{table_id}" class="facts"><tbody>{body}</tbody></table>'


def _figure_html(figure: go.Figure, div_id: str, *, with_plotlyjs: bool) -> str:
    # plotly.js goes inline once, with the first chart; the others reuse it.
    html: str = figure.to_html(
        full_html=False,
        include_plotlyjs=with_plotlyjs,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
        default_height="auto",
    )
    return html


def _figures(content: ReportContent) -> dict[str, str]:
    request = content.planning_input()
    plan = content.plan_object()
    figures = (
        memory_figure(request, plan),
        layer_ranges_figure(request, plan),
        candidates_figure(content.candidates_frame(), request.target_decode_tpot_ms),
    )
    return {
        div_id: _figure_html(figure, div_id, with_plotlyjs=index == 0)
        for index, (div_id, figure) in enumerate(zip(FIGURE_IDS, figures, strict=True))
    }


def render_html(content: ReportContent) -> str:
    """The whole report as one HTML document."""
    figures = _figures(content)
    ok = content.plan is not None
    source = (f" {content.provenance} {escape(content.source)}" if content.source else "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="planner {escape(content.tool_version)}">',
        f"<title>{escape(content.title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f'<header><h1 id="title">{escape(content.title)}</h1>',
        f'<p class="meta">Generated <time id="generated-at" datetime="'
        f'{escape(content.generated_at)}">{escape(content.generated_at)}</time> by planner '
        f'<span id="tool-version">{escape(content.tool_version)}</span>{source}.</p></header>',
        f'<p id="result" class="result {"ok" if ok else "none"}">'
        f"{escape(result_text(content))}</p>",
        '<section id="inputs"><h2>Inputs</h2>',
        "<h3>Model</h3>", _facts(model_rows(content), table_id="model-table"),
        "<h3>Planning options</h3>", _facts(planning_rows(content), table_id="planning-table"),
        "<h3>Nodes</h3>",
        f"<p>{escape(node_intro(content))}</p>",
        _table(node_table(content), table_id="nodes-table"),
        "</section>",
        '<section id="plan"><h2>Plan</h2>',
    ]
    if ok:
        parts += [_facts(plan_facts(content), table_id="plan-table"),
                  "<h3>Speed and cost (estimate)</h3>",
                  _facts(estimate_rows(content), table_id="estimate-table"),
                  "<h3>Stages</h3>",
                  _table(stage_table(content), table_id="stages-table"),
                  *(["<h3>Memory per stage (llama.cpp)</h3>",
                     _table(memory_table(content), table_id="memory-table"),
                     f'<p class="note">{escape(PLAN_CHARGES_NOTE)}</p>']
                    if memory_table(content).rows else []),
                  "<h3>Why this shape</h3>",
                  f'<p id="choice">{escape(choice_text(content))}</p>',
                  _table(choice_table(content), table_id="choice-table")]
    else:
        parts.append(f'<p id="no-plan">{escape(result_text(content))}</p>')
    parts += [
        '<div class="figure">', figures["memory-figure"], "</div>",
        '<div class="figure">', figures["layers-figure"], "</div>",
        "</section>",
        '<section id="quorum"><h2>Startup quorum</h2>',
        f"<p>{escape(quorum_text(content))}</p></section>",
        '<section id="what-if"><h2>Failure what-if</h2>',
    ]
    if ok:
        parts += ["<p>For each node: the plan the other nodes give if it is lost.</p>",
                  _table(what_if_table(content), table_id="what-if-table")]
    else:
        parts.append("<p>There is no plan; fewer nodes never fit where all of them did "
                     "not.</p>")
    selected = [bool(row["selected"]) for row in content.candidates]
    parts += [
        "</section>",
        '<section id="candidates"><h2>Candidates</h2>',
        "<p>Every shape the planner considers, in the order it tries them; lanes share one "
        "KV cache, so they never change whether a shape fits.</p>",
        '<div class="figure">', figures["candidates-figure"], "</div>",
        '<div class="scroll">',
        _table(candidate_table(content), table_id="candidates-table", selected=selected),
        "</div>",
        *([f"<p>{escape(note)}</p>"] if (note := candidate_estimate_note(content)) else []),
        "</section>",
        '<section id="warnings"><h2>Warnings</h2>',
    ]
    warnings = warning_lines(content)
    if warnings:
        items = "".join(f"<li>{escape(message)}</li>" for message in warnings)
        parts.append(f'<ul class="warnings">{items}</ul>')
    else:
        parts.append("<p>None.</p>")
    parts += ["</section>", "</body></html>", ""]
    return "\n".join(parts)
