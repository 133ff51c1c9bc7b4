"""The llama.cpp settings that change what it allocates (:class:`LlamaCppSettings`, with
llama-server's flags), the limits llama.cpp puts on them, and the error of a memory
estimate asked for settings llama.cpp refuses."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from planner._validate import Fail, flag, integer, shown
from planner.errors import CodedError
from planner.limits import DEFAULT_BATCH, DEFAULT_CACHE_TYPE, DEFAULT_UBATCH, MAX_BYTES
from planner.models.kv_cache import CACHE_TYPES, check_cache_type

KV_PADDING = 256


class MemoryModelError(CodedError):
    """A llama.cpp memory estimate was asked for settings llama.cpp refuses or that make
    no sense. ``code`` is stable: ``QuantizedVCacheNeedsFlashAttention``,
    ``InvalidMemorySettings``."""

    codes = ("QuantizedVCacheNeedsFlashAttention", "InvalidMemorySettings")


def _pad(value: int, to: int) -> int:
    return -(-value // to) * to


# llama.cpp's own limits on its settings (docs/sources.md §2): llama-server reads -c, -np,
# -ub and -b as 32-bit integers, and llama_context refuses more than 256 sequences.
LLAMA_MAX_INT = 2**31 - 1
LLAMA_MAX_SEQ = 256
SETTING_MAXIMUMS = {"context_length": LLAMA_MAX_INT, "parallel": LLAMA_MAX_SEQ,
                    "ubatch": LLAMA_MAX_INT, "batch": LLAMA_MAX_INT}


def _bad(name: str, limit: str = "") -> Fail:
    return lambda problem, value: MemoryModelError(
        "InvalidMemorySettings",
        f"{name}: {problem}{limit if problem.startswith('must be at most') else ''} "
        f"(got {shown(value)})", field=name, value=value)


def _cache_type(value: Any, name: str) -> str:
    """A KV cache type llama.cpp knows; refused naming the argument it was given as."""
    if not isinstance(value, str) or value not in CACHE_TYPES:
        try:
            check_cache_type(value)
        except CodedError as error:
            raise type(error)(error.code, f"{name}: {error.message}",
                              **{**error.details, "field": name}) from None
    return str(value)


def _check_positive(value: Any, name: str, minimum: int = 1,
                    maximum: int | None = None) -> int:
    limit = " (llama.cpp's limit)" if maximum is not None else ""
    return integer(value, _bad(name, limit), minimum=minimum, maximum=maximum)


def require_flash_attention(cache_type_v: str, flash_attn: bool) -> None:
    """llama.cpp refuses a quantized V cache without flash attention (llama_context)."""
    flash_attn = flag(flash_attn, _bad("flash_attn"))
    _cache_type(cache_type_v, "cache_type_v")
    if not flash_attn and CACHE_TYPES[cache_type_v][0] > 1:
        raise MemoryModelError(
            "QuantizedVCacheNeedsFlashAttention",
            f"V cache type {cache_type_v} is quantized, and llama.cpp refuses it without "
            f"flash attention (\"quantized V cache was requested, but this requires Flash "
            f"Attention\"); turn flash attention on or use an f16/bf16/f32 V cache",
            cache_type_v=cache_type_v, flash_attn=flash_attn)



@dataclass(frozen=True, slots=True)
class LlamaCppSettings:
    """The llama.cpp options that change memory (llama-server's flag in brackets)."""

    context_length: int  # -c
    cache_type_k: str = DEFAULT_CACHE_TYPE  # -ctk
    cache_type_v: str = DEFAULT_CACHE_TYPE  # -ctv
    parallel: int = 1  # -np
    kv_unified: bool = False  # -kvu
    ubatch: int = DEFAULT_UBATCH  # -ub
    batch: int = DEFAULT_BATCH  # -b
    flash_attn: bool = True  # -fa on|off
    overhead_bytes: int = 0
    """Backend overhead per device (not the host)."""
    outputs: int | None = None
    """The most outputs (logits) a ubatch computes, llama.cpp's ``n_outputs_max``:
    ``None`` for a batch's worth, as llama-cli and llama-completion reserve; llama-server
    reserves one per lane (``server_output_limits``: ``min(n_batch, lanes)`` without
    speculative decoding), which :func:`server_settings` gives."""

    def __post_init__(self) -> None:
        for name, maximum in SETTING_MAXIMUMS.items():
            object.__setattr__(self, name, _check_positive(getattr(self, name), name,
                                                           maximum=maximum))
        if self.outputs is not None:
            object.__setattr__(self, "outputs", _check_positive(self.outputs, "outputs",
                                                                maximum=LLAMA_MAX_INT))
        object.__setattr__(self, "overhead_bytes",
                           integer(self.overhead_bytes, _bad("overhead_bytes"), minimum=0,
                                   maximum=MAX_BYTES))
        for name in ("kv_unified", "flash_attn"):
            object.__setattr__(self, name, flag(getattr(self, name), _bad(name)))
        _cache_type(self.cache_type_k, "cache_type_k")
        _cache_type(self.cache_type_v, "cache_type_v")
        require_flash_attention(self.cache_type_v, self.flash_attn)

    @property
    def n_ctx(self) -> int:
        """Cells of the whole context after llama.cpp's padding (llama_context)."""
        padded = _pad(self.context_length, KV_PADDING)
        if self.kv_unified:
            return padded
        return self.n_ctx_seq * self.parallel

    @property
    def n_ctx_seq(self) -> int:
        padded = _pad(self.context_length, KV_PADDING)
        if self.kv_unified:
            return padded
        return _pad(padded // self.parallel, KV_PADDING)

    @property
    def streams(self) -> int:
        return 1 if self.kv_unified else self.parallel

    @property
    def n_batch(self) -> int:
        return min(self.n_ctx, self.batch)

    @property
    def n_ubatch(self) -> int:
        return min(self.n_batch, self.ubatch)

    @property
    def n_outputs_max(self) -> int:
        """llama.cpp's ``cparams.n_outputs_max``: the outputs a ubatch may compute."""
        return min(self.n_batch, self.outputs) if self.outputs is not None else self.n_batch

    def window_cells(self, window: int, unified: bool | None = None) -> int:
        """Cells per stream of the sliding-window cache (llama_kv_cache_iswa); ``unified``:
        whether that cache is unified (default: ``kv_unified``)."""
        lanes = self.parallel if (self.kv_unified if unified is None else unified) else 1
        return _pad(min(self.n_ctx_seq, window * lanes + self.n_ubatch), KV_PADDING)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def server_settings(**settings: Any) -> LlamaCppSettings:
    """The settings of a llama-server run (the commands ``planner launch`` prints): one
    output per lane, as llama-server reserves them."""
    settings.setdefault("outputs", settings.get("parallel", 1))
    return LlamaCppSettings(**settings)
