"""Topology reports: the content, and the HTML/Markdown/JSON renderings of it.

HTML is read with a real parser (html.parser into a small element tree), not searched as
text; the expected values come from the planner core, not from copies of its output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from planner_strategies import requests

import planner
from planner.fence import quorum_requirement
from planner.fleet import FleetDocument, FleetFileError, load_fleet, parse_fleet_toml
from planner.planning import PlanningInput
from planner.reports import build_report, render_report, write_report
from planner.units import format_bytes

FLEETS = Path(__file__).resolve().parent.parent / "data" / "fleets"
NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
EVIL = "<script>alert(1)</script>"

SMALL_MODEL = """
[model]
name = "Small | *model* <b>bold</b>"
native_context_length = 65536
layer_count = 40
model_weight_bytes = "40 GiB"
kv_bytes_per_token = 65536
"""


# -- a small HTML element tree ----------------------------------------------------------

_VOID = {"meta", "br", "link", "img", "input", "hr", "col", "source", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    parts: list[str | Element] = field(default_factory=list)

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else p.text() for p in self.parts)

    def iter(self, tag: str | None = None) -> list[Element]:
        found = [self] if tag in (None, self.tag) else []
        for child in self.children:
            found += child.iter(tag)
        return found

    def by_id(self, element_id: str) -> Element:
        matches = [e for e in self.iter() if e.attrs.get("id") == element_id]
        assert len(matches) == 1, f"expected one element with id {element_id!r}"
        return matches[0]

    def has_id(self, element_id: str) -> bool:
        return any(e.attrs.get("id") == element_id for e in self.iter())

    def table_rows(self) -> list[list[str]]:
        body = self.iter("tbody")[0]
        return [[cell.text() for cell in row.children] for row in body.iter("tr")]

    def headers(self) -> list[str]:
        return [cell.text() for cell in self.iter("thead")[0].iter("th")]


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        self.stack[-1].parts.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return
        raise AssertionError(f"unmatched </{tag}>")

    def handle_data(self, data: str) -> None:
        self.stack[-1].parts.append(data)


def parse_html(text: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(text)
    builder.close()
    assert [e.tag for e in builder.stack] == ["#document"], "unclosed elements"
    return builder.root


def facts(table: Element) -> dict[str, str]:
    return {row.iter("th")[0].text(): row.iter("td")[0].text() for row in table.iter("tr")}


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def five_by_eighty() -> FleetDocument:
    return load_fleet(FLEETS / "qwen480b-5x80.toml")


@pytest.fixture(scope="module")
def five_html(five_by_eighty: FleetDocument) -> Element:
    return parse_html(render_report(build_report(five_by_eighty, now=NOW), "html"))


# -- HTML: inputs, plan, charts ---------------------------------------------------------


def test_header_names_the_fleet_version_and_time(five_html: Element,
                                                 five_by_eighty: FleetDocument) -> None:
    assert five_html.by_id("title").text() == five_by_eighty.title
    assert five_html.iter("title")[0].text() == five_by_eighty.title
    assert five_html.by_id("tool-version").text() == planner.__version__
    stamp = five_html.by_id("generated-at").attrs["datetime"]
    assert datetime.fromisoformat(stamp.replace("Z", "+00:00")) == NOW


def test_nodes_table_derives_usable_bytes_step_by_step(tmp_path: Path) -> None:
    document = parse_fleet_toml(SMALL_MODEL + """
