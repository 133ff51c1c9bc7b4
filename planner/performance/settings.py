"""How llama.cpp is run, as a llama-bench row states it: the backend, flash attention,
the batch and micro-batch, the cached tokens before a prompt, and the build.

The build decides which kernels multiply quantized weights in a prompt's micro-batches
(:func:`stages_quantized_weights`): llama.cpp's CUDA backend dequantized them to FP16 in
memory and ran cuBLAS until pull request 8075 ("CUDA: use MMQ instead of cuBLAS by
default", commit a818f30, merged 2024-06-24) made its quantized matrix-multiplication
kernels (MMQ, on int8 tensor cores) the default. The earliest release found to carry the
change is b3266 (its llama-bench prints ``GGML_CUDA_FORCE_CUBLAS: no``, the option the
pull request added); builds before it are taken as staging.

It also decides how many kernels a mixture of experts' layer launches in a one-token step
(:func:`fuses_moe_kernels`): llama.cpp's GPU backends came to run its router (softmax,
top-k, the chosen experts' weights) as one kernel and the sum of its experts' outputs in
one, each layer's fixed time then that of fewer operations
(:mod:`planner.performance.graph_nodes`). CUDA did from pull request 16130 ("CUDA: add a
fused top-K MoE kernel", opened 2025-09-20, in the main line by 2025-09-23; its adds from
15631), and ROCm with it (llama.cpp's HIP backend compiles CUDA's kernels); Vulkan from
16641 ("vulkan: Implement topk_moe fused shader, ported from CUDA", measured against
b6791 of 2025-10-17; its adds from 15252, opened 2025-08-11). llama.cpp numbers about
ten builds a day: the estimate takes b6550 (CUDA, ROCm) and b6800 (Vulkan) as the first
fused builds. Metal fuses both in b11434, the build this project's llama.cpp knowledge is
read from; when it began is not recorded here, so an earlier Metal build is taken as
unfused. The CPU backend fuses neither.

And it decides where flash attention runs on AMD's and Intel's GPUs
(:func:`attends_on_shaders`), whose FP16 figure is the stand-in from shaders and clock. On
ROCm it ran the tile kernel on the shaders, unless built with rocWMMA (pull request 12032,
off by default), until llama.cpp's matrix flash-attention kernel reached AMD's units:
b11434's ``fattn.cu`` takes it on RDNA 3, 3.5 and 4 only for a model that groups its
queries (``gqa_opt_applies``: two query heads or more a KV head) with key heads of at most
256 (not 40 or 72) (:func:`groups_queries`); any other model stays on the tile kernel (in
October 2025 the matrix kernel still ran on NVIDIA's tensor cores only, issue 16631). The
published runs date the change: a Radeon 8060S's gpt-oss prompts (64 query heads on 8 KV
heads) after 32k to 64k cached tokens ran at one rate through b9112 (2026-05-12) and twice
as fast in b9187 (2026-05-18), while Llama 2 7B's (32 on 32) ran at the same rate in both
(165 and 160 tokens/s at 32k, 72 and 71 at 64k). On Vulkan a device with cooperative
matrices multiplied queries by keys on them since pull request 13506 (2025-05) and the
probabilities by values since b7865 (pull request 19075, "Vulkan Flash Attention Coopmat1
Refactor", 2026-01), for any model (``get_fa_tuning_params``); b7865 is the build taken
there, and the 8060S's Vulkan prompts at 32k cached tokens rose across it (gpt-oss-20b's
from 298 tokens/s in b7034 to 417 in b7938, Llama 2 7B's from 175 to 246), not at b9187
(546 and 556 for gpt-oss-20b in b8743 and b9187).

On NVIDIA's Volta, which has FP16 tensor cores but not Turing's int8 ones, any build's
CUDA backend multiplies quantized weights with MMQ (on the shaders' int8 dot product) only
for micro-batches under 64 tokens (``MMQ_DP4A_MAX_BATCH_SIZE`` in ``mmq.cuh``,
``ggml_cuda_should_use_mmq``: ``!fp16_mma_hardware_available(cc) || ne11 <
MMQ_DP4A_MAX_BATCH_SIZE`` where ``turing_mma_available`` is false); larger ones are
dequantized to FP16 and multiplied by cuBLAS on the tensor cores, staging as the builds
before MMQ did (:func:`staging_from_tokens`).

And it decides which tokens of a prompt go through the output head and the last layer's
feed-forward network (:func:`computes_every_output`): llama.cpp computes logits only for
the tokens a batch marks as outputs, and llama-bench's prompts and a server's mark only
each batch's last token (``common_batch_get_one``); from pull request 6122 ("llama :
greatly reduce output buffer memory usage", commit 557410b, merged 2024-03-26) the graph
takes those rows alone past the last layer's attention (``inp_out_ids``), so a prompt's
micro-batches skip the last layer's network and the head, the largest product of a model
with a large vocabulary (gemma-3-270m's tied head is 63 % of its parameters). Before it,
every token of a micro-batch went through them. Its release number is not recorded here:
the estimate takes b2500 as the first build with it, from the pace of releases around it
(b2713 of 2024-04-22 in the published runs here, b3266 of late June 2024: about eight a
day); every numbered build of the calibration's runs is after it, and its runs dated
before April 2024 before.

Which of a GPU's units a prompt's products run on (:func:`shader_flops_per_lane_clock`),
for a kind whose FP16 figure is the stand-in from its shaders: llama.cpp's CUDA and ROCm
backends reach its matrix units (cuBLAS or hipBLAS, and MMQ on tensor cores and, in
current builds, WMMA) and, for quantized weights, its 4-way int8 dot product
(``ggml_cuda_dp4a``: MMQ on GPUs without matrix units, RDNA 2 and Pascal among them);
Vulkan reaches matrix units through cooperative matrices where
``ggml_vk_khr_cooperative_matrix_support`` allows them (AMD's RDNA 3 and 4, Intel's Xe2,
NVIDIA since Turing; not Intel's discrete Xe-HPG), and otherwise runs its products on the
vector units (its integer dot-product MMQ, pull request 12135 and later, is not told
apart here); Metal reaches the M5's Neural Accelerators through the Metal 4 tensor API
(``apple10``); other backends run on the vector units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from planner._validate import flag, integer
from planner.limits import (
    DEFAULT_BATCH,
    DEFAULT_UBATCH,
    MAX_CONTEXT,
    MAX_LLAMA_CPP_BUILD,
    MAX_THREADS,
    MAX_UBATCH,
)
from planner.models.architectures import GpuArchitecture
from planner.models.gpus import BACKENDS
from planner.performance._errors import PerformanceError, bad

if TYPE_CHECKING:
    from planner.performance.traffic import ModelTraffic

# The first llama.cpp release known to run quantized prefill products with MMQ on CUDA.
MMQ_DEFAULT_BUILD = 3266
# The architectures whose CUDA micro-batches of at least this many tokens stage quantized
# weights on every build (FP16 tensor cores without Turing's int8 ones: the module
# docstring).
CUBLAS_FROM_TOKENS = {"volta": 64}
# The first build taken to run a prompt's output head and last layer's feed-forward
# network for its output tokens only.
OUTPUT_ROWS_BUILD = 2500
# The first build each backend is taken to fuse a mixture of experts' router and expert
# sums in (the module docstring).
FUSED_MOE_BUILD = {"cuda": 6550, "rocm": 6550, "vulkan": 6800, "metal": 11434}
# The first build taken to run flash attention on AMD's matrix units, on each backend that
# ran it on the shaders before (the module docstring); on ROCm for a model that groups its
# queries only (:func:`groups_queries`).
MATRIX_FLASH_ATTENTION_BUILD = {"rocm": 9187, "vulkan": 7865}
# The widest key head llama.cpp's matrix flash-attention kernel takes on AMD's RDNA, and
# the two narrower ones its tiles leave out (fattn.cu).
MATRIX_ATTENTION_MAX_HEAD_SIZE = 256
UNTILED_HEAD_SIZES = (40, 72)


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The llama.cpp settings an estimate is for (llama-bench's columns).

    ``backend``: one of :data:`planner.models.gpus.BACKENDS`, or ``None`` for each GPU
    kind's own; ``flash_attn``: flash attention on (``-fa 1``, llama.cpp's default since it
    chooses it automatically); ``ubatch`` and ``batch``: micro-batch and batch in tokens
    (``-ub``, ``-b``); ``depth``: tokens already cached before the prompt (llama-bench's
    ``-d``); ``build``: the llama.cpp build number (``None``: a current build);
    ``threads``: the CPU threads that compute (``-t``; ``None``: one a core), which on
    the CPU backend set how many of a kind's cores compute (:func:`computing_cores`)."""

    backend: str | None = None
    flash_attn: bool = True
    ubatch: int = DEFAULT_UBATCH
    batch: int = DEFAULT_BATCH
    depth: int = 0
    build: int | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in BACKENDS:
            raise PerformanceError(
                "InvalidPerformanceInput",
                f"backend: must be one of {', '.join(BACKENDS)} (got {self.backend!r})",
                field="backend", value=self.backend)
        object.__setattr__(self, "flash_attn", flag(self.flash_attn, bad("flash_attn")))
        object.__setattr__(self, "ubatch", integer(self.ubatch, bad("ubatch"), minimum=1,
                                                   maximum=MAX_UBATCH))
        object.__setattr__(self, "batch", integer(self.batch, bad("batch"), minimum=1,
                                                  maximum=MAX_CONTEXT))
        if self.ubatch > self.batch:
            raise PerformanceError(
                "InvalidPerformanceInput",
                f"ubatch: {self.ubatch:,} tokens exceed the batch of {self.batch:,} "
                "(llama.cpp splits each batch into micro-batches)",
                field="ubatch", value=self.ubatch)
        object.__setattr__(self, "depth", integer(self.depth, bad("depth"), minimum=0,
                                                  maximum=MAX_CONTEXT))
        if self.build is not None:
            object.__setattr__(self, "build", integer(self.build, bad("build"), minimum=1,
                                                      maximum=MAX_LLAMA_CPP_BUILD))
        if self.threads is not None:
            object.__setattr__(self, "threads", integer(self.threads, bad("threads"),
                                                        minimum=1, maximum=MAX_THREADS))

    def with_backend(self, backend: str | None) -> RunSettings:
        """These settings with ``backend`` where they name none."""
        return self if self.backend is not None or backend is None else replace(
            self, backend=backend)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "flash_attn": self.flash_attn,
                "ubatch": self.ubatch, "batch": self.batch, "depth": self.depth,
                "build": self.build, "threads": self.threads}


