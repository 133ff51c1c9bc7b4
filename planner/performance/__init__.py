"""An ESTIMATE of decode and prefill speed and of cost for a plan (pure: no widgets, no
plotting), calibrated on published llama.cpp measurements (docs/speed.md).

**One formula** (:mod:`~planner.performance.roofline`): a step of ``t`` tokens on a stage
(a decode step of ``t`` lanes, or a prompt's micro-batch) does :class:`Work` (weight bytes
read; the FLOPs of its products, a routed expert's small products apart; the parameters
it stages as FP16 and the activation units it moves; the cache bytes it reads; attention's
FLOPs and scores; its layers), each unit costing what :class:`Rates` say on the stage's
GPU run a given way (:class:`RunSettings`: backend, flash attention, micro-batch, cached
tokens, build), and :func:`step_ms` adds them up: a micro-batch's products overlap its
read (the slower counts), a decode step's add to it, and the rest adds on.

**Decode**: ``estimated_tpot_ms`` is every stage's step plus each hop (a fixed time, the
node's latency and ``hidden_size x 4`` bytes a token over the link);
``tokens_per_s = lanes x 1000 / estimated_tpot_ms``.

**Prefill**: a prompt runs in batches of ``batch`` tokens, each in micro-batches of
``ubatch``; a batch's micro-batches flow through the stages as a pipeline
(:func:`pipeline_ms`) and the batches follow one another, summed with bounded work
(:func:`~planner.performance.roofline.batch_sum`). ``ttft_ms`` is a prompt's prefill after
``settings.depth`` cached tokens, ``estimated_context_fill_ms`` the plan's whole
context's.

The rates come from the GPU kind's published figures (memory bandwidth, dense FP16
throughput, or a stated stand-in where there is none) at the calibration's fitted figures
for its backend and memory type (:class:`SpeedCalibration`, shipped in
``planner/data/speed-calibration.toml`` with the error cross-validated on sources and GPU
kinds the fit did not see); ``bandwidth_efficiency=x`` instead applies one efficiency to
weights and cache and nothing else: the plain bandwidth-bound estimate.

``cost_per_hour_usd = sum(price_per_hour)`` over the nodes paid for, and
``cost_per_million_tokens_usd = cost_per_hour_usd / (tokens_per_s x 3600) x 10**6``.
Everything here is an estimate and is labelled so wherever it is shown
(:data:`ESTIMATE_NOTE`, :meth:`SpeedCalibration.error_note`).

The package, one idea a module: :mod:`~planner.performance.traffic` (what a model's
steps move and compute, and each stage's share), :mod:`~planner.performance.settings`
(how llama.cpp is run), :mod:`~planner.performance.calibration` (the fitted figures and
their loader), :mod:`~planner.performance.device` (a GPU kind's rates),
:mod:`~planner.performance.roofline` (the one formula, a decode step and a prefill),
:mod:`~planner.performance.estimate` (a plan's estimate and its cost) and
:mod:`~planner.performance._tables` (the estimate as table columns).
"""

