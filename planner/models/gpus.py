"""A catalog of accelerators: memory, and what sizing and the speed estimate need.

Read from ``data/gpus.toml`` or a catalog file of the same format: one ``[[gpu]]`` table
per accelerator kind. An entry needs only ``name`` and its memory; everything else is
optional, so a file with your own prices needs no more than this::

    [[gpu]]
    name = "H100 at our provider"
    memory = "80 GiB"
    price_per_hour = 2.10

Sizes and bandwidths are written with units (``memory = "80 GiB"``,
``memory_bandwidth = "3.35 TB/s"``) or as numbers in the unit a ``*_bytes`` or
``*_bytes_per_s`` key names (``memory_bytes = 85899345920``, ``1.0e12``), not both. The
shipped catalog gives every source (a test keeps it so). The fields:

``name`` (required), ``vendor``, ``note``
    What the kind is; ``note`` says where its memory figure comes from.
``memory`` / ``memory_bytes`` (required)
    The memory a model may use on one node. Apple machines list the Metal working-set
    budget (the GPU's share of unified memory), not the total RAM; they also give
    ``unified_memory`` (``unified_memory_bytes``) and ``working_set_fraction``, and the
    budget must equal their product.
``id``
    The kind's id, used for node ids (``<id>-00``, ``<id>-01``, ...). Default: derived
    from the name (``"NVIDIA H100 SXM 80GB"`` -> ``"h100-sxm-80gb"``).
``price_per_hour``, ``price_kind``, ``price_source``, ``price_date``
    USD per GPU-hour; whether it is ``"rented"`` (what a provider charges, the default)
    or ``"owned"`` (a purchase price spread over hours of use); where it was listed and
    when (``YYYY-MM-DD``). Sizing compares one kind of price at a time.
``memory_bandwidth`` / ``memory_bandwidth_bytes_per_s``, ``memory_bandwidth_source``
    The vendor's peak memory bandwidth and where it is stated.
``headroom`` / ``headroom_bytes``
    Runtime headroom of a node of this kind (its ``runtime_headroom_bytes``), default 0.
``stage_transfer_latency_ms``
    Stage-transfer latency of a node of this kind (``5``, ``0.5``, ``"500 us"``),
    unknown when absent.
``max_count``
    How many of this kind can be had; unlimited when absent.
``annual_failure_rate``, ``repair_hours``
    Failures per node-year and mean hours to repair (:mod:`planner.availability`). A
    catalog file's ``[defaults]`` table gives them for every kind of that file that does
    not state its own (the shipped catalog's: 0.119 and 72).
``backend``, ``llamacpp_overhead`` / ``llamacpp_overhead_bytes``
    The llama.cpp backend the kind runs and its own fixed overhead per device
    (:mod:`planner.llamacpp`); a backend's default is in
    ``[llamacpp.backend_overhead_bytes]``.
``memory_type``
    ``hbm``, ``gddr``, ``lpddr`` or ``ddr`` (:data:`MEMORY_TYPES`): the speed estimate's
    read efficiencies differ by it (:mod:`planner.performance`).
``fp16_tflops``, ``fp16_tflops_source``
    Dense (no sparsity) FP16 matrix throughput with FP16 accumulate, in TFLOPS, and
    where it is stated: a data-centre or workstation card's datasheet figure, a GeForce
    card's FP16-accumulate tensor figure from its architecture whitepaper (NVIDIA
    publishes a second one, with FP32 accumulate, half of it for GeForce cards: 165.2
    against 330.3 for an RTX 4090), an Apple GPU's FP32 figure (it runs FP16 at the same
    rate). Prefill (time to first token) and the compute ceiling of large batches read
    it. A figure below half the kind's FP32 vector rate (:attr:`GpuModel.vector_tflops`,
    from ``shader_count`` and ``boost_clock_mhz`` when the entry gives them) is refused:
    it is no matrix figure.
``shader_count``, ``boost_clock_mhz``, ``shader_source``
    Where the vendor publishes no FP16 matrix figure: the GPU's shaders as the vendor
    counts them (stream processors, CUDA cores, Xe-cores, GPU cores), its boost clock
    and where they are stated. A CPU (``backend = "cpu"``, ``memory_type`` ``ddr`` or
    ``lpddr``) gives ``core_count``, ``simd_width_bits`` (the vector width llama.cpp's
    kernels use) and ``core_source`` instead of shaders. The speed estimate then
    computes with the FP32 vector rate they give (:attr:`GpuModel.vector_tflops`), and
    says so with a wider error. A kind that gives its shaders but no clock (Apple states
    none) computes at its shaders' lanes times the FP16 FLOPs a lane of its vendor's
    measured kinds that state both; a kind with neither gets a rate from its memory
    bandwidth (:mod:`planner.performance`).
``architecture``
    With ``shader_count``: the GPU's architecture (``rdna3``, ``ampere``, ... : the keys
    of :data:`planner.models.architectures.GPU_ARCHITECTURES`), whose FP16 matrix, packed FP16
    and int8 dot-product rates a lane and clock the stand-in from shaders then follows,
    as far as llama.cpp's kernels reach them on the run's backend. Without it the
    stand-in takes a matrix unit's 8 FLOPs a lane and clock (RDNA 3, NVIDIA's GeForce
    tensor cores since Ampere) and says so. An Apple kind (no clock) names it for units
    beyond its vector ones: ``apple10``, the M5's Neural Accelerators, which its lanes
    then compute on at the multiple Apple states.

:class:`GpuModel` checks its fields however it is made (a file, ``from_dict``, a
constructor call, ``dataclasses.replace``). Every problem raises
:class:`~planner.models.ModelError` with code ``InvalidGpuCatalog`` naming the file, the
entry and the field; a catalog file that does not exist raises ``GpuCatalogNotFound``.
"""

