"""Planning with llama.cpp's memory (``memory_model="llamacpp"``): what a plan charges
each layer and each node (:class:`LlamaCppCosts`), each node's backend overhead from its
GPU kind, and the costs of a GGUF model on a fleet's nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from planner._validate import flag
from planner.errors import InvalidInput
from planner.limits import DEFAULT_CACHE_TYPE, DEFAULT_PARALLEL_LANES, DEFAULT_UBATCH
from planner.llamacpp.estimate import (
    _model,
    device_compute_bytes,
    layer_kv_bytes,
    layer_state_bytes,
    stage_compute_bytes,
)
from planner.llamacpp.layout import LlamaCppModel, model_from_gguf
from planner.llamacpp.settings import (
    LLAMA_MAX_SEQ,
    LlamaCppSettings,
    _bad,
    _cache_type,
    _check_positive,
    server_settings,
)
from planner.planning.memory_rule import LayerCosts


@dataclass(frozen=True, slots=True)
class LlamaCppCosts:
    """What a plan with ``memory_model="llamacpp"`` charges each layer and each node.

    Per layer: its weights and KV cache as llama.cpp allocates them at the context (one
    unified cache for ``lanes`` lanes, as ``planner launch`` runs it; the sliding-window
    cache sized for ``lanes``, the most the search tries). The last layer, always on the
    last stage, also carries the output head (and a tied ``token_embd``'s second copy)
    and the output device's compute buffer. Per node: its backend overhead and the
    compute buffer of a pipeline stage before the last, reserved on every node (so a
    last stage is charged both, on the safe side). A plan of one stage is costed as
    llama.cpp runs it, on one device without pipeline parallelism (:meth:`for_stages`):
    the last layer carries that device's compute buffer and nodes reserve only their
    overhead, so the plan charges what llama.cpp allocates there.
    """

    model: LlamaCppModel
    cache_type_k: str = DEFAULT_CACHE_TYPE
    cache_type_v: str = DEFAULT_CACHE_TYPE
    flash_attn: bool = True
    ubatch: int = DEFAULT_UBATCH
    lanes: int = DEFAULT_PARALLEL_LANES
    overhead_bytes: tuple[tuple[str, int], ...] = ()
    """``(node_id, bytes)``: each node's backend overhead (0 for nodes not listed)."""
    one_device: bool = False
    """Costs of a plan of one stage (:meth:`for_stages`): llama.cpp runs one device
    without pipeline parallelism, so the last layer carries that device's whole compute
    buffer (no copies of its inputs) and nodes reserve only their overhead."""

    def __post_init__(self) -> None:
        _model(self.model)
        if isinstance(self.overhead_bytes, str | bytes) or not isinstance(
                self.overhead_bytes, Sequence | Mapping) or not all(
                isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2
                for pair in (self.overhead_bytes.items() if isinstance(
                    self.overhead_bytes, Mapping) else self.overhead_bytes)):
            raise _bad("overhead_bytes")("must be (node id, bytes) pairs",
                                         self.overhead_bytes)
        object.__setattr__(self, "lanes", _check_positive(self.lanes, "lanes",
                                                          maximum=LLAMA_MAX_SEQ))
        object.__setattr__(self, "ubatch", _check_positive(self.ubatch, "ubatch"))
        object.__setattr__(self, "flash_attn", flag(self.flash_attn, _bad("flash_attn")))
        object.__setattr__(self, "one_device", flag(self.one_device, _bad("one_device")))
        self.settings(4096)  # the cache types, ubatch and flash attention are valid
        object.__setattr__(self, "overhead_bytes", tuple(sorted(
            (str(node), _check_positive(size, f"overhead_bytes.{node}", minimum=0))
            for node, size in dict(self.overhead_bytes).items())))

    @property
    def layer_count(self) -> int:
        return self.model.layer_count

    def settings(self, context_length: int, lanes: int | None = None) -> LlamaCppSettings:
        """The llama-server settings of a plan at ``context_length`` with ``lanes``
        parallel sequences (default :attr:`lanes`), as ``planner launch`` runs it."""
        return server_settings(
            context_length=context_length, cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v, parallel=self.lanes if lanes is None else lanes,
            kv_unified=True, ubatch=self.ubatch, flash_attn=self.flash_attn)

    # -- the memory rule the planner costs layers and nodes with ------------------------
    name: ClassVar[str] = "llamacpp"

    def check(self, request: Any) -> None:
        if self.layer_count != request.layer_count:
            raise InvalidInput("memory_rule", f"describes {self.layer_count} layers but "
                               f"layer_count is {request.layer_count}",
                               value=self.layer_count)

    def layer_costs(self, request: Any, context_length: int, lanes: int) -> LayerCosts:
        """Each layer's weights, KV cache and recurrent state as llama.cpp allocates them
        at the context with ``lanes`` sequences (the sliding-window cache and the
        recurrent state grow with the lanes); the last layer's ``other`` is the output
        head and the output device's compute buffer."""
        settings = self.settings(context_length, lanes)
        model = self.model
        count = model.layer_count
        other = [0] * count
        if self.one_device:
            compute = device_compute_bytes(model, settings, [(0, count)])[0][0]
        else:
            compute = stage_compute_bytes(model, settings)[1]
        other[count - 1] = model.output_bytes + model.tied_embedding_bytes + compute
        return LayerCosts(
            weights=tuple(layer.weight_bytes for layer in model.layers),
            kv=tuple(layer_kv_bytes(model, index, settings) for index in range(count)),
            state=tuple(layer_state_bytes(model, index, settings) for index in range(count)),
            other=tuple(other))

    def node_reserves(self, request: Any, context_length: int,
                      lanes: int) -> dict[str, int]:
        """Per node: its backend overhead and the compute buffer of a pipeline stage
        before the last."""
        compute = self._stage_compute_bytes(context_length, lanes)
        overheads = dict(self.overhead_bytes)
        return {node.node_id: overheads.get(node.node_id, 0) + compute
                for node in request.nodes}

    def _stage_compute_bytes(self, context_length: int, lanes: int | None = None) -> int:
        if self.one_device:
            return 0  # the last layer carries the one device's compute buffer
        return stage_compute_bytes(self.model, self.settings(context_length, lanes))[0]

    def for_stages(self, count: int) -> LlamaCppCosts:
        """The costs of a plan of ``count`` stages: one stage runs on one device, without
        pipeline parallelism's copies (:attr:`one_device`); more stages, with them."""
        one = count == 1
        return self if one == self.one_device else replace(self, one_device=one)

    def lanes_matter(self, request: Any) -> bool:
        # The sliding-window cache, the recurrent state and the compute buffers that read
        # them are sized per sequence; the planner searches each lane count whose costs
        # differ.
        return True

    def layer_bytes(self, context_length: int) -> tuple[int, ...]:
        return self.layer_costs(None, context_length, self.lanes).totals

    def kv_bytes(self, context_length: int, layer_start: int, layer_end: int) -> int:
        """KV cache of layers ``[layer_start, layer_end)`` at the context."""
        return sum(self.layer_costs(None, context_length, self.lanes).kv[layer_start:layer_end])

    def reserve_bytes(self, node_id: str, context_length: int) -> int:
        return (dict(self.overhead_bytes).get(node_id, 0)
                + self._stage_compute_bytes(context_length))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model.to_dict(),
                "cache_type_k": self.cache_type_k,
                "cache_type_v": self.cache_type_v, "flash_attn": self.flash_attn,
                "ubatch": self.ubatch, "lanes": self.lanes,
                "overhead_bytes": dict(self.overhead_bytes),
                **({"one_device": True} if self.one_device else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlamaCppCosts:
        values = dict(data)
        values.pop("name", None)  # the rule's name, as the request's dict form gives it
        values["model"] = LlamaCppModel.from_dict(values["model"])
        values["overhead_bytes"] = tuple(dict(values.get("overhead_bytes") or {}).items())
        return cls(**values)


def node_overheads(nodes: Sequence[Any], node_kinds: Mapping[str, str] | None = None,
                   catalog: Sequence[Any] | None = None,
                   backend_overheads: Mapping[str, int] | None = None) -> dict[str, int]:
    """Each node's llama.cpp backend overhead, from its catalog kind in ``data/gpus.toml``
    (:func:`planner.models.gpus.node_gpu_kind`; ``node_kinds`` are the kinds nodes name,
    as a fleet file's ``gpu`` gives them); nodes of unknown kind are left out (overhead
    0)."""
    from planner.models import load_backend_overheads, load_gpu_catalog
    from planner.models.gpus import GpuModel, node_gpu_kinds
    from planner.planning import NodeBudget

    if isinstance(nodes, str | bytes) or not isinstance(nodes, Sequence) or not all(
            isinstance(node, NodeBudget) for node in nodes):
        raise _bad("nodes")("must be a list of NodeBudget", nodes)
    for name, mapping in (("node_kinds", node_kinds), ("backend_overheads", backend_overheads)):
        if mapping is not None and not isinstance(mapping, Mapping):
            raise _bad(name)("must be a mapping", mapping)
    if catalog is not None and (isinstance(catalog, str | bytes)
                                or not isinstance(catalog, Sequence)
                                or not all(isinstance(gpu, GpuModel) for gpu in catalog)):
        raise _bad("catalog")("must be a list of GpuModel", catalog)

    catalog = load_gpu_catalog() if catalog is None else catalog
    defaults = load_backend_overheads() if backend_overheads is None else backend_overheads
    return {node_id: gpu.llamacpp_overhead(defaults)
            for node_id, gpu in node_gpu_kinds(nodes, catalog, node_kinds).items()
            if gpu is not None}


def costs_from_gguf(path: str | Path, *, kv_cache_type: str = DEFAULT_CACHE_TYPE,
                    nodes: Sequence[Any] = (), node_kinds: Mapping[str, str] | None = None,
                    lanes: int = DEFAULT_PARALLEL_LANES, flash_attn: bool = True) -> LlamaCppCosts:
    """:class:`LlamaCppCosts` for the GGUF model at ``path`` on ``nodes``."""
    kv_cache_type = _cache_type(kv_cache_type, "kv_cache_type")
    return LlamaCppCosts(model_from_gguf(path), cache_type_k=kv_cache_type,
                         cache_type_v=kv_cache_type, flash_attn=flash_attn, lanes=lanes,
                         overhead_bytes=tuple(node_overheads(nodes, node_kinds).items()))
