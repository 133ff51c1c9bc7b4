"""Values as a person types them into the workbench, read and written back.

Sizes as ``"80 GiB"`` or ``"315.68 GB"`` (a rounded text keeps the exact bytes behind it
while it is left as shown), latencies, context lengths and whole numbers; blank is "not
set" where a value is optional. What cannot be read raises
:class:`~planner.workbench.problems.WorkbenchInputError` naming the field and node.
"""

from __future__ import annotations

import re

from planner.fleet import MEASURED_LATENCY
from planner.units import (
    UnitError,
    exact_size_text,
    format_bytes,
    parse_bytes,
    parse_context,
    parse_latency_ms,
)
from planner.workbench.problems import WorkbenchInputError


def weight_size_text(value: int) -> str:
    """Model weights as the editor shows them, always in one form: two decimals of the
    largest 1000-based unit (``"315.68 GB"``, ``"712.97 GB"``, ``"1.34 TB"``).

    The figure is rounded; :class:`ModelFields` keeps the exact bytes while the text is
    left as shown."""
    return format_bytes(value, decimal=True, trim=False)


def node_size_text(value: int) -> tuple[str, int | None]:
    """A node's memory as the fleet rows show it, and the exact bytes behind the text
    when it is rounded: the shortest exact size in GiB or GB (``"24 GiB"``, ``"1.5
    TiB"``), else GiB to two decimals (a driver's ``81559 MiB`` shows as ``"79.65 GiB"``,
    and the row keeps the exact 81559 MiB while that text is left as shown)."""
    exact = exact_size_text(value)
    if value < 2**30 or exact.endswith(("GiB", "TiB", "PiB", "GB", "TB", "PB")):
        return exact, None
    return format_bytes(value), value


def parse_size(text: str, field_name: str, *, label: str, node_id: str | None = None,
               optional: bool = False, bare_bytes: bool = False) -> int | None:
    """A size typed as ``"80 GiB"``, ``"24 GB"`` or ``"1024 B"``; blank is ``None`` when
    ``optional``. A bare number is bytes only with ``bare_bytes`` (a box labelled in
    bytes); elsewhere it is refused with the units it could mean."""
    stripped = text.strip()
    if not stripped:
        if optional:
            return None
        raise WorkbenchInputError(field_name, "is required; write e.g. '80 GiB'",
                                  node_id=node_id, label=label)
    if stripped.startswith("-"):
        raise WorkbenchInputError(field_name, "cannot be negative", value=text,
                                  node_id=node_id, label=label)
    try:
        return parse_bytes(stripped, bare_bytes=bare_bytes)
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, node_id=node_id,
                                  label=label) from None


def exact_or_parsed(text: str, exact: int | None, field_name: str, *, label: str,
                     node_id: str | None = None, optional: bool = False,
                     weights: bool = False) -> int | None:
    """``exact`` while ``text`` reads as its rounding (:func:`node_size_text`, or
    :func:`weight_size_text` for ``weights``, whose boxes take bare bytes too), else the
    size typed."""
    shown = weight_size_text(exact) if weights and exact is not None else (
        node_size_text(exact)[0] if exact is not None else None)
    if exact is not None and text.strip() == shown:
        return exact
    return parse_size(text, field_name, label=label, node_id=node_id, optional=optional,
                      bare_bytes=weights)


def parse_latency(text: str, field_name: str, *, label: str,
                  node_id: str | None = None) -> int | float | None:
    """An optional latency (blank is ``None``) read as fleet files read it: ``5``,
    ``0.5``, ``"5 ms"``, ``"500 us"``."""
    if not text.strip():
        return None
    try:
        return parse_latency_ms(text.strip())
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, node_id=node_id,
                                  label=label) from None


def parse_default_latency(text: str) -> int | float | str | None:
    """A fleet's latency for nodes without their own (blank is ``None``): a latency as
    :func:`parse_latency` reads it, or ``"measured"``."""
    if text.strip().lower() == MEASURED_LATENCY:
        return MEASURED_LATENCY
    try:
        return parse_latency(text, "default_latency_ms", label="default latency")
    except WorkbenchInputError as error:
        raise WorkbenchInputError("default_latency_ms", f"{error.message.split(': ', 1)[1]}"
                                  f"; or \"{MEASURED_LATENCY}\" for the slowest latency "
                                  "measured", label="default latency") from None


def parse_context_text(text: str, field_name: str, *, label: str) -> int | None:
    """An optional context length (blank is ``None``): ``131072``, ``"131,072"`` or
    ``"128k"`` (k = 1024 tokens)."""
    if not text.strip():
        return None
    try:
        return parse_context(text.strip())
    except UnitError as error:
        raise WorkbenchInputError(field_name, error.message, label=label) from None


_WHOLE = re.compile(r"^\s*(-?[0-9][0-9_,]*)\s*([a-zA-Z]*)\s*$")


def parse_whole(text: str, field_name: str, *, label: str, unit: str = "",
                node_id: str | None = None, minimum: int = 0,
                maximum: int | None = None) -> int | None:
    """An optional whole number (blank is ``None``), with an optional unit such as ``ms``,
    from ``minimum`` to ``maximum`` (a number out of range is refused, never clamped)."""
    stripped = text.strip()
    if not stripped:
        return None
    match = _WHOLE.match(stripped)
    if match is None or (match.group(2) and match.group(2).lower() != unit):
        suffix = f", optionally followed by {unit!r}" if unit else ""
        raise WorkbenchInputError(field_name, f"must be a whole number{suffix}",
                                  value=text, node_id=node_id, label=label)
    digits = match.group(1).replace("_", "").replace(",", "")
    most = 18 if maximum is None else len(str(abs(maximum)))
    if len(digits.lstrip("-0")) > most:
        problem = ("has too many digits" if maximum is None or digits.startswith("-")
                   else f"must be at most {maximum:,}")
        raise WorkbenchInputError(field_name, problem, value=text, node_id=node_id,
                                  label=label)
    number = int(digits)
    if number < minimum:
        problem = "cannot be negative" if minimum == 0 else f"must be at least {minimum:,}"
        raise WorkbenchInputError(field_name, problem, value=text, node_id=node_id,
                                  label=label)
    if maximum is not None and number > maximum:
        raise WorkbenchInputError(field_name, f"must be at most {maximum:,}", value=text,
                                  node_id=node_id, label=label)
    return number

