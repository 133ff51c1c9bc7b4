"""An ESTIMATE of decode and prefill speed and of cost for a plan (pure: no widgets, no
plotting), calibrated on published llama.cpp measurements.

**Decode** (one step: one new token for each of the plan's ``B`` busy lanes). Each stage
``i`` of ``L_i`` layers on a GPU of peak bandwidth ``BW_i`` and dense FP16 throughput
``TF_i`` takes

``stage_ms[i] = weight_read / (e_w x BW_i) + kv_read / (e_kv x BW_i)
+ flops / (e_c x TF_i) + L_i x layer_ms``

- ``weight_read``: the stage's weights without the token embeddings (a token looks up one
  row of those, at most ``hidden_size x 2`` bytes, counted per lane); of a mixture of
  experts, the shared weights plus the expected share of its routed experts that the
  step's ``B`` tokens use, ``1 - (1 - k/n)^B`` of ``n`` experts with ``k`` used per
  token (independent routing: two lanes rarely pick the same experts). A spec that gives
  only ``active_weight_bytes`` reads that share, whatever ``B``. Two or more lanes run
  the routed experts with llama.cpp's matrix-matrix kernel: their read overlaps their
  compute (each expert's few tokens below the full rate), and each layer pays
  ``expert_batch_ms`` (per backend) that one token's matrix-vector kernel does not.
- ``kv_read``: the stage's KV cache at the plan's context (the last token of a full
  context, the slowest), read at its own efficiency ``e_kv``: attention reads the cache
  less efficiently than matrix kernels read weights (published depth sweeps slow decode
  more than the bytes say).
- ``flops = 2 x active parameters x B + 4 x attention width x cached tokens`` per layer:
  the compute that caps large batches (with ``e_c x TF`` the ceiling; a kind without
  ``fp16_tflops`` has no ceiling, and the estimate says so).
- ``layer_ms``: a fixed time per layer and step (kernel launches, synchronisation) that
  bandwidth does not explain: a small model on a fast GPU is slower than its bytes say.

``hop_ms = hop_ms(backend) + stage_transfer_latency_ms + B x hidden_size x 4 / link``
for each of the ``stages - 1`` hops (llama.cpp passes F32 activations, one row of
``n_embd`` values per token). ``estimated_tpot_ms = sum(stage_ms) + sum(hop_ms)``,
``tokens_per_s = B x 1000 / estimated_tpot_ms``.

**Prefill** (a prompt of ``P`` tokens): llama.cpp splits it into batches of
:data:`BATCH_TOKENS` and those into ubatches of :data:`UBATCH_TOKENS`; a ubatch of ``u``
tokens at depth ``d`` takes, on each stage, the same formula with every weight read once
(all experts a ubatch routes to), the cache up to ``d + u`` read once, and
``flops = 2 x active parameters x u + 4 x attention width x (u x d + u^2 / 2)`` per
layer (attention's term grows with the prompt), and three transfers beside the weights,
each a fitted number of bytes per memory type and backend: quantized weights staged as
FP16 before the product (``staging_bytes_per_parameter`` per parameter the ubatch
multiplies, at ``e_w``), the activations passed between the ubatch's kernels
(``activation_bytes`` per token and unit of matrix width, active parameters /
``hidden_size``, at ``e_w``) and attention's scores written and read back
(``attention_score_bytes`` per unit of ``attention width x (query, cached token)``
pairs, at ``e_kv``; a decode step pays it too). The ubatches of a batch flow through the
stages as a pipeline (llama.cpp keeps several in flight across devices), each crossing
every hop (``u x hidden_size x 4`` bytes): a prompt of one ubatch gains nothing from more
stages, a long one approaches the slowest stage's rate. ``ttft_ms`` is the prefill of a
prompt; ``estimated_context_fill_ms`` the prefill of the plan's whole context.

The efficiencies ``e_w``, ``e_kv``, ``e_c`` (per memory type and backend) and the fixed
``layer_ms`` and ``hop_ms`` (per backend) are fitted to published measurements
(``validation/speed/``) and shipped in ``planner/data/speed-calibration.toml`` with
their held-out error (:class:`SpeedCalibration`). ``bandwidth_efficiency=x`` instead
applies one efficiency to weights and cache and no fixed times: the plain
bandwidth-bound estimate.

``cost_per_hour_usd = sum(price_per_hour)`` over the nodes paid for, and
``cost_per_million_tokens_usd = cost_per_hour_usd / (tokens_per_s x 3600) x 10**6``.

Everything here is an estimate and is labelled so wherever it is shown
(:data:`ESTIMATE_NOTE`, :meth:`SpeedCalibration.error_note`).
The package, one idea a module: :mod:`~planner.performance.traffic` (what a model's
steps move and compute, and each stage's share), :mod:`~planner.performance.calibration`
(the fitted figures and their loader), :mod:`~planner.performance.roofline` (the terms of
a stage's time, a decode step and a prefill), :mod:`~planner.performance.estimate` (a
plan's estimate and its cost) and :mod:`~planner.performance.tables` (the estimate as
table columns).
"""

from planner.performance.calibration import (
    CALIBRATION_FILE,
    EFFICIENCY_TABLES,
    FALLBACK_BACKEND,
    FALLBACK_MEMORY_TYPE,
    HeldOutError,
    SpeedCalibration,
    load_calibration,
)
from planner.performance.errors import PerformanceError
from planner.performance.estimate import (
    ACTIVATION_BYTES_PER_VALUE,
    DEFAULT_LINK_BANDWIDTH_BYTES_PER_S,
    ESTIMATE_NOTE,
    INTRA_HOST_LINK_BYTES_PER_S,
    NodeSpeed,
    PlanEstimate,
    StageEstimate,
    cost_per_million_tokens,
    estimate_plan,
    fleet_estimate,
    node_speeds,
    try_estimate,
)
from planner.performance.roofline import (
    BATCH_TOKENS,
    UBATCH_TOKENS,
    Device,
    StageTerms,
    calibrated_device,
    decode_step,
    prefill_ms,
    stage_terms,
    ubatches,
)
from planner.performance.tables import (
    ESTIMATE_COLUMNS,
    stage_estimates,
    with_candidate_estimates,
    with_stage_estimates,
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
    "ACTIVATION_BYTES_PER_VALUE", "BATCH_TOKENS", "CALIBRATION_FILE",
    "DEFAULT_LINK_BANDWIDTH_BYTES_PER_S", "EFFICIENCY_TABLES", "EMBEDDING_ROW_BYTES_PER_VALUE",
    "ESTIMATE_COLUMNS", "ESTIMATE_NOTE", "FALLBACK_BACKEND", "FALLBACK_MEMORY_TYPE",
    "INTRA_HOST_LINK_BYTES_PER_S", "SPEED_FIELDS", "UBATCH_TOKENS", "Device", "HeldOutError",
    "ModelTraffic", "NodeSpeed", "PerformanceError", "PlanEstimate", "SpeedCalibration",
    "StageEstimate", "StageLoad", "StageTerms", "calibrated_device", "cost_per_million_tokens",
    "decode_step", "estimate_plan", "even_layers", "fleet_estimate", "fleet_model_traffic",
    "load_calibration", "model_traffic", "node_speeds", "prefill_ms", "stage_estimates",
    "stage_loads", "stage_terms", "try_estimate", "ubatches", "with_candidate_estimates",
    "with_stage_estimates",
]
