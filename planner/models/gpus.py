"""A catalog of accelerators: memory, and what sizing and the speed estimate need.

Read from ``data/gpus.toml`` or a catalog file of the same format: one ``[[gpu]]`` table
per accelerator kind. Every entry has ``name``, ``vendor``, ``memory_bytes`` and ``note``.
Apple machines list the Metal working-set budget (the GPU's share of unified memory), not
the total RAM; they also give ``unified_memory_bytes`` and ``working_set_fraction``, and
the budget must equal their product.

Optional fields: ``annual_failure_rate`` (failures per node-year) and ``repair_hours``
(mean time to repair), used by :mod:`planner.availability` (the file says where each
figure comes from); and, used by :mod:`planner.performance` and :mod:`planner.sizing`:

``id``
    The kind's id, used for node ids (``<id>-00``, ``<id>-01``, ...). Default: derived
    from the name (``"NVIDIA H100 SXM 80GB"`` -> ``"h100-sxm-80gb"``).
``price_per_hour``, ``price_source``, ``price_date``
    Indicative on-demand price in USD per GPU-hour, where it was listed and when
    (``YYYY-MM-DD``). The three go together.
``memory_bandwidth_bytes_per_s``, ``memory_bandwidth_source``
    The vendor's peak memory bandwidth and where it is stated. They go together.
``headroom_bytes``
    Runtime headroom of a node of this kind (its ``runtime_headroom_bytes``), default 0.
``stage_transfer_latency_ms``
    Stage-transfer latency of a node of this kind, unknown when absent.
``max_count``
    How many of this kind can be had; unlimited when absent.

Every problem raises :class:`~planner.models.ModelError` with code ``InvalidGpuCatalog``
naming the file, the entry and the field; a catalog file that does not exist raises
``GpuCatalogNotFound``.
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from planner._validate import Fail, integer, number, shown
from planner.limits import MAX_BYTES, MAX_LATENCY_MS, MAX_NODES
from planner.models.presets import data_dir
from planner.models.spec import ModelError

GPU_FIELDS = ("name", "vendor", "memory_bytes", "note", "unified_memory_bytes",
              "working_set_fraction", "annual_failure_rate", "repair_hours", "id",
              "price_per_hour", "price_source", "price_date",
              "memory_bandwidth_bytes_per_s", "memory_bandwidth_source", "headroom_bytes",
              "stage_transfer_latency_ms", "max_count", "backend", "llamacpp_overhead_bytes")
# llama.cpp backends a GPU kind can run (planner.memory's fixed overhead per device).
BACKENDS = ("cuda", "rocm", "metal", "vulkan", "sycl", "cpu", "rpc")

_KIND_ID = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)*$")
_VENDOR_WORDS = {"nvidia", "amd", "apple", "intel", "geforce", "radeon"}


def kind_id(name: str) -> str:
    """A node id prefix from a GPU's name: ``"NVIDIA H100 SXM 80GB"`` -> ``"h100-sxm-80gb"``."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    kept = [w for w in words if w and w not in _VENDOR_WORDS] or words
    return "-".join(kept)[:24].strip("-") or "gpu"


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One accelerator kind of the catalog (the optional fields are ``None`` when the
    catalog does not give them)."""

    name: str
    memory_bytes: int
    vendor: str
    note: str
    # Failures per node-year and mean hours to repair (``planner.availability``).
    annual_failure_rate: float | None = None
    repair_hours: float | None = None
    id: str | None = None
    price_per_hour: float | None = None
    price_source: str | None = None
    price_date: str | None = None
    memory_bandwidth_bytes_per_s: int | None = None
    memory_bandwidth_source: str | None = None
    headroom_bytes: int | None = None
    stage_transfer_latency_ms: int | None = None
    max_count: int | None = None
    # The llama.cpp backend it runs, and its own fixed overhead (planner.memory).
    backend: str | None = None
    llamacpp_overhead_bytes: int | None = None

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
            known = ", ".join(gpu.kind for gpu in self.catalog) or "none"
            raise ModelError("UnknownGpuKind",
                             f"gpu {name!r} is not in the catalog; known kinds: {known}",
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
                      file=where, field=field_name)


def _fail(where: str, field_name: str) -> Fail:
    return lambda problem, value: _bad(where, field_name, problem, value)


def _int(entry: Mapping[str, Any], key: str, where: str, *, minimum: int,
         maximum: int) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    return integer(value, _fail(where, key), minimum=minimum, maximum=maximum)


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _bad(where, key, "must be a non-empty string", value)
    return value


def _together(entry: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    present = [key in entry for key in keys]
    if any(present) and not all(present):
        missing = [key for key, there in zip(keys, present, strict=True) if not there]
        raise _bad(where, missing[0], f"is missing; {', '.join(keys)} go together")


def _price(entry: Mapping[str, Any], where: str) -> tuple[float | None, str | None]:
    _together(entry, ("price_per_hour", "price_source", "price_date"), where)
    price = entry.get("price_per_hour")
    if price is None:
        return None, None
    price = number(price, _fail(where, "price_per_hour"), above=0, maximum=1_000_000)
    date = entry["price_date"]
    if isinstance(date, datetime.date) and not isinstance(date, datetime.datetime):
        return float(price), date.isoformat()
    if isinstance(date, str):
        try:
            return float(price), datetime.date.fromisoformat(date).isoformat()
        except ValueError:
            pass
    raise _bad(where, "price_date", "must be a date written YYYY-MM-DD", date)


def _gpu(entry: Any, where: str) -> GpuModel:
    if not isinstance(entry, Mapping):
        raise _bad(where, "entry", "must be a table", entry)
    for key in entry:
        if key not in GPU_FIELDS:
            raise _bad(where, key, f"is not a known field; expected {', '.join(GPU_FIELDS)}")
    for key in ("name", "vendor", "note"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise _bad(where, key, "must be a non-empty string", entry.get(key))
    memory = integer(entry.get("memory_bytes"), _fail(where, "memory_bytes"), minimum=1,
                     maximum=MAX_BYTES)
    unified = entry.get("unified_memory_bytes")
    fraction = entry.get("working_set_fraction")
    if (unified is None) != (fraction is None):
        raise _bad(where, "unified_memory_bytes", "and working_set_fraction go together")
    if unified is not None:
        unified = integer(unified, _fail(where, "unified_memory_bytes"), minimum=memory,
                          maximum=MAX_BYTES)
        fraction = number(fraction, _fail(where, "working_set_fraction"), above=0, maximum=1)
        budget = unified * Fraction(str(fraction))
        if budget != memory:
            raise _bad(where, "memory_bytes",
                       f"must be unified_memory_bytes x working_set_fraction = {budget}", memory)
    reliability = {key: None if entry.get(key) is None else number(entry[key], _fail(where, key))
                   for key in ("annual_failure_rate", "repair_hours")}
    kind = _text(entry, "id", where)
    if kind is not None and not _KIND_ID.match(kind):
        raise _bad(where, "id", "must be lower-case letters and digits joined by - _ or .",
                   kind)
    price, price_date = _price(entry, where)
    _together(entry, ("memory_bandwidth_bytes_per_s", "memory_bandwidth_source"), where)
    return GpuModel(
        name=entry["name"], memory_bytes=memory, vendor=entry["vendor"], note=entry["note"],
        annual_failure_rate=reliability["annual_failure_rate"],
        repair_hours=reliability["repair_hours"], id=kind, price_per_hour=price,
        price_source=_text(entry, "price_source", where),
        price_date=price_date,
        memory_bandwidth_bytes_per_s=_int(entry, "memory_bandwidth_bytes_per_s", where,
                                          minimum=1, maximum=MAX_BYTES),
        memory_bandwidth_source=_text(entry, "memory_bandwidth_source", where),
        headroom_bytes=_int(entry, "headroom_bytes", where, minimum=0, maximum=MAX_BYTES),
        stage_transfer_latency_ms=_int(entry, "stage_transfer_latency_ms", where, minimum=0,
                                       maximum=MAX_LATENCY_MS),
        max_count=_int(entry, "max_count", where, minimum=0, maximum=MAX_NODES),
        backend=_backend(entry, where),
        llamacpp_overhead_bytes=_int(entry, "llamacpp_overhead_bytes", where, minimum=0,
                                     maximum=MAX_BYTES),
    )


def _backend(entry: Mapping[str, Any], where: str) -> str | None:
    backend = entry.get("backend")
    if backend is not None and backend not in BACKENDS:
        raise _bad(where, "backend", f"must be one of {', '.join(BACKENDS)}", backend)
    return backend


def _read(path: Path, shipped: bool) -> Any:
    where = str(path)
    if not path.is_file():
        code = "MissingDataDir" if shipped else "GpuCatalogNotFound"
        raise ModelError(code, f"GPU catalog {path} does not exist", path=where, file=where)
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
            if key not in ("gpu", "llamacpp"):
                raise _bad(where, key, "is not a known table; a catalog holds [[gpu]] tables "
                           "and [llamacpp.backend_overhead_bytes]")
        _overheads(raw, where)
    catalog = [_gpu(entry, f"{where} [[gpu]] #{index + 1}")
               for index, entry in enumerate(entries)]
    for label, key in (("name", lambda gpu: gpu.name.casefold()),
                       ("id", lambda gpu: gpu.kind)):
        folded = [key(gpu) for gpu in catalog]
        duplicates = sorted({gpu.name for gpu in catalog if folded.count(key(gpu)) > 1})
        if duplicates:
            what = "name" if label == "name" else "kind id"
            raise _bad(where, label, f"{what} appears more than once: {', '.join(duplicates)}")
    return catalog


def _overheads(raw: Mapping[str, Any], where: str) -> dict[str, int]:
    section = raw.get("llamacpp", {})
    if not isinstance(section, Mapping) or set(section) - {"backend_overhead_bytes"}:
        raise _bad(where, "llamacpp", "may hold only a backend_overhead_bytes table")
    table = section.get("backend_overhead_bytes", {})
    if not isinstance(table, Mapping):
        raise _bad(where, "llamacpp.backend_overhead_bytes", "must be a table", table)
    for name in table:
        if name not in BACKENDS:
            raise _bad(where, f"llamacpp.backend_overhead_bytes.{name}",
                       f"is not a backend; expected {', '.join(BACKENDS)}")
    return {name: integer(value, _fail(where, f"llamacpp.backend_overhead_bytes.{name}"),
                          maximum=MAX_BYTES) for name, value in table.items()}


def load_backend_overheads(path: str | Path | None = None) -> dict[str, int]:
    """``[llamacpp.backend_overhead_bytes]`` of a catalog file (default the shipped one):
    llama.cpp's fixed overhead per device for each backend."""
    shipped = path is None
    resolved = data_dir() / "gpus.toml" if path is None else Path(path).expanduser()
    raw = _read(resolved, shipped)
    return _overheads(raw if isinstance(raw, Mapping) else {}, str(resolved))


def load_gpu_catalog(path: str | Path | None = None) -> list[GpuModel]:
    """Every accelerator kind of a catalog file, in file order.

    ``path`` is a catalog file in the format of ``data/gpus.toml``; ``None`` reads the
    shipped one.
    """
    shipped = path is None
    resolved = data_dir() / "gpus.toml" if path is None else Path(path).expanduser()
    return parse_gpu_catalog(_read(resolved, shipped), str(resolved))