from planner.performance._errors import PerformanceError
from planner.performance._tables import (
    ESTIMATE_COLUMNS,
    stage_estimates,
    with_candidate_estimates,
    with_stage_estimates,
)
from planner.performance.calibration import (
    CALIBRATION_FILE,
    BackendFigures,
    CrossValidatedError,
    KindCalibration,
    SpeedCalibration,
    load_calibration,
    read_calibration,
    set_calibration,
    shipped_calibration,
    use_calibration,
)
from planner.performance.device import (
    FALLBACK_BACKEND,
    NodeSpeed,
    calibrated_device,
    fp16_figure,
    kinds_error_note,
    matrix_tflops,
    model_device,
    plain_device,
)
from planner.performance.estimate import (
    ACTIVATION_BYTES_PER_VALUE,
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    ESTIMATE_NOTE,
    INTRA_HOST_LINK_BYTES_PER_S,
    PlanEstimate,
    StageEstimate,
    check_prompt,
    cost_per_million_tokens,
    estimate_plan,
    fleet_estimate,
    node_speeds,
    try_estimate,
)
from planner.performance.graph_nodes import (
    LAYER_NODES,
    REFERENCE_LAYER_NODES,
    layer_node_counts,
    layer_nodes,
)
from planner.performance.roofline import (
    Device,
    Prompt,
    Rates,
    StepTerms,
    Work,
    activation_bytes_per_token,
    decode_step,
    expected_expert_tiles,
    last_layer_network,
    pipeline_ms,
    prefill_ms,
    routed_full_rate_flops,
    step_ms,
    step_terms,
    step_work,
)
from planner.performance.settings import (
    DEFAULT_SETTINGS,
    EXPERT_TOKEN_TILES,
    FUSED_MOE_BUILD,
    MMQ_DEFAULT_BUILD,
    OUTPUT_ROWS_BUILD,
    RunSettings,
    attends_on_shaders,
    computes_every_output,
    computing_cores,
    expert_token_tile,
    fuses_moe_kernels,
    groups_queries,
    reaches_matrix_units,
    shader_flops_per_lane_clock,
    staging_from_tokens,
)
from planner.performance.traffic import (
    EMBEDDING_ROW_BYTES_PER_VALUE,
    SPEED_FIELDS,
    ModelTraffic,
    StageLoad,
    even_layers,
    fleet_model_traffic,
    model_traffic,
    stage_loads,
)

__all__ = [
    "ACTIVATION_BYTES_PER_VALUE",
    "CALIBRATION_FILE",
    "DEFAULT_LINK_BANDWIDTH_BYTES_PER_S",
    "DEFAULT_SETTINGS",
    "EMBEDDING_ROW_BYTES_PER_VALUE",
    "ESTIMATE_COLUMNS",
    "ESTIMATE_NOTE",
    "EXPERT_TOKEN_TILES",
    "FALLBACK_BACKEND",
    "FUSED_MOE_BUILD",
    "INTRA_HOST_LINK_BYTES_PER_S",
    "LAYER_NODES",
    "MMQ_DEFAULT_BUILD",
    "OUTPUT_ROWS_BUILD",
    "REFERENCE_LAYER_NODES",
    "SPEED_FIELDS",
    "BackendFigures",
    "CrossValidatedError",
    "Device",
    "KindCalibration",
    "ModelTraffic",
    "NodeSpeed",
    "PerformanceError",
    "PlanEstimate",
    "Prompt",
    "Rates",
    "RunSettings",
    "SpeedCalibration",
    "StageEstimate",
    "StageLoad",
    "StepTerms",
    "Work",
    "activation_bytes_per_token",
    "attends_on_shaders",
    "calibrated_device",
    "check_prompt",
    "computes_every_output",
    "computing_cores",
    "cost_per_million_tokens",
    "decode_step",
    "estimate_plan",
    "even_layers",
    "expected_expert_tiles",
    "expert_token_tile",
    "fleet_estimate",
    "fleet_model_traffic",
    "fp16_figure",
    "fuses_moe_kernels",
    "groups_queries",
    "kinds_error_note",
    "last_layer_network",
    "layer_node_counts",
    "layer_nodes",
    "load_calibration",
    "matrix_tflops",
    "model_device",
    "model_traffic",
    "node_speeds",
    "pipeline_ms",
    "plain_device",
    "prefill_ms",
    "reaches_matrix_units",
    "read_calibration",
    "routed_full_rate_flops",
    "set_calibration",
    "shader_flops_per_lane_clock",
    "shipped_calibration",
    "stage_estimates",
    "stage_loads",
    "staging_from_tokens",
    "step_ms",
    "step_terms",
    "step_work",
    "try_estimate",
    "use_calibration",
    "with_candidate_estimates",
    "with_stage_estimates",
]
