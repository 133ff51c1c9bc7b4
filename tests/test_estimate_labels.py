"""Wherever a plan's speed is shown it is labelled an estimate and given with its error
measured on held-out published measurements, and the time to fill the plan's whole
context stands next to the TPOT: ``planner plan``, ``planner candidates``, ``planner
size`` (text, JSON) and its reports, and the Size a fleet panel."""

from __future__ import annotations

import json
from html import escape

from test_cli import FIVE, run

from planner.fleet import load_fleet
from planner.models import load_gpu_catalog, load_preset
from planner.performance import ESTIMATE_NOTE, NodeSpeed, kinds_error_note, load_calibration
from planner.reports import build_report, render_report
from planner.reports.sizing import render_sizing
from planner.reports.tables import candidate_estimate_note
from planner.sizing import SizingTargets, size_fleet
from planner.units import format_milliseconds

MEASURED = "Median error on published measurements of GPUs and sources the fit did not see"
KINDS = ["h100-sxm-80gb", "l40s"]


def test_planner_plan_shows_the_estimate_with_the_context_fill_and_its_error() -> None:
    done = run("plan", FIVE)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "speed and cost (ESTIMATE):" in text
    tpot = text.index("estimated TPOT")
    fill = text.index("estimated time to fill the context")
    assert tpot < fill
    assert ESTIMATE_NOTE in text and MEASURED in text


def test_planner_candidates_has_a_context_fill_column_and_says_its_error() -> None:
    done = run("candidates", FIVE)
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0]
    assert header.index("est. decode TPOT") < header.index("est. context fill")
    selected = [line for line in done.stdout.splitlines() if "  yes  " in line
                and line.rstrip().endswith(tuple("0123456789"))]
    assert selected, done.stdout
    assert MEASURED in done.stdout and ESTIMATE_NOTE in done.stdout


def test_sizing_gives_the_measured_error_in_every_rendering() -> None:
    catalog = load_gpu_catalog()
    result = size_fleet(load_preset("llama-3.1-70b"), catalog, SizingTargets(),
                        kinds=KINDS, top=2)
    kinds = {gpu.kind: gpu for gpu in catalog}
    used = {kind for fleet in (*result.fleets, *result.pareto) for kind, _ in fleet.counts}
    assert result.error_note == kinds_error_note(
        load_calibration(), [NodeSpeed.of_kind(kind, kinds[kind]) for kind in sorted(used)])
    assert result.error_note.startswith(MEASURED)
    assert result.to_dict()["notes"][:2] == [ESTIMATE_NOTE, result.error_note]
    best = result.cheapest
    fill = format_milliseconds(best.estimated_context_fill_ms, estimated=True)
    for fmt in ("md", "html"):
        rendered = render_sizing(result, fmt, model_name="Llama")
        assert result.error_note in rendered, fmt
        assert f"filling the context takes {fill}" in rendered, fmt
    assert json.loads(render_sizing(result, "json", model_name="Llama"))["notes"][1] == (
        result.error_note)
    done = run("size", "llama-3.1-70b", "--kinds", ",".join(KINDS), "--top", "2")
    assert done.returncode == 0, done.stderr
    assert result.error_note in done.stdout and f"filling the context takes {fill}" in (
        done.stdout)
    as_json = json.loads(run("size", "llama-3.1-70b", "--kinds", ",".join(KINDS), "--top",
                             "2", "--json").stdout)
    # --json lists the cheapest fleets without the Pareto front: the error of their kinds.
    alone = size_fleet(load_preset("llama-3.1-70b"), catalog, SizingTargets(), kinds=KINDS,
                       top=2, pareto=False)
    assert alone.error_note in as_json["notes"]


def test_the_size_a_fleet_panel_gives_the_measured_error() -> None:
    from planner.performance import ModelTraffic
    from planner.workbench.sizing_panel import SizingModel, SizingPanel

    spec = load_preset("llama-3.1-70b")
    catalog = [gpu for gpu in load_gpu_catalog() if gpu.kind in KINDS]
    panel = SizingPanel(SizingModel(spec.planning_fields(), ModelTraffic.from_spec(spec),
                                    spec.name), catalog=catalog, top=2)
    assert panel.result is not None and panel.result.error_note
    assert panel.result.error_note in panel.summary.value
    assert "filling the context takes" in panel.summary.value


def test_the_reports_candidates_table_says_its_estimates_and_their_error() -> None:
    """The report's candidates table carries est. columns; the note under it says they
    are estimates and gives their measured error, in HTML and Markdown."""
    content = build_report(load_fleet(FIVE))
    assert any(row["estimated_tpot_ms"] is not None for row in content.candidates)
    note = candidate_estimate_note(content)
    assert note.startswith("est. columns: " + ESTIMATE_NOTE) and MEASURED in note
    html = render_report(content, "html")
    candidates = html[html.index('<section id="candidates">'):]
    candidates = candidates[:candidates.index("</section>")]
    assert escape(note) in candidates
    markdown = render_report(content, "md")
    section = markdown[markdown.index("## Candidates"):markdown.index("## Warnings")]
    assert ESTIMATE_NOTE in section and MEASURED in section
