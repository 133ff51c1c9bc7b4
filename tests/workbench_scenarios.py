"""Edits a person makes on the workbench page, each checked against what the charts show.

The same steps run in Voilà and in JupyterLab (tests/test_workbench_browser.py,
tests/test_workbench_lab_browser.py). Every check reads the plotly graph div on the page
and compares it with what the planner itself computes for the same fleet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from browser_support import (
    EDIT_SECONDS,
    PageWatch,
    layout_problems,
    read_chart,
    save_screenshot,
    trace,
    wait_for_chart,
    wait_until_drawn,
)

from planner.fleet import load_fleet
from planner.units import parse_bytes
from planner.workbench import WorkbenchState, evaluate
from planner.workbench.catalog import preset_source

FLEETS = Path(__file__).resolve().parents[1] / "data" / "fleets"
DEFAULT_FLEET = "qwen480b-5x80.toml"
MEMORY = ".wb-memory-figure"
LAYERS = ".wb-layers-figure"
CANDIDATES = ".wb-candidates-figure"
GIB = 2**30


def state_of(fleet: str) -> WorkbenchState:
    return WorkbenchState.from_document(load_fleet(FLEETS / fleet))


def stage_labels(state: WorkbenchState) -> list[str]:
    plan = evaluate(state).plan
    assert plan is not None
    return [f"{s.stage_id} · {s.node_id}" for s in plan.stages]


def wait_for_layers(page: Any, state: WorkbenchState, what: str) -> dict[str, Any]:
    """The layer-ranges chart shows exactly the plan of ``state``."""
    plan = evaluate(state).plan
    assert plan is not None
    labels = [f"{s.stage_id} · {s.node_id}" for s in plan.stages]
    counts = [s.layer_count for s in plan.stages]
    starts = [s.layer_start for s in plan.stages]
    title = f"({state.model.layer_count or plan.stages[-1].layer_end} layers)"

    def ready(chart: dict[str, Any]) -> bool:
        bars = trace(chart, "layers")
        return (bars["y"] == labels and bars["x"] == counts and bars["base"] == starts
                and title in chart["drawn_title"])

    return wait_for_chart(page, LAYERS, ready, what)


def node_totals_gib(chart: dict[str, Any]) -> dict[str, float]:
    """Each memory bar's height (all segments), by node id."""
    totals: dict[str, float] = {}
    for segment in chart["traces"]:
        for label, value in zip(segment["x"], segment["y"], strict=True):
            node = label.split("<br>")[0]
            totals[node] = totals.get(node, 0.0) + float(value)
    return totals


def wait_for_memory(page: Any, state: WorkbenchState, what: str) -> dict[str, Any]:
    """The memory chart has one bar per node of ``state``, each as tall as its VRAM."""
    wanted = {row.node_id: parse_bytes(row.vram) / GIB for row in state.nodes}

    def ready(chart: dict[str, Any]) -> bool:
        totals = node_totals_gib(chart)
        return (sorted(totals) == sorted(wanted)
                and all(abs(totals[n] - wanted[n]) < 1e-6 for n in wanted))

    return wait_for_chart(page, MEMORY, ready, what)


CHARTS = (MEMORY, LAYERS, CANDIDATES)


def charts_drawn(page: Any, what: str) -> None:
    """Every chart of the plan is drawn full size with labelled axes (a chart redrawn
    while its box had no width was once left a sliver a few pixels wide)."""
    for selector in CHARTS:
        wait_until_drawn(page, selector, what)


# -- driving the page ----------------------------------------------------------------------

def type_into(locator: Any, value: str) -> None:
    locator.fill(value)
    locator.press("Enter")


def node_input(page: Any, row: int, column: str) -> Any:
    return page.locator(".wb-node-row").nth(row).locator(f".wb-node-{column} input")


