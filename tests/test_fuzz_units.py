"""Fuzz: any size, latency or context text either reads or raises a CodedError.

Inputs mix the characters the parsers care about (digits, separators, unit letters,
blanks, line breaks, signs) with arbitrary text, so most examples land near the grammar.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import CodedError
from planner.units import (
    latency_microseconds,
    parse_bytes,
    parse_context,
    parse_latency_ms,
)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_NEAR = st.text(alphabet="0123456789_,. \t\n-+eEkKmMgGtTpPiIbBsuµ!", max_size=40)
_TEXT = st.one_of(_NEAR, st.text(max_size=60),
                  st.builds(lambda a, b, c: a + " " * b + c, _NEAR, st.integers(0, 5000), _NEAR))
_VALUES: st.SearchStrategy[Any] = st.one_of(
    _TEXT, st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.lists(st.integers(), max_size=3))


def _reads_or_names(parse: Any, value: Any) -> Any:
    try:
        return parse(value)
    except CodedError as error:
        assert error.code in ("InvalidSize", "InvalidLatency", "InvalidContext")
        assert len(error.message) < 600
        return None


@FUZZ
@given(_VALUES, st.booleans())
def test_sizes(value: Any, bare_bytes: bool) -> None:
    size = _reads_or_names(lambda v: parse_bytes(v, bare_bytes=bare_bytes), value)
    assert size is None or (isinstance(size, int) and size >= 0)


@FUZZ
@given(_VALUES)
def test_latencies(value: Any) -> None:
    latency = _reads_or_names(parse_latency_ms, value)
    if latency is not None:
        assert 0 <= latency <= 10**9
        # Whatever reads is a whole number of microseconds and reads back the same.
        assert parse_latency_ms(latency) == latency
        assert latency_microseconds(latency) == round(latency * 1000)


@FUZZ
@given(_VALUES)
def test_contexts(value: Any) -> None:
    tokens = _reads_or_names(parse_context, value)
    assert tokens is None or (isinstance(tokens, int) and tokens >= 0)


@FUZZ
@given(_VALUES | st.integers(-(2**80), 2**80), _VALUES, _VALUES)
def test_byte_formatters(value: Any, precision: Any, decimal: Any) -> None:
    """Any value, precision or flag is shown or refused by name; an exact size reads
    back as the bytes it shows."""
    from planner.units import exact_size_text, format_bytes

    _reads_or_names(lambda v: format_bytes(v, precision=precision, decimal=decimal), value)
    exact = _reads_or_names(exact_size_text, value)
    if exact is not None and exact != "0" and value > 0:
        assert parse_bytes(exact, bare_bytes=True) == value


@FUZZ
@given(st.one_of(_VALUES, st.integers(-(2**70), 2**70)), st.sampled_from(
    ["with_node", "remove_node", "duplicate_node", "add_gpus", "from_document"]))
def test_workbench_state_calls(value: Any, call: str) -> None:
    """Any index, count or document given to the workbench state is a new state or a
    coded error naming the argument, within a bounded time (no 10**70 nodes made)."""
    from planner.workbench.state import NodeRow, WorkbenchState

    state = WorkbenchState.design_default()
    calls = {
        "with_node": lambda: state.with_node(value, NodeRow("gpu-09", "80 GiB")),
        "remove_node": lambda: state.remove_node(value),
        "duplicate_node": lambda: state.duplicate_node(value),
        "add_gpus": lambda: state.add_gpus("H100", 80 * 2**30, value),
        "from_document": lambda: WorkbenchState.from_document(value),
    }
    try:
        result = calls[call]()
    except CodedError as error:
        assert error.code == "InvalidEditorValue" and len(error.message) < 600
        return
    assert isinstance(result, WorkbenchState) and len(result.nodes) <= 10_000
