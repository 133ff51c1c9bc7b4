"""What a model's steps move and compute (:class:`ModelTraffic`), and each stage's share
of it (:class:`StageLoad`): the inputs of the roofline terms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner._validate import integer, number
from planner.limits import (
    DEFAULT_CACHE_TYPE,
    MAX_ATTENTION_HEADS,
    MAX_ATTENTION_WIDTH,
    MAX_BITS_PER_PARAMETER,
    MAX_BYTES,
    MAX_CONTEXT,
    MAX_EXPERTS,
    MAX_HIDDEN_SIZE,
    MAX_LAYER_NODES,
    MIN_BITS_PER_PARAMETER,
)
from planner.models.kv_cache import row_bytes
from planner.models.spec import ATTENTION_FIELDS, ModelSpec
from planner.performance._errors import PerformanceError, bad, positive
from planner.performance.graph_nodes import layer_node_counts
from planner.planning.inputs import PlanningInput
from planner.planning.plan import Plan
from planner.planning.rules import kv_bytes_per_layer_token, layer_weights

EMBEDDING_ROW_BYTES_PER_VALUE = 2  # one token-embedding row, at most F16
# Where a model states no query heads, its attention's width is taken as heads of this
# size (Llama, Mistral, Qwen and DeepSeek's attention all use 128): the count of scores
# attention writes without flash attention.
TYPICAL_HEAD_SIZE = 128
# Each optional count of a model's shape and its physical bound (planner.limits).
_BOUNDED = {"hidden_size": MAX_HIDDEN_SIZE, "active_parameter_count": MAX_BYTES * 8,
            "expert_count": MAX_EXPERTS, "experts_used": MAX_EXPERTS,
            "token_embedding_bytes": MAX_BYTES, "attention_width": MAX_ATTENTION_WIDTH,
            "parameter_count": MAX_BYTES * 8, "attention_heads": MAX_ATTENTION_HEADS,
            "kv_heads": MAX_ATTENTION_HEADS, "head_size": MAX_ATTENTION_WIDTH,
            "sliding_window": MAX_CONTEXT, "output_head_parameters": MAX_BYTES * 8}


@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """What a model's steps move and compute: its weight bytes and the share one token
    reads, the activations' width, and (optional) parameters, routed experts, token
    embeddings and attention width for the compute terms."""

    model_weight_bytes: int
    active_weight_bytes: int
    hidden_size: int | None
    active_parameter_count: int | None = None
    expert_count: int | None = None
    experts_used: int | None = None
    token_embedding_bytes: int | None = None
    # Query heads x head size of a layer (the hidden size when not given); of latent
    # attention, the width it computes with (:func:`latent_attention_width`).
    attention_width: int | None = None
    parameter_count: int | None = None
    # All routed experts' bytes when the model states them (a preset's parts, a GGUF's
    # ``*_exps`` tensors); else derived from ``active_weight_bytes`` (:attr:`routed_bytes`).
    routed_expert_bytes: int | None = None
    # All routed experts' parameters when the model states them: of the parameters one
    # token computes with, the routed experts' share (their bytes alone misplace it where
    # experts and the rest are stored at different precisions).
    routed_expert_parameters: int | None = None
    # Query heads of a layer: each scores every cached token it attends to (without
    # flash attention llama.cpp writes those scores to memory).
    attention_heads: int | None = None
    # KV heads of a layer and the size of a key head (of latent attention, one head of
    # the cached row: kv_lora_rank + rope_head_size): whether llama.cpp's matrix
    # flash-attention kernel takes the model (planner.performance.groups_queries).
    kv_heads: int | None = None
    head_size: int | None = None
    # Layers that attend over a sliding window of ``sliding_window`` tokens only, and
    # their cache per token summed over them (beside the request's KV bytes per token,
    # which count the layers whose cache grows with the context).
    sliding_window: int | None = None
    window_layer_count: int = 0
    window_kv_bytes_per_token: int = 0
    # The ggml operations one layer computes (:mod:`planner.performance.graph_nodes`, by
    # architecture): a layer's fixed time is a llama layer's in their proportion.
    layer_nodes: float | None = None
    # The same on a backend that runs a mixture of experts' router and the sum of its
    # experts' outputs as one kernel each (:func:`planner.performance.fuses_moe_kernels`).
    fused_layer_nodes: float | None = None
    # Of ``active_parameter_count``, the output head's (``output.weight``, or the token
    # embeddings tied to it): a decoded token multiplies by it, a prompt's micro-batches
    # only for the batch's output token (:func:`planner.performance.computes_every_output`).
    output_head_parameters: int | None = None

    @property
    def quantized(self) -> bool:
        """Weights stored below 12 bits per parameter on average (llama.cpp multiplies
        them with its quantized kernels, not FP16 GEMM); unknown counts as not."""
        if self.parameter_count is None:
            return False
        return self.model_weight_bytes * 8 < 12 * self.parameter_count

    @property
    def mixture_of_experts(self) -> bool:
        """Whether a token reaches some of the routed experts only: the prompts of such a
        model are estimated with their own cross-validated error
        (:meth:`~planner.performance.calibration.SpeedCalibration.error`)."""
        return (self.expert_count is not None and self.experts_used is not None
                and self.experts_used < self.expert_count)

    def __post_init__(self) -> None:
        for name in ("model_weight_bytes", "active_weight_bytes"):
            object.__setattr__(self, name, positive(getattr(self, name), name))
        if self.active_weight_bytes > self.model_weight_bytes:
            raise PerformanceError("InvalidPerformanceInput",
                                   "active_weight_bytes exceeds model_weight_bytes",
                                   field="active_weight_bytes")
        for name, most in _BOUNDED.items():
            if getattr(self, name) is not None:
                object.__setattr__(self, name, integer(getattr(self, name), bad(name),
                                                       minimum=1, maximum=most))
        if self.routed_expert_parameters is not None:
            object.__setattr__(self, "routed_expert_parameters", integer(
                self.routed_expert_parameters, bad("routed_expert_parameters"), minimum=0,
                maximum=self.parameter_count or _BOUNDED["parameter_count"]))
        for name in ("window_layer_count", "window_kv_bytes_per_token"):
            object.__setattr__(self, name, integer(getattr(self, name), bad(name),
                                                   minimum=0, maximum=_BOUNDED[
                                                       "token_embedding_bytes"]))
        if self.window_layer_count and self.sliding_window is None:
            raise PerformanceError("InvalidPerformanceInput", "window_layer_count needs "
                                   "sliding_window", field="sliding_window")
        if self.parameter_count is not None:
            bits = self.model_weight_bytes * 8 / self.parameter_count
            if not MIN_BITS_PER_PARAMETER <= bits <= MAX_BITS_PER_PARAMETER:
                raise PerformanceError(
                    "InvalidPerformanceInput",
                    f"parameter_count: {self.parameter_count:,} parameters in "
                    f"{self.model_weight_bytes:,} bytes are {bits:.3g} bits each, outside "
                    f"[{MIN_BITS_PER_PARAMETER}, {MAX_BITS_PER_PARAMETER}]",
                    field="parameter_count", value=self.parameter_count)
            for name in ("active_parameter_count",):
                value = getattr(self, name)
                if value is not None and value > self.parameter_count:
                    raise PerformanceError("InvalidPerformanceInput",
                                           f"{name} exceeds parameter_count", field=name,
                                           value=value)
        if (self.expert_count is None) != (self.experts_used is None):
            raise PerformanceError("InvalidPerformanceInput",
                                   "expert_count and experts_used go together",
                                   field="experts_used")
        if (self.expert_count is not None and self.experts_used is not None
                and self.experts_used > self.expert_count):
            raise PerformanceError("InvalidPerformanceInput",
                                   f"experts_used exceeds expert_count {self.expert_count}",
                                   field="experts_used", value=self.experts_used)
        if self.routed_expert_bytes is not None:
            object.__setattr__(self, "routed_expert_bytes", integer(
                self.routed_expert_bytes, bad("routed_expert_bytes"), minimum=0,
                maximum=self.model_weight_bytes))
        for name in ("layer_nodes", "fused_layer_nodes"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(number(
                    getattr(self, name), bad(name), above=0, maximum=MAX_LAYER_NODES)))
        if (self.output_head_parameters is not None
                and self.output_head_parameters > (self.active_parameter_count or 0)):
            raise PerformanceError(
                "InvalidPerformanceInput",
                f"output_head_parameters: {self.output_head_parameters:,} exceed the "
                f"{self.active_parameter_count or 0:,} parameters a token computes with "
                "(active_parameter_count, or the parameters in the share of the weights "
                "one token reads): the head is among them",
                field="output_head_parameters", value=self.output_head_parameters)
        if (self.token_embedding_bytes or 0) >= self.model_weight_bytes:
            raise PerformanceError("InvalidPerformanceInput",
                                   "token_embedding_bytes must be below model_weight_bytes",
                                   field="token_embedding_bytes")

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> ModelTraffic:
        """A model's traffic; a spec without ``active_weight_bytes`` reads every weight.
        Its attention is the spec's shape (:func:`attention_traffic`), its windowed
        layers' cache rows stored at the spec's KV cache type."""
        shape = {name: getattr(spec, name) for name in ATTENTION_FIELDS}
        return cls(spec.model_weight_bytes,
                   spec.active_weight_bytes or spec.model_weight_bytes, spec.hidden_size,
                   active_parameter_count=spec.active_parameter_count,
                   expert_count=spec.expert_count, experts_used=spec.experts_used,
                   token_embedding_bytes=spec.token_embedding_bytes,
                   parameter_count=spec.parameter_count,
                   routed_expert_bytes=spec.routed_expert_bytes,
                   routed_expert_parameters=spec.routed_expert_parameters,
                   output_head_parameters=spec.output_head_parameters,
                   **layer_node_counts(spec.architecture, spec.experts_used),
                   **attention_traffic(shape, spec.kv_cache_type))

    @classmethod
    def dense(cls, model_weight_bytes: int, hidden_size: int | None = None,
              parameter_count: int | None = None) -> ModelTraffic:
        return cls(model_weight_bytes, model_weight_bytes, hidden_size,
                   active_parameter_count=parameter_count, parameter_count=parameter_count)

    @property
    def routed_bytes(self) -> int:
        """Bytes of the routed experts, all of them: as the model states them, else
        from ``active = model - routed + routed x k / n`` (numbers typed by hand); 0 for a
        dense model or one whose experts are not given."""
        if self.expert_count is None or self.experts_used is None or (
                self.experts_used >= self.expert_count):
            return 0
        if self.routed_expert_bytes is not None:
            return self.routed_expert_bytes
        unread = self.model_weight_bytes - self.active_weight_bytes
        share = 1 - self.experts_used / self.expert_count
        return min(self.model_weight_bytes, round(unread / share))

    def expert_share(self, tokens: int) -> float:
        """Expected share of the routed experts ``tokens`` independently routed tokens
        use: ``1 - (1 - k/n)^tokens``."""
        if self.expert_count is None or self.experts_used is None:
            return 1.0
        return 1 - (1 - self.experts_used / self.expert_count) ** tokens

    def read_share(self, tokens: int) -> float:
        """The share of the weights beside the token embeddings that a step of
        ``tokens`` tokens reads: the shared weights whole and the expected share of the
        routed experts; without them, all of it when the embeddings are known (they are
        apart), else the ``active_weight_bytes`` share."""
        body = self.model_weight_bytes - (self.token_embedding_bytes or 0)
        routed = self.routed_bytes
        if routed:
            return (body - routed + routed * self.expert_share(tokens)) / body
        if self.token_embedding_bytes is not None:
            return 1.0
        return self.active_weight_bytes / self.model_weight_bytes


# The numbers of a fleet file's ``[model]`` that ask for a speed estimate: numbers
# without any of them are a model whose traffic is unknown (a mixture of experts typed
# as its bytes alone would be estimated reading every weight).
SPEED_FIELDS = ("hidden_size", "active_weight_bytes", "parameter_count", "expert_count",
                "experts_used", "routed_expert_bytes", "routed_expert_parameters",
                "token_embedding_bytes", "output_head_parameters",
                "attention_heads", "head_size", "kv_heads", "sliding_window",
                "sliding_window_layers", "kv_lora_rank", "rope_head_size")


def latent_attention_width(heads: int, kv_lora_rank: int, rope_head_size: int) -> int:
    """The width latent attention computes with, as ``4 x width`` FLOPs per query-key pair
    (llama.cpp's absorbed form): each head scores a key over the latent rank and the
    rotary part (``2 x (rank + rope)`` FLOPs) and sums values over the rank
    (``2 x rank``), so ``heads x (rank + rope / 2)``."""
    return heads * (kv_lora_rank + -(-rope_head_size // 2))


def attention_traffic(shape: Mapping[str, Any], kv_cache_type: str = DEFAULT_CACHE_TYPE
                      ) -> dict[str, Any]:
    """The attention part of a model's traffic from its shape (the
    :data:`~planner.models.spec.ATTENTION_FIELDS` of a spec or of a fleet file's numbers,
    each absent or ``None`` when unknown): ``attention_heads x head_size`` is attention's
    width (latent attention's with ``kv_lora_rank`` and ``rope_head_size``,
    :func:`latent_attention_width`); ``sliding_window_layers`` attend over
    ``sliding_window`` tokens only, each caching ``kv_heads x head_size`` keys and as many
    values a token at ``kv_cache_type``, beside the request's ``kv_bytes_per_token``."""
    heads, size = shape.get("attention_heads"), shape.get("head_size")
    width = None if heads is None or size is None else heads * size
    if heads is not None and shape.get("kv_lora_rank") is not None:
        width = latent_attention_width(heads, shape["kv_lora_rank"],
                                       shape.get("rope_head_size") or 0)
    windowed = shape.get("sliding_window_layers") or 0
    row = (shape.get("kv_heads") or 0) * (size or 0)
    return {"attention_width": width, "attention_heads": heads,
            "kv_heads": shape.get("kv_heads"), "head_size": size,
            "sliding_window": shape.get("sliding_window") if windowed else None,
            "window_layer_count": windowed,
            "window_kv_bytes_per_token": windowed * 2 * row_bytes(kv_cache_type, row)}


