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


class _Opaque:
    """Any object of no type the API knows, with a repr that names no address, so that
    the tests' ids are the same in every process (pytest-xdist collects in each)."""

    def __repr__(self) -> str:
        return "<an object>"


AN_OBJECT = _Opaque()
# Values that are no mapping, no NodeReliability and no Targets / SpeedEstimator.
NOT_AN_OBJECT = ["10", -5, 2.5, True, [], [0.1], AN_OBJECT, float("nan"), b"x"]


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
      for value in ("10", None, -5, 0, 2.5, True, {}, [], AN_OBJECT)),
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


@pytest.mark.parametrize("request_value", [None, "fleet.toml", 5, [], AN_OBJECT])
def test_node_budgets_of_no_request_is_a_coded_error(request_value: Any) -> None:
    with pytest.raises(CodedError):
        node_budgets(request_value)


def test_node_budgets_takes_a_request_as_a_mapping() -> None:
    request = _request()
    assert node_budgets(request.to_dict()).equals(node_budgets(request))


# -- every public function of launch, memory, sweep and size_fleet ----------------------
#
# Each argument of each call below is given every value of WRONG in turn; each must be a
# coded error naming the argument (or, for a file path, showing the value), unless the
# value is listed in ACCEPTED for that argument (a value it does take: None for an
# optional argument, an empty list where nothing is a valid answer).

WRONG = ["10", "off", None, -5, 0, 2.5, True, [], {}, AN_OBJECT, float("nan"), 2**70, b"x",
         ""]


@cache
def _llama() -> dict[str, Any]:
    import tempfile
    from pathlib import Path

    import gguf_files

    from planner.llamacpp import LlamaCppSettings, model_from_gguf
    from planner.planning import plan_topology

    gguf = Path(tempfile.mkdtemp()) / "model.gguf"
    gguf.write_bytes(gguf_files.gemma3())
    document = load_fleet(example_fleet("llama70b-home-lab"))
    return {"gguf": gguf, "model": model_from_gguf(gguf), "document": document,
            "plan": plan_topology(document.to_request()),
            "settings": LlamaCppSettings(context_length=4096, parallel=2, kv_unified=True)}


FIVE_FLEET = "qwen480b-5x80"


