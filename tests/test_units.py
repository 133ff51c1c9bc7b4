from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.errors import CodedError
from planner.units import (
    ContextError,
    LatencyError,
    UnitError,
    exact_size_text,
    format_bandwidth,
    format_bytes,
    format_milliseconds,
    latency_microseconds,
    ms_from_microseconds,
    parse_bandwidth,
    parse_bytes,
    parse_context,
    parse_latency_ms,
    quoted,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("80 GiB", 80 * 2**30),
    ("80GiB", 80 * 2**30),
    ("80 GIB", 80 * 2**30),
    ("80 giB", 80 * 2**30),
    ("24GB", 24 * 10**9),
    ("24 gB", 24 * 10**9),
    ("512 MiB", 512 * 2**20),
    ("1.5 TiB", 3 * 2**39),
    ("1.3 GiB", 1_395_864_371),
    ("0.1 KiB", 102),
    ("2 kB", 2000),
    ("2 KB", 2000),
    ("3 KiB", 3072),
    ("1 PiB", 2**50),
    ("1,024 B", 1024),
    ("1,500.5 GB", 1_500_500_000_000),
    ("1_000 B", 1000),
    ("  7 B\t", 7),
    ("0", 0),
    (0, 0),
])
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [(4096, 4096), ("1,024", 1024), ("7", 7),
                                                (np.int64(40), 40)])
def test_bare_numbers_are_bytes_where_the_field_says_so(text: object, expected: int) -> None:
    assert parse_bytes(text, bare_bytes=True) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [24, "24", " 24 ", "2.5", np.int64(24)])
def test_a_bare_number_is_refused_with_the_forms_it_could_mean(value: object) -> None:
    with pytest.raises(UnitError) as caught:
        parse_bytes(value)  # type: ignore[arg-type]
    message = caught.value.message
    number = str(value).strip()
    assert f"'{number} GiB'" in message and f"'{number} B'" in message
    assert "no unit" in message


@pytest.mark.parametrize("text", ["", "GiB", "80 GQ", "-5 GiB", "1.5 B", "abc",
                                  "80 GiB extra", True, None, 1.5, -1, "1e3 GiB", ".5 GiB",
                                  "1__0 B", "1_ GiB", "١٢ GiB", "80 GiB\n", "80\u00a0GiB"])
def test_parse_bytes_refuses(text: object) -> None:
    with pytest.raises(UnitError) as caught:
        parse_bytes(text)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidSize"
    assert isinstance(caught.value, CodedError)
    assert caught.value.message


@pytest.mark.parametrize("text", ["1,5 TiB", "0,5 GiB", "8,0,,, GiB", "1,5", "12,34 GB",
                                  "1,0000 GB", ",5 GiB", "0,500 GB"])
def test_a_comma_that_is_not_a_thousands_separator_is_refused(text: str) -> None:
    with pytest.raises(UnitError, match="not a thousands separator") as caught:
        parse_bytes(text, bare_bytes=True)
    assert "'80 GiB'" in caught.value.message  # the accepted forms


@pytest.mark.parametrize(("text", "suggested"), [("80 Gb", "80 GB"), ("80 gb", "80 GB"),
                                                 ("80 Gib", "80 GiB"), ("80 gib", "80 GiB"),
                                                 ("2 kb", "2 kB"), ("8 b", "8 B")])
def test_a_lower_case_b_is_bits_and_is_refused(text: str, suggested: str) -> None:
    with pytest.raises(UnitError, match="bits") as caught:
        parse_bytes(text)
    assert f"'{suggested}'" in caught.value.message


@pytest.mark.parametrize("text", ["80\nGiB", "80\rGiB", "80\x00GiB", "8\n0 GiB"])
def test_a_line_break_or_control_character_inside_a_size_is_refused(text: str) -> None:
    with pytest.raises(UnitError, match="cannot read"):
        parse_bytes(text)


def test_unknown_unit_message_lists_the_units() -> None:
    with pytest.raises(UnitError, match=r"unknown unit 'GQ'.*GiB.*GB"):
        parse_bytes("80 GQ")


def test_a_long_bad_value_is_quoted_short() -> None:
    text = "1" + " " * 60_000 + "!"
    with pytest.raises(UnitError) as caught:
        parse_bytes(text)
    assert len(caught.value.message) < 400
    assert "60,002 characters" in caught.value.message
    assert len(str(caught.value.details["value"])) <= 80


def test_too_many_digits_are_refused() -> None:
    with pytest.raises(UnitError, match="too many digits"):
        parse_bytes("9" * 5000 + " GiB")


