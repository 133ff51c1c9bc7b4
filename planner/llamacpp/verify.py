"""How close a plan's estimate came to a launched split (``planner verify``): per device,
the weights, KV cache, compute buffer and total llama.cpp allocated against
:mod:`planner.llamacpp.estimate`'s estimate, and the decode and prefill speed it measured
against :mod:`planner.performance`'s, each judged by the estimate's stated error.

Pure: a fleet document, its plan and the launch that ran it
(:mod:`planner.llamacpp.launch`), the model's llama.cpp layout and a parsed log
(:mod:`planner.llamacpp.log`) in; a :class:`Verification` out.

- **Memory** is judged by the targets the estimate is held to on every recorded run
  (:data:`planner.llamacpp.check.ACCURACY_TARGETS`): weights, KV cache and output buffer
  within 0.05 MiB, the compute buffer within 10 %, the total within 5 %. The total is what the
  log shows (llama.cpp logs no backend overhead), so the estimate's overhead is left out.
- **Speed** is estimated for what was measured: one lane (each request alone), the
  requests' mean prompt for prefill, and their mean context depth while decoding. It is
  judged by the estimate's stated error for the stages' memory type: the median error
  on held-out measurements (of the shipped calibration, or of the user's own), so a
  correct estimate misses it about half of the time; a memory miss is a defect of the
  estimate, a speed miss a measure of it.

A log of another run than the plan's (other devices, another context, lanes, cache type,
micro-batch or flash attention, layers elsewhere) is refused with
``LogDoesNotMatchPlan`` naming what differs: its figures say nothing about the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from planner.errors import CodedError
from planner.llamacpp.check import ACCURACY_TARGETS, within_target
from planner.llamacpp.estimate import DeviceMemory, estimate
from planner.llamacpp.launch import Launch
from planner.llamacpp.layout import LlamaCppModel
from planner.llamacpp.log import HOST, MIB, Measured
from planner.llamacpp.settings import LlamaCppSettings
from planner.models import ModelError
from planner.models.gpus import GpuModel
from planner.performance import (
    FALLBACK_BACKEND,
    ModelTraffic,
    PlanEstimate,
    SpeedCalibration,
    fp16_figure,
    load_calibration,
    node_speeds,
    try_estimate,
)
from planner.planning import Plan, PlanningInput
from planner.units import layer_range

MEMORY_FIGURES = ("weights_bytes", "kv_bytes", "state_bytes", "compute_bytes",
                  "output_bytes", "total_bytes")
SPEED_FIGURES = ("decode_ms_per_token", "prefill_tokens_per_s")


class VerifyError(CodedError):
    """A log that cannot be verified against a plan. ``code`` is stable:
    ``LogDoesNotMatchPlan``, ``NothingToVerify``."""

    codes = ("LogDoesNotMatchPlan", "NothingToVerify")


@dataclass(frozen=True, slots=True)
class Check:
    """One figure of one device, estimated and measured. ``error`` is
    (estimated - measured) / measured; ``within`` is ``None`` where there is no estimate
    (or nothing measured) to judge."""

    device: str
    """The node id, or ``host``; ``run`` for the speed figures."""
    layers: str
    figure: str
    estimated: float | None
    measured: float | None
    allowed: str
    within: bool | None

    @property
    def error(self) -> float | None:
        if self.estimated is None or self.measured is None or self.measured == 0:
            return None
        return (self.estimated - self.measured) / self.measured

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "layers": self.layers, "figure": self.figure,
                "estimated": self.estimated, "measured": self.measured,
                "error": None if self.error is None else round(self.error, 6),
                "allowed": self.allowed, "within": self.within}


@dataclass(frozen=True, slots=True)
class Verification:
    """Every check of one log, and what to know about them."""

    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """No figure falls outside the estimate's stated error."""
        return all(check.within is not False for check in self.checks)

    @property
    def misses(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.within is False)

    def frame(self) -> pd.DataFrame:
        """One row per check: ``device``, ``layers``, ``figure``, ``estimated``,
        ``measured``, ``error``, ``allowed``, ``within``."""
        return pd.DataFrame([check.to_dict() for check in self.checks],
                            columns=["device", "layers", "figure", "estimated", "measured",
                                     "error", "allowed", "within"])

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [check.to_dict() for check in self.checks],
                "notes": list(self.notes)}


# -- the log against the plan ------------------------------------------------------------------


def _location(address: str, device: int) -> str:
    """The key :func:`planner.llamacpp.log.parse_log` keeps a device's buffers under."""
    return address if device == 0 else f"{address}/{device}"