DEFAULT_SETTINGS = RunSettings()


def computing_cores(core_count: int, threads: int | None) -> int:
    """The cores of a CPU with ``core_count`` cores that ``threads`` threads compute on:
    one a thread, at most every core (a second thread on a core shares its vector units);
    ``None``: every core, as llama.cpp's default of one thread a core
    (``common_cpu_get_num_math``)."""
    return core_count if threads is None else min(threads, core_count)


# The tokens of the tile in which each GPU backend's kernels multiply a routed expert's
# tokens in a prompt's micro-batch (llama.cpp b11434). A tile's products are computed
# whole, so an expert given fewer tokens than a tile pays for the tile. CUDA and ROCm:
# MMQ's token tile (``J``, up to 128 in ``mmq-config-*.cuh``), chosen against the
# micro-batch's tokens (``ncols_opt = ne12`` in ``ggml_cuda_mul_mat_q`` of ``mmq.cu``), so
# a micro-batch of hundreds of tokens runs 128-token tiles however few reach each expert.
# Vulkan: ``matmul_id``'s large tile, 128 tokens (``l_mmqid_wg_denoms``, ``l_wg_denoms``),
# chosen by the micro-batch's tokens (``nei1`` in ``ggml_vk_mul_mat_id_q_f16``). Metal:
# ``kernel_mul_mm_id``'s threadgroups of 32 tokens by 64 rows per expert
# (``ggml_metal_op_mul_mat_id``).
EXPERT_TOKEN_TILES: dict[str, int] = {"cuda": 128, "rocm": 128, "vulkan": 128, "metal": 32}