def load_fleet_file(page: Any, name: str) -> None:
    # Shipped fleets are listed as examples, saved ones as saved (workspace.py).
    label = name if name.endswith(")") else f"{name} (example)"
    page.locator(".wb-fleet-file select").select_option(label=label)
    # The kernel names the choice on the button once it has it; a click sent before
    # then can overtake the choice and load the file chosen before.
    loads_it = page.locator("button.wb-load-fleet").and_(
        page.get_by_title(f"load {label}", exact=True))
    loads_it.wait_for(timeout=EDIT_SECONDS * 1000)
    loads_it.click()


def _page_state(page: Any) -> str:
    """What the page says it shows (for a failure's message)."""
    read = {name: page.locator(selector).first.inner_text() if page.locator(selector).count()
            else None for name, selector in (("title", ".wb-title"), ("message", ".wb-message"),
                                             ("summary", ".wb-summary"))}
    read["fleet file"] = page.locator(".wb-fleet-file select").input_value()
    return repr(read)


def reset(page: Any) -> WorkbenchState:
    """Back to the default fleet file, as loaded from its file."""
    state = state_of(DEFAULT_FLEET)
    load_fleet_file(page, DEFAULT_FLEET)
    page.locator(".wb-node-row").nth(len(state.nodes) - 1).wait_for(
        timeout=EDIT_SECONDS * 1000)
    try:
        wait_for_layers(page, state, "the default fleet after loading it")
    except pytest.fail.Exception as failed:
        pytest.fail(f"{failed}; the page reads {_page_state(page)}")
    wait_for_memory(page, state, "the default fleet after loading it")
    return state


def with_node(state: WorkbenchState, index: int, **fields: str) -> WorkbenchState:
    nodes = list(state.nodes)
    nodes[index] = replace(nodes[index], **fields)
    return replace(state, nodes=tuple(nodes))


# -- the edits -------------------------------------------------------------------------------

def wait_for_text_in(page: Any, selector: str, wanted: str, what: str) -> str:
    """Poll until an element ``selector`` shows ``wanted`` in its visible text; that text.
    Fails saying ``what`` was awaited and what the elements read."""
    deadline = time.monotonic() + EDIT_SECONDS
    texts: list[str] = []
    while time.monotonic() < deadline:
        found = page.locator(selector)
        texts = [found.nth(i).inner_text() for i in range(found.count())
                 if found.nth(i).is_visible()]
        for text in texts:
            if wanted in text:
                return text
        time.sleep(0.1)
    pytest.fail(f"{what}: {selector} reads {texts!r}, without {wanted!r}")


def vram_edit(page: Any) -> None:
    state = reset(page)
    type_into(node_input(page, 4, "vram"), "24 GiB")
    edited = with_node(state, 4, vram="24 GiB")
    chart = wait_for_memory(page, edited, "qwen-node-04 at 24 GiB")
    assert node_totals_gib(chart)["qwen-node-04"] == 24.0
    charts_drawn(page, "after a VRAM edit")
    # 96 GiB is no catalog kind's memory: the summary says why the TPOT is unknown.
    type_into(node_input(page, 0, "vram"), "96 GiB")
    wait_for_text_in(page, ".wb-summary", "estimated TPOT unknown: node qwen-node-00 has no "
                     "memory bandwidth", "the summary once a node is 96 GiB")
    # A number out of range is refused by name, left as typed, never clamped.
    layers = page.locator(".wb-layer-count input")
    type_into(layers, "-3")
    wait_for_text_in(page, ".wb-message", "layers: cannot be negative (got '-3')",
                     "the message after typing -3 layers")
    assert layers.input_value() == "-3"


def fleet_file_load(page: Any) -> None:
    reset(page)
    name = "deepseek-v3-mixed-datacenter.toml"
    load_fleet_file(page, name)
    state = state_of(name)
    chart = wait_for_layers(page, state, f"the plan of {name}")
    assert len(trace(chart, "layers")["y"]) == 11
    assert "61 layers" in chart["drawn_title"]
    wait_for_memory(page, state, f"the nodes of {name}")
    charts_drawn(page, f"after loading {name}")