def model_traffic(spec: ModelSpec | None, numbers: Mapping[str, Any] | None = None
                  ) -> ModelTraffic | None:
    """A model's traffic: from its spec (preset or GGUF), else from numbers typed by hand
    that state at least one of :data:`SPEED_FIELDS` (a fleet file's ``[model]``);
    ``None`` otherwise.

    The numbers' attention is read as a spec's (:func:`attention_traffic`), its windowed
    layers' cache at the default cache type (F16); a token computes with the parameters
    :func:`_typed_active_parameters` gives."""
    if spec is not None:
        return ModelTraffic.from_spec(spec)
    if not numbers or "model_weight_bytes" not in numbers or all(
            numbers.get(name) is None for name in SPEED_FIELDS):
        return None
    weight = numbers["model_weight_bytes"]
    active = numbers.get("active_weight_bytes") or weight
    parameters = numbers.get("parameter_count")
    return ModelTraffic(weight, active, numbers.get("hidden_size"),
                        active_parameter_count=_typed_active_parameters(numbers),
                        expert_count=numbers.get("expert_count"),
                        experts_used=numbers.get("experts_used"),
                        parameter_count=parameters,
                        routed_expert_bytes=numbers.get("routed_expert_bytes"),
                        routed_expert_parameters=numbers.get("routed_expert_parameters"),
                        token_embedding_bytes=numbers.get("token_embedding_bytes"),
                        output_head_parameters=numbers.get("output_head_parameters"),
                        **attention_traffic(numbers))


