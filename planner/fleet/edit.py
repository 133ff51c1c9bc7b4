"""Saving over a hand-written TOML fleet file without losing what the person wrote.

:func:`edited_toml` applies the values of a freshly written fleet file to the old text
with ``tomlkit``, which keeps comments, blank lines, key order and the spelling of values
that did not change (``"80GiB"`` stays ``"80GiB"``). The result is used only when it
reads back as exactly the new document; otherwise the caller writes the new text, and
:func:`toml_comments` tells it which comments that would drop.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import replace
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Table

from planner.errors import CodedError
from planner.fleet._toml import parse_fleet_toml
from planner.fleet.document import expanded_node_ids
from planner.units import parse_bytes, parse_context, parse_latency_ms

_READERS: tuple[Callable[[Any], Any], ...] = (
    lambda value: parse_bytes(value, bare_bytes=True), parse_latency_ms, parse_context)


def _same(old: Any, new: Any) -> bool:
    """Whether the old spelling of a value reads as the new value."""
    old = old.unwrap() if hasattr(old, "unwrap") else old
    if old == new and type(old) is type(new):
        return True
    for read in _READERS:
        try:
            if read(old) == read(new):
                return True
        except (CodedError, TypeError, ValueError):
            continue
    return False


def _update(old: MutableMapping[str, Any], new: dict[str, Any]) -> None:
    """Make ``old`` hold ``new``'s keys and values, keeping unchanged items as written
    and the comment at the end of a changed value's line."""
    for key in [key for key in old if key not in new]:
        del old[key]
    for key, value in new.items():
        if key not in old:
            old[key] = value
        elif not _same(old[key], value):
            old[key] = _with_trivia_of(old[key], value)


def _with_trivia_of(old: Any, value: Any) -> Any:
    """``value`` as a TOML item that keeps ``old``'s comment (``count = 5  # the pool``)."""
    trivia = getattr(old, "trivia", None)
    if trivia is None or not trivia.comment:
        return value
    item = tomlkit.item(value)
    item.trivia.comment, item.trivia.comment_ws = trivia.comment, trivia.comment_ws
    return item


def _entry_key(entry: Any) -> tuple[Any, Any]:
    return (entry.get("id"), entry.get("count"))


def _nodes(old_entries: list[Table], new_entries: list[dict[str, Any]]) -> list[Table]:
    """The new node entries, each reusing an old entry (and its comments) where one names
    the same nodes: the same ``id`` and ``count``, or, for a ``count`` entry, one old
    entry per expanded id."""
    unused = list(old_entries)

    def take(key: tuple[Any, Any]) -> Table | None:
        for entry in unused:
            if _entry_key(entry) == key:
                unused.remove(entry)
                return entry
        return None

    tables: list[Table] = []
    for new in new_entries:
        entry = take(_entry_key(new))
        if entry is None and isinstance(new.get("count"), int):
            # The same pool of nodes, grown or shrunk: its entry keeps its comments.
            entry = next((old for old in unused if old.get("id") == new["id"]
                          and isinstance(old.get("count"), int)), None)
            if entry is not None:
                unused.remove(entry)
        if entry is not None:
            _update(entry, new)
            tables.append(entry)
            continue
        count = new.get("count")
        singles = ([(node_id, [e for e in unused if _entry_key(e) == (node_id, None)])
                    for node_id in expanded_node_ids(new["id"], count)]
                   if isinstance(count, int) else [])
        if singles and all(found for _, found in singles):
            for node_id, found in singles:
                unused.remove(found[0])
                _update(found[0], {**{k: v for k, v in new.items() if k != "count"},
                                   "id": node_id})
                tables.append(found[0])
            continue
        table = tomlkit.table()
        table.update(new)
        tables.append(table)
    return tables


def edited_toml(old_text: str, new_text: str) -> str | None:
    """``old_text`` changed to hold what ``new_text`` holds, or ``None`` when that cannot
    be done faithfully (the old text does not parse, or the edit would read differently).

    A table the old text does not have (``[planning]`` with its defaults) is added only
    when leaving it out would read differently.
    """
    try:
        wanted = tomlkit.parse(new_text).unwrap()
        tomlkit.parse(old_text)
    except TOMLKitError:  # not TOML: nothing to keep, the file is rewritten whole
        return None
    expected = replace(parse_fleet_toml(new_text), source=None)
    for add_tables in (False, True):
        text = _edited(tomlkit.parse(old_text), wanted, add_tables=add_tables)
        try:
            if text is not None and replace(parse_fleet_toml(text), source=None) == expected:
                return text
        except CodedError:
            continue
    return None


def _edited(document: Any, wanted: dict[str, Any], *, add_tables: bool) -> str | None:
    old_nodes = document.get("nodes")
    if old_nodes is not None and not isinstance(old_nodes, AoT):
        return None
    for key in [key for key in document if key not in wanted]:
        del document[key]
    for key, value in wanted.items():
        if key == "nodes":
            continue
        if isinstance(value, dict) and isinstance(document.get(key), Table):
            _update(document[key], value)
        elif isinstance(value, dict) and key not in document and not add_tables:
            continue
        elif key not in document:
            document[key] = value
        elif not _same(document[key], value):
            document[key] = _with_trivia_of(document[key], value)
    if "nodes" in wanted:
        old_entries = list(old_nodes or ())
        nodes = _nodes(old_entries, wanted["nodes"])
        # Entries edited in place keep their spacing; only a changed list is replaced
        # (building an AoT re-spaces the tables in it).
        if [id(table) for table in nodes] != [id(table) for table in old_entries]:
            document["nodes"] = AoT(nodes)
    return tomlkit.dumps(document)


def toml_comments(text: str) -> list[str]:
    """The comments of a TOML text, each from its ``#`` to the end of the line, in order.

    A ``#`` inside a string (basic, literal, or either multi-line form) is no comment.
    One pass over the text: no pattern can make it slow."""
    comments: list[str] = []
    index, size = 0, len(text)
    while index < size:
        char = text[index]
        if char == "#":
            end = text.find("\n", index)
            end = size if end < 0 else end
            comments.append(text[index:end].rstrip())
            index = end
        elif char in "\"'":
            delimiter = char * 3 if text.startswith(char * 3, index) else char
            index = _string_end(text, index + len(delimiter), delimiter)
        else:
            index += 1
    return comments


def _string_end(text: str, index: int, delimiter: str) -> int:
    """Where the string whose body starts at ``index`` ends (past its closing quotes)."""
    quote, escapes, size = delimiter[0], delimiter[0] == '"', len(text)
    while index < size:
        char = text[index]
        if escapes and char == "\\":
            index += 2
        elif char == "\n" and len(delimiter) == 1:
            return index  # an unclosed one-line string ends with its line
        elif char == quote and text.startswith(delimiter, index):
            # Up to two quotes may stand just inside a multi-line string's closing ones.
            end = index + 1
            while len(delimiter) == 3 and end < size and text[end] == quote:
                end += 1
            return end
        else:
            index += 1
    return size