def add_and_remove_node(page: Any) -> None:
    state = reset(page)
    page.locator("button.wb-add-node").click()
    added = state.add_node()
    assert added.nodes[-1].node_id == "qwen-node-05"
    chart = wait_for_memory(page, added, "a sixth node after 'Add node'")
    assert trace(chart, "weights")["x"][-1].endswith("unused")
    page.locator(".wb-node-row").nth(0).locator("button.wb-node-remove").click()
    removed = added.remove_node(0)
    wait_for_memory(page, removed, "five nodes after removing qwen-node-00")
    wait_for_layers(page, removed, "the plan without qwen-node-00")
    charts_drawn(page, "after adding and removing a node")


def _star(chart: dict[str, Any]) -> tuple[list[int], list[int]]:
    star = trace(chart, "selected")
    return star["x"], star["y"]


def latency_and_tpot_edit(page: Any) -> None:
    state = reset(page)
    wait_for_chart(page, CANDIDATES, lambda c: _star(c) == ([5], [262_144]),
                   "the star on 5 stages at 262,144")
    # One link measured: the others count as 0 ms, so the plan leaves out the node
    # measured, and the page says so; a default latency of "measured" gives the others
    # its 5 ms, and the plan takes qwen-node-00 again.
    type_into(node_input(page, 0, "latency"), "5 ms")
    one = with_node(state, 0, latency_ms="5 ms")
    wait_for_layers(page, one, "the plan without the one node measured")
    wait_for_text_in(page, ".wb-latency-note", "4 nodes without a latency count as 0 ms",
                     "the latency note with one link measured")
    type_into(page.locator(".wb-default-latency input"), "measured")
    measured = replace(one, options=replace(one.options, default_latency_ms="measured"))
    layers = wait_for_layers(page, measured, "the plan with the others at the slowest measured")
    assert "stage-0 · qwen-node-00" in trace(layers, "layers")["y"]
    wait_for_text_in(page, ".wb-latency-note", "4 nodes without their own latency are "
                     "planned at 5 ms, the slowest measured", "the latency note with a default")
    type_into(page.locator(".wb-default-latency input"), "")
    wait_for_layers(page, one, "the plan without a default latency again")
    edited = state
    for row in range(len(state.nodes)):
        type_into(node_input(page, row, "latency"), "5 ms")
        edited = with_node(edited, row, latency_ms="5 ms")
    plan = evaluate(edited).plan
    assert plan is not None and (plan.stage_count, plan.context_length) == (4, 65_536)
    chart = wait_for_chart(
        page, CANDIDATES,
        lambda c: _star(c) == ([4], [65_536]) and "TPOT" in c["drawn_title"]
        and "unknown" not in c["drawn_title"],
        "the star on 4 stages at 65,536 after 5 ms latencies")
    assert "circle-open" not in trace(chart, "feasible")["symbol"]
    # A 12 ms target is missed by every shape (4 x 5 ms at best): hollow dots.
    type_into(page.locator(".wb-tpot-target input"), "12")
    wait_for_chart(page, CANDIDATES,
                   lambda c: set(trace(c, "feasible")["symbol"]) == {"circle-open"},
                   "every shape missing the 12 ms TPOT target")
    # A 100 ms target: the chart's hollow dots are the shapes the table says missed, both
    # judged on the one estimated TPOT the page shows.
    type_into(page.locator(".wb-tpot-target input"), "100")
    table = page.locator(".wb-candidates-table")
    # At 12 ms every shape missed: a shape meeting the target is the table at 100 ms (a
    # "missed" cell alone may still be the table of 12 ms).
    table.locator("td", has_text=re.compile(r"^met$")).first.wait_for(
        timeout=EDIT_SECONDS * 1000)
    judged = {}
    for row in table.locator("tbody tr").all():
        cells = [cell.strip() for cell in row.locator("td").all_inner_texts()]
        if cells[2] == "yes":
            judged[(int(cells[1]), int(cells[0].replace(",", "")))] = cells[4]
    assert "missed" in judged.values(), judged

    def shown(chart: dict[str, Any]) -> dict[tuple[int, int], str]:
        feasible = trace(chart, "feasible")
        return {(x, y): "missed" if symbol == "circle-open" else "met"
                for x, y, symbol in zip(feasible["x"], feasible["y"], feasible["symbol"],
                                        strict=True)}

    wait_for_chart(page, CANDIDATES, lambda c: shown(c) == judged,
                   "hollow dots where the table says the 100 ms target is missed")
    charts_drawn(page, "after latency and TPOT target edits")


