"""Fuzz: any sweep grid file loads within the caps or is refused by name, and a grid that
loads runs with each row's error in its row; any bytes saved under a sweep's parts folder
are used only when they are a plausible result of this sweep, else skipped with a warning
and evaluated again, never an exception.

Grid files are drawn near the format (the real columns, values of every TOML type, huge,
negative and fractional numbers, long text, axes too long to multiply), written out and
sometimes cut or spliced. Part files are real records with columns replaced by drawn
JSON values, or drawn bytes.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import tempfile
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.limits import MAX_SWEEP_SCENARIOS
from planner.sweep import (
    EVALUATIONS,
    GRID_COLUMNS,
    RESULT_COLUMNS,
    SweepError,
    grid_from_axes,
    load_grid,
    record_problem,
    sweep,
)

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[1]
FIVE = str(ROOT / "planner" / "data" / "fleets" / "qwen480b-5x80.toml")

_NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.integers(0, 300),
                     st.sampled_from([0, 1, 0.5, -1.0, 2.0, 1e300, 2**31, 2**63, 65536]),
                     st.floats(allow_nan=True, allow_infinity=True))
_SCALARS: st.SearchStrategy[Any] = st.one_of(
    _NUMBERS, st.text(max_size=6), st.booleans(),
    st.sampled_from([FIVE, "missing.toml", "/dev/zero", "q8_0", "x" * 5000, "a,b",
                     "qwen3-coder-480b-a35b", date(2026, 1, 1)]))
_VALUES: st.SearchStrategy[Any] = st.one_of(
    _SCALARS, st.lists(_SCALARS, max_size=3), st.dictionaries(st.text(max_size=3), _SCALARS,
                                                             max_size=2))
_COLUMNS = st.integers(0, 9).flatmap(
    lambda roll: st.text(max_size=6) if roll == 0 else st.sampled_from(GRID_COLUMNS))
_GOOD: dict[str, st.SearchStrategy[Any]] = {
    "fleet": st.sampled_from([FIVE, FIVE, FIVE, "missing.toml", "/dev/zero"]),
    "model": st.sampled_from(["qwen3-coder-480b-a35b", "llama-3.1-70b", "no-such-model"]),
    "kv_cache_type": st.sampled_from(["f16", "q8_0", "q4_0", "bf17"]),
    "min_context": st.sampled_from([0, 8192, 65536, 262144, 2**31 + 1]),
    "min_lanes": st.integers(0, 6),
    "target_tpot_ms": st.integers(0, 200),
    "annual_failure_rate": st.sampled_from([0, 0.05, 0.5, 2.0, -1.0]),
    "repair_hours": st.sampled_from([0, 1, 24, 168.5]),
    "catalog": st.sampled_from(["/dev/zero", "missing.toml"]),
    "max_states": st.integers(-2, 40),
    "seed": st.integers(-1, 3),
    "horizon_hours": st.sampled_from([0, 1, 100, 8760.5]),
    "failures_tolerated": st.integers(0, 3),
    "price_scale": st.sampled_from([0, 0.5, 1.5]),
    "kinds": st.sampled_from(["h100-80gb", "a,b", ""]),
}


def _value(column: str) -> st.SearchStrategy[Any]:
    """Mostly a value the column takes, sometimes anything."""
    good = _GOOD.get(column, _SCALARS)
    return st.integers(0, 7).flatmap(lambda roll: _SCALARS if roll == 0 else good)


@st.composite
def _axes(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly short lists of values; sometimes a long one (so axes multiply past the
    cap), sometimes not a list at all."""
    axes: dict[str, Any] = {}
    for column in draw(st.lists(_COLUMNS, max_size=4, unique=True)):
        roll = draw(st.integers(0, 9))
        axes[column] = (draw(_VALUES) if roll == 0 else
                        list(range(1, draw(st.integers(1, 2000)) + 1)) if roll == 1 else
                        draw(st.lists(_value(column), min_size=0 if roll == 2 else 1,
                                      max_size=3)))
    return axes


@st.composite
def _grid_documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if draw(st.integers(0, 4)):
        document["evaluate"] = draw(st.sampled_from(EVALUATIONS) if draw(st.integers(0, 9))
                                    else _SCALARS)
    if draw(st.integers(0, 4)):
        document["axes"] = draw(_axes())
    if draw(st.integers(0, 4)):
        columns = draw(st.lists(_COLUMNS, max_size=3, unique=True))
        document["fixed"] = {c: draw(_value(c)) for c in columns}
        if draw(st.integers(0, 2)):
            document["fixed"]["fleet"] = FIVE
    if draw(st.integers(0, 9)) == 0:
        document[draw(st.text(max_size=5))] = draw(_VALUES)
    return document


