"""A catalog of common accelerators and the memory a model may use on each.

Read from ``data/gpus.toml``: one ``[[gpu]]`` table per accelerator with ``name``,
``vendor``, ``memory_bytes`` and ``note``. Apple machines list the Metal working-set budget
(the GPU's share of unified memory), not the total RAM; they also give
``unified_memory_bytes`` and ``working_set_fraction``, and the budget must equal their
product. ``annual_failure_rate`` (failures per node-year) and ``repair_hours`` (mean
time to repair) are optional; the file says where each figure comes from.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from planner.models.presets import data_dir
from planner.models.spec import ModelError

GPU_FIELDS = ("name", "vendor", "memory_bytes", "note", "unified_memory_bytes",
              "working_set_fraction", "annual_failure_rate", "repair_hours")


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_bytes: int
    vendor: str
    note: str
    # Failures per node-year and mean hours to repair (``planner.availability``).
    annual_failure_rate: float | None = None
    repair_hours: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuModel:
        return _gpu(data, "GpuModel.from_dict")


def _bad(where: str, field_name: str, problem: str, value: Any = None) -> ModelError:
    shown = f" (got {value!r})" if value is not None else ""
    return ModelError("InvalidGpuCatalog", f"{where}: {field_name} {problem}{shown}",
                      file=where, field=field_name)


def _gpu(entry: Any, where: str) -> GpuModel:
    if not isinstance(entry, Mapping):
        raise _bad(where, "entry", "must be a table", entry)
    for key in entry:
        if key not in GPU_FIELDS:
            raise _bad(where, key, f"is not a known field; expected {', '.join(GPU_FIELDS)}")
    for key in ("name", "vendor", "note"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise _bad(where, key, "must be a non-empty string", entry.get(key))
    memory = entry.get("memory_bytes")
    if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
        raise _bad(where, "memory_bytes", "must be a positive integer", memory)
    unified = entry.get("unified_memory_bytes")
    fraction = entry.get("working_set_fraction")
    if (unified is None) != (fraction is None):
        raise _bad(where, "unified_memory_bytes", "and working_set_fraction go together")
    if unified is not None:
        if isinstance(unified, bool) or not isinstance(unified, int) or unified < memory:
            raise _bad(where, "unified_memory_bytes", "must be an integer >= memory_bytes",
                       unified)
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not (
                0 < fraction <= 1):
            raise _bad(where, "working_set_fraction", "must be in (0, 1]", fraction)
        budget = unified * Fraction(str(fraction))
        if budget != memory:
            raise _bad(where, "memory_bytes",
                       f"must be unified_memory_bytes x working_set_fraction = {budget}", memory)
    for key in ("annual_failure_rate", "repair_hours"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 <= value < float("inf")):
            raise _bad(where, key, "must be a finite number >= 0", value)
    return GpuModel(name=entry["name"], memory_bytes=memory, vendor=entry["vendor"],
                    note=entry["note"], annual_failure_rate=entry.get("annual_failure_rate"),
                    repair_hours=entry.get("repair_hours"))


def load_gpu_catalog(path: str | Path | None = None) -> list[GpuModel]:
    """Every accelerator in ``path`` (default ``data/gpus.toml``), in file order."""
    path = data_dir() / "gpus.toml" if path is None else Path(path)
    where = str(path)
    if not path.is_file():
        raise ModelError("MissingDataDir", f"GPU catalog {path} does not exist", path=where)
    try:
        with path.open("rb") as handle:
            raw = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ModelError("InvalidGpuCatalog", f"{where}: not valid TOML: {exc}",
                         file=where) from None
    entries = raw.get("gpu")
    if not isinstance(entries, list) or not entries:
        raise _bad(where, "gpu", "must be a non-empty array of [[gpu]] tables")
    catalog = [_gpu(entry, f"{where} [[gpu]] #{index + 1}")
               for index, entry in enumerate(entries)]
    folded = [gpu.name.casefold() for gpu in catalog]
    duplicates = sorted({gpu.name for gpu in catalog if folded.count(gpu.name.casefold()) > 1})
    if duplicates:
        raise _bad(where, "name", f"appears more than once: {', '.join(duplicates)}")
    return catalog