def preset_change(page: Any) -> None:
    state = reset(page)
    preset = "qwen3-235b-a22b"
    page.locator(".wb-model-preset select").select_option(label=preset)
    # The cache type chosen (here the fleet file's q8_0) is kept for the new model.
    assert state.model.kv_cache_type == "q8_0"
    changed = state.with_model(preset_source(preset, "q8_0").fields)
    chart = wait_for_layers(page, changed, f"the plan of the {preset} preset at q8_0")
    assert "(94 layers)" in chart["drawn_title"]
    assert page.locator(".wb-kv-cache-type select").input_value() == "q8_0"
    charts_drawn(page, "after a preset change")
    # The preset run from a file of other precisions than its own: the plan takes the
    # file's bytes (fewer stages here), and the weights box shows them.
    type_into(page.locator(".wb-file-size input"), "100 GiB")
    sized = changed.with_model(preset_source(preset, "q8_0", 100 * GIB).fields)
    assert len(evaluate(sized).plan.stages) < len(evaluate(changed).plan.stages)
    wait_for_layers(page, sized, f"the plan of {preset} run from a file of 100 GiB")
    weights = page.locator(".wb-model-weights input")
    assert weights.input_value() == sized.model.model_weight_bytes == "107.37 GB"
    assert page.locator(".wb-model-preset select").input_value() == preset
    charts_drawn(page, "after a preset's file size")


AVAILABILITY = ".wb-availability-panel"
AVAILABILITY_CONTEXT = ".wb-availability-context-figure"
AVAILABILITY_TIMELINE = ".wb-availability-timeline-figure"
AVAILABILITY_CHARTS = (AVAILABILITY_CONTEXT, AVAILABILITY_TIMELINE)


def open_panel(page: Any, title: str, content: str) -> None:
    """Open the workbench's panel ``title`` (a click on its title, unless ``content`` is
    already shown)."""
    if not page.locator(content).first.is_visible():
        page.locator(".jupyter-widget-Collapse-header", has_text=title).first.click()
    page.locator(content).first.wait_for(state="visible", timeout=EDIT_SECONDS * 1000)


def wait_for_availability(page: Any, state: WorkbenchState, what: str) -> dict[str, Any]:
    """The availability panel's context chart reaches up to the plan of ``state`` (with
    every node up), and both its charts are drawn full size with labelled axes."""
    plan = evaluate(state).plan
    assert plan is not None
    full = f"{plan.context_length:,}"

    def ready(chart: dict[str, Any]) -> bool:
        labels = [label for t in chart["traces"] for label in t["x"] or []]
        planned = [int(label.replace(",", "")) for label in labels if label != "no plan"]
        return bool(planned) and f"{max(planned):,}" == full

    chart = wait_for_chart(page, AVAILABILITY_CONTEXT, ready, what)
    for selector in AVAILABILITY_CHARTS:
        wait_until_drawn(page, selector, what)
    # The probability axis reads in percent at whole decades (two at least), not in
    # crowded exponents.
    ticks = read_chart(page, AVAILABILITY_CONTEXT)["y_ticks"]
    assert len(ticks) >= 2 and all(tick.endswith("%") and "e" not in tick
                                   for tick in ticks), ticks
    # The spares are priced as the kind the nodes are (they said "no price").
    spares = page.locator(f"{AVAILABILITY} .wb-spares-table").inner_text()
    assert "USD" in spares and "no price" not in spares, spares
    return chart