from __future__ import annotations

import datetime
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

from planner._validate import integer, number, shown, text
from planner.limits import (
    DEFAULT_PRICE_KIND,
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_BYTES,
    MAX_CLOCK_MHZ,
    MAX_LATENCY_MS,
    MAX_NODE_BYTES,
    MAX_NODES,
    MAX_PRICE_PER_HOUR,
    MAX_SHADERS,
    MAX_TFLOPS,
    MIN_BANDWIDTH_BYTES_PER_S,
    MIN_CLOCK_MHZ,
    MIN_PRICE_PER_HOUR,
    MIN_TFLOPS,
)
from planner.models.architectures import FMA_FLOPS, GPU_ARCHITECTURES
from planner.models.presets import data_dir
from planner.models.spec import ModelError
from planner.units import UnitError, parse_bandwidth, parse_bytes, parse_latency_ms

# llama.cpp backends a GPU kind can run (planner.llamacpp's fixed overhead per device).
BACKENDS = ("cuda", "rocm", "metal", "vulkan", "sycl", "cpu", "rpc")
# The backend of a kind that is a CPU: its rates are its cores' (core_count, simd_width_bits).
CPU_BACKEND = "cpu"
# The backend that forwards to an rpc-server, whose device may be a CPU or a GPU.
RPC_BACKEND = "rpc"
# The GPU vendor each of llama.cpp's vendor backends runs on (b11434's docs/build.md: CUDA
# "using an NVIDIA GPU", HIP "HIP-supported AMD GPUs", Metal on Apple silicon, SYCL "to
# support Intel GPU"; docs/backend/SYCL.md dropped NVIDIA's and AMD's GPUs in 2026.02).
# Vulkan runs on any vendor's GPU, RPC on its server's device, cpu on any vendor's CPU.
BACKEND_VENDORS = {"cuda": "NVIDIA", "rocm": "AMD", "metal": "Apple", "sycl": "Intel"}


class OtherVendorsBackend(NamedTuple):
    """A vendor backend asked of another vendor's GPU (:func:`other_vendors_backend`)."""

    backend: str
    runs_on: str
    """The vendor whose GPUs ``backend`` runs on."""
    vendor: str
    own: tuple[str, ...]
    """The backends ``vendor``'s GPUs run."""

    def said(self, then: str = "") -> str:
        """The rule, for a message; ``then`` is said inside its closing parenthesis."""
        return (f"llama.cpp's {self.backend} backend runs on {self.runs_on}'s GPUs only "
                f"({self.vendor}'s run {' or '.join(self.own)}{then})")


