"""Model metadata for the planner: GGUF files, presets of published models, GPU catalog.

Pure core: no widgets, no plotting.
"""

from planner.models.architectures import GPU_ARCHITECTURES, GpuArchitecture
from planner.models.gguf_spec import from_gguf
from planner.models.gpus import (
    GpuModel,
    gpu_catalog_with,
    load_backend_overheads,
    load_gpu_catalog,
    node_gpu_kind,
)
from planner.models.kv_cache import CACHE_TYPES
from planner.models.layer_memory import LLAMA_CPP_ARCHITECTURES as SUPPORTED_ARCHITECTURES
from planner.models.presets import data_dir, list_presets, load_preset
from planner.models.spec import ModelError, ModelSpec, describe_model

__all__ = [
    "CACHE_TYPES",
    "GPU_ARCHITECTURES",
    "SUPPORTED_ARCHITECTURES",
    "GpuArchitecture",
    "GpuModel",
    "ModelError",
    "ModelSpec",
    "data_dir",
    "describe_model",
    "from_gguf",
    "gpu_catalog_with",
    "list_presets",
    "load_backend_overheads",
    "load_gpu_catalog",
    "load_preset",
    "node_gpu_kind",
]