[[nodes]]
id = "capped"
vram = "80 GiB"
max_vram = "24 GiB"
headroom = "2 GiB"
[[nodes]]
id = "plain"
vram = "48 GiB"
""")
    root = parse_html(render_report(build_report(document, now=NOW), "html"))
    table = root.by_id("nodes-table")
    assert table.headers()[:6] == ["node", "detected VRAM", "max VRAM cap", "after cap",
                                   "− headroom", "= usable"]
    rows = {row[0]: row for row in table.table_rows()}
    for node in document.nodes:
        row = rows[node.node_id]
        cap = "none" if node.max_vram_bytes is None else format_bytes(node.max_vram_bytes)
        assert row[1:6] == [format_bytes(node.detected_vram_bytes), cap,
                            format_bytes(node.capped_vram_bytes),
                            format_bytes(node.runtime_headroom_bytes),
                            format_bytes(node.usable_bytes)]
    assert rows["capped"][3:6] == ["24 GiB", "2 GiB", "22 GiB"]


def test_plan_and_stages_match_the_planner(five_html: Element,
                                           five_by_eighty: FleetDocument) -> None:
    request = five_by_eighty.to_request()
    plan = planner.plan_topology(request)
    plan_facts = facts(five_html.by_id("plan-table"))
    assert plan_facts["context length"] == f"{plan.context_length:,} tokens"
    assert plan_facts["parallel lanes"] == str(plan.parallel_lanes)
    assert plan_facts["stages"] == str(plan.stage_count)
    rows = five_html.by_id("stages-table").table_rows()
    usage = planner.stage_usage(request, plan)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (s.stage_id, s.node_id, f"{s.layer_start}–{s.layer_end - 1}", str(s.layer_count))
        for s in plan.stages]
    assert [r[8] for r in rows] == [format_bytes(int(v)) for v in usage["remaining_bytes"]]
    assert "Plan found" in five_html.by_id("result").text()


def test_charts_are_embedded_with_plotly_inline(five_html: Element) -> None:
    for div_id in ("memory-figure", "layers-figure", "candidates-figure"):
        assert five_html.by_id(div_id).tag == "div"
    scripts = five_html.iter("script")
    assert not [s for s in scripts if "src" in s.attrs], "the report must not load scripts"
    bundles = [s for s in scripts if "plotly.js v" in s.text()]
    assert len(bundles) == 1
    calls = [s.text() for s in scripts if "Plotly.newPlot(" in s.text()]
    assert len(calls) == 3


def test_quorum_section_counts_tolerated_failures(five_html: Element) -> None:
    text = five_html.by_id("quorum").text()
    needed = quorum_requirement(5)
    assert f"needs {needed} of 5" in text
    assert f"tolerates {5 - needed} stage failures" in text


def test_failure_what_if_gives_the_plan_of_the_remaining_nodes(
        five_html: Element, five_by_eighty: FleetDocument) -> None:
    request = five_by_eighty.to_request()
    rows = five_html.by_id("what-if-table").table_rows()
    assert [row[0] for row in rows] == [node.node_id for node in request.nodes]
    for row, node in zip(rows, request.nodes, strict=True):
        rest = PlanningInput.from_dict({**request.to_dict(), "nodes": [
            n.to_dict() for n in request.nodes if n.node_id != node.node_id]})
        fallback = planner.plan_topology(rest)
        assert row[3].startswith(f"{fallback.stage_count} stages, context "
                                 f"{fallback.context_length:,}")
        assert row[3].endswith(", ".join(fallback.node_ids))


def test_what_if_says_why_when_no_plan_is_left(tmp_path: Path) -> None:
    document = parse_fleet_toml(SMALL_MODEL + """