def other_vendors_backend(vendor: str | None, backend: str | None
                          ) -> OtherVendorsBackend | None:
    """``backend`` where it cannot run on a GPU of ``vendor`` (``None``: it can, or the
    vendor or backend is not one of :data:`BACKEND_VENDORS`)."""
    runs_on = BACKEND_VENDORS.get(backend or "")
    if (backend is None or runs_on is None or vendor is None
            or vendor not in BACKEND_VENDORS.values() or vendor == runs_on):
        return None
    own = tuple(name for name, maker in BACKEND_VENDORS.items() if maker == vendor)
    return OtherVendorsBackend(backend, runs_on, vendor, (*own, "vulkan"))


def is_cpu_kind(backend: str | None) -> bool:
    """Whether a kind of ``backend`` is a CPU (its cores compute; it has no GPU's matrix
    or packed FP16 units), the one test of it."""
    return backend == CPU_BACKEND

# Memory a kind reads its weights from: stacked HBM, GDDR on a card, LPDDR shared with the
# CPU (Apple silicon, DGX Spark), or a CPU's DDR modules; the speed estimate's figures
# differ by it.
MEMORY_TYPES = ("hbm", "gddr", "lpddr", "ddr")
# What a price per hour is: what a provider charges, or a purchase spread over hours.
PRICE_KINDS = ("rented", "owned")
# The unit forms a catalog file may write instead of a field whose name carries the unit.
UNIT_SPELLINGS = {"memory": "memory_bytes", "unified_memory": "unified_memory_bytes",
                  "headroom": "headroom_bytes", "llamacpp_overhead": "llamacpp_overhead_bytes",
                  "memory_bandwidth": "memory_bandwidth_bytes_per_s"}

_KIND_ID = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)*$")
_VENDOR_WORDS = {"nvidia", "amd", "apple", "intel", "geforce", "radeon"}
# FP32 lanes of one shader as each vendor counts its shaders: a stream processor (AMD) or
# CUDA core (NVIDIA) is one lane; an Xe-core (Intel Xe-HPG and Xe2: 16 or 8 vector
# engines of 8 or 16 lanes) and an Apple GPU core hold 128 (docs/sources.md §6).
FP32_LANES_PER_SHADER = {"AMD": 1, "NVIDIA": 1, "Intel": 128, "Apple": 128}
# A message lists at most this many kinds.
_LISTED_KINDS = 20


def kind_id(name: str) -> str:
    """A node id prefix from a GPU's name: ``"NVIDIA H100 SXM 80GB"`` -> ``"h100-sxm-80gb"``."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    kept = [w for w in words if w and w not in _VENDOR_WORDS] or words
    return "-".join(kept)[:24].strip("-") or "gpu"


def listed_kinds(catalog: Sequence[GpuModel]) -> str:
    """The catalog's kind ids for a message, the first few of a long catalog."""
    ids = [gpu.kind for gpu in catalog[:_LISTED_KINDS]]
    more = len(catalog) - len(ids)
    return ", ".join(ids) + (f" and {more:,} more" if more > 0 else "") if ids else "none"


def _fail(problem: str, value: Any = None) -> ModelError:
    """A field's problem, before the file and field are known (:func:`_located`)."""
    return ModelError("InvalidGpuCatalog", problem, problem=problem, value=value)


def _located(error: ModelError, where: str, field_name: str) -> ModelError:
    return _bad(where, field_name, error.details.get("problem", error.message),
                error.details.get("value"))


def _whole(minimum: int, maximum: int) -> Callable[[Any], int]:
    return lambda value: integer(value, _fail, minimum=minimum, maximum=maximum)


def _real(**bounds: float) -> Callable[[Any], float]:
    return lambda value: float(number(value, _fail, **bounds))


def _text(value: Any) -> str:
    return text(value, _fail)


def _kind_id(value: Any) -> str:
    if not isinstance(value, str) or not _KIND_ID.match(value):
        raise _fail("must be lower-case letters and digits joined by - _ or .", value)
    return value


def _date(value: Any) -> str:
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise _fail("must be a date written YYYY-MM-DD", value)


def _latency(value: Any) -> int | float:
    latency = number(value, _fail, minimum=0, maximum=MAX_LATENCY_MS)
    return latency if isinstance(latency, int) or not latency.is_integer() else int(latency)


