"""What the planner knows of llama.cpp: what it allocates on each device of a layer
split, the commands that run a plan, and the check of both against real runs.

The planner's design rule (``w_j + ceil(kv/L) * context`` per layer) leaves out most of
what makes a real split run out of memory. This package follows llama.cpp's own code
(the version pinned in ``validation/``, checked against its logs by ``make validate``):

weights (``llama_model::load_tensors``)
    Each ``blk.N.*`` tensor lives on the device of layer N. The input embeddings
    (``token_embd`` and the other input tensors) always stay in host memory, which maps
    the file from the first of them to the end of the last. Every other
    tensor (``output``, ``output_norm``, ...) goes to the output device, the last one; a
    model without ``output.weight`` ties its head to ``token_embd``, and llama.cpp loads a
    second copy of it there (``TENSOR_DUPLICATED``). Tensors are padded to the buffer's
    alignment.
KV cache (``llama_kv_cache``, ``llama_kv_cache_iswa``)
    The context is padded to 256 cells. One cache (``--kv-unified``) holds every lane;
    otherwise each of the ``P`` lanes gets its own stream of ``pad(ctx / P, 256)`` cells.
    Sliding-window layers keep ``pad(min(cells, window * (P if unified else 1) + ubatch),
    256)`` cells per stream. Each layer's K row is ``row(type_k, n_embd_k_gqa)`` bytes per
    cell, its V row ``row(type_v, n_embd_v_gqa)``; latent attention (MLA) keeps no V row.
compute buffer (``llama_context::sched_reserve``)
    Derived from the model's graph (:mod:`planner.llamacpp.graph`, built by the model's
    family of :mod:`planner.llamacpp.families`, allocated by
    :mod:`planner.llamacpp.allocator` as ggml-alloc does it): every tensor of the prompt graph
    of a ubatch (the attention's projections, scores without flash attention, the
    feed-forward or experts' intermediates, the router, the logits of every token on the
    output device) and of the generation graph, placed in order in a best-fit buffer that
    reuses freed tensors; each backend's buffer is the furthest any of its tensors reached.
    Split over devices, a device also holds copies of the tensors it reads from another
    one, and every input and copy four times over when pipeline parallelism is on
    (``GGML_SCHED_MAX_COPIES``).
output buffer (``llama_context::output_reserve``)
    ``n_vocab x max(1, P)`` floats in host memory.
overhead
    What the backend itself takes on each device (CUDA/ROCm context, Metal); llama.cpp does
    not log it. Defaults per backend are in ``data/gpus.toml``.

The modules: :mod:`.settings` (llama.cpp's options and their limits), :mod:`.layout` (a
model as llama.cpp lays it out, from its GGUF file), :mod:`.estimate` (:func:`estimate`:
one :class:`DeviceMemory` per device plus the host, with totals and a DataFrame),
:mod:`.costs` (planning with llama.cpp's memory), :mod:`.graph` and :mod:`.families` (the
compute graph), :mod:`.allocator` (ggml's graph allocator), :mod:`.launch` (the commands
of a plan), :mod:`.runner` (the one module that runs llama.cpp, ``make validate``),
:mod:`.check` and :mod:`.grid` (the estimate against the recorded runs). Importing the
package gives the estimate's names below; the launch, the runner and the check are
imported from their modules.
"""


from planner.llamacpp.costs import LlamaCppCosts, costs_from_gguf, node_overheads
from planner.llamacpp.estimate import (
    COMPONENTS,
    KEYS,
    SCHED_MAX_COPIES,
    DeviceMemory,
    MemoryEstimate,
    device_compute_bytes,
    estimate,
    even_ranges,
    layer_kv_bytes,
    layer_state_bytes,
    ranges_from_counts,
    runs_flash_attention,
    stage_compute_bytes,
)
from planner.llamacpp.graph import architectures as _architectures
from planner.llamacpp.layout import (
    LayerLayout,
    LlamaCppModel,
    model_from_gguf,
    model_from_header,
)
from planner.llamacpp.settings import (
    LLAMA_MAX_SEQ,
    LlamaCppSettings,
    MemoryModelError,
    require_flash_attention,
    server_settings,
)

SUPPORTED_ARCHITECTURES = _architectures()
"""Every architecture a model family of :mod:`planner.llamacpp.families` builds: the
architectures the estimate supports (equal to :data:`planner.models.SUPPORTED_ARCHITECTURES`,
llama.cpp's names)."""

__all__ = [
    "COMPONENTS", "KEYS", "LLAMA_MAX_SEQ", "SCHED_MAX_COPIES", "SUPPORTED_ARCHITECTURES",
    "DeviceMemory", "LayerLayout", "LlamaCppCosts", "LlamaCppModel", "LlamaCppSettings",
    "MemoryEstimate", "MemoryModelError", "costs_from_gguf", "device_compute_bytes",
    "estimate", "even_ranges", "layer_kv_bytes", "layer_state_bytes", "model_from_gguf",
    "model_from_header", "node_overheads", "ranges_from_counts", "require_flash_attention",
    "runs_flash_attention", "server_settings", "stage_compute_bytes",
]