def availability_compute(page: Any) -> None:
    """The Availability panel's Compute, before and after an edit: its charts follow the
    plan, and every chart on the page keeps its size."""
    state = reset(page)
    open_panel(page, "Availability", AVAILABILITY)
    compute = page.locator(AVAILABILITY).get_by_role("button", name="Compute", exact=True)
    compute.click()
    wait_for_availability(page, state, "the default fleet's availability after Compute")
    charts_drawn(page, "after the Availability panel's Compute")
    page.locator(".wb-node-row").nth(0).locator("button.wb-node-remove").click()
    removed = state.remove_node(0)
    wait_for_layers(page, removed, "the plan without qwen-node-00")
    compute.click()
    wait_for_availability(page, removed, "availability without qwen-node-00 after Compute")
    charts_drawn(page, "after removing a node and Compute")
    # The panel reads as a person sees it at both widths (legends clear of the titles).
    size = page.viewport_size
    try:
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for selector in AVAILABILITY_CHARTS:
                wait_until_drawn(page, selector, f"at {width} px")
                save_screenshot(page, selector,
                                f"{frontend_of(page)}-{width}px-{selector.strip('.')}")
            problems = layout_problems(page, AVAILABILITY)
            assert problems == [], f"the Availability panel at {width} px: {problems}"
    finally:
        page.set_viewport_size(size)


LLAMACPP = ".wb-llamacpp-panel"
LLAMACPP_TITLE = "llama.cpp: memory and launch commands"
GGUF_NAME = "g.gguf"


def place_gguf(notebooks: Path) -> Path:
    """A small GGUF file in ``models/`` beside the notebooks, where the workbench's GGUF
    list looks (the kernel runs in the notebooks' folder); written before the server
    starts, since the list is read when the panel opens."""
    from test_memory import write_gemma_like

    folder = notebooks / "models"
    folder.mkdir(parents=True, exist_ok=True)
    return write_gemma_like(folder)


def _memory_model(page: Any, label: str) -> None:
    page.locator(LLAMACPP).locator(".wb-memory-model button", has_text=label).click()


def _gguf_plan(state: WorkbenchState, path: str) -> WorkbenchState:
    """What the page plans once the GGUF file at ``path`` is used under llama.cpp's rule."""
    from planner.workbench import Workbench

    bench = Workbench(state.with_memory_model("llamacpp"))
    bench.use_gguf(path)
    return bench.state


def gguf_chooser(page: Any) -> None:
    """Under llama.cpp's rule a preset model needs a GGUF file: the page offers a list of
    those found and a path box, and each plans the file chosen."""
    state = reset(page)
    open_panel(page, LLAMACPP_TITLE, LLAMACPP)
    panel = page.locator(LLAMACPP)
    box = panel.locator(".wb-gguf-box")
    try:
        _memory_model(page, "llama.cpp")
        page.locator(".wb-error", has_text="model.gguf").first.wait_for(
            timeout=EDIT_SECONDS * 1000)
        box.wait_for(state="visible", timeout=EDIT_SECONDS * 1000)
        # The list: the GGUF file in models/ beside the notebook.
        choice = box.locator(".wb-gguf-choice select")
        found = [text for text in choice.locator("option").all_inner_texts()
                 if text.endswith("/models/" + GGUF_NAME)]
        assert len(found) == 1, choice.locator("option").all_inner_texts()
        choice.select_option(label=found[0])
        chosen = _gguf_plan(state, found[0])
        chart = wait_for_layers(page, chosen, "the plan of the GGUF file chosen from the list")
        assert "(6 layers)" in chart["drawn_title"]
        # Under llama.cpp's rule each bar still stacks to its node's VRAM, with the output
        # head and compute buffer and the node's reserve; both tables name those parts.
        wait_for_memory(page, chosen, "every bar at its VRAM under llama.cpp's rule")
        headers = page.locator(".wb-stage-table th").all_inner_texts()
        assert "llama.cpp reserve" in headers and "output & compute" in headers, headers
        wait_for_text_in(page, f"{LLAMACPP} .wb-llamacpp-memory thead", "plan charges",
                         "the llama.cpp table's column of what the plan charges")
        box.wait_for(state="hidden", timeout=EDIT_SECONDS * 1000)
        charts_drawn(page, "after choosing a GGUF file from the list")
        # The path box, on the preset again.
        _memory_model(page, "design rule")
        state = reset(page)
        _memory_model(page, "llama.cpp")
        box.wait_for(state="visible", timeout=EDIT_SECONDS * 1000)
        type_into(box.locator(".wb-gguf-path input"), found[0])
        box.locator("button.wb-use-gguf").click()
        wait_for_layers(page, _gguf_plan(state, found[0]), "the plan of the GGUF file typed")
        charts_drawn(page, "after typing a GGUF file's path")
    finally:
        _memory_model(page, "design rule")
    reset(page)