def _one_of(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise _fail(f"must be one of {', '.join(options)}", value)
        return str(value)
    return check


# How each field of GpuModel is checked (``None``: absent). A new field is a GpuModel
# attribute and a row here (and, for a file spelling with units, a row of _FROM_FILE).
_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": _text,
    "memory_bytes": _whole(1, MAX_NODE_BYTES),
    "vendor": _text,
    "note": _text,
    "unified_memory_bytes": _whole(1, MAX_BYTES),
    "working_set_fraction": _real(above=0, maximum=1),
    "annual_failure_rate": _real(minimum=0),
    "repair_hours": _real(minimum=0),
    "id": _kind_id,
    "price_per_hour": _real(minimum=MIN_PRICE_PER_HOUR, maximum=MAX_PRICE_PER_HOUR),
    "price_kind": _one_of(PRICE_KINDS),
    "price_source": _text,
    "price_date": _date,
    "memory_bandwidth_bytes_per_s": _whole(MIN_BANDWIDTH_BYTES_PER_S,
                                           MAX_BANDWIDTH_BYTES_PER_S),
    "memory_bandwidth_source": _text,
    "headroom_bytes": _whole(0, MAX_NODE_BYTES),
    "stage_transfer_latency_ms": _latency,
    "max_count": _whole(0, MAX_NODES),
    "backend": _one_of(BACKENDS),
    "llamacpp_overhead_bytes": _whole(0, MAX_BYTES),
    "memory_type": _one_of(MEMORY_TYPES),
    "fp16_tflops": _real(minimum=MIN_TFLOPS, maximum=MAX_TFLOPS),
    "fp16_tflops_source": _text,
    "shader_count": _whole(1, MAX_SHADERS),
    "boost_clock_mhz": _real(minimum=MIN_CLOCK_MHZ, maximum=MAX_CLOCK_MHZ),
    "shader_source": _text,
    "architecture": _one_of(tuple(GPU_ARCHITECTURES)),
    "core_count": _whole(1, MAX_SHADERS),
    "simd_width_bits": _whole(32, 4096),
    "core_source": _text,
}


