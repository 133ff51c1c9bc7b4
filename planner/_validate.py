"""Checks of plain values shared by every boundary of the package.

Each check takes the value and a ``fail`` function that builds the caller's own error
from a problem text and the offending value (``InvalidInput`` for a planning request,
``FleetFileError`` for a fleet file, ``InvalidFenceInput`` for the fence, ...), so every
boundary refuses the same things with the same words and raises its own coded error.

Integer fields accept any integral type (Python ``int``, numpy integers, anything with
``__index__``) and return a Python ``int``; ``bool`` and floats are refused, even
``40.0``. This module imports nothing from the package, so anything may use it.
"""

from __future__ import annotations

import operator
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any, SupportsIndex, TypeGuard

Fail = Callable[[str, Any], Exception]
"""Builds the caller's error from a problem text and the value that was given."""

MAX_SHOWN = 80
"""At most this many characters of a bad value are quoted in a message."""

NOT_AN_INTEGER = "must be an integer (a whole number)"
FLOAT_INTEGER = "a whole number written as a float; give an integer"
NOT_A_NUMBER = "must be a number"


def shown(value: Any) -> str:
    """``repr(value)`` cut to :data:`MAX_SHOWN` characters, and safe for any value.

    An integer too long to print (Python refuses more than 4,300 digits) is described
    by its number of digits; a value whose ``repr`` fails is named by its type.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        digits = _digit_count(value)
        if digits > 40:
            sign = "a negative" if value < 0 else "an"
            return f"{sign} integer of {digits:,} digits"
    try:
        text = repr(value)
    except Exception:  # any repr may fail; the message must not
        return f"a {type(value).__name__}"
    if len(text) > MAX_SHOWN:
        return text[: MAX_SHOWN - 4] + " ..."
    return text


def clipped(message: str, limit: int = 2 * MAX_SHOWN) -> str:
    """``message`` cut to ``limit`` characters, for text that is not the package's own."""
    return message if len(message) <= limit else message[: limit - 4] + " ..."


def _digit_count(value: int) -> int:
    magnitude = abs(value)
    if magnitude < 10**40:
        return len(str(magnitude))
    # From the bit length, the digit count is e + 1 or e + 2; one comparison decides,
    # without printing the number.
    e = int((magnitude.bit_length() - 1) * 0.30102999566398120)
    return e + 2 if magnitude >= 10 ** (e + 1) else e + 1


def is_integral(value: Any) -> TypeGuard[SupportsIndex]:
    """True for ``int``, numpy integers and other ``__index__`` types; not for bools."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        return False
    return hasattr(type(value), "__index__")


def _is_numpy_bool(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) == "b"


def integer(
    value: Any,
    fail: Fail,
    *,
    minimum: int | None = 0,
    maximum: int | None = None,
) -> int:
    """``value`` as a Python ``int`` within ``[minimum, maximum]`` (a bound of ``None`` is
    open), or the error ``fail`` builds, with the problem in the words of docs/rules.md."""
    if value is None:
        raise fail("is required", None)
    if not is_integral(value):
        is_float = isinstance(value, float) or type(value).__name__.startswith("float")
        whole = is_float and _float_is_integer(value)
        raise fail(FLOAT_INTEGER if whole else NOT_AN_INTEGER, value)
    try:
        number = operator.index(value)
    except Exception:  # a broken __index__ is a bad value like any other
        raise fail(NOT_AN_INTEGER, value) from None
    if minimum is not None and number < minimum:
        raise fail(f"must be at least {minimum:,}", number)
    if maximum is not None and number > maximum:
        raise fail(f"must be at most {maximum:,}", number)
    return number


def optional_integer(
    value: Any,
    fail: Fail,
    *,
    minimum: int | None = 0,
    maximum: int | None = None,
) -> int | None:
    """Like :func:`integer`, with ``None`` allowed (and returned)."""
    if value is None:
        return None
    return integer(value, fail, minimum=minimum, maximum=maximum)


def number(
    value: Any,
    fail: Fail,
    *,
    minimum: int | float | None = 0,
    maximum: int | float | None = None,
    above: int | float | None = None,
    below: int | float | None = None,
) -> int | float:
    """A real number: an integral value (as :func:`integer` reads it) as a Python
    ``int``, a float (numpy floats too) as a Python ``float``; within
    ``[minimum, maximum]`` and, with ``above`` and ``below``, strictly between them.
    ``bool``, text, NaN and infinities are refused."""
    if value is None:
        raise fail("is required", None)
    if is_integral(value):
        result: int | float = integer(value, fail, minimum=None)
    elif _is_real(value):
        result = float(value)
        if result != result or result in (float("inf"), float("-inf")):
            raise fail("must be a finite number", value)
    else:
        raise fail(NOT_A_NUMBER, value)
    if minimum is not None and result < minimum:
        raise fail(f"must be at least {minimum:,}", value)
    if above is not None and result <= above:
        raise fail(f"must be more than {above:,}", value)
    if maximum is not None and result > maximum:
        raise fail(f"must be at most {maximum:,}", value)
    if below is not None and result >= below:
        raise fail(f"must be less than {below:,}", value)
    return result


def _is_real(value: Any) -> bool:
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "kind", None) == "f" and not hasattr(value, "__len__")


def flag(value: Any, fail: Fail) -> bool:
    """``value`` as a Python ``bool``: ``True``/``False`` or a numpy bool; not 0 or 1."""
    if isinstance(value, bool):
        return value
    if _is_numpy_bool(value) and not hasattr(value, "__len__"):
        return bool(value)
    raise fail("must be true or false", value)


def _float_is_integer(value: Any) -> bool:
    try:
        return bool(float(value).is_integer())
    except (TypeError, ValueError, OverflowError):
        return False


def text(value: Any, fail: Fail) -> str:
    """``value`` when it is a string with something besides spaces in it, and Unicode
    text: half of a UTF-16 surrogate pair is not, and no file, table or terminal the
    value would reach can encode it."""
    if not isinstance(value, str) or not value.strip():
        raise fail("must be a non-empty string", value)
    lone = _SURROGATE.search(value)
    if lone is not None:
        raise fail(f"holds a lone surrogate (U+{ord(lone.group()):04X}), which is not "
                   "Unicode text", value)
    return value


def instance(value: Any, kind: type | tuple[type, ...], fail: Fail, what: str) -> Any:
    """``value`` when it is a ``kind`` (a class or a tuple of classes); else the error
    ``fail`` builds, saying the value must be ``what``."""
    if not isinstance(value, kind):
        raise fail(f"must be {what}", value)
    return value


def known_keys(data: Mapping[str, Any], allowed: Iterable[str],
               fail: Callable[[str, str], Exception]) -> None:
    """Refuse the first key of ``data`` not in ``allowed``: ``fail(key, problem)``."""
    names = tuple(allowed)
    for key in data:
        if key not in names:
            raise fail(str(key), f"unknown field; expected one of {', '.join(names)}")


# C0, DEL and C1 controls start terminal escape sequences (C1 U+009B is a one-character
# CSI); the bidirectional overrides and isolates reorder what follows them on screen, so
# a node id "gpu\u202egnp.exe" would read "gpuexe.png"; the invisible format characters
# (zero-width space and joiners, word joiner, soft hyphen, byte order mark, tags) show
# nothing, so "gpu\u200b-01" would read "gpu-01".
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_INVISIBLE = (0x00AD, 0x180E, 0x200B, 0x200C, 0x200D, *range(0x2060, 0x2065),
              *range(0x206A, 0x2070), 0xFEFF, *range(0xFFF9, 0xFFFC),
              *range(0x1BCA0, 0x1BCA4), *range(0x1D173, 0x1D17B), 0xE0001,
              *range(0xE0020, 0xE0080))
_CONTROL = {code: "?" for code in (*range(32), *range(127, 160), *_BIDI, *_INVISIBLE)}
_SURROGATE = re.compile("[\ud800-\udfff]")


def inert_text(text: str) -> str:
    """``text`` with every character that acts rather than shows written ``?``: C0 and
    C1 controls (line breaks, escape sequences), bidirectional overrides and isolates,
    invisible format characters (a zero-width space) and lone surrogates (which no
    encoding can write). Terminals, HTML and Markdown reports and charts all show a
    user's string through this."""
    return _SURROGATE.sub("?", text.translate(_CONTROL))