SIZING = ".wb-sizing-panel"
HOME_LAB = "llama70b-home-lab.toml"


def wait_for_sized(page: Any, what: str) -> dict[str, Any]:
    """The sizing chart drawn full size with the fleets of a Size (a chart of no fleets
    stands in for it, hidden, after a Size that found none)."""
    wait_for_chart(page, ".wb-sizing-figure",
                   lambda chart: any(t["name"] == "Pareto front" and t["x"]
                                     for t in chart["traces"]), what)
    return wait_until_drawn(page, ".wb-sizing-figure", what)


def sizing_out_of_date(page: Any) -> None:
    """Size a fleet says when the model changed since it sized, with the reason and a
    button that sizes again; a fleet it sized, loaded into the editor, costs what its
    table says."""
    reset(page)
    load_fleet_file(page, HOME_LAB)
    wait_for_layers(page, state_of(HOME_LAB), f"the plan of {HOME_LAB}")
    open_panel(page, "Size a fleet", SIZING)
    panel = page.locator(SIZING)
    panel.locator("button.wb-sizing-size").click()
    # The home lab's own 40 ms target: no fleet meets it, which is said at once.
    panel.locator(".wb-error", has_text="NoFleetMeetsTargets").first.wait_for(
        timeout=EDIT_SECONDS * 1000)
    page.locator(".wb-model-preset select").select_option(label="gpt-oss-120b")
    note = panel.locator(".wb-sizing-stale")
    wait_for_text(note.locator(".wb-warning-box"), "Out of date: the model changed "
                  "(llama-3.1-70b → gpt-oss-120b) since the last sizing.",
                  "the note after the model changed")
    type_into(panel.locator(".wb-sizing-tolerate input"), "1")
    note.get_by_role("button", name="Size again").click()
    note.wait_for(state="hidden", timeout=EDIT_SECONDS * 1000)
    panel.locator(".wb-sizing-summary", has_text="gpt-oss-120b").wait_for(
        timeout=EDIT_SECONDS * 1000)
    sized = wait_for_sized(page, "the sizing chart after Size again")
    # The Pareto front is drawn (its fleets marked) and named in the legend beside the
    # fleets, whose colour bar, if any, spans TPOTs that differ.
    front = trace(sized, "Pareto front")
    assert front["x"] and front["symbol"] == "diamond-open", front
    assert "Pareto front" in sized["legend"], sized["legend"]
    # A Size that fails (1 ms: no kind reads the model that fast) leaves no chart of the
    # fleets sized before (it drew them on).
    tpot = panel.locator(".wb-sizing-tpot input")
    type_into(tpot, "1")
    panel.locator("button.wb-sizing-size").click()
    panel.locator(".wb-error", has_text="NoFleetMeetsTargets").first.wait_for(
        timeout=EDIT_SECONDS * 1000)
    panel.locator(".wb-sizing-figure").wait_for(state="hidden", timeout=EDIT_SECONDS * 1000)
    # The button's state is its own widget message: waited for, not read at one instant.
    panel.locator("button.wb-sizing-load:disabled").wait_for(timeout=EDIT_SECONDS * 1000)
    type_into(tpot, "")
    panel.locator("button.wb-sizing-size").click()
    wait_for_sized(page, "the sizing chart after a Size that finds fleets again")
    # The cheapest fleet survives losing a node; loaded, it costs what the table says.
    cost = panel.locator(".wb-sizing-fleets tbody tr").first.locator("td").nth(3)
    usd = cost.inner_text().strip()
    panel.locator("button.wb-sizing-load").click()
    page.locator(".wb-summary", has_text=f"USD {usd}/h").wait_for(
        timeout=EDIT_SECONDS * 1000)
    summary = page.locator(".wb-summary").inner_text()
    assert summary.count("TPOT") == 1 and "unknown" not in summary, summary
    charts_drawn(page, "after loading a sized fleet")
    reset(page)


