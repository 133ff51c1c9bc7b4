"""Fuzz: any fleet-file text either loads or raises a named CodedError.

Documents are drawn near the format (the real keys, values of every TOML/JSON type,
sizes and latencies as text, deep or long values), written out, and sometimes cut or
spliced, so examples land on the parser, on each field's check and past them. Whatever
loads must plan or be refused by name, and save and load back equal.
"""

from __future__ import annotations

import json
from datetime import date, time
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import CodedError
from planner.fleet import fleet_to_toml, parse_fleet_json, parse_fleet_toml
from planner.fleet._fields import MODEL_KEYS, NODE_KEYS, PLANNING_KEYS, TOP_KEYS
from planner.planning import plan_topology

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_GOOD_SIZES = st.sampled_from(["80 GiB", "24 GB", "1 B", "0", "1.5 TiB", "80GiB"])
_BAD_SIZES = st.sampled_from(["80 Gb", "1,5 TiB", "-1 GiB", "80\nGiB", "1e3 GB", "", " "])
_SIZES = st.integers(0, 7).flatmap(lambda roll: _BAD_SIZES if roll == 5 else _GOOD_SIZES)
_SCALARS: st.SearchStrategy[Any] = st.one_of(
    _SIZES, st.text(max_size=8), st.integers(-(2**70), 2**70), st.integers(0, 300),
    st.sampled_from([0.5, -1.0, 1e300, True, False, date(2026, 1, 1), time(1, 2)]))
_VALUES: st.SearchStrategy[Any] = st.one_of(
    _SCALARS, st.lists(_SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(["a", "id", "vram"]), _SCALARS, max_size=2))
_PRESETS = st.sampled_from(["qwen3-coder-480b-a35b", "no-such-model"])


_GOOD: dict[str, st.SearchStrategy[Any]] = {
    "name": st.text(min_size=1, max_size=8),
    "kv_cache_type": st.sampled_from(["f16", "q8_0", "q4_0", "bf17"]),
    "minimum_nodes": st.integers(0, 6),
    "context_length_override": st.sampled_from([8192, "8k", 65536, 3]),
    "parallel_lanes_override": st.integers(0, 5),
    "target_decode_tpot_ms": st.integers(0, 100),
    "count": st.integers(1, 12),
    "vram": _SIZES,
    "max_vram": _SIZES,
    "headroom": _SIZES,
    "latency_ms": st.sampled_from([0, 5, 0.5, "5 ms", "500 us", "0.0001 ms", -1]),
}


def _value(key: str) -> st.SearchStrategy[Any]:
    """Mostly a value the key takes, sometimes anything."""
    good = _GOOD.get(key)
    if good is None:
        return _VALUES
    return st.integers(0, 15).flatmap(lambda roll: _VALUES if roll == 9 else good)