def test_quoted_keeps_short_values_and_cuts_long_ones() -> None:
    assert quoted("80 GiB") == "'80 GiB'"
    long = quoted("x" * 1000)
    assert len(long) <= 110 and "1,000 characters" in long
    assert len(quoted(list(range(1000)))) <= 80


@pytest.mark.parametrize(("value", "expected"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
    (80 * 2**30, "80 GiB"), (75_161_927_680, "70 GiB"), (315_680_000_000, "294 GiB"),
    (2**50, "1 PiB"), (-2048, "-2 KiB"),
])
def test_format_bytes(value: int, expected: str) -> None:
    assert format_bytes(value) == expected


@given(st.integers(0, 2**53))
def test_format_then_parse_is_within_rounding(value: int) -> None:
    back = parse_bytes(format_bytes(value, precision=6))
    assert abs(back - value) <= max(1, value) * 1e-6


@given(st.integers(0, 10**6), st.sampled_from(["KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB"]))
def test_whole_numbers_of_any_unit_parse_exactly(number: int, unit: str) -> None:
    factor = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
              "kB": 10**3, "MB": 10**6, "GB": 10**9}[unit]
    assert parse_bytes(f"{number} {unit}") == number * factor


SIZE_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
              "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}


@pytest.mark.parametrize(("unit", "factor"), SIZE_UNITS.items())
def test_every_unit_reads_prints_and_is_listed_alike(unit: str, factor: int) -> None:
    """The one unit table serves the parser, both formatters and the error message."""
    binary = "i" in unit
    assert parse_bytes(f"1 {unit}") == factor
    assert format_bytes(factor, decimal=not binary) == f"1 {unit}"
    assert format_bytes(factor * 3 // 2, decimal=not binary) == f"1.5 {unit}"
    assert exact_size_text(factor) == (f"1 {unit}" if unit != "kB" else "1000 B")
    with pytest.raises(UnitError) as caught:
        parse_bytes("1 XB")
    assert caught.value.message.split("use one of ")[1].startswith(
        "B, KiB, MiB, GiB, TiB, PiB, kB, MB, GB, TB, PB;")


@pytest.mark.parametrize(("value", "text"), [
    (0, "0 B/s"), (900 * 10**9, "900 GB/s"), (3_350_000_000_000, "3.35 TB/s"),
    (1_008_000_000_000, "1.01 TB/s"), (np.int64(936 * 10**9), "936 GB/s"),
])
def test_format_bandwidth(value: int, text: str) -> None:
    assert format_bandwidth(value) == text
    assert abs(parse_bandwidth(text) - value) <= value * 0.005


@pytest.mark.parametrize("value", [-1, 1.5e12, "3 TB/s", True, None, 2**71])
def test_format_bandwidth_refuses_what_is_no_bandwidth(value: object) -> None:
    with pytest.raises(UnitError) as caught:
        format_bandwidth(value)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidSize"
    assert caught.value.message.startswith("format_bandwidth: bytes_per_s ")


# -- latency ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (5, 5), (0, 0), (5.0, 5), (0.5, 0.5), ("0.5", 0.5), ("5 ms", 5), ("5ms", 5),
    (" 0.25 MS ", 0.25), ("500 us", 0.5), ("1500 µs", 1.5), ("1,000 ms", 1000),
    (0.001, 0.001), (np.int64(7), 7), (np.float64(0.5), 0.5),
])
def test_parse_latency_ms(value: object, expected: int | float) -> None:
    parsed = parse_latency_ms(value)  # type: ignore[arg-type]
    assert parsed == expected
    assert type(parsed) is type(expected)


@pytest.mark.parametrize("value", [-1, -0.5, "-5 ms", "1.0005", 0.0001, float("nan"),
                                   float("inf"), "5 s", "ms", "", True, None, 2 * 10**9,
                                   "5\nms", "0,5 ms", [5]])
def test_parse_latency_refuses(value: object) -> None:
    with pytest.raises(LatencyError) as caught:
        parse_latency_ms(value)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidLatency"


def test_latency_errors_show_the_accepted_forms() -> None:
    with pytest.raises(LatencyError, match=r"'0\.5'.*'5 ms'"):
        parse_latency_ms("fast")


@given(st.integers(0, 10**12))
def test_microseconds_round_trip_exactly(micro: int) -> None:
    ms = ms_from_microseconds(micro)
    assert latency_microseconds(ms) == micro
    assert parse_latency_ms(ms) == ms
    assert parse_latency_ms(f"{micro} us") == ms