WIDTHS = (1024, 1440)
"""The window widths the page's layout is read at."""


def frontend_of(page: Any) -> str:
    """``voila``, ``lab`` or ``notebook``: the front-end showing ``page``."""
    path = urlsplit(page.url).path
    return "voila" if "/voila/" in path else "lab" if "/lab" in path else "notebook"


def layout_at_two_widths(page: Any) -> None:
    """At 1024 and 1440 px: every chart of the plan and of the Size a fleet panel drawn
    full size with labelled axes, no legend over a title, no inputs overlapping or
    squashed (the catalog's price and count boxes were 13 px high, on top of each
    other), no label cut short, every column of the candidates table and its note
    within its box (they were past a horizontal scroll), and no word broken over two
    lines. Screenshots of each at each width are kept."""
    frontend = frontend_of(page)
    size = page.viewport_size
    try:
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            reset(page)
            open_panel(page, "Size a fleet", SIZING)
            page.locator(SIZING).locator(".wb-sizing-summary", has_text="Cheapest").wait_for(
                timeout=EDIT_SECONDS * 1000)
            charts_drawn(page, f"at {width} px")
            wait_for_sized(page, f"the sizing chart at {width} px")
            problems = layout_problems(page, ".wb-root")
            for selector in (*CHARTS, ".wb-candidates-table", ".wb-sizing-figure",
                             ".wb-sizing-catalog", ".wb-sizing-fleets", ".wb-stage-table"):
                save_screenshot(page, selector, f"{frontend}-{width}px-{selector.strip('.')}")
            assert problems == [], f"at {width} px: {problems}"
    finally:
        page.set_viewport_size(size)


def default_plan_drawn(page: Any) -> None:
    """The page came up planned: its charts show the default fleet's plan."""
    state = state_of(DEFAULT_FLEET)
    wait_for_layers(page, state, "the default plan, without running a cell")
    wait_for_memory(page, state, "the default fleet, without running a cell")
    charts_drawn(page, "as the page opens")


# What each front-end's test file checks on its one page, in this order: the page as it
# opens, then every edit above.
PAGE_CHECKS: tuple[Callable[[Any], None], ...] = (
    default_plan_drawn, vram_edit, fleet_file_load, add_and_remove_node,
    latency_and_tpot_edit, preset_change, availability_compute, gguf_chooser,
    sizing_out_of_date, layout_at_two_widths)
PAGE_CHECK_IDS = [check.__name__ for check in PAGE_CHECKS]


def run_page_check(page: Any, watch: PageWatch, check: Callable[[Any], None],
                   frontend: str) -> None:
    """One check on the page, a screenshot of each chart kept after it, and nothing
    wrong on the page so far (no console error, no request to another host)."""
    check(page)
    for selector in (*CHARTS, *AVAILABILITY_CHARTS):
        if page.locator(selector).first.is_visible():
            save_screenshot(page, selector, f"{frontend}-{check.__name__}-{selector.strip('.')}")
    assert watch.problems() == []


FIRST_SCENARIO = ".fx-sequence-figure"  # the first stepper on the page is scenario 1's


