"""Model presets, GGUF models and the GPU catalog, as the workbench offers them.

Thin and cached: presets and the catalog are files that do not change while the
workbench runs, and reading them on every edit would cost more than planning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.fleet import ModelChoice
from planner.limits import MAX_GGUF_FILES
from planner.models import (
    GpuModel,
    ModelError,
    ModelSpec,
    describe_model,
    from_gguf,
    list_presets,
    load_gpu_catalog,
    load_preset,
)
from planner.performance import ModelTraffic
from planner.performance import model_traffic as typed_model_traffic
from planner.workbench.editor_fields import ModelFields


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A model read from a preset or a GGUF file, ready for the editor."""

    fields: ModelFields
    kv_cache_types: tuple[str, ...]
    description: str


@lru_cache(maxsize=1)
def preset_names() -> tuple[str, ...]:
    return tuple(list_presets())


@lru_cache(maxsize=1)
def gpu_catalog() -> tuple[GpuModel, ...]:
    return tuple(load_gpu_catalog())


@lru_cache(maxsize=64)
def _preset(name: str, kv_cache_type: str | None, file_bytes: int | None = None
            ) -> ModelSpec:
    spec = load_preset(name, kv_cache_type=kv_cache_type)
    return spec if file_bytes is None else spec.stored_in(file_bytes)


@lru_cache(maxsize=16)
def _gguf(path: Path, kv_cache_type: str | None) -> ModelSpec:
    spec = from_gguf(path)
    return spec if kv_cache_type is None else spec.with_kv_cache_type(kv_cache_type)


def _source(spec: ModelSpec, *, preset: str | None = None, gguf: str | None = None,
            name: str | None = None, file_bytes: int | None = None) -> ModelSource:
    fields = ModelFields.from_planning_fields(
        spec.planning_fields(), name=name or spec.name, preset=preset, gguf=gguf,
        kv_cache_type=spec.kv_cache_type, file_bytes=file_bytes)
    return ModelSource(fields, tuple(spec.kv_bytes_per_token_by_type), describe_model(spec))


def gguf_path(path: str, base_dir: Path | None) -> Path:
    """The GGUF file ``path`` names, as a fleet file's ``gguf`` (relative paths start at
    ``base_dir``)."""
    resolved = ModelChoice(gguf=path).gguf_path(base_dir)
    assert resolved is not None
    return resolved.resolve()


def gguf_files(folders: Sequence[Path], depth: int = 2) -> tuple[Path, ...]:
    """The ``.gguf`` files in ``folders`` and up to ``depth`` levels below them, sorted
    and without repeats, at most :data:`MAX_GGUF_FILES`."""
    found: dict[Path, None] = {}
    for folder in folders:
        try:
            if not folder.is_dir():
                continue
            for level in range(depth + 1):
                pattern = "/".join(["*"] * level + ["*.gguf"])
                for path in sorted(folder.glob(pattern)):
                    if path.is_file():
                        found.setdefault(path.resolve())
                    if len(found) >= MAX_GGUF_FILES:
                        return tuple(found)
        except OSError:
            continue
    return tuple(found)


def preset_source(name: str, kv_cache_type: str | None = None,
                  file_bytes: int | None = None) -> ModelSource:
    """A preset at a KV cache type (its own default when ``None``), stored in a file of
    ``file_bytes`` (its own weights when ``None``: :meth:`ModelSpec.stored_in`).

    Raises :class:`planner.models.ModelError` for an unknown preset or cache type, or a
    size that cannot hold the preset (field ``file_bytes``).
    """
    return _source(_preset(name, kv_cache_type, file_bytes), preset=name,
                   file_bytes=file_bytes)


def gguf_source(path: str, base_dir: Path | None, kv_cache_type: str | None = None,
                name: str | None = None) -> ModelSource:
    """A GGUF file (relative paths start at ``base_dir``) at a KV cache type."""
    resolved = gguf_path(path, base_dir)
    return _source(_gguf(resolved, kv_cache_type), gguf=path, name=name)


def model_source(model: ModelFields, base_dir: Path | None) -> ModelSource | None:
    """Where ``model``'s numbers came from, re-read; ``None`` for numbers typed by hand."""
    if model.preset is not None:
        return preset_source(model.preset, model.kv_cache_type, model.file_bytes)
    if model.gguf is not None:
        return gguf_source(model.gguf, base_dir, model.kv_cache_type, model.name)
    return None


def model_traffic(model: ModelChoice, base_dir: Path | None) -> ModelTraffic | None:
    """The traffic the speed estimate reads of the fleet document's model: a preset's or
    GGUF file's (read once and kept), or its numbers' as ``planner plan`` reads them
    (:func:`planner.performance.model_traffic`: ``None`` when they state nothing the
    estimate reads); ``None`` for a model that cannot be read. Numbers that contradict
    each other raise their :class:`~planner.performance.PerformanceError`."""
    try:
        if model.preset is not None:
            spec = _preset(model.preset, model.kv_cache_type, model.file_bytes)
        elif model.gguf is not None:
            spec = _gguf(gguf_path(model.gguf, base_dir), model.kv_cache_type)
        else:
            return typed_model_traffic(None, model.numbers)
    except (ModelError, OSError):
        return None
    return ModelTraffic.from_spec(spec)
