"""A hostile string (a node id, a GGUF model name) reaches every output as inert text:
no terminal escape sequence, no spreadsheet formula, no Markdown link, no plotly markup."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import cmarkgfm
import pytest
from gguf import GGUFWriter
from test_fleetfile import write_tiny_gguf

from planner.figures.plan import candidates_figure, layer_ranges_figure, memory_figure
from planner.fleet import parse_fleet_toml
from planner.planning import candidates, plan_topology
from planner.reports import build_report, render_html
from planner.reports.markdown import md_text, render_markdown
from planner.reports.tables import spreadsheet_safe, terminal_safe

ROOT = Path(__file__).resolve().parent.parent

# Written as TOML escapes so the fleet file itself stays printable.
ESC_ID = r"\u001b[31mred\u001b]8;;https://evil.example\u0007link\u001b]8;;\u0007"
C1_ID = r"csi\u009b31m"
BIDI_ID = r"gpu\u202egnp.exe"
FORMULA_ID = '=HYPERLINK(\\"https://evil.example\\",\\"click\\")'


def fleet_text(*ids: str) -> str:
    nodes = "".join(f'[[nodes]]\nid = "{node_id}"\nvram = "48 GiB"\n\n' for node_id in ids)
    return ("[model]\nnative_context_length = 65536\nlayer_count = 40\n"
            'model_weight_bytes = "40 GiB"\nkv_bytes_per_token = 65536\n\n' + nodes)


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def unsafe_terminal_characters(text: str) -> list[str]:
    """Characters a terminal would act on rather than print (newlines aside)."""
    return [ch for ch in text if ch != "\n" and (
        ord(ch) < 32 or 127 <= ord(ch) < 160 or ch in "\u061c\u200e\u200f"
        or 0x202A <= ord(ch) <= 0x202E or 0x2066 <= ord(ch) <= 0x2069)]


# -- terminal ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["\x1b[31m", "\x9b31m", "a\u202eb", "x\u2066y\u2069",
                                  "\u200fz", "lone \ud800 surrogate", "bell\x07", "del\x7f"])
def test_terminal_safe_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    shown = terminal_safe(text)
    assert unsafe_terminal_characters(shown) == []
    shown.encode("utf-8")  # a lone surrogate cannot be printed: it must be gone
    assert len(shown) == len(text)


def test_plain_text_is_unchanged_by_every_sanitiser() -> None:
    plain = "qwen-node-04 · 80 GiB, ünïcode 中文"
    assert terminal_safe(plain) == plain
    assert spreadsheet_safe(plain) == plain


@pytest.mark.parametrize("command", ["candidates", "plan"])
def test_cli_tables_print_no_escape_sequences(tmp_path: Path, command: str) -> None:
    fleet = tmp_path / "hostile.toml"
    fleet.write_text(fleet_text(ESC_ID, C1_ID, BIDI_ID), encoding="utf-8")
    result = run_cli(command, fleet)
    assert result.returncode == 0, result.stderr
    assert any(word in result.stdout for word in ("red", "csi", "gnp"))
    assert unsafe_terminal_characters(result.stdout) == []
    assert unsafe_terminal_characters(result.stderr) == []


def test_candidates_csv_carries_no_escape_sequences(tmp_path: Path) -> None:
    fleet = tmp_path / "hostile.toml"
    fleet.write_text(fleet_text(ESC_ID, C1_ID, BIDI_ID), encoding="utf-8")
    result = run_cli("candidates", fleet, "--csv")
    assert result.returncode == 0, result.stderr
    assert unsafe_terminal_characters(result.stdout) == []


def test_inspect_prints_a_hostile_model_name_as_text(tmp_path: Path) -> None:
    path = tmp_path / "named.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_string("general.name", "\x1b[31mred\x1b[0m \x9b2J \u202eevil")
    for key, value in (("llama.block_count", 2), ("llama.context_length", 4096),
                       ("llama.embedding_length", 64), ("llama.attention.head_count", 4),
                       ("llama.attention.head_count_kv", 2)):
        writer.add_uint32(key, value)
    import numpy as np

    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = run_cli("inspect", path)
    assert result.returncode == 0, result.stderr
    assert "red" in result.stdout
    assert len(result.stdout.splitlines()) > 1  # line breaks of the description survive
    assert unsafe_terminal_characters(result.stdout) == []


def test_inspect_of_a_plain_model_is_unchanged(tmp_path: Path) -> None:
    result = run_cli("inspect", write_tiny_gguf(tmp_path / "tiny.gguf"))
    assert result.returncode == 0, result.stderr
    assert "Tiny Test Llama" in result.stdout


# -- spreadsheets -----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1"])
def test_spreadsheet_safe_turns_formulas_into_text(text: str) -> None:
    safe = spreadsheet_safe(text)
    assert safe.startswith("'")
    assert safe[1:] == terminal_safe(text)


def test_candidates_csv_never_starts_a_cell_with_a_formula(tmp_path: Path) -> None:
    fleet = tmp_path / "formula.toml"
    fleet.write_text(fleet_text(FORMULA_ID, "-2+3", "@cmd"), encoding="utf-8")
    result = run_cli("candidates", fleet, "--csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows
    cells = [cell for row in rows for cell in row.values()]
    assert not [c for c in cells if c and c[0] in "=+@\t\r"]
    # Negative numbers are numbers, not text; only text cells start with "-".
    assert not [c for c in cells if c.startswith("-") and not c[1:].isdigit()]
    node_lists = {row["node_ids"] for row in rows if row["node_ids"]}
    assert node_lists and all(nodes.startswith("'") for nodes in node_lists)


# -- Markdown ---------------------------------------------------------------------------


def gfm(markdown: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(markdown)


@pytest.mark.parametrize("text", [
    "https://evil.example/x", "HTTP://EVIL.EXAMPLE", "see www.evil.example now",
    "ftp://files.example", "ops@evil.example", "mailto:ops@evil.example",
    "xmpp:ops@evil.example", "<https://evil.example>", "[x](https://evil.example)",
])
def test_markdown_text_never_becomes_a_link(text: str) -> None:
    html = gfm(f"| id |\n| --- |\n| {md_text(text)} |\n\n{md_text(text)}\n")
    assert "<a " not in html
    # What a reader sees is the text as typed (the joiner after "@" is invisible).
    assert html.count(text.replace("<", "&lt;").replace(">", "&gt;").replace(
        "@", "@\u2060")) == 2


def test_markdown_report_links_nothing_from_node_ids() -> None:
    document = parse_fleet_toml(fleet_text("https://evil.example/a", "www.evil.example",
                                           "ops@evil.example"))
    html = gfm(render_markdown(build_report(document)))
    assert "<a " not in html
    assert "evil.example/a" in html


# -- plotly -----------------------------------------------------------------------------

LINK_ID = '<a href=\\"https://evil.example/x\\">CLICKME</a>'
STYLE_ID = '<span style=\\"font-size:90px;fill:red\\">BIG</span>'


def figure_strings(figure: object) -> list[str]:
    """Every string in a figure's data (labels, hover text, text)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(figure.to_plotly_json()["data"])  # type: ignore[attr-defined]
    return found