def _toml(document: dict[str, Any]) -> str:
    def plain(value: Any) -> Any:  # TOML has no NaN key order issue, but no None
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return tomli_w.dumps(plain(document))


@st.composite
def _spliced(draw: st.DrawFn, text: str) -> str:
    """The text, or cut at a point, or with a drawn piece put in."""
    roll = draw(st.integers(0, 5))
    if roll == 0 and text:
        return text[:draw(st.integers(0, len(text)))]
    if roll == 1:
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.text(alphabet="[]{}=\"'.,#\n 0123456789ae-", max_size=8)) \
            + text[at:]
    return text


@FUZZ
@given(st.data())
def test_grid_files(data: st.DataObject) -> None:
    text = data.draw(_spliced(_toml(data.draw(_grid_documents()))))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "grid.toml"
        path.write_text(text, encoding="utf-8")
        try:
            grid, evaluation = load_grid(path)
        except SweepError as error:
            assert error.code == "InvalidGrid" and str(path) in error.message
            assert len(error.message) < 6000, error.message
            return
    assert 1 <= len(grid) <= MAX_SWEEP_SCENARIOS and evaluation in EVALUATIONS
    if len(grid) > 4 or evaluation == "size":
        return  # sizing every drawn model is the sizing fuzz's work, not this one's
    results = sweep(grid, evaluation, executor="inline")
    assert list(results["scenario"]) == list(range(len(grid)))
    check = record_problem(evaluation)
    columns = [*RESULT_COLUMNS[evaluation], "error_code", "error_message"]
    for record in results[columns].astype(object).to_dict("records"):
        record = {k: None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v
                  for k, v in record.items()}
        assert check(record) is None, record
        assert (record["error_code"] is None) == (record["error_message"] is None)


@lru_cache(maxsize=1)
def _clean() -> tuple[pd.DataFrame, dict[str, Any]]:
    """The grid's fresh results and a real saved record of scenario 0."""
    grid = _grid()
    whole = sweep(grid, "plan", executor="inline")
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.csv"

        class Stop(Exception):
            pass

        def stop(done: int, total: int) -> None:
            if done:
                raise Stop

        with contextlib.suppress(Stop):
            sweep(grid, "plan", executor="inline", batch_size=1, output=output, progress=stop)
        (part,) = (Path(folder) / "out.csv.parts").glob("part-*.jsonl")
        record = json.loads(part.read_text(encoding="utf-8").splitlines()[0])
    return whole, record


def _grid() -> pd.DataFrame:
    return grid_from_axes({"min_lanes": [1, 2]}, {"fleet": FIVE})


_EDGES = st.sampled_from([-1, 0, 1, 2**63 - 1, 2**63, 2**80, -(2**63), 1.5, -0.0, 1e300,
                          "5", "", True, False, None])
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.one_of(_EDGES, _EDGES, st.none(), st.booleans(), st.integers(-(2**80), 2**80),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                               max_size=3),
    max_leaves=6)


@st.composite
def _part_lines(draw: st.DrawFn) -> bytes:
    _, real = _clean()
    roll = draw(st.integers(0, 5))
    if roll == 0:
        return draw(st.binary(max_size=64))
    if roll == 1:
        return draw(st.text(max_size=64)).encode("utf-8", "surrogatepass")
    record = dict(real)
    if roll == 2:  # one column forged: the likeliest way to slip past a check
        record[draw(st.sampled_from(sorted(RESULT_COLUMNS["plan"])))] = draw(_EDGES)
        return json.dumps(record).encode()
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.one_of(st.sampled_from(sorted(RESULT_COLUMNS["plan"])),
                             st.sampled_from(sorted(RESULT_COLUMNS["plan"])),
                             st.sampled_from(sorted(real)), st.text(max_size=4)))
        if draw(st.integers(0, 5)) == 0:
            record.pop(key, None)
        else:
            record[key] = draw(_JSON)
    text = json.dumps(record)
    return text.encode() if draw(st.integers(0, 7)) else text[:draw(
        st.integers(0, len(text)))].encode()