def test_fractional_latencies_sum_exactly_in_microseconds() -> None:
    # 10 stages at 0.7 ms is 7 ms exactly; in floats 10 * 0.7 is 7.000000000000001.
    assert 10 * latency_microseconds(parse_latency_ms("0.7")) == 7000
    assert ms_from_microseconds(7000) == 7


# -- context ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("128k", 131_072), ("128K", 131_072), (" 128 k ", 131_072), ("64k", 65_536),
    ("1M", 1_048_576), ("1.5k", 1536), ("131072", 131_072), ("131,072", 131_072),
    ("65_536", 65_536), (262_144, 262_144), (np.int32(512), 512),
])
def test_parse_context(value: object, expected: int) -> None:
    assert parse_context(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["0.3k", "128kb", "128 KiB", "-1", "x", 1.5, True, "",
                                   "1,5k", "128k\n"])
def test_parse_context_refuses(value: object) -> None:
    with pytest.raises(ContextError) as caught:
        parse_context(value)  # type: ignore[arg-type]
    assert caught.value.code == "InvalidContext"
    assert "128k" in caught.value.message


@pytest.mark.parametrize(("value", "text"), [
    (25, "25 ms"), (2.5, "2.5 ms"), (1250, "1,250 ms"), (0.001, "0.001 ms"),
    (2.0, "2 ms"), (np.int64(40), "40 ms"), (7.000000000000001, "7 ms"), (1234.5, "1,234.5 ms"),
])
def test_milliseconds_are_written_to_the_microsecond(value: float, text: str) -> None:
    assert format_milliseconds(value) == text


PACKAGE = Path(__file__).resolve().parent.parent / "planner"
# Where "<number> ms" is written without format_milliseconds, and why.
MILLISECONDS_BY_HAND = {
    "units.py": "the formatter itself",
    # The fence simulation's clock: whole milliseconds, each event's time read exactly in
    # the event log (t=12,345 ms must not read 12.3 s, nor gain a separator).
    "fence": "the fence simulation's clock",
    "figures/fence.py": "the fence simulation's clock",
    "workbench/_fence_steppers.py": "the fence simulation's clock",
}
_MS_AFTER = re.compile(r"^ ?ms\b")


def _milliseconds_by_hand(tree: ast.AST) -> Iterator[int]:
    """The lines of ``tree`` that write a value followed by "ms": in an f-string
    (``f"{tpot:,.1f} ms"``) or added to one (``str(tpot) + " ms"``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for value, after in zip(node.values, node.values[1:], strict=False):
                if (isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant)
                        and isinstance(after.value, str) and _MS_AFTER.match(after.value)):
                    yield node.lineno
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
              and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str)
              and _MS_AFTER.match(node.right.value)):
            yield node.lineno


def test_the_scan_finds_milliseconds_written_by_hand() -> None:
    found = list(_milliseconds_by_hand(ast.parse(
        'a = f"{tpot:,.1f} ms"\nb = f"target {x}ms, " f"{y}"\nc = str(t) + " ms"\n'
        'd = f"{n} msgs"\ne = f"{format_milliseconds(t)}"\n')))
    assert found == [1, 2, 3]


def test_no_module_writes_milliseconds_by_hand() -> None:
    """Every duration in milliseconds a message, table or chart shows is written by
    format_milliseconds (its thousands separators, its three significant figures for an
    estimate, its seconds from 10 s on): estimated TPOTs were written to one decimal in
    one message, two in another and to the microsecond in a third."""
    by_hand = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name in MILLISECONDS_BY_HAND or name.split("/")[0] in MILLISECONDS_BY_HAND:
            continue
        by_hand += [f"planner/{name}:{line}"
                    for line in _milliseconds_by_hand(ast.parse(path.read_text()))]
    assert by_hand == []
    assert all((PACKAGE / name).exists() for name in MILLISECONDS_BY_HAND)


@pytest.mark.parametrize(("value", "text"), [
    (38.271, "38.3 ms"), (3.4567, "3.5 ms"), (0.0456, "0.046 ms"), (1834.24, "1,834.2 ms"),
    (30, "30.0 ms"), (99.96, "100.0 ms"), (0.996, "1.0 ms"), (9999.4, "9,999.4 ms"),
    (12_345.6, "12.3 s"), (np.float64(0.52), "0.52 ms"), (0.0, "0 ms"),
])
def test_estimated_milliseconds_are_written_to_a_tenth(value: float, text: str) -> None:
    """An estimate's later digits are noise (38.271 was written 38.3 ms in one message,
    38.27 ms in another and 38.271 ms in a third); below 1 ms two significant figures
    say what a stage's hop or read takes."""
    assert format_milliseconds(value, estimated=True) == text