def _public_calls() -> dict[str, tuple[Callable[..., Any], Callable[[], dict[str, Any]]]]:
    import pandas as pd

    import planner.llamacpp as memory
    import planner.llamacpp.check as check
    import planner.llamacpp.launch as launch
    import planner.sweep as sweep_module
    from planner.models import load_gpu_catalog, load_preset
    from planner.sizing import size_fleet

    def five() -> str:
        return str(example_fleet(FIVE_FLEET))

    def llama(**names: str) -> Callable[[], dict[str, Any]]:
        return lambda: {argument: _llama()[key] for argument, key in names.items()}

    plan_columns = {**sweep_module.RESULT_COLUMNS["plan"], **sweep_module.ERROR_COLUMNS}
    return {
        "shell_quote": (launch.shell_quote, lambda: {"argument": "x"}),
        "shell_join": (launch.shell_join, lambda: {"argv": ["a", "b"]}),
        "tensor_split": (launch.tensor_split, lambda: {"ranges": [(0, 2), (2, 4)]}),
        "layer_devices": (launch.layer_devices,
                          lambda: {"ranges": [(0, 2), (2, 4)], "layer_count": 4}),
        "split_address": (launch.split_address, lambda: {"address": "h:1"}),
        "build_launch": (launch.build_launch, lambda: {
            "stages": _llama()["plan"].stages, "model_path": "m.gguf",
            "settings": _llama()["settings"],
            "layer_count": _llama()["plan"].stages[-1].layer_end, "addresses": {},
            "rpc_server": "r", "llama_server": "l", "extra_server_args": ()}),
        "launch_for_plan": (launch.launch_for_plan, lambda: {
            **llama(document="document", plan="plan")(), "model_path": "m.gguf",
            "flash_attn": True, "ubatch": 512}),
        "within_target": (check.within_target,
                          lambda: {"component": "kv_bytes", "estimated": 1, "measured": 1}),
        "require_flash_attention": (memory.require_flash_attention,
                                    lambda: {"cache_type_v": "q8_0", "flash_attn": True}),
        "model_from_gguf": (memory.model_from_gguf, llama(path="gguf")),
        "LlamaCppSettings": (memory.LlamaCppSettings, lambda: {
            "context_length": 4096, "cache_type_k": "f16", "cache_type_v": "f16",
            "parallel": 1, "kv_unified": False, "ubatch": 512, "batch": 2048,
            "flash_attn": True, "overhead_bytes": 0}),
        "even_ranges": (memory.even_ranges, lambda: {"layer_count": 4, "devices": 2}),
        "ranges_from_counts": (memory.ranges_from_counts,
                               lambda: {"layer_count": 4, "counts": [2, 2]}),
        "layer_kv_bytes": (memory.layer_kv_bytes,
                           lambda: {**llama(model="model", settings="settings")(), "index": 0}),
        "runs_flash_attention": (memory.runs_flash_attention,
                                 llama(model="model", settings="settings")),
        "layer_state_bytes": (memory.layer_state_bytes, lambda: {
            **llama(model="model", settings="settings")(), "index": 0}),
        "device_compute_bytes": (memory.device_compute_bytes, lambda: {
            **llama(model="model", settings="settings")(), "ranges": [(0, 3), (3, 6)]}),
        "stage_compute_bytes": (memory.stage_compute_bytes,
                                llama(model="model", settings="settings")),
        "estimate": (memory.estimate, lambda: {
            **llama(model="model", settings="settings")(), "ranges": None, "devices": 2}),
        "LlamaCppCosts": (memory.LlamaCppCosts, lambda: {
            **llama(model="model")(), "cache_type_k": "f16", "cache_type_v": "f16",
            "flash_attn": True, "ubatch": 512, "lanes": 4, "overhead_bytes": ()}),
        "node_overheads": (memory.node_overheads, lambda: {
            "nodes": _llama()["document"].nodes, "node_kinds": None, "catalog": None,
            "backend_overheads": None}),
        "costs_from_gguf": (memory.costs_from_gguf, lambda: {
            **llama(path="gguf")(), "kv_cache_type": "f16", "nodes": (),
            "node_kinds": None, "lanes": 4, "flash_attn": True}),
        "SweepGrid": (sweep_module.SweepGrid,
                      lambda: {"axes": {"min_lanes": [1]}, "fixed": {"fleet": five()}}),
        "check_grid": (sweep_module.check_grid,
                       lambda: {"grid": pd.DataFrame({"min_lanes": [1]})}),
        "evaluate_scenario": (sweep_module.evaluate_scenario, lambda: {
            "evaluation": "plan", "row": {"fleet": five()},
            "documents": {five(): load_fleet(five())}}),
        "scenario_key": (sweep_module.scenario_key, lambda: {
            "evaluation": "plan", "row": {"min_lanes": 1}, "inputs": None}),
        "record_problem": (sweep_module.record_problem, lambda: {"evaluation": "plan"}),
        "results_frame": (sweep_module.results_frame, lambda: {
            "grid": pd.DataFrame({"min_lanes": [1]}), "evaluation": "plan",
            "columns": {name: [None] for name in plan_columns}}),
        "sweep": (sweep_module.sweep, lambda: {
            "grid": sweep_module.SweepGrid({"min_lanes": [1]}, {"fleet": five()}),
            "evaluate": "plan", "workers": 1, "scheduler": None, "executor": "inline",
            "output": None, "batch_size": 1, "progress": None, "warn": None}),
        "size_fleet": (size_fleet, lambda: {
            "model": load_preset("llama-3.1-70b"), "catalog": load_gpu_catalog(),
            "targets": None, "top": 1, "kinds": None, "traffic": None,
            "context_length_override": None, "parallel_lanes_override": None,
            "pareto": False, "bandwidth_efficiency": None,
            "link_bandwidth_bytes_per_s": 1_250_000_000, "price_kind": "rented"}),
    }


# Values an argument does take (its default, an empty list of extras, any text for a
# shell word or a program name, any size for a comparison).
_OPTIONAL = (None,)
ACCEPTED: dict[tuple[str, str], tuple[Any, ...]] = {
    ("shell_quote", "argument"): ("10", "off", ""),
    ("shell_join", "argv"): ([],),
    ("build_launch", "model_path"): ("10", "off"),
    ("build_launch", "addresses"): (None, {}),
    ("build_launch", "rpc_server"): ("10", "off"),
    ("build_launch", "llama_server"): ("10", "off"),
    ("build_launch", "extra_server_args"): ([],),
    ("launch_for_plan", "model_path"): ("10", "off"),
    ("within_target", "estimated"): (0, 2**70),
    ("within_target", "measured"): (0, 2**70),
    ("require_flash_attention", "flash_attn"): (True,),
    ("LlamaCppSettings", "kv_unified"): (True,),
    ("LlamaCppSettings", "flash_attn"): (True,),
    ("LlamaCppSettings", "overhead_bytes"): (0,),
    ("layer_kv_bytes", "index"): (0,),
    ("layer_state_bytes", "index"): (0,),
    ("estimate", "ranges"): (None, []),
    ("device_compute_bytes", "ranges"): ([],),
    ("estimate", "devices"): (None, 0),
    ("LlamaCppCosts", "flash_attn"): (True,),
    ("LlamaCppCosts", "overhead_bytes"): ([], {}),
    ("node_overheads", "nodes"): ([],),
    ("node_overheads", "node_kinds"): (None, {}),
    ("node_overheads", "catalog"): (None, []),
    ("node_overheads", "backend_overheads"): (None, {}),
    ("costs_from_gguf", "nodes"): ([],),
    ("costs_from_gguf", "node_kinds"): (None, {}),
    ("costs_from_gguf", "flash_attn"): (True,),
    ("SweepGrid", "axes"): ({},),
    ("SweepGrid", "fixed"): (None, {}),
    ("evaluate_scenario", "row"): ({},),
    # A row naming a fleet not among the documents is that row's error, as in a sweep.
    ("evaluate_scenario", "documents"): ({},),
    ("scenario_key", "row"): ({},),
    ("scenario_key", "inputs"): (None, {}),
    ("sweep", "workers"): _OPTIONAL, ("sweep", "scheduler"): _OPTIONAL,
    ("sweep", "output"): _OPTIONAL, ("sweep", "batch_size"): _OPTIONAL,
    ("sweep", "progress"): _OPTIONAL, ("sweep", "warn"): _OPTIONAL,
    ("size_fleet", "targets"): _OPTIONAL, ("size_fleet", "kinds"): _OPTIONAL,
    ("size_fleet", "traffic"): _OPTIONAL,
    ("size_fleet", "context_length_override"): _OPTIONAL,
    ("size_fleet", "parallel_lanes_override"): _OPTIONAL,
    ("size_fleet", "pareto"): (True,),
    ("size_fleet", "bandwidth_efficiency"): _OPTIONAL,
    ("launch_for_plan", "flash_attn"): (True,),
}
# Arguments whose refusal names the setting as users give it elsewhere, or, for a file
# or a catalog entry, shows the value (the file or kind that is missing).
NAMED_AS = {("launch_for_plan", "ubatch"): "ubatch"}
SHOWS_THE_VALUE = {("model_from_gguf", "path"), ("costs_from_gguf", "path"),
                   ("size_fleet", "kinds"), ("size_fleet", "model"),
                   ("launch_for_plan", "model_path")}


