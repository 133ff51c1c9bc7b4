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