def _file_bytes(value: Any) -> Any:
    """A ``*_bytes`` value as a file may write it: a whole number (``1.0e12`` too) or a
    size with a unit."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return parse_bytes(value, bare_bytes=True)
    return value


def _file_date(value: Any) -> Any:
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


# What a catalog file may write beyond the constructor's values, read into them: the
# unit spellings (UNIT_SPELLINGS) and these.
_FROM_FILE: dict[str, Callable[[Any], Any]] = {
    "memory_bytes": _file_bytes,
    "unified_memory_bytes": _file_bytes,
    "headroom_bytes": _file_bytes,
    "llamacpp_overhead_bytes": _file_bytes,
    "memory_bandwidth_bytes_per_s": lambda value: parse_bandwidth(value, bare_bytes_per_s=True),
    "stage_transfer_latency_ms": parse_latency_ms,
    "price_date": _file_date,
}
# Fields that say something about another and mean nothing without it.
_NEEDS = {"price_kind": "price_per_hour", "price_source": "price_per_hour",
          "price_date": "price_per_hour",
          "memory_bandwidth_source": "memory_bandwidth_bytes_per_s",
          "fp16_tflops_source": "fp16_tflops",
          "shader_source": "shader_count", "core_source": "core_count",
          "architecture": "shader_count",
          "simd_width_bits": "core_count",
          "unified_memory_bytes": "working_set_fraction",
          "working_set_fraction": "unified_memory_bytes"}


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One accelerator kind of the catalog (the optional fields are ``None`` when the
    catalog does not give them; ``price_kind`` is ``"rented"`` when a price is given
    without one). Made any way, its fields are checked (``InvalidGpuCatalog``)."""

    name: str
    memory_bytes: int
    vendor: str | None = None
    note: str | None = None
    unified_memory_bytes: int | None = None
    working_set_fraction: float | None = None
    # Failures per node-year and mean hours to repair (``planner.availability``).
    annual_failure_rate: float | None = None
    repair_hours: float | None = None
    id: str | None = None
    price_per_hour: float | None = None
    price_kind: str | None = None
    price_source: str | None = None
    price_date: str | None = None
    memory_bandwidth_bytes_per_s: int | None = None
    memory_bandwidth_source: str | None = None
    headroom_bytes: int | None = None
    stage_transfer_latency_ms: int | float | None = None
    max_count: int | None = None
    # The llama.cpp backend it runs, and its own fixed overhead (planner.llamacpp).
    backend: str | None = None
    llamacpp_overhead_bytes: int | None = None
    # What the speed estimate reads beyond bandwidth (planner.performance).
    memory_type: str | None = None
    fp16_tflops: float | None = None
    fp16_tflops_source: str | None = None
    # Where no FP16 figure is published: the GPU's shaders and clock, from which the
    # speed estimate derives a stand-in (:func:`vector_tflops`).
    shader_count: int | None = None
    boost_clock_mhz: float | None = None
    shader_source: str | None = None
    # Which units those shaders have (planner.models.architectures).
    architecture: str | None = None
    # A CPU (backend "cpu"): its cores and the SIMD width llama.cpp's kernels use.
    core_count: int | None = None
    simd_width_bits: int | None = None
    core_source: str | None = None

    def __post_init__(self) -> None:
        for key, check in _CHECKS.items():
            value = getattr(self, key)
            if value is None and key in ("name", "memory_bytes"):
                raise _bad("GpuModel", key, "is required")
            if value is not None:
                try:
                    object.__setattr__(self, key, check(value))
                except ModelError as error:
                    raise _located(error, "GpuModel", key) from None
        for key, needed in _NEEDS.items():
            if getattr(self, key) is not None and getattr(self, needed) is None:
                raise _bad("GpuModel", key, f"is given without {needed}")
        if (self.architecture is not None and self.vendor is not None
                and self.vendor != GPU_ARCHITECTURES[self.architecture].vendor):
            raise _bad("GpuModel", "architecture",
                       f"is {GPU_ARCHITECTURES[self.architecture].vendor}'s, not {self.vendor}'s",
                       self.architecture)
        other = other_vendors_backend(self.vendor, self.backend)
        if other is not None:
            raise _bad("GpuModel", "backend",
                       f"does not run on {self.vendor}'s GPUs: {other.said()}", self.backend)
        vector = self.vector_tflops
        if (self.fp16_tflops is not None and vector is not None
                and self.fp16_tflops < vector / 2):
            raise _bad("GpuModel", "fp16_tflops",
                       f"is below half the kind's FP32 vector rate of {vector:,.1f} TFLOPS "
                       "(shader_count x boost_clock_mhz): give the dense FP16 matrix "
                       "figure with FP16 accumulate", self.fp16_tflops)
        if self.price_per_hour is not None and self.price_kind is None:
            object.__setattr__(self, "price_kind", DEFAULT_PRICE_KIND)
        if self.unified_memory_bytes is not None and self.working_set_fraction is not None:
            budget = self.unified_memory_bytes * Fraction(str(self.working_set_fraction))
            if budget != self.memory_bytes:
                raise _bad("GpuModel", "memory_bytes",
                           f"must be unified_memory_bytes x working_set_fraction = {budget}",
                           self.memory_bytes)

    @property
    def vector_tflops(self) -> float | None:
        """The FP32 vector rate at :attr:`boost_clock_mhz` of :attr:`shader_count` shaders
        (:data:`FP32_LANES_PER_SHADER` lanes each), or of a CPU's :attr:`core_count`
        cores of :attr:`simd_width_bits` (one vector unit each), two FLOPs per lane per
        cycle (a fused multiply-add), in TFLOPS; ``None`` without them."""
        if self.boost_clock_mhz is None:
            return None
        if self.core_count is not None and self.simd_width_bits is not None:
            lanes = self.core_count * self.simd_width_bits // 32
        elif self.shader_lanes is not None:
            lanes = self.shader_lanes
        else:
            return None
        return FMA_FLOPS * lanes * self.boost_clock_mhz * 1e6 / 1e12

    @property
    def shader_lanes(self) -> int | None:
        """The FP32 lanes of :attr:`shader_count` shaders as the vendor counts them
        (:data:`FP32_LANES_PER_SHADER`); ``None`` without a count or for another vendor."""
        if self.shader_count is None or self.vendor not in FP32_LANES_PER_SHADER:
            return None
        return self.shader_count * FP32_LANES_PER_SHADER[self.vendor]

    def llamacpp_overhead(self, defaults: Mapping[str, int]) -> int:
        """Bytes llama.cpp's backend takes on this GPU beyond its logged buffers: the
        kind's own figure, else its backend's default from ``defaults``."""
        if self.llamacpp_overhead_bytes is not None:
            return self.llamacpp_overhead_bytes
        return defaults.get(self.backend or "", 0)

    @property
    def kind(self) -> str:
        """The kind's id: ``id`` when given, else derived from the name."""
        return self.id if self.id is not None else kind_id(self.name)

    @property
    def usable_bytes(self) -> int:
        """Usable bytes of one node of this kind (docs/rules.md §3 with its headroom)."""
        return max(0, self.memory_bytes - (self.headroom_bytes or 0))

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuModel:
        """An entry as a catalog file or :meth:`to_dict` writes it (units allowed)."""
        return _gpu(data, "GpuModel.from_dict")


