"""Byte sizes in human units.

``parse_bytes`` accepts binary units (``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB``: powers
of 1024) and decimal units (``kB``/``KB``, ``MB``, ``GB``, ``TB``, ``PB``: powers of 1000),
an optional space, and plain integers meaning bytes. Unit letters are case-insensitive
(``gib`` is GiB, ``gb`` is GB); the ``i`` is what makes a unit binary, so the meaning is
never ambiguous. ``format_bytes`` prints the largest binary unit that keeps the number
at or above 1.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from planner.errors import CodedError

_BINARY = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "pib": 1024**5}
_DECIMAL = {"kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "pb": 1000**5}
_UNITS: dict[str, int] = {"": 1, "b": 1, **_BINARY, **_DECIMAL}
_PATTERN = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


class UnitError(CodedError):
    """A size string that cannot be read as bytes."""

    codes = ("InvalidSize",)

    def __init__(self, message: str) -> None:
        super().__init__("InvalidSize", message)


def parse_bytes(text: str | int) -> int:
    """Parse ``"80 GiB"``, ``"24GB"``, ``"512 MiB"``, ``"1.5 TiB"`` or ``1024`` into bytes.

    A fractional size in a unit is rounded to the nearest byte; bytes themselves must be whole.

    >>> parse_bytes("80 GiB")
    85899345920
    >>> parse_bytes("24GB")
    24000000000
    """
    if isinstance(text, bool):
        raise UnitError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"a size cannot be negative: {text}")
        return text
    if not isinstance(text, str):
        raise UnitError(f"not a size: {text!r}")
    match = _PATTERN.match(text)
    if match is None:
        raise UnitError(
            f"cannot read {text!r} as a size; write e.g. '80 GiB', '24 GB' or '512 MiB'"
        )
    number_text, unit_text = match.groups()
    unit = unit_text.lower()
    if unit not in _UNITS:
        known = ", ".join(["B", "KiB", "MiB", "GiB", "TiB", "PiB", "kB", "MB", "GB", "TB", "PB"])
        raise UnitError(f"unknown unit {unit_text!r} in {text!r}; use one of {known}")
    try:
        number = Decimal(number_text.replace("_", "").replace(",", ""))
    except InvalidOperation as exc:  # pragma: no cover - the pattern already guards this
        raise UnitError(f"cannot read {text!r} as a size") from exc
    value = number * _UNITS[unit]
    if _UNITS[unit] == 1 and value != value.to_integral_value():
        raise UnitError(f"{text!r} is not a whole number of bytes")
    # "1.3 GiB" is not a whole number of bytes; the nearest byte is what anyone means.
    return int(value.to_integral_value(rounding=ROUND_HALF_UP))


def format_bytes(value: int, *, precision: int = 2) -> str:
    """Print bytes in the largest binary unit that keeps the number at or above 1.

    >>> format_bytes(85899345920)
    '80 GiB'
    >>> format_bytes(1536)
    '1.5 KiB'
    """
    if value < 0:
        return "-" + format_bytes(-value, precision=precision)
    for name, factor in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3),
                         ("MiB", 1024**2), ("KiB", 1024)):
        if value >= factor:
            scaled = value / factor
            text = f"{scaled:.{precision}f}".rstrip("0").rstrip(".")
            return f"{text} {name}"
    return f"{value} B"