def _public_cases() -> list[tuple[str, str]]:
    return [(function, argument) for function, (_, base) in _PUBLIC.items()
            for argument in _ARGUMENTS[function]]


_PUBLIC = _public_calls()
_ARGUMENTS = {
    "shell_quote": ["argument"], "shell_join": ["argv"], "tensor_split": ["ranges"],
    "layer_devices": ["ranges", "layer_count"], "split_address": ["address"],
    "build_launch": ["stages", "model_path", "settings", "layer_count", "addresses",
                     "rpc_server", "llama_server", "extra_server_args"],
    "launch_for_plan": ["document", "plan", "model_path", "flash_attn", "ubatch"],
    "within_target": ["component", "estimated", "measured"],
    "require_flash_attention": ["cache_type_v", "flash_attn"],
    "model_from_gguf": ["path"],
    "LlamaCppSettings": ["context_length", "cache_type_k", "cache_type_v", "parallel",
                         "kv_unified", "ubatch", "batch", "flash_attn", "overhead_bytes"],
    "even_ranges": ["layer_count", "devices"], "ranges_from_counts": ["layer_count", "counts"],
    "layer_kv_bytes": ["model", "index", "settings"],
    "runs_flash_attention": ["model", "settings"],
    "layer_state_bytes": ["model", "index", "settings"],
    "device_compute_bytes": ["model", "settings", "ranges"],
    "stage_compute_bytes": ["model", "settings"],
    "estimate": ["model", "settings", "ranges", "devices"],
    "LlamaCppCosts": ["model", "cache_type_k", "cache_type_v", "flash_attn", "ubatch",
                      "lanes", "overhead_bytes"],
    "node_overheads": ["nodes", "node_kinds", "catalog", "backend_overheads"],
    "costs_from_gguf": ["path", "kv_cache_type", "nodes", "node_kinds", "lanes",
                        "flash_attn"],
    "SweepGrid": ["axes", "fixed"], "check_grid": ["grid"],
    "evaluate_scenario": ["evaluation", "row", "documents"],
    "scenario_key": ["evaluation", "row", "inputs"], "record_problem": ["evaluation"],
    "results_frame": ["grid", "evaluation", "columns"],
    "sweep": ["grid", "evaluate", "workers", "scheduler", "executor", "output",
              "batch_size", "progress", "warn"],
    "size_fleet": ["model", "catalog", "targets", "top", "kinds", "traffic",
                   "context_length_override", "parallel_lanes_override", "pareto",
                   "bandwidth_efficiency", "link_bandwidth_bytes_per_s", "price_kind"],
}


@pytest.mark.parametrize(("function", "argument"), _public_cases(),
                         ids=[f"{f}-{a}" for f, a in _public_cases()])
def test_every_wrong_argument_of_a_public_function_is_a_coded_error(function: str,
                                                                    argument: str) -> None:
    call, base = _PUBLIC[function]
    arguments = base()
    call(**arguments)  # the example itself is valid
    allowed = ACCEPTED.get((function, argument), ())
    said = NAMED_AS.get((function, argument), argument)
    for value in WRONG:
        if any(value is ok or (type(value) is type(ok) and value == ok) for ok in allowed):
            continue
        try:
            call(**{**arguments, argument: value})
        except CodedError as error:
            if (function, argument) in SHOWS_THE_VALUE:
                continue
            assert said in error.message or error.details.get("field") == said, (
                value, error.message)
        else:
            raise AssertionError(f"{function}({argument}={value!r}) was accepted")
