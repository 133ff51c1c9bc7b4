"""The report as Markdown (GitHub-flavoured tables), every user string neutralised."""

from __future__ import annotations

import re
from collections.abc import Sequence

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
    terminal_safe,
    warning_lines,
    what_if_table,
)

# Characters that start emphasis, code, links, raw HTML, entities, strikethrough or
# break a table cell wherever they appear.
_INLINE = re.compile(r"([\\`*_\[\]|~!])")
# Block markers only count at the start of a line and (but for ">") before a space.
_LINE_START = re.compile(r"^(\s*)(>|[#+\-](?=\s|$)|\d{1,9}(?=[.)](?:\s|$)))")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
# GitHub's autolinker turns bare "scheme://", "www." and e-mail addresses into links: an
# escaped ":" or "." stops the first two; an invisible word joiner after "@" the third.
_URL_SCHEME = re.compile(r"(?<=[A-Za-z0-9]):(?=//)")
_WWW = re.compile(r"(?i)(?<![A-Za-z0-9])(www)\.")
_EMAIL_AT = "@\u2060"


def md_text(text: str) -> str:
    """``text`` as literal Markdown: no markup, HTML, table syntax or autolink survives."""
    text = terminal_safe(_CONTROL.sub(" ", text))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _INLINE.sub(r"\\\1", text)
    text = _URL_SCHEME.sub(r"\\:", text)
    text = _WWW.sub(r"\1\\.", text)
    text = text.replace("@", _EMAIL_AT)
    # A leading "# ", "- ", "1. " would make a heading or a list even inside a list item.
    match = _LINE_START.match(text)
    if match:
        start = match.end(1)
        if match.group(2)[0].isdigit():
            end = match.end(2)
            text = text[:end] + "\\" + text[end:]
        else:
            text = text[:start] + "\\" + text[start:]
    return text


def _table(table: TextTable) -> list[str]:
    if not table.rows:
        return ["(none)"]
    rule = ["---:" if align == "r" else "---" for align in table.align]
    lines = ["| " + " | ".join(md_text(h) if h else " " for h in table.headers) + " |",
             "| " + " | ".join(rule) + " |"]
    for row in table.rows:
        lines.append("| " + " | ".join(md_text(cell) if cell else " " for cell in row) + " |")
    return lines


def _pairs(rows: Sequence[tuple[str, str]]) -> list[str]:
    return _table(TextTable(("", ""), tuple(rows), ("l", "l")))


def render_markdown(content: ReportContent) -> str:
    """The whole report as Markdown text."""
    lines: list[str] = [f"# {md_text(content.title)}", ""]
    meta = f"Generated {md_text(content.generated_at)} by planner {md_text(content.tool_version)}"
    if content.source:
        meta += f" {content.provenance} {md_text(content.source)}"
    lines += [meta + ".", "", "## Result", "", md_text(result_text(content)), ""]

    lines += ["## Inputs", "", "### Model", "", *_pairs(model_rows(content)), ""]
    lines += ["### Planning options", "", *_pairs(planning_rows(content)), ""]
    lines += ["### Nodes", "",
              md_text(node_intro(content)), "", *_table(node_table(content)), ""]

    lines += ["## Plan", ""]
    if content.plan is not None:
        lines += [*_pairs(plan_facts(content)), "",
                  "### Speed and cost (estimate)", "", *_pairs(estimate_rows(content)), "",
                  "### Stages", "",
                  *_table(stage_table(content)), "",
                  *(["### Memory per stage (llama.cpp)", "", *_table(memory_table(content)),
                     "", md_text(PLAN_CHARGES_NOTE), ""] if memory_table(content).rows else []),
                  "### Why this shape", "", md_text(choice_text(content)), "",
                  *_table(choice_table(content)), ""]
    else:
        lines += [md_text(result_text(content)), ""]

    lines += ["## Startup quorum", "", md_text(quorum_text(content)), ""]

    lines += ["## Failure what-if", ""]
    if content.plan is None:
        lines += ["There is no plan; fewer nodes never fit where all of them did not.", ""]
    else:
        lines += ["For each node: the plan the other nodes give if it is lost.", "",
                  *_table(what_if_table(content)), ""]

    lines += ["## Candidates", "",
              "Every shape the planner considers, in the order it tries them.", "",
              *_table(candidate_table(content)), ""]
    if note := candidate_estimate_note(content):
        lines += [md_text(note), ""]

    lines += ["## Warnings", ""]
    warnings = warning_lines(content)
    lines += [f"- {md_text(message)}" for message in warnings] or ["None."]
    lines.append("")
    return "\n".join(lines)