[planning]
minimum_nodes = 2
[[nodes]]
id = "big"
vram = "48 GiB"
[[nodes]]
id = "small"
vram = "16 GiB"
""")
    content = build_report(document, now=NOW)
    lost = {row["lost_node_id"]: row for row in content.failure_what_if}
    assert lost["big"]["ok"] is False
    assert lost["big"]["error"]["code"] == "NoValidTopology"
    root = parse_html(render_report(content, "html"))
    rows = {row[0]: row for row in root.by_id("what-if-table").table_rows()}
    assert rows["big"][2] == "no plan (NoValidTopology)"
    assert "minimum_nodes" in rows["big"][3]


def test_losing_an_unused_node_keeps_the_plan() -> None:
    document = load_fleet(FLEETS / "qwen480b-10x80.toml")
    request = document.to_request()
    plan = planner.plan_topology(request)
    content = build_report(document, now=NOW, include_candidates=False)
    unused = [row for row in content.failure_what_if if not row["in_plan"]]
    assert len(unused) == len(request.nodes) - plan.stage_count == 5
    for row in unused:
        rest = PlanningInput.from_dict({**request.to_dict(), "nodes": [
            n.to_dict() for n in request.nodes if n.node_id != row["lost_node_id"]]})
        assert row["plan"] == planner.plan_topology(rest).to_dict() == plan.to_dict()
        assert row["unchanged"] is True


@settings(max_examples=60)
@given(requests(max_nodes=6, max_layers=8, failures=False))
def test_what_if_equals_replanning_without_each_node(request_data: dict) -> None:
    request = PlanningInput.from_dict(request_data)
    content = build_report(request, include_candidates=False)
    if content.plan is None:
        assert content.failure_what_if == ()
        return
    assert [row["lost_node_id"] for row in content.failure_what_if] == [
        n.node_id for n in request.nodes]
    for row, node in zip(content.failure_what_if, request.nodes, strict=True):
        rest = [n.to_dict() for n in request.nodes if n.node_id != node.node_id]
        if not rest:
            assert row["ok"] is False and row["error"]["code"] == "MissingNodes"
            continue
        try:
            expected = planner.plan_topology({**request.to_dict(), "nodes": rest})
        except planner.PlanError as error:
            assert row["ok"] is False and row["error"]["code"] == error.code
        else:
            assert row["ok"] is True and row["plan"] == expected.to_dict()
            assert row["unchanged"] == (expected.to_dict() == content.plan)


def test_candidates_table_has_every_shape_and_marks_the_selected(
        five_html: Element, five_by_eighty: FleetDocument) -> None:
    frame = planner.candidates(five_by_eighty.to_request())
    table = five_html.by_id("candidates-table")
    body = table.iter("tbody")[0].iter("tr")
    assert len(body) == len(frame)
    marked = [i for i, row in enumerate(body) if row.attrs.get("class") == "selected"]
    assert marked == [int(i) for i in frame.index[frame["selected"]]]


# -- no valid topology, refusals, warnings ----------------------------------------------


def test_no_valid_topology_still_gives_a_report_that_says_why() -> None:
    document = load_fleet(FLEETS / "qwen480b-4x70.toml")
    with pytest.raises(planner.PlanError) as caught:
        planner.plan_topology(document.to_request())
    content = build_report(document, now=NOW)
    assert not content.ok and content.error is not None
    assert content.error["code"] == "NoValidTopology"
    root = parse_html(render_report(content, "html"))
    assert root.by_id("result").attrs["class"] == "result none"
    assert caught.value.message in root.by_id("result").text()
    assert not root.has_id("stages-table")
    assert root.by_id("memory-figure").tag == "div"
    assert len(root.by_id("candidates-table").table_rows()) == len(content.candidates)
    markdown = render_report(content, "md")
    assert "No plan (NoValidTopology)" in markdown
    data = json.loads(render_report(content, "json"))
    assert data["ok"] is False and data["plan"] is None
    assert data["error"]["code"] == "NoValidTopology"


def test_request_refusal_is_reported_with_its_code() -> None:
    document = parse_fleet_toml(SMALL_MODEL + """
[planning]
context_length_override = 131072
[[nodes]]
id = "a"
vram = "80 GiB"
""")
    content = build_report(document, now=NOW)
    assert content.error is not None and content.error["code"] == "ContextExceedsNative"
    assert content.candidates == () and content.failure_what_if == ()
    root = parse_html(render_report(content, "html"))
    assert "ContextExceedsNative" in root.by_id("result").text()


def test_warnings_for_partial_latency_and_unusable_nodes() -> None:
    document = parse_fleet_toml(SMALL_MODEL + """
[[nodes]]
id = "measured"
vram = "48 GiB"
latency_ms = 4
[[nodes]]
id = "unmeasured"
vram = "48 GiB"
[[nodes]]
id = "all-headroom"
vram = "8 GiB"
headroom = "10 GiB"
latency_ms = 2
""")
    content = build_report(document, now=NOW)
    codes = {w["code"]: w for w in content.warnings}
    assert codes["PartialLatency"]["node_ids"] == ["unmeasured"]
    assert codes["NoUsableMemory"]["node_ids"] == ["all-headroom"]
    items = parse_html(render_report(content, "html")).by_id("warnings").iter("li")
    assert [li.text() for li in items] == [w["message"] for w in content.warnings]
    assert len(items) == 2


def test_no_warnings_for_a_clean_fleet(five_html: Element) -> None:
    assert five_html.by_id("warnings").iter("li") == []


# -- escaping ---------------------------------------------------------------------------

def _evil_document() -> FleetDocument:
    return parse_fleet_toml(f'name = "Fleet {EVIL}"\n' + SMALL_MODEL + f"""