def _table(keys: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    chosen = st.lists(st.sampled_from(keys), unique=True, max_size=len(keys))
    return chosen.flatmap(lambda names: st.fixed_dictionaries(
        {name: _value(name) for name in names}))


@st.composite
def _models(draw: st.DrawFn) -> dict[str, Any]:
    optional = draw(_table(("name", "kv_cache_type")))
    kind = draw(st.sampled_from(["numbers"] * 4 + ["preset", "gguf", "any"]))
    if kind == "preset":
        return {"preset": draw(_PRESETS), **optional}
    if kind == "gguf":
        return {"gguf": draw(st.sampled_from(["absent.gguf", "", "/proc/self/mem"])),
                **optional}
    if kind == "any":
        return draw(_table(MODEL_KEYS))
    layers = draw(st.integers(0, 6).map(lambda n: n or 62))
    # Good numbers here; the one value out of place (below) makes them bad.
    model = {"native_context_length": draw(st.sampled_from([8192, "128k", 65536])),
             "layer_count": layers,
             "model_weight_bytes": draw(st.sampled_from([2**30, "1 GiB", "315.68 GB"])),
             "kv_bytes_per_token": draw(st.integers(1, 2**20))}
    if draw(st.booleans()):
        model["layer_weight_bytes"] = draw(st.lists(st.integers(0, 2**28) | _SIZES,
                                                    min_size=layers, max_size=layers + 1))
    return {**model, **{k: v for k, v in optional.items() if k == "name"}}


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = draw(_table(("name",)))
    document["model"] = draw(_models())
    document["planning"] = draw(_table(PLANNING_KEYS))
    nodes = []
    for index in range(draw(st.integers(0, 4).map(lambda n: n or 5))):
        node = {"id": draw(st.sampled_from([f"gpu{index}"] * 4 + ["gpu", "gpu-00", " "])),
                "vram": draw(_value("vram")), **draw(_table(NODE_KEYS[2:]))}
        nodes.append(node)
    document["nodes"] = nodes
    if draw(st.integers(0, 3)) == 2:  # one value out of place
        where = draw(st.sampled_from(["top", "model", "planning", "node"]))
        key = draw(st.sampled_from((*TOP_KEYS, *MODEL_KEYS, *NODE_KEYS, "unknown")))
        table = {"top": document, "model": document["model"],
                 "planning": document["planning"],
                 "node": nodes[0] if nodes else document}[where]
        if isinstance(table, dict):
            table[key] = draw(_VALUES)
    return document


_HOSTILE_VALUES = ("[" * 1000 + "]" * 1000, "{a = " * 1000 + "1" + "}" * 1000, "9" * 5000,
                   '"\\ud800"', '"a\udfffb"', "-" + "1" * 4301)


@st.composite
def _spliced(draw: st.DrawFn, text: str) -> str:
    """The text, sometimes cut short, with a piece of other text put in, or with one
    value replaced by one no parser should take."""
    choice = draw(st.sampled_from([0] * 6 + [1, 2, 3, 3]))
    if choice == 0 or not text:
        return text
    at = draw(st.integers(0, len(text)))
    if choice == 1:
        return text[:at]
    if choice == 2:
        piece = draw(st.sampled_from(["[", "]", "{", "\"", "\n", "=", "[[nodes]]\n", "\\u"])
                     | st.text(max_size=4))
        return text[:at] + piece + text[at:]
    # The value of the first "key = value" or '"key": value' at or after ``at``.
    separator = " = " if " = " in text else ": "
    start = text.find(separator, at)
    if start < 0:
        start = text.find(separator)
    if start < 0:
        return text
    start += len(separator)
    end = start
    while end < len(text) and text[end] not in "\n,}":
        end += 1
    return text[:start] + draw(st.sampled_from(_HOSTILE_VALUES)) + text[end:]


def _toml_text(document: dict[str, Any]) -> str:
    try:
        return tomli_w.dumps(document)
    except (TypeError, ValueError):  # a value TOML cannot hold (None, a mixed array)
        return repr(document)


def _json_default(value: Any) -> Any:
    if isinstance(value, date | time):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def _loads_or_names(parse: Any, text: str) -> None:
    try:
        document = parse(text, "fuzz")
    except CodedError as error:
        assert len(str(error)) < 1000, str(error)
        return
    # A document that loads saves and loads back equal ...
    assert parse_fleet_toml(fleet_to_toml(document), "fuzz") == document
    # ... and either plans or is refused by name (a missing preset, no valid topology).
    try:
        plan_topology(document.to_request())
    except CodedError as error:
        assert len(str(error)) < 1000, str(error)


@FUZZ
@given(st.data())
def test_toml_fleet_files(data: st.DataObject) -> None:
    text = data.draw(_spliced(_toml_text(data.draw(_documents()))))
    _loads_or_names(parse_fleet_toml, text)


@FUZZ
@given(st.data())
def test_json_fleet_files(data: st.DataObject) -> None:
    document = data.draw(_documents())
    request = {**{k: v for k, v in document.items() if k != "model"},
               **(document["model"] if isinstance(document["model"], dict) else {})}
    nodes = request.get("nodes")
    if isinstance(nodes, list):
        # A drawn node may be any value: only a table is given the request's key names.
        request["nodes"] = [{"node_id": n.get("id"), "detected_vram_bytes": n.get("vram"),
                             **n} if isinstance(n, dict) else n for n in nodes]
    text = json.dumps(request, default=_json_default)
    _loads_or_names(parse_fleet_json, data.draw(_spliced(text)))


@FUZZ
@given(st.text(alphabet='[]{}="\'.,#\n \\-_0123456789abcdeilmnoprstuvxyzGiBM', max_size=200))
def test_any_text(text: str) -> None:
    _loads_or_names(parse_fleet_toml, text)
    _loads_or_names(parse_fleet_json, text)


# -- look-alike node ids --------------------------------------------------------------------

_INVISIBLE_MARKS = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
                                    "\u00ad", "\u202e", "\u2066", "\u200e"])


