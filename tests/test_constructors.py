"""Every public constructor of the package checks its numbers with the one validator.

The input types are found, not listed: every public frozen dataclass of the package is
either an input type, with a valid example here, or a result the package builds only
from inputs it has checked, named in :data:`RESULTS` with the reason (a new one in
neither fails the first test). A type that checks its fields on construction (it has a
``__post_init__``) or reads plain data (``from_dict``) is an input type, unless only the
package's own files and readers feed it. Then for each of its integer, number and flag
fields, and each integer inside a tuple field:

- a numpy integer (or numpy float, numpy bool) is accepted where a Python one is, and
  stored as the Python value;
- ``True``, a float, text and an object are refused with a :class:`CodedError` that
  names the field (never ``TypeError``, ``AttributeError`` or a silent acceptance).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import planner
from planner.errors import CodedError
from planner.fence.claims import ClaimDecision, CoordinatorClaim, LoadClaimRef, LoadDecision
from planner.fence.coordinator import SplitPlan
from planner.fence.runtime import StageWork, StopDecision, StopRequest
from planner.fleet import ModelChoice
from planner.llamacpp import LlamaCppModel
from planner.performance import BackendFigures
from planner.planning import NodeBudget, Stage

GIB = 2**30
_BACKEND = BackendFigures(weight_efficiency=0.9, layer_ms=0.05)


def _public_dataclasses() -> list[type]:
    found = []
    for info in pkgutil.walk_packages(planner.__path__, "planner."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and value.__module__ == module.__name__
                    and not name.startswith("_") and dataclasses.is_dataclass(value)):
                found.append(value)
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def _input_types() -> list[type]:
    return [cls for cls in _public_dataclasses() if _name(cls) not in RESULTS]


def _claim() -> CoordinatorClaim:
    return CoordinatorClaim("m", "p", "s", "t", "r", "c", 1, "ph", "th", 1_000)


def _ref(cls: type) -> Any:
    return cls("m", "p", "s", "t", "r", "c", 1)


def _llama_model() -> LlamaCppModel:
    runs = Path(__file__).resolve().parents[1] / "validation" / "results" / "llamacpp-runs.json"
    return LlamaCppModel.from_dict(json.loads(runs.read_text())["model_layout"])


def _node(node_id: str = "a") -> NodeBudget:
    return NodeBudget(node_id, 24 * GIB, 20 * GIB, GIB, 2)


_SPEC = dict(name="m", architecture="llama", layer_count=2, native_context_length=4096,
             model_weight_bytes=10, layer_weight_bytes=(4, 6), kv_bytes_per_token=8,
             kv_cache_type="f16", kv_cache_table=(("f16", 8), ("q8_0", 4)), source="s",
             hidden_size=64, active_weight_bytes=10,
             layer_kv_table=(("f16", (0, 8)), ("q8_0", (0, 4))),
             layer_state_bytes_per_sequence=(16, 0), parameter_count=20,
             active_parameter_count=5, expert_count=8, experts_used=2,
             token_embedding_bytes=2, routed_expert_bytes=3, routed_expert_parameters=16,
             output_head_parameters=2, attention_heads=4, head_size=16, kv_heads=2,
             sliding_window=512,
             sliding_window_layers=1, kv_lora_rank=32, rope_head_size=8)

# A valid example of each input type, every optional number given a value so it is
# exercised. Keyed by "module.Class".
EXAMPLES: dict[str, Callable[[], dict[str, Any]]] = {
    "planner.availability.reliability.NodeReliability": lambda: dict(annual_failure_rate=0.1,
                                                         repair_hours=24.0),
    "planner.fence.check.configuration.CheckConfig": lambda: dict(
        stages=2, coordinators=2, max_term=2, clock_bound=1, lease_ticks=2, skew=True,
        skew_ticks=1, message_loss=False, stops=True, planned=((0, 1), (1,))),
    "planner.fence.claims.CoordinatorClaim": lambda: dataclasses.asdict(_claim()),
    "planner.fence.claims.GenerationRef": lambda: dict(
        model_id="m", package_ref="p", manifest_sha256="s", topology_id="t", run_id="r",
        coordinator_id="c", coordinator_term=1),
    "planner.fence.claims.LoadClaimRef": lambda: dict(
        model_id="m", package_ref="p", manifest_sha256="s", topology_id="t", run_id="r",
        coordinator_id="c", coordinator_term=1),
    "planner.fence.coordinator.SplitPlan": lambda: dict(
        model_id="m", package_ref="p", manifest_sha256="s", topology_id="t", run_id="r",
        stage_nodes=("a", "b"), layer_ranges=((0, 2), (2, 4))),
    "planner.fence.coordinator.CoordinatorPolicy": lambda: dict(
        lease_ms=1000, claim_timeout_ms=100, load_timeout_ms=100, retry_interval_ms=100,
        max_attempts=3, max_renewals=2, stand_down_on_newer_term=True),
    "planner.fence.coordinator.Coordinator": lambda: dict(
        node_id="c", plan=SplitPlan("m", "p", "s", "t", "r", ("a",))),
    "planner.fence.messages.ClaimCoordinator": lambda: dict(claim=_claim(), round_id=1),
    "planner.fence.messages.ClaimReply": lambda: dict(
        decision=ClaimDecision(True, None, None, None, _claim(), 5), term=1, round_id=1),
    "planner.fence.messages.LoadStage": lambda: dict(load=_ref(LoadClaimRef), round_id=1),
    "planner.fence.messages.LoadReply": lambda: dict(
        decision=LoadDecision(True, None, False, None, _ref(LoadClaimRef), 5), term=1,
        round_id=1),
    "planner.fence.messages.StageReady": lambda: dict(work=_ref(StageWork)),
    "planner.fence.messages.StopStage": lambda: dict(request=_ref(StopRequest)),
    "planner.fence.messages.StopReply": lambda: dict(
        decision=StopDecision(True, None, None, _ref(StopRequest)), term=1),
    "planner.fence.runtime.StageWork": lambda: dataclasses.asdict(_ref(StageWork)),
    "planner.fence.runtime.StopRequest": lambda: dataclasses.asdict(_ref(StopRequest)),
    "planner.fence.runtime.StageRuntime": lambda: dict(node_id="a", claims=(_claim(),)),
    "planner.fence.simulator.NetworkConfig": lambda: dict(base_delay_ms=5, jitter_ms=2,
                                                          drop_probability=0.25),
    "planner.fence.simulator.MessageRule": lambda: dict(term=1, extra_delay_ms=5, drop=True,
                                                        times=2),
    "planner.fleet.document.ModelChoice": lambda: dict(preset="llama-3.1-70b",
                                                       file_bytes=42_520_000_000),
    "planner.fleet.document.ReliabilityOverride": lambda: dict(annual_failure_rate=0.1,
                                                               repair_hours=24.0),
    "planner.fleet.document.FleetDocument": lambda: dict(
        model=ModelChoice(preset="llama-3.1-70b"), nodes=(_node("a"), _node("b")),
        minimum_nodes=1, context_length_override=4096, parallel_lanes_override=2,
        target_decode_tpot_ms=50, addresses=(("a", "10.0.0.1:50052"),),
        rpc_devices=(("a", 1),)),
    "planner.llamacpp.settings.LlamaCppSettings": lambda: dict(
        context_length=4096, parallel=2, kv_unified=True, ubatch=512, batch=2048,
        flash_attn=True, overhead_bytes=100, program="llama-completion"),
    "planner.llamacpp.costs.LlamaCppCosts": lambda: dict(
        model=_llama_model(), flash_attn=True, ubatch=512, lanes=4,
        overhead_bytes=(("a", 100),), one_device=False),
    "planner.models.gpus.GpuModel": lambda: dict(
        name="Card", memory_bytes=24 * GIB, unified_memory_bytes=24 * GIB,
        working_set_fraction=1.0, annual_failure_rate=0.1, repair_hours=24.0,
        price_per_hour=1.5, memory_bandwidth_bytes_per_s=10**12, headroom_bytes=GIB,
        stage_transfer_latency_ms=2, max_count=4, llamacpp_overhead_bytes=100,
        fp16_tflops=82.5, shader_count=4096, boost_clock_mhz=2500.0, core_count=8,
        simd_width_bits=256),
    "planner.models.spec.ModelSpec": lambda: dict(_SPEC),
    "planner.performance.traffic.ModelTraffic": lambda: dict(
        model_weight_bytes=100, active_weight_bytes=10, hidden_size=64,
        active_parameter_count=40, expert_count=8, experts_used=2, token_embedding_bytes=5,
        attention_width=64, parameter_count=200, routed_expert_bytes=80,
        routed_expert_parameters=120, attention_heads=4, kv_heads=2, head_size=16,
        sliding_window=128,
        window_layer_count=2, window_kv_bytes_per_token=8, layer_nodes=25.0,
        fused_layer_nodes=23.0, output_head_parameters=8),
    "planner.performance.calibration.BackendFigures": lambda: dict(
        weight_efficiency=0.9, layer_ms=0.05, kv_efficiency=0.3,
        kv_efficiency_without_flash_attention=0.2, matrix_efficiency=0.4,
        attention_efficiency=0.1, quantized_matrix_factor=1.2, hop_ms=0.1),
    "planner.performance.calibration.KindCalibration": lambda: dict(
        read_factor=0.8, compute_factor=1.2, decode_error=0.1, decode_runs=3,
        prefill_error=0.2, prefill_runs=2),
    "planner.performance.calibration.SpeedCalibration": lambda: dict(
        backends={"cuda": _BACKEND}, memory_factors={"hbm": 0.6},
        shader_units_factor=1.0,
        fallback_flops_per_byte={"all": 150.0}),
    "planner.performance.settings.RunSettings": lambda: dict(
        backend="cuda", flash_attn=True, ubatch=512, batch=2048, depth=0, build=4000,
        threads=8),
    "planner.planning.inputs.NodeBudget": lambda: dataclasses.asdict(_node()),
    "planner.planning.plan.Stage": lambda: dict(
        stage_id="stage-0", stage_index=0, node_id="a", layer_start=0, layer_end=2,
        parameter_bytes=10),
    "planner.planning.plan.Plan": lambda: dict(
        context_length=4096, parallel_lanes=2,
        stages=(Stage("stage-0", 0, "a", 0, 1, 4), Stage("stage-1", 1, "b", 1, 2, 6)),
        estimated_decode_network_ms_per_token=6, decode_tpot_target_met=True),
    "planner.availability._spares.SpareKind": lambda: dict(
        name="Card", budget=_node(), price_per_hour=1.5),
    "planner.planning.inputs.PlanningInput": lambda: dict(
        native_context_length=4096, layer_count=2, model_weight_bytes=10,
        kv_bytes_per_token=8, nodes=(_node("a"), _node("b")), minimum_nodes=1,
        layer_weight_bytes=(4, 6), context_length_override=2048,
        parallel_lanes_override=2, target_decode_tpot_ms=50,
        layer_kv_bytes_per_token=(8, 0), layer_state_bytes_per_sequence=(0, 16)),
    "planner.sweep._grid.SweepGrid": lambda: dict(axes={"min_lanes": (1, 2)},
                                            fixed={"seed": 3, "fleet": "fleet.toml"}),
    "planner.targets.Targets": lambda: dict(
        minimum_context=4096, minimum_lanes=2, minimum_nodes=1, target_decode_tpot_ms=50,
        failures_tolerated=1, target_ttft_ms=500, prompt_tokens=4096),
}

_ANSWER = "an answer the package computes from inputs it has checked"
_FENCE = "a fence or checker result, built only by the fence from checked messages"
_SAVED = "read only from the package's own saved results (planner/data, validation/)"
_WORKBENCH = "the workbench's own state: text as typed, read by its checked readers"
_MODEL = "built only by the model readers from a checked GGUF file or preset"

# Public dataclasses that are not input: nothing outside the package builds them.
_RPC = "built only by the RPC conversation from replies it has checked"

RESULTS = {
    "planner.llamacpp.rpc.RpcDevice": _RPC,
    "planner.llamacpp.rpc.RpcServerReport": _RPC,
    "planner.llamacpp.rpc.Step": "a request the conversation writes itself",
    "planner.llamacpp.rpc.Transcript": "the bytes a conversation sent and received",
    "planner.llamacpp.verify.Check": _ANSWER,
    "planner.llamacpp.bench.BenchFit": _ANSWER,
    "planner.llamacpp.bench.RunFit": _ANSWER,
    "planner.llamacpp.bench.RunShape": _ANSWER,
    "planner.llamacpp.bench_output.BenchRun": "read only from llama-bench output by its "
                                                 "checked reader",
    "planner.llamacpp.verify.Verification": _ANSWER,
    "planner.llamacpp.verify.SpeedEstimates": _ANSWER,
    "planner.planning.search.NodeSetChoice": "a search result, built only by the search",
    "planner.planning.search.SearchBudget": "the search's own step counter",
    "planner.fence.check.model.Rules": "holds functions, no numbers",
    "planner.planning.memory_rule.LayerCosts": "built only by the memory rules",
    "planner.planning.memory_rule.DesignRule": "has no fields",
    "planner.planning.api.Shape": _ANSWER,
    "planner.planning.explain.ShapeOption": _ANSWER,
    "planner.planning.explain.HigherContext": _ANSWER,
    "planner.planning.explain.ChoiceExplanation": _ANSWER,
    "planner.planning._result.PlanningResult": _ANSWER,
    "planner.planning.rules.Walk": _ANSWER,
    "planner.planning.warnings.FleetWarning": _ANSWER,
    "planner.availability._spares.SparesResult": _ANSWER,
    "planner.availability.states.Outcome": _ANSWER,
    "planner.availability.states.NodeKind": _ANSWER,
    "planner.availability.states.AvailabilityResult": _ANSWER,
    "planner.availability.fleet.FleetAvailability": _ANSWER,
    "planner.availability.reliability.NodeFigures": _ANSWER,
    "planner.sizing.floors.DecodeFloor": _ANSWER,
    "planner.sizing.floors.PrefillFloor": _ANSWER,
    "planner.sizing._result.SizedFleet": _ANSWER,
    "planner.sizing._result.SizingResult": _ANSWER,
    "planner.simulation.SimulatedYear": _ANSWER,
    "planner.sweep._evaluators.Batch": _ANSWER,
    "planner.performance.device.NodeSpeed": _ANSWER,
    "planner.performance.calibration.CrossValidatedError": _ANSWER,
    "planner.performance.traffic.StageLoad": _ANSWER,
    "planner.performance.roofline.Device": _ANSWER,
    "planner.performance.roofline.Work": _ANSWER,
    "planner.performance.roofline.Rates": _ANSWER,
    "planner.performance.roofline.StepTerms": _ANSWER,
    "planner.performance.roofline.Prompt": _ANSWER,
    "planner.performance.estimate.StageEstimate": _ANSWER,
    "planner.performance.estimate.PlanEstimate": _ANSWER,
    "planner.llamacpp.launch.LaunchStage": _ANSWER,
    "planner.llamacpp.launch.RpcServer": _ANSWER,
    "planner.llamacpp.launch.Launch": _ANSWER,
    "planner.llamacpp.estimate.DeviceMemory": _ANSWER,
    "planner.llamacpp.estimate.MemoryEstimate": _ANSWER,
    "planner.llamacpp.check.Comparison": _ANSWER,
    "planner.llamacpp.check.GridRun": _ANSWER,
    "planner.llamacpp.grid.Factor": "the package's own design of settings",
    "planner.reports.content.ReportContent": _ANSWER,
    "planner.reports.tables.TextTable": _ANSWER,
    "planner.llamacpp.allocator.Tensor": "ggml's graph as the graph builder lays it out",
    "planner.llamacpp.allocator.Graph": "ggml's graph as the graph builder lays it out",
    "planner.llamacpp.log.Measured": "what a llama.cpp run printed, parsed from its log",
    "planner.llamacpp.log.Timing": "a pair of timing lines, parsed from a log",
    "planner.llamacpp.layout.LayerLayout": _MODEL,
    "planner.llamacpp.layout.LlamaCppModel": _MODEL,
    "planner.llamacpp.graph.shapes.AttentionShape": _MODEL,
    "planner.llamacpp.graph.shapes.FeedForwardShape": _MODEL,
    "planner.llamacpp.graph.shapes.RecurrentShape": _MODEL,
    "planner.llamacpp.graph.shapes.BlockShape": _MODEL,
    "planner.llamacpp.graph.shapes.GraphModel": _MODEL,
    "planner.llamacpp.graph.builder.Builder": "the graph a family is building",
    "planner.llamacpp.graph.reading.Activation": "a family's own trait",
    "planner.llamacpp.families.deepseek4.CompressedAttention": _MODEL,
    "planner.llamacpp.families.falcon.FalconNorms": _MODEL,
    "planner.llamacpp.families.glm5_next.PooledIndexer": _MODEL,
    "planner.llamacpp.families.hrm_text.HrmStacks": _MODEL,
    "planner.llamacpp.families.hy_v4.HyperConnections": _MODEL,
    "planner.llamacpp.families.kimi_k3.ResidualStack": _MODEL,
    "planner.llamacpp.families.minimax_m3.SparseAttention": _MODEL,
    "planner.llamacpp.families.qwen4exp.Qwen4ExpFields": _MODEL,
    "planner.models.gguf_file.SkippedValue": _MODEL,
    "planner.models.gguf_file.TensorEntry": _MODEL,
    "planner.models.gguf_file.GgufHeader": _MODEL,
    "planner.models.kv_cache.LayerCache": _MODEL,
    "planner.models.kv_cache.KvLayout": _MODEL,
    "planner.models.kv_cache.LayerCaches": _MODEL,
    "planner.models.layer_memory.SlidingRule": "the package's table of llama.cpp's rules",
    "planner.models.architectures.GpuArchitecture": "the package's table of GPU architectures",
    "planner.models.layer_memory.LayerMemory": _MODEL,
    "planner.models.layer_memory.ModelMemory": _MODEL,
    "planner.fence.check.configuration.NamedConfig": _SAVED,
    "planner.fence.check.model.TraceStep": _SAVED,
    "planner.fence.check._properties.Property": "the checker's own properties (functions)",
    "planner.fence.check.report.Counterexample": _SAVED,
    "planner.fence.check.report.PropertyResult": _SAVED,
    "planner.fence.check.report.CheckResult": _SAVED,
    "planner.fence.check.report.CheckReport": _SAVED,
    "planner.fence.claims.ClaimDecision": _FENCE,
    "planner.fence.claims.LoadDecision": _FENCE,
    "planner.fence.coordinator.Send": _FENCE,
    "planner.fence.coordinator.SetTimer": _FENCE,
    "planner.fence.coordinator.Note": _FENCE,
    "planner.fence.runtime.StopDecision": _FENCE,
    "planner.fence.runtime.ClaimOutcome": _FENCE,
    "planner.fence.runtime.LoadOutcome": _FENCE,
    "planner.fence.runtime.StopOutcome": _FENCE,
    "planner.fence.scenarios.Expectation": _FENCE,
    "planner.fence.scenarios.ScenarioOutcome": _FENCE,
    "planner.fence.scenarios.ScenarioResult": _FENCE,
    "planner.fence.scenarios.Scenario": "the package's own scenario table",
    "planner.fence.simulator.SimEvent": _FENCE,
    "planner.workbench.availability_panel.AvailabilityView": _WORKBENCH,
    "planner.workbench.catalog.ModelSource": _WORKBENCH,
    "planner.workbench.evaluation.LimitingNode": _ANSWER,
    "planner.workbench.evaluation.UnusedNode": _ANSWER,
    "planner.workbench.evaluation.Evaluation": _ANSWER,
    "planner.workbench._fence_claims.ClaimPreset": _WORKBENCH,
    "planner.workbench._fence_claims.LoadPreset": _WORKBENCH,
    "planner.workbench.serve.LabServer": "a running server's handle",
    "planner.workbench.sizing_panel.SizingModel": _WORKBENCH,
    "planner.workbench.problems.Problem": _ANSWER,
    "planner.workbench.editor_fields.NodeRow": _WORKBENCH,
    "planner.workbench.editor_fields.ModelFields": _WORKBENCH,
    "planner.workbench.editor_fields.PlanOptions": _WORKBENCH,
    "planner.workbench.editor_fields.NodeExtras": _WORKBENCH,
    "planner.workbench.state.WorkbenchState": _WORKBENCH,
}
STATE_FIELDS = {
    "planner.fence.coordinator.Coordinator": {
        "term", "highest_seen_term", "round_id", "attempts", "renewals", "quorum_terms",
        "loads_sent"},
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_every_input_type_has_an_example() -> None:
    found = {_name(cls) for cls in _input_types()}
    assert found == set(EXAMPLES), "add an example for each new input type"
    assert set(RESULTS) <= {_name(cls) for cls in _public_dataclasses()}, "a stale entry"


def test_what_a_user_can_build_is_an_input_type() -> None:
    """A type that checks its fields or reads plain data is never waved through as a
    result, unless only the package's own data or readers build it."""
    checking = {"planner.planning.search.NodeSetChoice",
                "planner.planning.memory_rule.LayerCosts", "planner.fence.check.model.Rules"}
    for cls in _public_dataclasses():
        reason = RESULTS.get(_name(cls))
        if reason is None:
            continue
        assert not hasattr(cls, "__post_init__") or _name(cls) in checking, _name(cls)
        assert not hasattr(cls, "from_dict") or reason in (_SAVED, _MODEL, _WORKBENCH), (
            f"{_name(cls)} reads plain data, so it is input")


