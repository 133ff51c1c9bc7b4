"""Sizes, latencies and context lengths as people write them.

One parser per kind of value, shared by fleet files, the Python API and the workbench:

- :func:`parse_bytes` reads a size: a number and a unit. Binary units (``KiB``, ``MiB``,
  ``GiB``, ``TiB``, ``PiB``) are powers of 1024, decimal units (``kB``/``KB``, ``MB``,
  ``GB``, ``TB``, ``PB``) powers of 1000, ``B`` is bytes. The unit's first letter and its
  ``i`` may be in either case, but the byte symbol is an upper-case ``B``: a lower-case
  ``b`` is a bit (``80 Gb`` is 10 GB), so it is refused rather than guessed. A number
  without a unit is refused too (``24`` could mean 24 GiB or 24 bytes), except where the
  caller's field names its unit (``model_weight_bytes``) and for ``0``. Digits may be
  grouped with ``_`` or with ``,`` in groups of three (``1,024``); any other comma
  (``1,5``) is refused, since a decimal comma would be read a thousand times off.
- :func:`parse_bandwidth` reads a memory bandwidth in bytes per second: a size per
  second, ``"3.35 TB/s"``, ``"2,039 GB/s"`` or ``"1 TiB/s"`` (the size's units).
- :func:`parse_latency_ms` reads a stage-transfer latency in milliseconds: ``5``,
  ``0.5``, ``"5 ms"``, ``"0.25ms"`` or ``"500 us"``, to the microsecond (three decimals).
- :func:`parse_context` reads a context length in tokens: ``131072``, ``"131,072"`` or
  ``"128k"``. In a context ``k`` means 1024 and ``M`` means 1024 * 1024 tokens (the
  way context windows are quoted: ``128k`` is 131,072), never 1000.

Every parser runs in time linear in its input, and an error quotes at most about
80 characters of the value (:func:`quoted`).

The formatters print the values back, one for each: :func:`format_bytes` a size (and
:func:`exact_size_text` one that reads back exactly), :func:`format_bandwidth` a
bandwidth, :func:`format_milliseconds` every duration.
"""

from __future__ import annotations

import math
import operator
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from planner._validate import MAX_SHOWN, Fail, flag, integer, shown
from planner.errors import CodedError
from planner.limits import MAX_LATENCY_MS, MAX_NUMBER_DIGITS, MAX_SHOWN_BYTES

# The size units, each spelled once here: its symbol and its bytes, the largest first.
# Everything else (what a unit is read as, the units a message lists, the units a size
# is printed in) is derived from these two.
_BINARY_UNITS = (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2),
                 ("KiB", 1024))
