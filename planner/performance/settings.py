"""How llama.cpp is run, as a llama-bench row states it: the backend, flash attention,
the batch and micro-batch, the cached tokens before a prompt, and the build.

The build decides which kernels multiply quantized weights in a prompt's micro-batches
(:func:`stages_quantized_weights`): llama.cpp's CUDA backend dequantized them to FP16 in
memory and ran cuBLAS until pull request 8075 ("CUDA: use MMQ instead of cuBLAS by
default", commit a818f30, merged 2024-06-24) made its quantized matrix-multiplication
kernels (MMQ, on int8 tensor cores) the default. The earliest release found to carry the
change is b3266 (its llama-bench prints ``GGML_CUDA_FORCE_CUBLAS: no``, the option the
pull request added); builds before it are taken as staging.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner._validate import flag, integer
from planner.limits import (
    DEFAULT_BATCH,
    DEFAULT_UBATCH,
    MAX_CONTEXT,
    MAX_LLAMA_CPP_BUILD,
    MAX_UBATCH,
)
from planner.models.gpus import BACKENDS
from planner.performance._errors import PerformanceError, bad

# The first llama.cpp release known to run quantized prefill products with MMQ on CUDA.
MMQ_DEFAULT_BUILD = 3266


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The llama.cpp settings an estimate is for (llama-bench's columns).

    ``backend``: one of :data:`planner.models.gpus.BACKENDS`, or ``None`` for each GPU
    kind's own; ``flash_attn``: flash attention on (``-fa 1``, llama.cpp's default since it
    chooses it automatically); ``ubatch`` and ``batch``: micro-batch and batch in tokens
    (``-ub``, ``-b``); ``depth``: tokens already cached before the prompt (llama-bench's
    ``-d``); ``build``: the llama.cpp build number (``None``: a current build)."""

    backend: str | None = None
    flash_attn: bool = True
    ubatch: int = DEFAULT_UBATCH
    batch: int = DEFAULT_BATCH
    depth: int = 0
    build: int | None = None

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

    def with_backend(self, backend: str | None) -> RunSettings:
        """These settings with ``backend`` where they name none."""
        return self if self.backend is not None or backend is None else replace(
            self, backend=backend)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "flash_attn": self.flash_attn,
                "ubatch": self.ubatch, "batch": self.batch, "depth": self.depth,
                "build": self.build}


DEFAULT_SETTINGS = RunSettings()


def stages_quantized_weights(backend: str, build: int | None) -> bool:
    """Whether a prompt's micro-batches dequantize quantized weights to FP16 in memory
    before multiplying them: llama.cpp's CUDA backend did before
    :data:`MMQ_DEFAULT_BUILD` (the module docstring)."""
    return backend == "cuda" and build is not None and build < MMQ_DEFAULT_BUILD