_UNSEEN = dict.fromkeys((*_BIDI, *_INVISIBLE))


def looks(text: str) -> str:
    """What ``text`` looks like on a screen, to tell two names apart: without what shows
    nothing (bidirectional controls, zero-width and other invisible format characters),
    in NFKC form (accents composed, full-width and compatibility letters as the plain
    ones, a no-break space as a space), and with what acts written ``?`` as
    :func:`inert_text` shows it. Two names with the same look are look-alikes."""
    if text.isascii() and text.isprintable():  # the common id, which looks as it is
        return text
    return inert_text(unicodedata.normalize("NFKC", text.translate(_UNSEEN)))


def spelled(text: str) -> str:
    """``text`` quoted with every character outside printable ASCII as its escape
    (``'cafe\\u0301'``, ``'gpu\\x07'``), cut to :data:`MAX_SHOWN` characters: how a
    message tells look-alikes apart."""
    escaped = str(text.encode("unicode_escape"), "ascii")
    return "'" + (escaped if len(escaped) <= MAX_SHOWN
                  else escaped[:MAX_SHOWN - 4] + " ...") + "'"


def look_alike(node_id: str, other: str, other_where: str) -> str:
    """The refusal of a node id that is not ``other`` (the id of ``other_where``) but
    looks the same (:func:`looks`)."""
    return (f"node id {spelled(node_id)} looks the same as {other_where}'s "
            f"{spelled(other)} but is not the same text; give the nodes ids that look "
            "different")


def identifier(value: Any, fail: Fail) -> str:
    """An id (a node's): non-blank text whose first and last characters are not blank,
    since two ids that differ only there cannot be told apart."""
    checked = text(value, fail)
    if checked != checked.strip():
        raise fail("starts or ends with a blank (a space, tab, line break or other "
                   "white space); ids are compared exactly, so remove it", value)
    return checked


def _json_escape(code: int) -> str:
    """A code point as a JSON ``\\u`` escape (a surrogate pair above U+FFFF)."""
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


# What json.dumps leaves raw with ensure_ascii=False: it escapes C0 controls inside strings
# itself, and JSON text has none outside them but the line breaks of its indentation.
_JSON_ESCAPES = {code: _json_escape(code)
                 for code in (*range(127, 160), *_BIDI, *_INVISIBLE)}


def inert_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with every character
    :func:`inert_text` would replace written as a ``\\uXXXX`` escape instead: read back,
    it is the same data, and a terminal shows it without acting on any of it."""
    return _SURROGATE.sub(lambda found: _json_escape(ord(found.group())),
                          text.translate(_JSON_ESCAPES))


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` for a CSV cell: inert (:func:`inert_text`), and never read as a formula.

    Spreadsheets run a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or
    carriage return before one) as a formula, e.g. ``=HYPERLINK(...)``; a leading ``'``
    makes it text, as the OWASP guidance on CSV injection recommends.
    """
    if text.startswith(_FORMULA_START):
        text = "'" + text
    return inert_text(text)