def _plausible_plan(record: dict[str, Any]) -> bool:
    """What a plan sweep can have written, stated apart from the sweep's own check: its
    columns only, counts as whole numbers within 64 bits, a yes/no, texts."""
    counts = {"node_count", "context_length", "stage_count", "parallel_lanes",
              "estimated_decode_network_ms_per_token"}
    known = counts | {"meets_targets", "error_code", "error_message", "scenario",
                      "scenario_key"}
    for name, value in record.items():
        if name not in known:
            return False
        if value is None and name not in ("scenario", "scenario_key"):
            continue
        if name in counts:
            fits = type(value) is int and 0 <= value < 2**63
        elif name == "meets_targets":
            fits = type(value) is bool
        else:
            fits = name == "scenario" or type(value) is str
        if not fits:
            return False
    return True


@FUZZ
@given(_part_lines())
def test_part_files(line: bytes) -> None:
    whole, real = _clean()
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.csv"
        parts = Path(folder) / "out.csv.parts"
        parts.mkdir()
        (parts / "part-fuzz.jsonl").write_bytes(line + b"\n")
        warnings: list[str] = []
        results = sweep(_grid(), "plan", executor="inline", output=output,
                        warn=warnings.append)
    assert len(warnings) <= 1
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        record = None
    usable = (isinstance(record, dict) and type(record.get("scenario")) is int
              and record["scenario"] == 0
              and record.get("scenario_key") == real["scenario_key"]
              and _plausible_plan(record))
    if usable:
        # A plausible record of this scenario on these inputs is resumed as it is.
        assert warnings == []
        for name in RESULT_COLUMNS["plan"]:
            got = results.loc[0, name]
            assert (pd.isna(got) and record.get(name) is None) or got == record.get(name)
    else:
        pd.testing.assert_frame_equal(results, whole)
        stale = (isinstance(record, dict) and type(record.get("scenario")) is int
                 and record.get("scenario") in (0, 1)
                 and isinstance(record.get("scenario_key"), str)
                 and record.get("scenario_key") != (real["scenario_key"]
                                                    if record["scenario"] == 0 else None))
        if not stale:
            assert len(warnings) == 1 and "part-fuzz.jsonl" in warnings[0]


# -- hostile names in a sweep's CSV ----------------------------------------------------------

_FORMULA_START = st.sampled_from(["=", "+", "-", "@", "\t=", "\r="])
_ACTS = st.sampled_from(["\x1b[2J", "\x1b]0;title\x07", "\x9b31m", "\u202e", "\u2066",
                         "\u200b", "\ufeff", "\x00", "\n", "\ud800"])
_HOSTILE_NAMES = st.one_of(
    st.builds(lambda start, rest: start + rest, _FORMULA_START, st.text(max_size=12)),
    st.builds(lambda a, act, b: a + act + b, st.text(max_size=6), _ACTS, st.text(max_size=6)),
    st.text(max_size=12))


def _unsafe(text: str) -> list[str]:
    """Characters a terminal acts on (newlines between rows aside), and lone surrogates."""
    return [ch for ch in text if ch != "\n" and (
        ord(ch) < 32 or 127 <= ord(ch) < 160 or 0xD800 <= ord(ch) <= 0xDFFF
        or ch in "\u061c\u200b\u200c\u200d\u200e\u200f\ufeff"
        or 0x202A <= ord(ch) <= 0x202E or 0x2060 <= ord(ch) <= 0x206F)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_HOSTILE_NAMES.filter(lambda name: bool(name.strip())), min_size=1,
                max_size=3), st.sampled_from(["fleet", "model", "kinds", "catalog"]))
def test_hostile_names_reach_a_sweep_csv_inert(names: list[str], column: str) -> None:
    """Any text a grid names (a fleet, a model, kinds, a catalog) and every error message
    that quotes it is written to a sweep's CSV as a cell no spreadsheet runs and no
    terminal acts on."""
    from planner.sweep import write_csv

    fixed = {} if column == "fleet" else {"fleet": FIVE}
    try:
        results = sweep(grid_from_axes({column: names}, fixed), "plan", executor="inline")
    except SweepError as error:  # a value no grid takes (a path holding a NUL byte)
        assert error.code == "InvalidGrid"
        return
    stream = io.StringIO()
    write_csv(results, stream)
    text = stream.getvalue()
    assert _unsafe(text) == []
    for row in csv.reader(io.StringIO(text)):
        assert not [cell for cell in row if cell[:1] in ("=", "+", "@", "\t", "\r")
                    or (cell.startswith("-") and not _is_number(cell))], row


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