def _kind(annotation: str) -> str | None:
    """The kind of number a field holds, from its annotation."""
    bare = annotation.replace(" | None", "").replace("None | ", "")
    if bare in ("int", "int | float", "float | int"):
        return "int" if bare == "int" else "number"
    if bare == "float":
        return "number"
    if bare == "bool":
        return "flag"
    if re.search(r"\bint\b", bare) and bare.startswith(("tuple[", "list[")):
        return "nested"
    return None


def _first_int_path(value: Any, path: tuple[int, ...] = ()) -> tuple[int, ...] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return path
    if isinstance(value, tuple | list):
        for index, item in enumerate(value):
            found = _first_int_path(item, (*path, index))
            if found is not None:
                return found
    return None


def _replace_at(value: Any, path: tuple[int, ...], new: Any) -> Any:
    if not path:
        return new
    items = list(value)
    items[path[0]] = _replace_at(items[path[0]], path[1:], new)
    return type(value)(items)


def _numpy_ints(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return np.int64(value)
    if isinstance(value, tuple | list):
        return type(value)(_numpy_ints(item) for item in value)
    return value


def _cases() -> Iterator[Any]:
    for cls in _input_types():
        name = _name(cls)
        example = EXAMPLES[name]()
        skipped = STATE_FIELDS.get(name, set())
        for field in dataclasses.fields(cls):
            kind = _kind(str(field.type))
            if not field.init or kind is None or field.name in skipped:
                continue
            if field.name not in example:
                continue
            yield pytest.param(cls, field.name, kind, id=f"{cls.__qualname__}.{field.name}")


CASES = list(_cases())


def test_the_cases_cover_every_numeric_field_of_the_examples() -> None:
    covered = {(cls, name) for cls, name, _ in (case.values for case in CASES)}
    for cls in _input_types():
        example = EXAMPLES[_name(cls)]()
        for field in dataclasses.fields(cls):
            if (field.init and _kind(str(field.type)) is not None
                    and field.name not in STATE_FIELDS.get(_name(cls), set())):
                assert field.name in example, f"{_name(cls)}: give {field.name} an example"
                assert (cls, field.name) in covered


def _refused_naming(cls: type, example: dict[str, Any], field: str, value: Any) -> None:
    try:
        cls(**{**example, field: value})
    except CodedError as error:
        named = " ".join(str(v) for v in (error.message, *error.details.values()))
        assert field in named, f"{error} does not name {field}"
    else:
        pytest.fail(f"{cls.__qualname__}({field}={value!r}) was accepted")


@pytest.mark.parametrize(("cls", "field", "kind"), CASES)
def test_numbers_are_read_by_the_one_validator(cls: type, field: str, kind: str) -> None:
    example = EXAMPLES[_name(cls)]()
    good = example[field]
    assert good is not None, f"{_name(cls)}.{field} needs a non-None example"
    if kind == "nested":
        path = _first_int_path(good)
        assert path is not None
        built = cls(**{**example, field: _numpy_ints(good)})
        stored = getattr(built, field)
        assert stored == getattr(cls(**example), field)
        assert _first_int_path(stored) is not None  # stored as Python ints
        wrong = [True, float(_dig(good, path)) + 0.5, "12", object()]
        for value in wrong:
            _refused_naming(cls, example, field, _replace_at(good, path, value))
        return
    if kind == "flag":
        built = cls(**{**example, field: np.bool_(good)})
        assert getattr(built, field) is bool(good)
        for value in (1, "yes", object(), *(() if _optional(cls, field) else (None,))):
            _refused_naming(cls, example, field, value)
        return
    built = cls(**{**example, field: np.int64(good) if kind == "int" and isinstance(
        good, int) else np.float64(good)})
    stored = getattr(built, field)
    assert stored == good and type(stored) is type(good), (
        f"{cls.__qualname__}.{field}: stored {stored!r} ({type(stored).__name__})")
    if kind == "number":
        assert type(getattr(cls(**{**example, field: np.int64(1)}), field)) in (int, float)
    wrong: list[Any] = [True, "12", object(), [1]]
    if kind == "int":
        wrong += [float(good), float(good) + 0.5]
    else:
        wrong += [float("nan"), float("inf")]
    for value in wrong:
        _refused_naming(cls, example, field, value)


def _dig(value: Any, path: tuple[int, ...]) -> Any:
    for index in path:
        value = value[index]
    return value


def _optional(cls: type, field: str) -> bool:
    annotation = next(str(f.type) for f in dataclasses.fields(cls) if f.name == field)
    return "None" in annotation


def test_a_saved_plan_reads_back_or_is_refused_by_name() -> None:
    request = planner.PlanningInput(
        native_context_length=4096, layer_count=4, model_weight_bytes=30 * GIB,
        kv_bytes_per_token=4, nodes=(_node("a"), _node("b")))
    plan = planner.plan_topology(request)
    saved = json.loads(json.dumps(plan.to_dict()))
    assert planner.Plan.from_dict(saved) == plan
    stages = saved["stages"]
    broken: list[tuple[dict[str, Any], str]] = [
        ({k: v for k, v in saved.items() if k != "parallel_lanes"}, "parallel_lanes"),
        ({**saved, "stages": [{k: v for k, v in stages[0].items() if k != "layer_end"},
                              *stages[1:]]}, "stages[0].layer_end"),
        ({**saved, "stages": stages[::-1]}, "stages[0]"),
        ({**saved, "stages": []}, "stages"),
        ({**saved, "stages": "stage-0"}, "stages"),
        ({**saved, "stages": [*stages[:-1], {**stages[-1], "layer_start": 0}]},
         f"stages[{len(stages) - 1}]"),
        ({**saved, "context_length": True}, "context_length"),
        ({**saved, "decode_tpot_target_met": "yes"}, "decode_tpot_target_met"),
        ("a plan", "plan"),
    ]
    for data, field in broken:
        with pytest.raises(CodedError) as caught:
            planner.Plan.from_dict(data)  # type: ignore[arg-type]
        assert caught.value.code == "InvalidInput"
        assert caught.value.details["field"] == field, (field, caught.value)