def check_log_matches(launch: Launch, settings: LlamaCppSettings, measured: Measured,
                      layer_count: int) -> None:
    """Refuse (``LogDoesNotMatchPlan``) a log whose devices, settings or layers are not
    the launch's; ``NothingToVerify`` a log with no buffers and no timings."""
    if not measured.memory and not measured.timings:
        raise VerifyError("NothingToVerify", "the log holds no buffer sizes and no timing "
                          "lines: give the log llama-server (or llama-cli) printed while "
                          "loading the model and serving requests")
    planned = {_location(stage.address, stage.rpc_device): stage.node_id
               for stage in launch.stages}
    logged = {key for key in measured.memory if key != HOST}
    if measured.memory:
        extra = sorted(logged - set(planned))
        missing = sorted(set(planned) - logged)
        if extra or missing:
            parts = []
            if missing:
                parts.append("nothing allocated on " + ", ".join(
                    f"{planned[key]} ({key})" for key in missing))
            if extra:
                parts.append("buffers on " + ", ".join(extra) + ", which the plan does not "
                             "use")
            raise VerifyError("LogDoesNotMatchPlan",
                              f"the log is of another split than the plan's: "
                              f"{'; '.join(parts)}", missing=missing, extra=extra)
    expected: dict[str, Any] = {
        "n_ctx": settings.n_ctx, "n_seq_max": settings.parallel,
        "n_ubatch": settings.n_ubatch, "kv_unified": settings.kv_unified,
        "flash_attn": "enabled" if settings.flash_attn else "disabled",
        "cache_type_k": settings.cache_type_k, "cache_type_v": settings.cache_type_v}
    for name, value in expected.items():
        got = measured.settings.get(name)
        if got is not None and got != value:
            raise VerifyError("LogDoesNotMatchPlan",
                              f"the log ran with {name} = {got}, and the plan's launch with "
                              f"{name} = {value}", setting=name, logged=got, planned=value)
    if measured.layer_devices:
        names = [f"RPC{index}" for index in launch_device_numbers(launch)]
        wanted = [names[index] for index, stage in enumerate(launch.stages)
                  for _ in range(stage.layer_start, stage.layer_end)] + [names[-1]]
        got_layers = [measured.layer_devices.get(layer) for layer in range(layer_count + 1)]
        if got_layers != wanted:
            first = next(i for i, (a, b) in enumerate(zip(got_layers, wanted, strict=True))
                         if a != b)
            raise VerifyError("LogDoesNotMatchPlan",
                              f"layer {first} ran on {got_layers[first]}, and the plan puts "
                              f"it on {wanted[first]}", layer=first)


def launch_device_numbers(launch: Launch) -> list[int]:
    """The ``RPCn`` number of each stage's device, as the launch's ``--device`` names it."""
    argv = list(launch.llama_server)
    names = argv[argv.index("--device") + 1].split(",")
    return [int(name.removeprefix("RPC")) for name in names]


def memory_checks(launch: Launch, model: LlamaCppModel, settings: LlamaCppSettings,
                  measured: Measured) -> list[Check]:
    """Each device's (and the host's) components and total, estimated and logged."""
    ranges = [(stage.layer_start, stage.layer_end) for stage in launch.stages]
    predicted = estimate(model, settings, ranges)
    parts: list[tuple[str, str, str, DeviceMemory]] = [
        (stage.node_id, _location(stage.address, stage.rpc_device),
         layer_range(stage.layer_start, stage.layer_end, "-"), part)
        for stage, part in zip(launch.stages, predicted.devices, strict=True)]
    parts.append((HOST, HOST, "", predicted.host))
    checks = []
    for name, key, layers, part in parts:
        seen = measured.memory.get(key, {})
        for component in MEMORY_FIGURES[:-1]:
            estimated = getattr(part, component)
            if component not in seen and estimated == 0:
                continue
            checks.append(_memory_check(name, layers, component, estimated,
                                        seen.get(component, 0)))
        checks.append(_memory_check(name, layers, "total_bytes",
                                    part.total_bytes - part.overhead_bytes,
                                    sum(seen.values())))
    return checks


def _memory_check(device: str, layers: str, component: str, estimated: int,
                  measured: int) -> Check:
    kind, limit = ACCURACY_TARGETS[component]
    allowed = f"{limit / MIB:g} MiB" if kind == "abs" else f"{limit:.0%}"
    return Check(device, layers, component, estimated, measured, allowed,
                 within_target(component, estimated, measured))


# -- speed --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeedEstimates:
    """The speed estimate for what was measured, and the error it states."""

    decode: PlanEstimate | None
    prefill: PlanEstimate | None
    decode_error: float | None
    prefill_error: float | None
    decode_source: str = ""
    """What the decode error is: ``median of 93 held-out runs (gddr)``."""
    prefill_source: str = ""
    reason: str = ""
    """Why there is no estimate, when there is none."""


