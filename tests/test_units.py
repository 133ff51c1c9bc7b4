from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.units import UnitError, format_bytes, parse_bytes


@pytest.mark.parametrize(("text", "expected"), [
    ("80 GiB", 80 * 2**30),
    ("80GiB", 80 * 2**30),
    ("80 gib", 80 * 2**30),
    ("24GB", 24 * 10**9),
    ("24 gb", 24 * 10**9),
    ("512 MiB", 512 * 2**20),
    ("1.5 TiB", 3 * 2**39),
    ("1.3 GiB", 1_395_864_371),
    ("0.1 KiB", 102),
    ("2 kB", 2000),
    ("2 KB", 2000),
    ("3 KiB", 3072),
    ("1 PiB", 2**50),
    ("1,024", 1024),
    ("1_000 B", 1000),
    ("  7 ", 7),
    (4096, 4096),
])
def test_parse_bytes(text: str | int, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "80 GQ", "-5 GiB", "1.5 B", "2.5", "abc",
                                  "80 Gib extra", True, None, 1.5, -1])
def test_parse_bytes_refuses(text: object) -> None:
    with pytest.raises(UnitError) as caught:
        parse_bytes(text)  # type: ignore[arg-type]
    assert str(caught.value)


def test_unknown_unit_message_lists_the_units() -> None:
    with pytest.raises(UnitError, match=r"unknown unit 'GQ'.*GiB.*GB"):
        parse_bytes("80 GQ")


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