class _KindIndex:
    """A catalog looked up by kind id or name, by node id prefix and by memory."""

    def __init__(self, catalog: Sequence[GpuModel]) -> None:
        self.catalog = tuple(catalog)
        self.named: dict[str, GpuModel] = {}
        for gpu in self.catalog:
            for key in (gpu.name, gpu.kind):
                self.named.setdefault(key.strip().casefold(), gpu)
        self.by_id = {gpu.kind: gpu for gpu in self.catalog}
        self.by_memory: dict[int, list[GpuModel]] = {}
        for gpu in self.catalog:
            self.by_memory.setdefault(gpu.memory_bytes, []).append(gpu)

    def named_kind(self, name: str) -> GpuModel:
        found = self.named.get(name.strip().casefold()) if isinstance(name, str) else None
        if found is None:
            raise ModelError("UnknownGpuKind", f"gpu {shown(name)} is not in the catalog; "
                             f"known kinds: {listed_kinds(self.catalog)}",
                             field="gpu", value=name)
        return found

    def of(self, node: Any, gpu: str | None) -> GpuModel | None:
        if gpu is not None:
            try:
                return self.named_kind(gpu)
            except ModelError as error:
                raise ModelError(error.code, f"node {node.node_id!r}: {error.message}",
                                 **{**error.details, "node_id": node.node_id}) from None
        prefix, _, number = node.node_id.rpartition("-")
        if number.isascii() and number.isdigit() and prefix in self.by_id:
            return self.by_id[prefix]
        same = self.by_memory.get(node.detected_vram_bytes, ())
        return same[0] if len(same) == 1 else None


def node_gpu_kind(node: Any, catalog: Sequence[GpuModel], gpu: str | None = None
                  ) -> GpuModel | None:
    """The catalog kind a node is, or ``None`` when that is not known for sure.

    ``node`` is a planning node (a :class:`~planner.planning.NodeBudget`: its ``node_id``
    and ``detected_vram_bytes`` are read); ``gpu`` is the kind the node names (a fleet
    file's ``gpu``: a kind id or name, any case). The rule, the one every part of the
    package uses (speed estimate, llama.cpp overhead, failure figures, sizing):

    1. a ``gpu`` the node names wins; a name the catalog lacks raises
       :class:`ModelError` ``UnknownGpuKind``;
    2. else a node id ``<kind>-<digits>`` (the ids "Add GPUs" and ``count`` give) naming
       a catalog kind id is that kind;
    3. else the one catalog kind whose ``memory_bytes`` is exactly the node's detected
       memory; when no kind or several kinds have it (the H100 SXM and PCIe cards report
       the same 81,559 MiB) the kind is unknown: ``None``, never a guess.
    """
    return _KindIndex(catalog).of(node, gpu)


def node_gpu_kinds(nodes: Iterable[Any], catalog: Sequence[GpuModel],
                   gpus: Mapping[str, str] | None = None) -> dict[str, GpuModel | None]:
    """:func:`node_gpu_kind` of each node, by node id; ``gpus`` maps node ids to the kind
    each names."""
    index = _KindIndex(catalog)
    named = gpus or {}
    return {node.node_id: index.of(node, named.get(node.node_id)) for node in nodes}


def catalog_kind(catalog: Sequence[GpuModel], name: str) -> GpuModel:
    """The catalog kind whose id or name is ``name`` (any case); ``UnknownGpuKind``
    when there is none."""
    return _KindIndex(catalog).named_kind(name)


def _bad(where: str, field_name: str, problem: str, value: Any = None) -> ModelError:
    got = f" (got {shown(value)})" if value is not None else ""
    return ModelError("InvalidGpuCatalog", f"{where}: {field_name} {problem}{got}",
                      file=where, field=field_name, problem=problem, value=value)