def measured_shape(plan: Plan, measured: Measured) -> tuple[Plan, int | None]:
    """The plan as the log's requests ran it: one lane, at the requests' mean context
    depth while decoding (each decoded token weighted), and their mean prompt."""
    timings = [t for t in measured.timings if t.decode_tokens or t.prompt_tokens]
    decoded = sum(t.decode_tokens for t in timings)
    if decoded:
        depth = sum(t.decode_tokens * (t.prompt_tokens + t.decode_tokens / 2)
                    for t in timings) / decoded
    else:
        depth = 1.0
    prompts = [t.prompt_tokens for t in timings if t.prompt_tokens]
    prompt = round(sum(prompts) / len(prompts)) if prompts else None
    context = max(1, min(plan.context_length, round(depth)))
    return replace(plan, context_length=context, parallel_lanes=1), prompt


def speed_estimates(request: PlanningInput, plan: Plan, traffic: ModelTraffic | None,
                    catalog: Sequence[GpuModel], measured: Measured, *,
                    node_kinds: dict[str, str] | None = None,
                    calibration: SpeedCalibration | None = None) -> SpeedEstimates:
    """The speed estimate of ``plan`` as the log's requests ran it
    (:func:`measured_shape`), and the error the calibration states for it: the largest
    held-out median error of the stages' memory types, per phase."""
    calibration = calibration or load_calibration()
    shape, prompt = measured_shape(plan, measured)
    try:
        decode, reason = try_estimate(request, shape, traffic, catalog,
                                      node_kinds=node_kinds, calibration=calibration,
                                      context_fill=False)
    except ModelError as error:  # a node names a kind the catalog lacks
        return SpeedEstimates(None, None, None, None, reason=error.message)
    prefill = None
    if decode is not None and prompt is not None:
        prefill, _ = try_estimate(request, shape, traffic, catalog, node_kinds=node_kinds,
                                  calibration=calibration, context_fill=False,
                                  prompt_tokens=prompt)
    speeds = node_speeds(request.nodes, catalog, node_kinds) if decode is not None else {}
    used = [speeds[node] for node in plan.node_ids if node in speeds]
    errors: dict[str, tuple[float, str] | None] = {}
    experts = traffic is not None and traffic.mixture_of_experts
    for phase in ("decode", "prefill"):
        found = [calibration.stated_error(
            phase, speed.kind, speed.backend or FALLBACK_BACKEND, speed.memory_type,
            fp16_figure(speed, calibration.fallback_gflops_per_lane),
            experts) for speed in used]
        known = [error for error in found if error is not None]
        errors[phase] = max(known, key=lambda e: e[0]) if known else None
    decode_error, prefill_error = errors["decode"], errors["prefill"]
    return SpeedEstimates(decode, prefill,
                          decode_error[0] if decode_error else None,
                          prefill_error[0] if prefill_error else None,
                          decode_error[1] if decode_error else "",
                          prefill_error[1] if prefill_error else "", reason)


def speed_checks(measured: Measured, speed: SpeedEstimates | None) -> list[Check]:
    """Decode time per token and prefill tokens per second, estimated and measured."""
    checks = []
    decode_ms = measured.decode_ms_per_token
    prefill = measured.prefill_tokens_per_s
    decode_estimate = prefill_estimate = None
    # Plain floats: the estimate computes with numpy.
    if speed is not None and speed.decode is not None:
        decode_estimate = float(speed.decode.estimated_tpot_ms)
    if speed is not None and speed.prefill is not None and speed.prefill.ttft_ms:
        prompt = speed.prefill.prompt_tokens or 0
        prefill_estimate = float(prompt * 1000 / speed.prefill.ttft_ms)
    for figure, estimated, value, error, source in (
            ("decode_ms_per_token", decode_estimate, decode_ms,
             speed.decode_error if speed else None, speed.decode_source if speed else ""),
            ("prefill_tokens_per_s", prefill_estimate, prefill,
             speed.prefill_error if speed else None, speed.prefill_source if speed else "")):
        if value is None:
            continue
        if estimated is None or error is None:
            checks.append(Check("run", "", figure, estimated, value, "no estimate", None))
            continue
        off = abs(estimated - value) / value
        checks.append(Check("run", "", figure, estimated, float(value),
                            f"{error:.1%}: {source}", bool(off <= error)))
    return checks


def verify(launch: Launch, model: LlamaCppModel, settings: LlamaCppSettings,
           measured: Measured, speed: SpeedEstimates | None = None,
           notes: Sequence[str] = ()) -> Verification:
    """Every check of one log against the plan ``launch`` runs (refused when the log is
    of another run: :func:`check_log_matches`)."""
    check_log_matches(launch, settings, measured, model.layer_count)
    checks = memory_checks(launch, model, settings, measured) if measured.memory else []
    found = list(notes)
    if not measured.memory:
        found.append("the log holds no buffer sizes (the model's load is not in it): "
                     "memory is not checked")
    if not measured.timings:
        found.append("the log holds no timing lines (no request was served): speed is not "
                     "checked")
    checks += speed_checks(measured, speed)
    if measured.timings and speed is not None and speed.reason:
        found.append(f"no speed estimate: {speed.reason}")
    return Verification(tuple(checks), tuple(dict.fromkeys(found)))