def _typed_active_parameters(numbers: Mapping[str, Any]) -> int | None:
    """The parameters one token computes with, of numbers typed by hand: with the routed
    experts' parameters, all but the experts a token leaves and the token embeddings
    (their bytes at the rate of the weights beside the experts); else the parameters in
    the share of the bytes one token reads."""
    weight: int = numbers["model_weight_bytes"]
    parameters: int | None = numbers.get("parameter_count")
    if parameters is None:
        return None
    routed: int | None = numbers.get("routed_expert_parameters")
    count: int | None = numbers.get("expert_count")
    used: int | None = numbers.get("experts_used")
    routed_bytes: int = numbers.get("routed_expert_bytes") or 0
    if routed and count and used and parameters > routed and weight > routed_bytes:
        per_byte = (parameters - routed) / (weight - routed_bytes)
        embedding: float = (numbers.get("token_embedding_bytes") or 0) * per_byte
        return max(1, round(parameters - routed * (1 - used / count) - embedding))
    active = numbers.get("active_weight_bytes") or weight
    return max(1, round(parameters * active / weight))


@dataclass(frozen=True, slots=True)
class StageLoad:
    """One stage's share of a model: its layers, the weight bytes it holds (without token
    embeddings) and of those its routed experts', the parameters one token computes
    with, its KV bytes per cached token, and its attention width and query heads summed
    over its layers. Its layers over a sliding window of ``window`` tokens keep
    ``window_kv_bytes_per_token``, ``window_attention_width`` and
    ``window_attention_heads`` apart."""

    layer_count: int
    weight_bytes: int
    routed_expert_bytes: int
    active_parameters: float
    kv_bytes_per_token: int
    attention_width: int
    window_kv_bytes_per_token: int = 0
    window_attention_width: int = 0
    window: int = 0
    embedding_row_bytes: int = 0  # on the first stage: one token's embedding row
    routed_active_parameters: float = 0.0  # of active_parameters, in routed experts
    attention_heads: int = 0
    window_attention_heads: int = 0
    # Of active_parameters, the output head's: a prompt's micro-batches multiply it for
    # the batch's output tokens only (:func:`planner.performance.computes_every_output`),
    # and so the feed-forward network of the model's last layer on the stage that
    # ``holds_last_layer``.
    head_parameters: float = 0.0
    holds_last_layer: bool = False

    def kv_tokens(self, cached: Any) -> tuple[Any, Any]:
        """Cached tokens of one sequence a full-attention and a windowed layer hold
        (numbers or arrays)."""
        return cached, np.minimum(cached, self.window) if self.window else 0 * cached

    def kv_bytes(self, cached: Any, sequences: Any = 1) -> Any:
        """The cache of ``sequences`` sequences of ``cached`` tokens each."""
        full, windowed = self.kv_tokens(cached)
        return sequences * (self.kv_bytes_per_token * full
                            + self.window_kv_bytes_per_token * windowed)