_DECIMAL_UNITS = (("PB", 1000**5), ("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2),
                  ("kB", 1000))
# A unit is read by its prefix letter in either case: "g" -> bytes.
_BINARY = {symbol[0].lower(): factor for symbol, factor in _BINARY_UNITS}
_DECIMAL = {symbol[0].lower(): factor for symbol, factor in _DECIMAL_UNITS}
# (prefix letter, binary) -> the symbol a size is written with.
_SYMBOLS = {(symbol[0].lower(), symbol[1:2] == "i"): symbol
            for symbol, _ in (*_BINARY_UNITS, *_DECIMAL_UNITS)}
_KNOWN_UNITS = ", ".join(["B", *(symbol for symbol, _ in reversed(_BINARY_UNITS)),
                          *(symbol for symbol, _ in reversed(_DECIMAL_UNITS))])
SIZE_FORMS = ("write a number and a unit: '80 GiB' (1024-based), '24 GB' (1000-based), "
              "'512 MiB', '1.5 TiB', or '1024 B' for bytes")
BANDWIDTH_FORMS = ("write a size per second: '3.35 TB/s' (1000-based), '900 GB/s' or "
                   "'1 TiB/s' (1024-based)")
LATENCY_FORMS = "write milliseconds: '5', '0.5', '5 ms', '0.25 ms' or '500 us'"
CONTEXT_FORMS = "write tokens: '131072', '131,072' or '128k' (k = 1024 tokens)"
# Digits kept from one number: far beyond any real value, small enough that reading a
# hostile string never costs more than its length.
# Latencies are counted in whole microseconds, so sums and comparisons are exact.
LATENCY_DECIMALS = 3

# Each pattern is a plain sequence of single-choice repetitions (no nested or adjacent
# quantifiers over the same characters), so matching is linear in the input.
_PLAIN = re.compile(r"[0-9]+(?:_[0-9]+)*(?:\.[0-9]+)?")
_GROUPED = re.compile(r"[1-9][0-9]{0,2}(?:,[0-9]{3})+(?:\.[0-9]+)?")
_NUMBER_CHARS = frozenset("0123456789_,.")
_BLANKS = " \t"


class UnitError(CodedError):
    """A size that cannot be read as bytes.

    ``value`` is what was given, cut to about 80 characters when it is long.
    """

    codes = ("InvalidSize",)

    def __init__(self, message: str, *, value: Any = None) -> None:
        super().__init__(self.codes[0], message, value=_shortened(value))
        self.value = _shortened(value)


class LatencyError(UnitError):
    """A latency that cannot be read as milliseconds."""

    codes = ("InvalidLatency",)


class ContextError(UnitError):
    """A context length that cannot be read as tokens."""

    codes = ("InvalidContext",)


def quoted(value: Any) -> str:
    """``value`` as an error quotes it: :func:`planner._validate.shown`, plus the length
    of a long string, so a cut value is not mistaken for the whole."""
    text = shown(value)
    if isinstance(value, str) and len(value) > MAX_SHOWN:
        return f"{text} ({len(value):,} characters)"
    return text


def _shortened(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_SHOWN:
        return value[: MAX_SHOWN - 4] + " ..."
    return value


def _split(text: str) -> tuple[str, str, str]:
    """``(stripped, number, unit)``: the leading number characters and the rest."""
    stripped = text.strip(_BLANKS)
    end = 0
    while end < len(stripped) and stripped[end] in _NUMBER_CHARS:
        end += 1
    rest = end
    while rest < len(stripped) and stripped[rest] in _BLANKS:
        rest += 1
    return stripped, stripped[:end], stripped[rest:]


def _number(number: str, text: str, error: type[UnitError], forms: str) -> Decimal:
    """The value of a number written with ``_`` or thousands commas (see the module)."""
    if "," in number:
        if _GROUPED.fullmatch(number) is None:
            raise error(f"{quoted(text)} has a comma that is not a thousands separator "
                        "(groups of three digits, as in '1,024'); write a decimal point, "
                        f"as in '1.5', or no comma; {forms}", value=text)
        digits = number.replace(",", "")
    elif _PLAIN.fullmatch(number) is not None:
        digits = number.replace("_", "")
    else:
        raise error(f"cannot read {quoted(text)}; {forms}", value=text)
    whole, _, fraction = digits.partition(".")
    if len(whole.lstrip("0")) > MAX_NUMBER_DIGITS or len(fraction) > MAX_NUMBER_DIGITS:
        raise error(f"{quoted(text)} has too many digits; {forms}", value=text)
    return Decimal(digits)


def _refuse_non_string(value: Any, error: type[UnitError], forms: str, kind: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str):
        raise error(f"not {kind}: {quoted(value)}; {forms}", value=value)
    return value


def _refuse_negative(stripped: str, text: str, error: type[UnitError], kind: str,
                     forms: str) -> None:
    if stripped.startswith("-"):
        raise error(f"cannot be negative (got {quoted(text)}); {forms}", value=text)
    if not stripped:
        raise error(f"{kind} is empty; {forms}", value=text)


def _size_factor(unit: str, text: str, number: str) -> int:
    if unit == "B":
        return 1
    lowered = unit.lower()
    prefix = lowered[:1]
    binary = len(unit) == 3 and lowered[1] == "i"
    if (len(unit) == 2 or binary) and prefix in _DECIMAL and unit[-1] in "bB":
        if unit[-1] == "b":
            raise UnitError(
                f"{quoted(text)}: {unit!r} is in bits (a lower-case b); sizes are bytes, "
                f"so write an upper-case B: '{number} {_symbol(prefix, binary)}'",
                value=text)
        return _BINARY[prefix] if binary else _DECIMAL[prefix]
    if unit == "b":
        raise UnitError(f"{quoted(text)}: 'b' is bits; write '{number} B' for bytes",
                        value=text)
    raise UnitError(f"unknown unit {quoted(unit)} in {quoted(text)}; use one of "
                    f"{_KNOWN_UNITS}; {SIZE_FORMS}", value=text)


def _symbol(prefix: str, binary: bool) -> str:
    return _SYMBOLS[(prefix, binary)]


def _integral(value: Any) -> int | None:
    """``value`` as an ``int`` when it is an integer of any integral type (numpy's too),
    never a ``bool``; else ``None``."""
    if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def parse_bytes(text: str | int, *, bare_bytes: bool = False) -> int:
    """Read a size (``"80 GiB"``, ``"24GB"``, ``"512 MiB"``, ``"1.5 TiB"``) as bytes.

    A number without a unit (an ``int``, or text without a unit) is refused unless it is
    zero or ``bare_bytes`` says the field's name carries the unit
    (``model_weight_bytes``); then it is bytes. A fractional size in
    a unit is rounded to the nearest byte; bytes themselves must be whole.

    >>> parse_bytes("80 GiB")
    85899345920
    >>> parse_bytes("24GB")
    24000000000
    """
    integer = _integral(text)
    if integer is not None:
        text = integer
        if text < 0:
            raise UnitError(f"cannot be negative (got {quoted(text)})", value=text)
        if text and not bare_bytes:
            raise UnitError(_bare_message(str(text)), value=text)
        return text
    text = _refuse_non_string(text, UnitError, SIZE_FORMS, "a size")
    stripped, number, unit = _split(text)
    _refuse_negative(stripped, text, UnitError, "a size", SIZE_FORMS)
    if not number:
        raise UnitError(f"cannot read {quoted(text)} as a size; {SIZE_FORMS}", value=text)
    if unit and not (unit.isascii() and unit.isalpha()):
        raise UnitError(f"cannot read {quoted(text)} as a size; {SIZE_FORMS}", value=text)
    value = _number(number, text, UnitError, SIZE_FORMS)
    if not unit:
        if value and not bare_bytes:
            raise UnitError(_bare_message(number), value=text)
        factor = 1
    else:
        factor = _size_factor(unit, text, number)
    scaled = value * factor
    if factor == 1 and scaled != scaled.to_integral_value():
        raise UnitError(f"{quoted(text)} is not a whole number of bytes", value=text)
    # "1.3 GiB" is not a whole number of bytes; the nearest byte is what anyone means.
    return int(scaled.to_integral_value(rounding=ROUND_HALF_UP))


def parse_bandwidth(value: str | int | float, *, bare_bytes_per_s: bool = False) -> int:
    """Read a memory bandwidth (``"3.35 TB/s"``, ``"900 GB/s"``, ``"1 TiB/s"``) as bytes
    per second, to the nearest byte.

    A number without a unit (``3.35e12``, ``1_000_000``) is refused unless
    ``bare_bytes_per_s`` says the field's name carries the unit
    (``memory_bandwidth_bytes_per_s``); then it is bytes per second.

    >>> parse_bandwidth("3.35 TB/s")
    3350000000000
    """
    if isinstance(value, float):
        if not bare_bytes_per_s:
            raise UnitError(f"{quoted(value)} has no unit; {BANDWIDTH_FORMS}", value=value)
        if not math.isfinite(value) or value < 0:
            raise UnitError(f"a bandwidth must be a finite number at least 0 (got "
                            f"{quoted(value)})", value=value)
        return int(Decimal(value).to_integral_value(rounding=ROUND_HALF_UP))
    if _integral(value) is not None:
        if value and not bare_bytes_per_s:
            raise UnitError(f"{quoted(value)} has no unit; {BANDWIDTH_FORMS}", value=value)
        return parse_bytes(value, bare_bytes=True)
    _refuse_non_string(value, UnitError, BANDWIDTH_FORMS, "a bandwidth")
    assert isinstance(value, str)
    stripped = value.strip(_BLANKS)
    if stripped.endswith("/s"):
        size = stripped[:-2].rstrip(_BLANKS)
    elif bare_bytes_per_s and stripped and all(c in _NUMBER_CHARS for c in stripped):
        size = stripped
    else:
        raise UnitError(f"cannot read {quoted(value)} as a bandwidth; {BANDWIDTH_FORMS}",
                        value=value)
    try:
        return parse_bytes(size, bare_bytes=bare_bytes_per_s)
    except UnitError as error:
        raise UnitError(f"cannot read {quoted(value)} as a bandwidth ({error.message})",
                        value=value) from None


def _bare_message(number: str) -> str:
    return (f"{number} has no unit, so it could be GiB, GB or bytes; write "
            f"'{number} GiB', '{number} GB' or '{number} B'")


def _argument(function: str, name: str) -> Fail:
    return lambda problem, value: UnitError(f"{function}: {name} {problem} (got "
                                            f"{shown(value)})", value=value)


def _shown_bytes(value: Any, function: str) -> int:
    """A number of bytes a formatter shows: an integer (numpy's too) within
    :data:`~planner.limits.MAX_SHOWN_BYTES` either side of 0."""
    return integer(value, _argument(function, "value"), minimum=-MAX_SHOWN_BYTES,
                   maximum=MAX_SHOWN_BYTES)


def format_bytes(value: int, *, precision: int = 2, decimal: bool = False,
                 trim: bool = True) -> str:
    """Print bytes in the largest unit that keeps the number at or above 1: binary units
    (``GiB``), or decimal ones (``GB``) with ``decimal``. ``trim`` drops trailing zeros
    (``"80 GiB"``); without it every figure has ``precision`` decimals (``"1.50 TB"``).
    The figure is rounded: :func:`exact_size_text` gives one that reads back exactly.

    >>> format_bytes(85899345920)
    '80 GiB'
    >>> format_bytes(1536)
    '1.5 KiB'
    >>> format_bytes(315_680_000_000, decimal=True, trim=False)
    '315.68 GB'
    """
    # Checked unless plainly valid: tables format every size of tens of thousands of rows.
    if not (type(value) is int and -MAX_SHOWN_BYTES <= value <= MAX_SHOWN_BYTES):
        value = _shown_bytes(value, "format_bytes")
    if not (type(precision) is int and 0 <= precision <= MAX_NUMBER_DIGITS):
        precision = integer(precision, _argument("format_bytes", "precision"),
                            maximum=MAX_NUMBER_DIGITS)
    if type(decimal) is not bool or type(trim) is not bool:
        decimal = flag(decimal, _argument("format_bytes", "decimal"))
        trim = flag(trim, _argument("format_bytes", "trim"))
    if value < 0:
        return "-" + format_bytes(-value, precision=precision, decimal=decimal, trim=trim)
    for symbol, factor in _DECIMAL_UNITS if decimal else _BINARY_UNITS:
        if value >= factor:
            text = f"{value / factor:.{precision}f}"
            if trim:
                text = text.rstrip("0").rstrip(".")
            return f"{text} {symbol}"
    return f"{value} B"


def format_bandwidth(bytes_per_s: int, *, precision: int = 2) -> str:
    """Print a bandwidth in bytes per second the way vendors quote it and
    :func:`parse_bandwidth` reads it: decimal units per second, trailing zeros dropped.

    >>> format_bandwidth(3_350_000_000_000), format_bandwidth(936_000_000_000)
    ('3.35 TB/s', '936 GB/s')
    """
    if not (type(bytes_per_s) is int and 0 <= bytes_per_s <= MAX_SHOWN_BYTES):
        bytes_per_s = integer(bytes_per_s, _argument("format_bandwidth", "bytes_per_s"),
                              minimum=0, maximum=MAX_SHOWN_BYTES)
    return format_bytes(bytes_per_s, precision=precision, decimal=True) + "/s"


# The units an exact size text may use: every binary one, and the decimal ones from MB.
_EXACT_UNITS = (*_BINARY_UNITS, *((symbol, factor) for symbol, factor in _DECIMAL_UNITS
                                  if symbol != "kB"))


def exact_size_text(value: int) -> str:
    """``value`` as the shortest size that reads back exactly (``"80 GiB"``,
    ``"315.68 GB"``, ``"1.5 KiB"``), or ``"N B"`` when no unit gives a short exact
    figure; ``"0"`` for nothing.

    >>> exact_size_text(315_680_000_000)
    '315.68 GB'
    """
    value = _shown_bytes(value, "exact_size_text")
    if value == 0:
        return "0"
    best: str | None = None
    for unit, factor in _EXACT_UNITS:
        if value < factor:
            continue
        text = format((Decimal(value) / Decimal(factor)).normalize(), "f")
        if len(text.partition(".")[2]) > 3 or len(text.replace(".", "")) > 7:
            continue
        candidate = f"{text} {unit}"
        if best is None or len(candidate) < len(best):
            best = candidate
    if best is None or parse_bytes(best) != value:
        return f"{value} B"
    return best


# -- latency ----------------------------------------------------------------------------


def _exact_ms(value: Decimal, text: Any) -> int | float:
    """A latency as an ``int`` when whole, else the ``float`` of its microseconds."""
    if value > MAX_LATENCY_MS:
        raise LatencyError(f"a latency must be at most {MAX_LATENCY_MS:,} ms "
                           f"(got {quoted(text)})", value=text)
    micro = value * 1000
    if micro != micro.to_integral_value():
        raise LatencyError(f"{quoted(text)}: latency is counted to the microsecond, so "
                           f"give at most {LATENCY_DECIMALS} decimals of a millisecond",
                           value=text)
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def parse_latency_ms(value: str | int | float) -> int | float:
    """Read a stage-transfer latency in milliseconds.

    Numbers are milliseconds (``5``, ``0.5``); text may add ``ms`` or give ``us``/``µs``
    (``"5 ms"``, ``"500 us"``). The result is an ``int`` when whole, else a ``float`` with
    at most three decimals (whole microseconds, see :func:`latency_microseconds`).

    >>> parse_latency_ms("0.5 ms")
    0.5
    >>> parse_latency_ms("5ms")
    5
    """
    integer = _integral(value)
    if integer is not None:
        value = integer
        if value < 0:
            raise LatencyError(f"cannot be negative (got {quoted(value)})",
                               value=value)
        return _exact_ms(Decimal(value), value)
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise LatencyError(f"a latency must be a finite number of ms, at least 0 "
                               f"(got {quoted(value)})", value=value)
        # repr is the shortest text that reads back as this float: 0.1, not 0.1000...0555.
        return _exact_ms(Decimal(repr(float(value))), value)
    value = _refuse_non_string(value, LatencyError, LATENCY_FORMS, "a latency")
    stripped, number, unit = _split(value)
    _refuse_negative(stripped, value, LatencyError, "a latency", LATENCY_FORMS)
    if not number or unit.lower() not in ("", "ms", "us", "µs"):
        raise LatencyError(f"cannot read {quoted(value)} as a latency; {LATENCY_FORMS}",
                           value=value)
    amount = _number(number, value, LatencyError, LATENCY_FORMS)
    if unit.lower() in ("us", "µs"):
        amount = amount / 1000
    return _exact_ms(amount, value)


def latency_microseconds(latency_ms: int | float) -> int:
    """A latency read by :func:`parse_latency_ms` as whole microseconds, exactly."""
    if isinstance(latency_ms, int):
        return latency_ms * 1000
    return int(Decimal(repr(float(latency_ms))) * 1000)


def ms_from_microseconds(micro: int) -> int | float:
    """Whole microseconds back as milliseconds: an ``int`` when whole, else a ``float``."""
    whole, rest = divmod(micro, 1000)
    return whole if rest == 0 else float(Decimal(micro) / 1000)


def format_milliseconds(value: int | float, *, estimated: bool = False) -> str:
    """A time in milliseconds as people read it, the one duration format of the package.

    From 10 s on in seconds, minutes or hours to one decimal (an estimated prefill of a
    long context). Below, a time someone gave (a latency, a target, a sum of latencies) is
    written to the microsecond the planner works in, as it was given; an ``estimated``
    one to a tenth of a millisecond, as the tables' columns write it (an estimate's later
    digits are noise), and below 1 ms to two significant figures.

    >>> format_milliseconds(25), format_milliseconds(2.5), format_milliseconds(1250)
    ('25 ms', '2.5 ms', '1,250 ms')
    >>> format_milliseconds(0.125), format_milliseconds(12.345)
    ('0.125 ms', '12.345 ms')
    >>> format_milliseconds(12_345), format_milliseconds(252_000), format_milliseconds(9e6)
    ('12.3 s', '4.2 min', '2.5 h')
    >>> [format_milliseconds(ms, estimated=True) for ms in (38.271, 1834.24, 30, 0.292, 0)]
    ['38.3 ms', '1,834.2 ms', '30.0 ms', '0.29 ms', '0 ms']
    """
    if not math.isfinite(value):
        return f"{value} ms"
    for unit, size, start in _LONG_DURATIONS:
        if abs(value) >= start:
            return f"{value / size:,.1f} {unit}"
    if estimated:
        return f"{value:,.{_estimate_decimals(value)}f} ms"
    exact = ms_from_microseconds(latency_microseconds(value))
    return f"{exact:,} ms" if isinstance(exact, int) else f"{exact:,.3f}".rstrip("0") + " ms"


def _estimate_decimals(value: int | float) -> int:
    """Decimals for an estimate in milliseconds: one from 1 ms on, as the tables' columns
    write it; below, two significant figures, down to the microsecond (counted after
    rounding: 0.996 ms is 1.0 ms)."""
    if value == 0:
        return 0
    for digits, below in ((3, 0.1), (2, 1)):
        if abs(round(value, digits)) < below:
            return digits
    return 1


# Long durations: (unit, its milliseconds, the duration from which it is used).
_LONG_DURATIONS = (("h", 3_600_000, 7_200_000), ("min", 60_000, 120_000),
                   ("s", 1000, 10_000))


# -- context ----------------------------------------------------------------------------

_CONTEXT_FACTORS = {"": 1, "k": 1024, "m": 1024**2}


def parse_context(value: str | int) -> int:
    """Read a context length in tokens: ``131072``, ``"131,072"``, ``"128k"``, ``"1M"``.

    ``k`` is 1024 tokens and ``M`` 1024 * 1024, as context windows are quoted.

    >>> parse_context("128k")
    131072
    """
    integer = _integral(value)
    if integer is not None:
        value = integer
        if value < 0:
            raise ContextError(f"cannot be negative (got {quoted(value)})",
                               value=value)
        return value
    value = _refuse_non_string(value, ContextError, CONTEXT_FORMS, "a context length")
    stripped, number, unit = _split(value)
    _refuse_negative(stripped, value, ContextError, "a context length",
                     CONTEXT_FORMS)
    factor = _CONTEXT_FACTORS.get(unit.lower()) if unit.isascii() else None
    if not number or factor is None:
        raise ContextError(f"cannot read {quoted(value)} as a context length; "
                           f"{CONTEXT_FORMS}", value=value)
    tokens = _number(number, value, ContextError, CONTEXT_FORMS) * factor
    if tokens != tokens.to_integral_value():
        raise ContextError(f"{quoted(value)} is not a whole number of tokens; "
                           f"{CONTEXT_FORMS}", value=value)
    return int(tokens)

# -- counts and layer ranges ------------------------------------------------------------


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one: ``"1 layer"``, ``"3 layers"``.

    >>> counted(1, "layer"), counted(2, "layer"), counted(2, "copy", "copies")
    ('1 layer', '2 layers', '2 copies')
    """
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def layer_range(start: int, end: int, dash: str = "\u2013") -> str:
    """Layers ``start`` to ``end`` (exclusive) as people read them: ``"0\u201314"``, a single
    layer as its number (``"17"``, never ``"17\u201317"``), none as ``"\u2014"``.

    >>> layer_range(0, 15), layer_range(17, 18), layer_range(3, 3), layer_range(0, 2, "-")
    ('0\u201314', '17', '\u2014', '0-1')
    """
    if end <= start:
        return "\u2014"
    return str(start) if end - start == 1 else f"{start}{dash}{end - 1}"


__all__ = [
    "CONTEXT_FORMS",
    "LATENCY_FORMS",
    "SIZE_FORMS",
    "ContextError",
    "LatencyError",
    "UnitError",
    "counted",
    "format_bytes",
    "latency_microseconds",
    "layer_range",
    "ms_from_microseconds",
    "parse_bytes",
    "parse_context",
    "parse_latency_ms",
    "quoted",
]