def expert_token_tile(backend: str) -> int:
    """The tokens of the tile ``backend`` multiplies a routed expert's tokens in
    (:data:`EXPERT_TOKEN_TILES`), or 0 where it has none: the CPU backend multiplies each of
    an expert's weight rows with each token routed to it by one dot product
    (``ggml_compute_forward_mul_mat_id_one_chunk``), a token's cost the same however few
    share the expert."""
    return EXPERT_TOKEN_TILES.get(backend, 0)


def stages_quantized_weights(backend: str, build: int | None) -> bool:
    """Whether a prompt's micro-batches dequantize quantized weights to FP16 in memory
    before multiplying them: llama.cpp's CUDA backend did before
    :data:`MMQ_DEFAULT_BUILD` (the module docstring)."""
    return backend == "cuda" and build is not None and build < MMQ_DEFAULT_BUILD


def staging_from_tokens(backend: str, build: int | None,
                        architecture: str | None) -> float | None:
    """The tokens from which a micro-batch on ``backend`` at ``build`` stages quantized
    weights as FP16 before multiplying them: every micro-batch (0) on a build before MMQ
    (:func:`stages_quantized_weights`), those of :data:`CUBLAS_FROM_TOKENS` on an
    architecture it names; ``None``: none does."""
    if stages_quantized_weights(backend, build):
        return 0.0
    if backend == "cuda" and architecture in CUBLAS_FROM_TOKENS:
        return float(CUBLAS_FROM_TOKENS[architecture])
    return None