def even_layers(layer_count: int, devices: int) -> list[int]:
    """Layers per device of an even split (``-sm layer`` on equal GPUs): the first
    ``layer_count % devices`` devices take one more."""
    base, extra = divmod(layer_count, devices)
    return [base + (1 if index < extra else 0) for index in range(devices)]


def stage_loads(request: PlanningInput, plan: Plan, traffic: ModelTraffic) -> list[StageLoad]:
    """Each stage's share of the model (:class:`StageLoad`), from the request's per-layer
    weights and KV. The token embeddings leave the stage holding layer 0 when the
    request's weights are per layer (a GGUF puts them there), else every stage in
    proportion; a sliding window's layers are spread evenly over the layers."""
    weights = layer_weights(request)
    kv_layer = kv_bytes_per_layer_token(request)
    embedding = traffic.token_embedding_bytes or 0
    model = sum(weights)
    body = max(1, model - embedding)
    width = traffic.attention_width or traffic.hidden_size or 0
    heads = traffic.attention_heads or -(-width // TYPICAL_HEAD_SIZE)
    routed = traffic.routed_bytes
    windowed_share = min(1.0, traffic.window_layer_count / request.layer_count)
    loads = []
    for stage in plan.stages:
        held = sum(weights[stage.layer_start:stage.layer_end])
        if request.layer_weight_bytes is not None:
            held -= embedding if stage.layer_start == 0 else 0
        else:
            held -= round(embedding * held / model)
        held = max(0, held)
        active = (None if traffic.active_parameter_count is None else
                  traffic.active_parameter_count * held / body)
        # The output head spread as the parameters are (the estimate's stages share a
        # model's weights by their bytes).
        head = (0.0 if active is None else
                (traffic.output_head_parameters or 0) * held / body)
        # Of those, the routed experts': their parameters' share of the stage's routed
        # bytes where the model states them, else their share of the bytes one token
        # reads.
        one_token = body * traffic.read_share(1)
        if active is None or not routed:
            routed_active = 0.0
        elif traffic.routed_expert_parameters:
            routed_active = (traffic.routed_expert_parameters * traffic.expert_share(1)
                             * held / body)
        else:
            routed_active = active * routed * traffic.expert_share(1) / one_token
        windowed = stage.layer_count * windowed_share
        full = stage.layer_count - windowed
        loads.append(StageLoad(
            layer_count=stage.layer_count, weight_bytes=held,
            routed_active_parameters=routed_active,
            routed_expert_bytes=round(routed * held / body),
            active_parameters=active if active is not None else 0.0,
            kv_bytes_per_token=kv_layer * stage.layer_count,
            attention_width=round(width * full), attention_heads=round(heads * full),
            window=(traffic.sliding_window or 0) if windowed else 0,
            window_kv_bytes_per_token=round(traffic.window_kv_bytes_per_token
                                            * stage.layer_count / request.layer_count),
            window_attention_width=round(width * windowed),
            window_attention_heads=round(heads * windowed), head_parameters=head,
            holds_last_layer=stage.layer_end == request.layer_count,
            embedding_row_bytes=(EMBEDDING_ROW_BYTES_PER_VALUE * (traffic.hidden_size or 0)
                                 if embedding and stage.layer_start == 0 else 0)))
    return loads


def fleet_model_traffic(model: Any, base_dir: Any = None) -> ModelTraffic | None:
    """The traffic of a fleet file's model (``planner.fleet.ModelChoice``): a preset's or
    GGUF file's, or its numbers' (:func:`model_traffic`). Raises what loading the model
    raises."""
    return model_traffic(model.spec(base_dir), model.numbers)