def test_figures_draw_markup_in_node_ids_as_text() -> None:
    document = parse_fleet_toml(fleet_text(LINK_ID, STYLE_ID))
    request = document.to_request()
    plan = plan_topology(request)
    for figure in (memory_figure(request, plan), layer_ranges_figure(request, plan),
                   candidates_figure(candidates(request))):
        strings = " ".join(figure_strings(figure))
        assert "CLICKME" in strings or "BIG" in strings
        assert "<a " not in strings and "<span" not in strings
        assert "&lt;a href" in strings or "&lt;span" in strings


# -- HTML and Markdown reports, charts: the terminal's rule --------------------------------

HOSTILE_IDS = json.loads((ROOT / "tests" / "data" / "hostile" / "display_ids.json")
                         .read_text(encoding="utf-8"))


def _hostile_document():
    return parse_fleet_toml(fleet_text(*(json.dumps(i)[1:-1] for i in HOSTILE_IDS)))


def test_html_and_markdown_reports_show_controls_and_bidi_overrides_as_text() -> None:
    content = build_report(_hostile_document())
    markdown = render_markdown(content)
    assert unsafe_terminal_characters(markdown) == []
    assert "gpu?gnp.exe" in markdown
    page = render_html(content)
    # Outside plotly.js itself, which is not the report's text.
    ours = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)
    assert unsafe_terminal_characters(ours) == []
    assert "gpu?gnp.exe" in ours and "?[31mred" in ours
    charts = [script for script in re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)
              if "Plotly.newPlot" in script]
    assert len(charts) == 3 and "?[31mred" in " ".join(charts)
    for script in charts:  # as characters, or as JSON escapes of them
        assert unsafe_terminal_characters(script.replace("\n", "")) == []
        assert re.search(r"\\u(00[01][0-9a-fA-F]|007[fF]|00[89][0-9a-fA-F]|202[a-eA-E]"
                         r"|206[6-9]|200[eEfF]|061[cC])", script) is None