def computes_every_output(build: int | None) -> bool:
    """Whether a prompt's every token goes through the output head and the last layer's
    feed-forward network at ``build`` (``None``: a current build): before
    :data:`OUTPUT_ROWS_BUILD` (the module docstring); since then only a batch's output
    tokens do."""
    return build is not None and build < OUTPUT_ROWS_BUILD


def fuses_moe_kernels(backend: str, build: int | None) -> bool:
    """Whether ``backend`` at ``build`` (``None``: a current build) runs a mixture of
    experts' router and the sum of its experts' outputs as one kernel each
    (:data:`FUSED_MOE_BUILD`, the module docstring)."""
    first = FUSED_MOE_BUILD.get(backend)
    return first is not None and (build is None or build >= first)


def groups_queries(traffic: ModelTraffic | None) -> bool:
    """Whether llama.cpp's matrix flash-attention kernel takes ``traffic``'s model on AMD's
    RDNA (fattn.cu's ``gqa_opt_applies`` and head sizes, the module docstring): two query
    heads or more a KV head, with key heads it tiles. A model that does not state its
    heads is taken to (as nearly every model since 2024 does)."""
    if traffic is None or not traffic.attention_heads or not traffic.kv_heads:
        return True
    size = traffic.head_size
    tiled = size is None or (size <= MATRIX_ATTENTION_MAX_HEAD_SIZE
                             and size not in UNTILED_HEAD_SIZES)
    return traffic.attention_heads >= 2 * traffic.kv_heads and tiled


def attends_on_shaders(backend: str, build: int | None, grouped: bool) -> bool:
    """Whether flash attention on ``backend`` at ``build`` (``None``: a current build) runs
    on the shaders of a GPU whose FP16 figure is the stand-in from them, for a model that
    groups its queries or not (:func:`groups_queries`): on ROCm before
    :data:`MATRIX_FLASH_ATTENTION_BUILD` and, for a model that does not, on every build;
    on Vulkan before its build (the module docstring)."""
    first = MATRIX_FLASH_ATTENTION_BUILD.get(backend)
    if first is None:
        return False
    if backend == "rocm" and not grouped:
        return True
    return build is not None and build < first


# Backends whose matrix kernels reach a GPU's matrix units and, for quantized weights, its
# int8 dot product (the module docstring).
_BLAS_BACKENDS = ("cuda", "rocm")


def reaches_matrix_units(architecture: GpuArchitecture, backend: str) -> bool:
    """Whether llama.cpp's kernels on ``backend`` reach ``architecture``'s matrix units
    (the module docstring); without them its flash attention runs on the shaders too."""
    reaches = (backend in _BLAS_BACKENDS
               or (backend == "vulkan" and architecture.vulkan_matrix)
               or (backend == "metal" and architecture.metal_matrix))
    return architecture.matrix_fp16 is not None and reaches


def shader_flops_per_lane_clock(architecture: GpuArchitecture, backend: str,
                                quantized: bool) -> int:
    """FP16 FLOPs a lane and clock of the fastest of ``architecture``'s units that
    llama.cpp's prompt products reach on ``backend`` (the module docstring)."""
    rates = [architecture.packed_fp16]
    if architecture.matrix_fp16 is not None and reaches_matrix_units(architecture, backend):
        rates.append(architecture.matrix_fp16)
    if architecture.int8_dot is not None and quantized and backend in _BLAS_BACKENDS:
        rates.append(architecture.int8_dot)
    return max(rates)