_FIELD_NAMES = tuple(field.name for field in fields(GpuModel))
_FILE_KEYS = (*_FIELD_NAMES, *UNIT_SPELLINGS)
# The fields a catalog file's [defaults] table may give its kinds.
CATALOG_DEFAULTS = ("annual_failure_rate", "repair_hours")


def _gpu(entry: Any, where: str, defaults: Mapping[str, Any] | None = None) -> GpuModel:
    """One ``[[gpu]]`` table: its unit forms read, then checked as a :class:`GpuModel`."""
    if not isinstance(entry, Mapping):
        raise _bad(where, "entry", "must be a table", entry)
    values: dict[str, Any] = {}
    for key, value in entry.items():
        if key not in _FILE_KEYS:
            raise _bad(where, str(key), f"is not a known field; expected one of "
                       f"{', '.join(_FILE_KEYS)}")
        canonical = UNIT_SPELLINGS[key] if key in UNIT_SPELLINGS else str(key)
        if canonical in values:
            raise _bad(where, key, f"and {canonical} say the same: give one of them")
        try:
            if key in UNIT_SPELLINGS:
                value = (parse_bandwidth(value) if canonical.endswith("_per_s")
                         else parse_bytes(value))
            elif key in _FROM_FILE:
                value = _FROM_FILE[key](value)
        except UnitError as error:
            raise _bad(where, key, error.message) from None
        values[canonical] = value
    for key in ("name", "memory_bytes"):
        if key not in values:
            spelled = "memory (or memory_bytes)" if key == "memory_bytes" else key
            raise _bad(where, spelled, "is required")
    for key, value in (defaults or {}).items():
        values.setdefault(key, value)
    try:
        return GpuModel(**values)
    except ModelError as error:
        field_name = error.details.get("field", "entry")
        raise _located(error, where, field_name) from None