def fencing_first_event(page: Any, timeout: float = EDIT_SECONDS) -> dict[str, Any]:
    """The first scenario's sequence chart, drawn at its first event."""
    return wait_for_chart(page, FIRST_SCENARIO, lambda c: "(event 1 of " in c["drawn_title"],
                          "event 1 of scenario 1", timeout)


def wait_for_text(locator: Any, wanted: str, what: str,
                  timeout: float = EDIT_SECONDS) -> None:
    """Poll until ``locator``'s visible text is ``wanted``; fail saying what it reads."""
    deadline = time.monotonic() + timeout
    shown = None
    while time.monotonic() < deadline:
        shown = locator.inner_text().strip() if locator.count() else None
        if shown == wanted:
            return
        time.sleep(0.1)
    pytest.fail(f"{what}: reads {shown!r}, not {wanted!r}")


def fencing_stepper(page: Any, frontend: str, timeout: float = EDIT_SECONDS) -> None:
    """'next ▶' twice on the first scenario: the sequence chart follows the slider, and
    the slider reads the event's number as the chart's title does."""
    first = fencing_first_event(page, timeout)
    total = first["drawn_title"].split(" of ")[-1].rstrip(")")
    readout = page.locator(".fx-scenario-1 .widget-readout").first
    wait_for_text(readout, "1", "scenario 1's slider at event 1")
    next_button = page.get_by_role("button", name="next ▶").first
    for step in (2, 3):
        next_button.click()
        wait_for_chart(page, FIRST_SCENARIO,
                       lambda c, s=step: f"(event {s} of {total})" in c["drawn_title"],
                       f"event {step} of scenario 1 after 'next ▶'")
        wait_until_drawn(page, FIRST_SCENARIO, f"at event {step} of scenario 1")
        wait_for_text(readout, str(step), f"scenario 1's slider at event {step}")
    save_screenshot(page, FIRST_SCENARIO, f"{frontend}-fencing-scenario-1-event-3")


def fencing_tables(page: Any) -> None:
    """The whole fencing page: the scenario table shows every text whole (no "..."), and
    the checker's properties count counterexample steps in whole numbers."""
    table = page.locator(".fx-scenario-table table")
    table.wait_for(timeout=EDIT_SECONDS * 1000)
    cells = table.locator("td").all_inner_texts()
    assert len(cells) >= 10 * 5, cells
    assert [cell for cell in cells if "..." in cell or "…" in cell] == []
    summary = next(cell for cell in cells if cell.startswith("expected result holds"))
    assert len(summary) > 50, summary
    properties = page.locator("table.fx-table", has_text="shortest_counterexample_steps")
    properties.wait_for(timeout=EDIT_SECONDS * 1000)
    headers = properties.locator("th").all_inner_texts()
    column = headers.index("shortest_counterexample_steps")
    steps = [row.locator("td").nth(column).inner_text().strip()
             for row in properties.locator("tbody tr").all()]
    counts = [step for step in steps if step]
    assert counts and all(step.isdigit() for step in counts), steps



def fencing_folded_scenario(page: Any, frontend: str,
                            timeout: float = EDIT_SECONDS) -> None:
    """Scenario 2 is made only when its title is clicked: its chart then shows its first
    event, and 'next ▶' moves it on."""
    chart = ".fx-scenario-2 .fx-sequence-figure"
    section = page.locator(".fx-scenario-2")
    assert section.locator(".js-plotly-plot").count() == 0
    section.get_by_text("Scenario 2:").first.click()
    first = wait_for_chart(page, chart, lambda c: "Scenario 2 (event 1 of " in c["drawn_title"],
                           "event 1 of scenario 2 after opening it", timeout)
    total = first["drawn_title"].split(" of ")[-1].rstrip(")")
    section.get_by_role("button", name="next ▶").click()
    wait_for_chart(page, chart, lambda c: f"Scenario 2 (event 2 of {total})" in c["drawn_title"],
                   "event 2 of scenario 2 after 'next ▶'", timeout)
    wait_until_drawn(page, chart, "at event 2 of scenario 2")
    save_screenshot(page, chart, f"{frontend}-fencing-scenario-2-event-2")
