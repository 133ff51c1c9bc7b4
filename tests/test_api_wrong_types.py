"""Every public function refuses a wrong-typed or out-of-range argument with a coded error.

Each call below passes one argument of a public function something it cannot mean (text
for a number or an object, a number for a mapping, a list, None where a value is
required, a mapping naming a node the fleet does not have) and expects a
:class:`~planner.errors.CodedError` naming that argument: never a ``TypeError``,
``AttributeError``, ``KeyError`` or ``ValueError`` from deep inside, and never a silent
acceptance. The constructors' fields are covered by ``test_constructors.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.availability import (
    NodeReliability,
    SpareKind,
    down_probabilities,
    fleet_availability,
    per_node_reliability,
    spares_for,
)
from planner.errors import CodedError
from planner.fleet import example_fleet, load_fleet
from planner.planning import NodeBudget, PlanningInput, node_budgets
from planner.simulation import simulate


@cache
def _request() -> PlanningInput:
    return load_fleet(example_fleet("llama70b-home-lab")).to_request()


def _node_ids() -> list[str]:
    return [node.node_id for node in _request().nodes]


# Values that are no mapping, no NodeReliability and no Targets / SpeedEstimator.
NOT_AN_OBJECT = ["10", -5, 2.5, True, [], [0.1], object(), float("nan"), b"x"]


def _availability(**kwargs: Any) -> Any:
    return fleet_availability(_request(), **{"exact_states": 64, **kwargs})


def _simulate(**kwargs: Any) -> Any:
    return simulate(_request(), **{"horizon_hours": 100, **kwargs})


def _down_probabilities(**kwargs: Any) -> Any:
    return down_probabilities(_request().nodes, **kwargs)


def _per_node_reliability(**kwargs: Any) -> Any:
    return per_node_reliability(_request().nodes, **kwargs)


def _spares_for(**kwargs: Any) -> Any:
    spare = SpareKind("spare", NodeBudget("spare", 24 * 2**30, None, 0, 0))
    return spares_for(_request(), 0.9, [spare], **kwargs)


CALLS: list[tuple[str, Callable[..., Any], str, Any]] = [
    *(("spares_for", _spares_for, name, value)
      for name in ("max_spares", "max_candidates")
      for value in ("10", None, -5, 0, 2.5, True, {}, [], object())),
    *(("fleet_availability", _availability, name, value)
      for name in ("reliability", "targets", "estimator") for value in NOT_AN_OBJECT),
    *(("simulate", _simulate, name, value)
      for name in ("reliability", "targets", "estimator") for value in NOT_AN_OBJECT),
    *(("down_probabilities", _down_probabilities, "reliability", value)
      for value in NOT_AN_OBJECT),
    *(("per_node_reliability", _per_node_reliability, "reliability", value)
      for value in NOT_AN_OBJECT),
    *(("fleet_availability", _availability, name, value)
      for name in ("max_states", "exact_states")
      for value in ("10", None, -5, 2.5, 10.0, True)),
    ("fleet_availability", _availability, "tolerance", "0.1"),
    ("fleet_availability", _availability, "tolerance", 1.5),
    ("fleet_availability", _availability, "min_lanes", "1"),
    ("fleet_availability", _availability, "min_context", "4096"),
    ("simulate", _simulate, "fence", "no"),
    ("simulate", _simulate, "fence", 0),
    ("simulate", _simulate, "seed", -1),
    ("simulate", _simulate, "seed", "1"),
    ("simulate", _simulate, "horizon_hours", "100"),
    ("simulate", _simulate, "horizon_hours", -1.0),
]


# The shorthand arguments are named as the target they stand for.
SAID_AS = {"min_lanes": "minimum_lanes", "min_context": "minimum_context"}


def _refused_by_name(call: Callable[..., Any], name: str, value: Any) -> CodedError:
    with pytest.raises(CodedError) as caught:
        call(**{name: value})
    error = caught.value
    said = SAID_AS.get(name, name)
    assert said in error.message or error.details.get("field") == said, error.message
    return error


@pytest.mark.parametrize(("function", "call", "name", "value"), CALLS,
                         ids=[f"{f}-{n}={v!r}" for f, _, n, v in CALLS])
def test_wrong_argument_is_a_coded_error_naming_it(function: str, call: Callable[..., Any],
                                                   name: str, value: Any) -> None:
    _refused_by_name(call, name, value)


@pytest.mark.parametrize("value", NOT_AN_OBJECT[:4])
def test_reliability_of_one_node_that_is_not_node_reliability_names_the_node(value: Any
                                                                             ) -> None:
    first = _node_ids()[0]
    for call in (_availability, _simulate, _down_probabilities):
        error = _refused_by_name(call, "reliability", {first: value})
        assert error.code == "InvalidReliability"
        assert error.details.get("node_id") == first


def test_reliability_of_a_node_not_in_the_fleet_is_refused_everywhere() -> None:
    for call in (_availability, _simulate, _down_probabilities):
        error = _refused_by_name(call, "reliability", {"no-such-node": NodeReliability()})
        assert error.details.get("node_id") == "no-such-node"


def test_down_missing_a_node_or_naming_another_is_a_coded_error() -> None:
    ids = _node_ids()
    missing = _refused_by_name(_availability, "down", {ids[0]: 0.1})
    assert missing.details.get("node_id") == min(ids[1:])
    extra = _refused_by_name(_availability, "down", {**dict.fromkeys(ids, 0.1), "zz": 0.1})
    assert extra.details.get("node_id") == "zz"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=8), st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4),
    st.builds(NodeReliability)), max_size=4))
def test_any_drawn_down_or_reliability_mapping_is_a_result_or_a_coded_error(
        drawn: dict[str, Any]) -> None:
    for call, name in ((_down_probabilities, "reliability"), (_availability, "down")):
        try:
            call(**{name: drawn})
        except CodedError as error:
            assert name in error.message or error.details.get("field") == name


# Any value a TOML or JSON document can hold, and a few no parser gives.
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
              st.text(max_size=12), st.sampled_from(["80 GiB", "3.35 TB/s", "-1 GB",
                                                     "1e-300", "H100", "cuda", ""])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def _catalog_keys() -> st.SearchStrategy[str]:
    from planner.models.gpus import _FILE_KEYS

    return st.sampled_from(_FILE_KEYS) | st.text(max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    _VALUES,
    st.fixed_dictionaries({"gpu": st.lists(st.dictionaries(
        _catalog_keys(), _VALUES, max_size=8), max_size=4)}, optional={
        "llamacpp": _VALUES, "other": _VALUES})))
def test_any_drawn_gpu_catalog_loads_or_is_a_coded_error(raw: Any) -> None:
    from planner.models.gpus import GpuModel, parse_gpu_catalog

    try:
        catalog = parse_gpu_catalog(raw, "drawn")
    except CodedError as error:
        assert "drawn" in error.message
        return
    assert catalog and all(isinstance(gpu, GpuModel) for gpu in catalog)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_drawn_gpu_catalog_file_loads_or_is_a_coded_error(tmp_path_factory: Any,
                                                              content: bytes) -> None:
    from planner.models.gpus import load_gpu_catalog

    path = tmp_path_factory.mktemp("catalog") / "gpus.toml"
    path.write_bytes(b"[[gpu]]\nname = 'X'\nmemory = '8 GiB'\n" + content)
    with contextlib.suppress(CodedError):  # anything else fails the test
        load_gpu_catalog(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["minimum_context", "minimum_lanes",
                                        "target_decode_tpot_ms",
                                        "target_ttft_ms"]) | st.text(max_size=6),
                       _VALUES, max_size=4))
def test_any_drawn_targets_load_and_judge_or_are_a_coded_error(drawn: dict[str, Any]
                                                               ) -> None:
    from planner.targets import Targets

    with contextlib.suppress(CodedError):  # anything else fails the test
        targets = Targets.from_dict(drawn)
        fleet_availability(_request(), targets=targets, exact_states=64, max_states=8)


@pytest.mark.parametrize("request_value", [None, "fleet.toml", 5, [], object()])
def test_node_budgets_of_no_request_is_a_coded_error(request_value: Any) -> None:
    with pytest.raises(CodedError):
        node_budgets(request_value)


def test_node_budgets_takes_a_request_as_a_mapping() -> None:
    request = _request()
    assert node_budgets(request.to_dict()).equals(node_budgets(request))