def _read(path: Path, shipped: bool) -> Any:
    where = str(path)
    if not path.is_file():
        code = "MissingDataDir" if shipped else "GpuCatalogNotFound"
        what = ("is a folder, not a catalog file" if path.is_dir() else
                "is not a regular file" if path.exists() else "does not exist")
        raise ModelError(code, f"GPU catalog {path} {what}", path=where, file=where)
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError("InvalidGpuCatalog", f"{where}: not valid TOML: {exc}",
                         file=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError("InvalidGpuCatalog", f"{where}: cannot be read: {exc}",
                         file=where) from None


def parse_gpu_catalog(raw: Any, where: str) -> list[GpuModel]:
    """The entries of a catalog document (the parsed TOML), checked as a whole: names and
    kind ids are unique (case-insensitively)."""
    entries = raw.get("gpu") if isinstance(raw, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise _bad(where, "gpu", "must be a non-empty array of [[gpu]] tables")
    if isinstance(raw, Mapping):
        for key in raw:
            if key not in ("gpu", "llamacpp", "defaults"):
                raise _bad(where, key, "is not a known table; a catalog holds [[gpu]] tables, "
                           "[defaults] and [llamacpp.backend_overhead_bytes]")
        _overheads(raw, where)
    defaults = _defaults(raw, where)
    catalog = [_gpu(entry, f"{where} [[gpu]] #{index + 1}", defaults)
               for index, entry in enumerate(entries)]
    for label, key in (("name", lambda gpu: gpu.name.strip().casefold()),
                       ("kind id", lambda gpu: gpu.kind)):
        seen: dict[str, GpuModel] = {}
        for gpu in catalog:
            first = seen.setdefault(key(gpu), gpu)
            if first is not gpu:
                raise _bad(where, "id" if label == "kind id" else "name",
                           f"{key(gpu)!r} is the {label} of two entries ({first.name!r} and "
                           f"{gpu.name!r}); give one of them another")
    return catalog


def _defaults(raw: Any, where: str) -> dict[str, Any]:
    """``[defaults]``: the checked values of :data:`CATALOG_DEFAULTS` it gives."""
    table = raw.get("defaults", {}) if isinstance(raw, Mapping) else {}
    return _named_values(table, where, "defaults", CATALOG_DEFAULTS, "a catalog default",
                         lambda key, value: _CHECKS[key](value))


def _overheads(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    section = raw.get("llamacpp", {})
    if not isinstance(section, Mapping) or set(section) - {"backend_overhead_bytes"}:
        raise _bad(where, "llamacpp", "may hold only a backend_overhead_bytes table")
    return _named_values(section.get("backend_overhead_bytes", {}), where,
                         "llamacpp.backend_overhead_bytes", BACKENDS, "a backend",
                         lambda _, value: integer(value, _fail, maximum=MAX_BYTES))


def _named_values(table: Any, where: str, name: str, known: Sequence[str], what: str,
                  check: Callable[[str, Any], Any]) -> dict[str, Any]:
    """A table of a catalog file whose keys are among ``known``, each value checked; a
    problem names the file and ``<name>.<key>``."""
    if not isinstance(table, Mapping):
        raise _bad(where, name, "must be a table", table)
    values = {}
    for key, value in table.items():
        field_name = f"{name}.{key}"
        if key not in known:
            raise _bad(where, field_name, f"is not {what}; expected {', '.join(known)}")
        try:
            values[key] = check(key, value)
        except ModelError as error:
            raise _located(error, where, field_name) from None
    return values


def _catalog_path(path: Any) -> Path:
    """The catalog file ``path`` names (``None``: the shipped one); anything that is no
    path is ``GpuCatalogNotFound``."""
    if path is None:
        return data_dir() / "gpus.toml"
    if (not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str)
            or not os.fspath(path).strip()):
        raise ModelError("GpuCatalogNotFound", "the GPU catalog path must be the path of a "
                         "catalog file (text or a Path), or None for the shipped one (got "
                         f"{shown(path)})", path=shown(path))
    return Path(path).expanduser()


def load_backend_overheads(path: str | Path | None = None) -> dict[str, int]:
    """``[llamacpp.backend_overhead_bytes]`` of a catalog file (default the shipped one):
    llama.cpp's fixed overhead per device for each backend."""
    shipped = path is None
    resolved = _catalog_path(path)
    raw = _read(resolved, shipped)
    return _overheads(raw if isinstance(raw, Mapping) else {}, str(resolved))


def load_gpu_catalog(path: str | Path | None = None) -> list[GpuModel]:
    """Every accelerator kind of a catalog file, in file order.

    ``path`` is a catalog file in the format of ``data/gpus.toml``; ``None`` reads the
    shipped one.
    """
    shipped = path is None
    resolved = _catalog_path(path)
    return parse_gpu_catalog(_read(resolved, shipped), str(resolved))


def gpu_catalog_with(path: str | Path | None) -> list[GpuModel]:
    """The shipped catalog with the kinds of the catalog file at ``path`` added: what
    every ``--catalog FILE`` option reads (:func:`extend_catalog`: a kind whose id is
    shipped replaces that one). ``None``: the shipped catalog alone."""
    shipped = load_gpu_catalog()
    if path is None:
        return shipped
    return extend_catalog(shipped, load_gpu_catalog(path), os.fspath(path))


# A stated FP16 figure this close to half the shipped one is NVIDIA's FP32-accumulate
# tensor figure for a GeForce card (half its FP16-accumulate one), not the figure the
# catalog asks for.
_HALF_FIGURE = (0.48, 0.52)


def extend_catalog(base: Sequence[GpuModel], extra: Sequence[GpuModel],
                   where: str = "catalog") -> list[GpuModel]:
    """``base`` with the kinds of ``extra``: a kind whose id is in ``base`` replaces that
    one in its place, the others follow in their order.

    A replacing kind whose ``fp16_tflops`` is half the replaced kind's is refused
    (``InvalidGpuCatalog``): it is the FP32-accumulate figure, which halves the prefill
    estimate (:class:`GpuModel`'s ``fp16_tflops``)."""
    replacing = {gpu.kind: gpu for gpu in extra}
    for gpu in base:
        new = replacing.get(gpu.kind)
        if (new is not None and new.fp16_tflops is not None and gpu.fp16_tflops is not None
                and _HALF_FIGURE[0] <= new.fp16_tflops / gpu.fp16_tflops <= _HALF_FIGURE[1]):
            raise _bad(where, f"{gpu.kind}.fp16_tflops",
                       f"is half the shipped {gpu.fp16_tflops:g} TFLOPS of this kind: that "
                       "is the FP32-accumulate tensor figure; give the dense FP16 figure "
                       "with FP16 accumulate", new.fp16_tflops)
    kept = [replacing.pop(gpu.kind, gpu) for gpu in base]
    return kept + [gpu for gpu in extra if gpu.kind in replacing]