def test_charts_draw_controls_and_bidi_overrides_as_text() -> None:
    request = _hostile_document().to_request()
    plan = plan_topology(request)
    for figure in (memory_figure(request, plan), layer_ranges_figure(request, plan),
                   candidates_figure(candidates(request))):
        strings = " ".join(figure_strings(figure))
        assert "?[31mred" in strings
        assert unsafe_terminal_characters(strings) == []


def test_the_sizing_report_shows_a_hostile_kind_as_text() -> None:
    from planner.models import load_gpu_catalog, load_preset
    from planner.reports.sizing import render_sizing
    from planner.sizing import SizingTargets, size_fleet

    catalog = [replace(gpu, name=f"{gpu.name}\u202e\x1b[31m") for gpu in load_gpu_catalog()]
    result = size_fleet(load_preset("llama-3.1-70b"), catalog, SizingTargets(), top=2)
    for suffix in ("html", "md"):
        text = render_sizing(result, suffix, model_name="m\u202ex")
        assert "m?x" in text
        ours = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S)
        assert unsafe_terminal_characters(ours) == [], suffix


# -- sweeps -----------------------------------------------------------------------------

HOSTILE_PATH = "\x1b]0;pwned\x07\x1b[2J\u202egnp.toml"


HOSTILE_FORMULA = '=HYPERLINK("http://evil","x")'


def _sweep_grid_file(tmp_path: Path) -> Path:
    five = ROOT / "planner" / "data" / "fleets" / "qwen480b-5x80.toml"
    fleets = ", ".join(json.dumps(str(path)) for path in (five, HOSTILE_PATH))
    grid = tmp_path / "grid.toml"
    grid.write_text(f'evaluate = "plan"\n[axes]\nfleet = [{fleets}]\n'
                    f"[fixed]\nkinds = {json.dumps(HOSTILE_FORMULA)}\n", encoding="utf-8")
    return grid


def _assert_inert_csv(text: str) -> None:
    assert unsafe_terminal_characters(text) == []
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 2 and rows[1]["error_code"] == "FileNotFound"
    cells = [cell for row in rows for cell in row.values()]
    assert not [c for c in cells if c and c[0] in "=+-@\t\r"]
    assert all(row["kinds"] == "'" + HOSTILE_FORMULA for row in rows)


def test_a_sweep_csv_on_stdout_is_inert(tmp_path: Path) -> None:
    result = run_cli("sweep", _sweep_grid_file(tmp_path))
    assert result.returncode == 0, result.stderr
    _assert_inert_csv(result.stdout)
    assert unsafe_terminal_characters(result.stderr) == []


def test_a_sweep_csv_file_is_inert(tmp_path: Path) -> None:
    output = tmp_path / "out.csv"
    result = run_cli("sweep", _sweep_grid_file(tmp_path), "-o", output)
    assert result.returncode == 0, result.stderr
    _assert_inert_csv(output.read_text(encoding="utf-8"))


def test_a_sweep_parquet_file_keeps_the_values_as_given(tmp_path: Path) -> None:
    import pandas as pd

    from planner.sweep import grid_from_axes, sweep

    output = tmp_path / "out.parquet"
    sweep(grid_from_axes({"fleet": ["=HYPERLINK(\"x\").toml"]}), "plan", output=output)
    assert pd.read_parquet(output)["fleet"].tolist() == ["=HYPERLINK(\"x\").toml"]


# -- JSON -------------------------------------------------------------------------------

BIDI_NAME = "model \u202eevil\u202c \x9b2J \x7f \u2066x\u2069"


def _named_gguf(path: Path, name: str) -> Path:
    from test_models_gguf import llama_metadata, llama_tensors, write_gguf

    write_gguf(path, "llama", {**llama_metadata(), "general.name": name}, llama_tensors())
    return path


def test_speed_json_escapes_what_a_terminal_acts_on_and_keeps_the_name(
        tmp_path: Path) -> None:
    gguf = _named_gguf(tmp_path / "bidi.gguf", BIDI_NAME)
    result = run_cli("speed", gguf, "--gpu", "h100-sxm-80gb", "--json")
    assert result.returncode == 0, result.stderr
    assert unsafe_terminal_characters(result.stdout) == []
    assert json.loads(result.stdout)["model"] == BIDI_NAME  # the same data, escaped
    assert "\\u202e" in result.stdout


def test_terminal_json_escapes_only_what_acts(tmp_path: Path) -> None:
    from planner.reports.tables import terminal_json

    data = {"plain": "café 中文 · ok", "bidi": BIDI_NAME, "lone": "\ud800", "c0": "\x1b[2J"}
    text = terminal_json(data)
    assert unsafe_terminal_characters(text) == []
    assert json.loads(text) == data
    assert "café 中文 · ok" in text
    text.encode("utf-8")