[[nodes]]
id = "{EVIL}"
vram = "48 GiB"
[[nodes]]
id = "pipe|*star*_[link](x)"
vram = "24 GiB"
""")


def test_html_shows_user_strings_as_text_never_markup() -> None:
    document = _evil_document()
    html_text = render_report(build_report(document, now=NOW), "html")
    root = parse_html(html_text)
    assert EVIL not in html_text
    assert "<b>bold</b>" not in html_text
    assert root.iter("b") == []
    assert root.by_id("title").text() == f"Fleet {EVIL}"
    assert facts(root.by_id("model-table"))["model"] == "Small | *model* <b>bold</b>"
    node_cells = [row[0] for row in root.by_id("nodes-table").table_rows()]
    assert node_cells == [EVIL, "pipe|*star*_[link](x)"]
    for script in root.iter("script"):
        assert "alert(1)</script>" not in script.text()


def _markdown_cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_markdown_neutralises_user_strings() -> None:
    markdown = render_report(build_report(_evil_document(), now=NOW), "md")
    assert "<script>" not in markdown and "<b>" not in markdown
    assert markdown.splitlines()[0] == "# Fleet &lt;script&gt;alert(1)&lt;/script&gt;"
    lines = markdown.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("| node |")))
    width = len(_markdown_cells(lines[header]))
    rows = [_markdown_cells(line) for line in lines[header + 2:header + 4]]
    assert [len(row) for row in rows] == [width, width]
    assert rows[1][0] == r"pipe\|\*star\*\_\[link\](x)"


# -- the three formats carry the same content -------------------------------------------


def test_json_report_is_the_content_and_the_plan_is_spec_section_7(
        tmp_path: Path, five_by_eighty: FleetDocument) -> None:
    path = write_report(five_by_eighty, tmp_path / "report.json", now=NOW)
    data = json.loads(path.read_text())
    assert data == json.loads(json.dumps(build_report(five_by_eighty, now=NOW).to_dict()))
    assert data["plan"] == planner.plan_topology(five_by_eighty.to_request()).to_dict()
    assert data["tool_version"] == planner.__version__
    assert data["quorum"] == {"planned_stages": 5, "quorum_requirement": quorum_requirement(5),
                              "tolerated_failures": 5 - quorum_requirement(5)}
    assert len(data["candidates"]) == len(planner.candidates(five_by_eighty.to_request()))


def test_markdown_carries_the_same_tables(tmp_path: Path,
                                          five_by_eighty: FleetDocument) -> None:
    path = write_report(five_by_eighty, tmp_path / "report.md", now=NOW)
    markdown = path.read_text()
    for heading in ("## Inputs", "## Plan", "### Stages", "## Startup quorum",
                    "## Failure what-if", "## Candidates", "## Warnings"):
        assert heading in markdown
    content = build_report(five_by_eighty, now=NOW)
    stage_lines = [line for line in markdown.splitlines() if line.startswith("| stage-")]
    assert [_markdown_cells(line)[1] for line in stage_lines] == [
        s["node_id"] for s in content.stages]
    assert planner.__version__ in markdown and content.generated_at in markdown


def test_write_report_accepts_a_request_and_a_model_name(tmp_path: Path) -> None:
    request = load_fleet(FLEETS / "qwen480b-two-studios.toml").to_request()
    path = write_report(request, tmp_path / "studios.html", model_name="Qwen 480B")
    root = parse_html(path.read_text())
    assert facts(root.by_id("model-table"))["model"] == "Qwen 480B"
    assert root.by_id("title").text() == "Qwen 480B"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["studios.html"]


def test_write_report_refuses_unknown_formats(tmp_path: Path) -> None:
    request = load_fleet(FLEETS / "qwen480b-5x80.toml")
    with pytest.raises(FleetFileError) as caught:
        write_report(request, tmp_path / "report.pdf")
    assert caught.value.code == "UnsupportedFormat"
    assert not (tmp_path / "report.pdf").exists()


def test_the_tpot_target_is_judged_by_the_speed_estimate_as_the_workbench_judges_it() -> None:
    # The home lab's network estimate (16 ms, which ranks the shapes) is within its
    # 40 ms target, but its speed estimate (about 157 ms) is not: the report, the plan
    # command and the workbench give one answer, the speed estimate's.
    from planner.fleet import example_fleet
    from planner.workbench.evaluation import evaluate
    from planner.workbench.state import WorkbenchState

    document = load_fleet(example_fleet("llama70b-home-lab"))
    content = build_report(document, include_candidates=False, include_what_if=False)
    assert content.plan is not None and content.plan["decode_tpot_target_met"] is True
    assert content.estimate is not None and content.estimate["estimated_tpot_ms"] > 40
    assert content.tpot_target_met is False
    assert "target missed" in content.summary and "target met" not in content.summary
    markdown = render_report(content, "md")
    assert re.search(r"TPOT target met \| no", markdown), markdown
    assert evaluate(WorkbenchState.from_document(document)).target_met is False


@pytest.mark.parametrize("fleet", ["qwen480b-5x80.toml", "gguf"])
def test_the_report_colours_its_candidates_by_the_speed_estimate(
        fleet: str, tmp_path: Path) -> None:
    """The report gave each candidate a TPOT and drew its candidates chart uncoloured,
    titled "(no latencies and no speed estimate: TPOT unknown)": the chart read the
    candidate rows without their estimate columns. It draws what the workbench draws."""
    from planner.figures.plan import candidates_figure
    from planner.workbench.evaluation import evaluate
    from planner.workbench.state import WorkbenchState

    if fleet == "gguf":
        from test_memory import write_gemma_like

        write_gemma_like(tmp_path)
        path = tmp_path / "fleet.toml"
        path.write_text('[model]\ngguf = "g.gguf"\n'
                        '[[nodes]]\nid = "a100-80gb-00"\nvram = "256 MiB"\n'
                        '[[nodes]]\nid = "a100-80gb-01"\nvram = "256 MiB"\n')
        document = load_fleet(path)
    else:
        document = load_fleet(FLEETS / fleet)
    content = build_report(document)
    assert content.estimate is not None and content.estimate["available"]
    figure = candidates_figure(content.candidates_frame(),
                               content.planning["target_decode_tpot_ms"])
    assert "coloured by estimated TPOT" in figure.layout.title.text
    evaluation = evaluate(WorkbenchState.from_document(document))
    assert evaluation.candidates is not None
    shown = candidates_figure(evaluation.candidates, evaluation.request.target_decode_tpot_ms)
    assert list(figure.data[0].marker.color) == list(shown.data[0].marker.color)
    html = render_report(content, "html")
    assert "no latencies and no speed estimate" not in html


def test_a_report_says_the_file_a_preset_is_run_from(tmp_path: Path) -> None:
    """A preset run from a file of other precisions than its own is planned at the file's
    bytes; the report says so beside the weights it shows."""
    document = parse_fleet_toml('[model]\npreset = "gpt-oss-20b"\nfile_bytes = "11.27 GiB"\n'
                                '[[nodes]]\nid = "a"\nvram = "24 GiB"\n')
    path = write_report(document, tmp_path / "report.html", now=NOW)
    table = facts(parse_html(path.read_text()).by_id("model-table"))
    assert table["from"] == "preset gpt-oss-20b, run from a file of 11.27 GiB"
    assert table["weights"].startswith(f"11.27 GiB ({round(11.27 * 1024**3):,} B)")
    data = json.loads(write_report(document, tmp_path / "report.json", now=NOW).read_text())
    assert data["model"]["file_bytes"] == round(11.27 * 1024**3)
    own = build_report(parse_fleet_toml('[model]\npreset = "gpt-oss-20b"\n[[nodes]]\n'
                                        'id = "a"\nvram = "24 GiB"\n'), now=NOW)
    assert own.model["file_bytes"] is None