@st.composite
def _look_alike_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """An id and another that a screen shows the same: decomposed or composed, with an
    invisible character put in, full-width, a no-break space for a space, or a control
    for another control."""
    import unicodedata

    base = draw(st.text(st.characters(codec="utf-8", categories=("Ll", "Lu", "Nd")),
                        min_size=1, max_size=6)
                | st.sampled_from(["caf\u00e9", "na\u00efve", "gpu 01", "\u00c5ngstr\u00f6m"]))
    how = draw(st.sampled_from(["nfd", "invisible", "fullwidth", "nbsp", "control"]))
    if how == "nfd":
        other = unicodedata.normalize("NFD", base)
        base = unicodedata.normalize("NFC", base)
    elif how == "invisible":
        at = draw(st.integers(0, len(base)))
        other = base[:at] + draw(_INVISIBLE_MARKS) + base[at:]
    elif how == "fullwidth":
        other = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in base)
    elif how == "nbsp":
        base = base + " x"
        other = base.replace(" ", "\u00a0")
    else:
        base, other = base + "\x07", base + draw(st.sampled_from(["\x1b", "\x9b", "?"]))
    from hypothesis import assume

    assume(other != base and other.strip() == other and base.strip() == base)
    return base, other


def _fleet_of(*ids: str) -> str:
    return ("[model]\nnative_context_length = 65536\nlayer_count = 40\n"
            'model_weight_bytes = "40 GiB"\nkv_bytes_per_token = 65536\n\n'
            + "".join(f"[[nodes]]\n{tomli_w.dumps({'id': i})}vram = \"48 GiB\"\n\n"
                      for i in ids))


@FUZZ
@given(_look_alike_pairs(), st.booleans())
def test_look_alike_node_ids_are_refused_in_either_order(pair: tuple[str, str],
                                                         swap: bool) -> None:
    first, second = reversed(pair) if swap else pair
    try:
        parse_fleet_toml(_fleet_of(first, "other", second), "fuzz")
    except CodedError as error:
        assert error.code == "DuplicateNodeId", str(error)
        assert "looks the same as" in error.message
        return
    raise AssertionError(f"{first!r} and {second!r} were both accepted")


@FUZZ
@given(st.lists(st.text(min_size=1, max_size=6), min_size=2, max_size=5))
def test_ids_a_fleet_accepts_all_look_different(ids: list[str]) -> None:
    from planner._validate import looks

    try:
        document = parse_fleet_toml(_fleet_of(*ids), "fuzz")
    except CodedError as error:
        assert len(str(error)) < 1000
        return
    accepted = [node.node_id for node in document.nodes]
    assert accepted == ids
    assert len({looks(node_id) for node_id in accepted}) == len(accepted)
    assert all(node_id == node_id.strip() for node_id in accepted)
