"""The shape of a model's compute graph, as its family reads it from the GGUF file: each
block's attention, feed-forward network or experts and recurrent mixer, and the model's
own fields (:class:`GraphModel`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """One block's attention: the widths its projections produce per token, and whether
    it reads the sliding-window cache."""

    q_width: int
    """The query projection's output (with the gate, for gated attention)."""
    k_width: int
    v_width: int
    out_width: int
    """The attention's output before the output projection (heads x value head size),
    which is also the roped query's width."""
    n_head: int
    sliding: bool = False
    fused_qkv: bool = False
    parallel: str = ""
    """A parallel block: "ffn_first" (the feed-forward network before the output
    projection), "ffn_residual_first" (the network, its sum with the residual, then the
    output projection) or "ffn_after"; "" for a sequential block."""
    kv_lora: int = 0
    """Latent attention (MLA, absorbed): the compressed KV width; 0 for plain attention.
    ``q_width`` is then the query heads' nope + rope, ``k_width`` the rope part."""
    q_lora: int = 0
    output_gate: bool = False
    """The attention's output is gated by a sigmoid of its own projection (Kimi K3)."""
    kv_b_width: int = 0
    """Latent attention without absorption (MiniCPM3): the heads' decompressed K nope and
    V width, cached as plain K and V; 0 for absorbed latent attention."""
    cached: bool = True
    """False for an encoder or a diffusion model: K and V go straight to the attention."""
    rope: bool = True
    """False where learned position embeddings replace rotary ones (GPT-2, MPT, ...)."""
    indexer_heads: int = 0
    """A sparse attention's indexer on this block: its heads, head size and top-k (0: the
    block has none, or reuses the last indexer's selection)."""
    indexer_dim: int = 0
    indexer_top_k: int = 0


@dataclass(frozen=True, slots=True)
class FeedForwardShape:
    """One block's feed-forward network, or mixture of experts when ``n_expert``."""

    n_ff: int
    gated: bool = True
    fused_up: bool = False
    """The up projection yields gate and up together (a GLU on one tensor)."""
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_shexp: int = 0
    norm_weights: bool = False
    n_ff_dense: int = 0
    """A dense network run beside the experts (after them) and added to their sum."""
    clamped: bool = False
    """The gated activation is clamped (a ``swiglu_clamp`` limit) and computed in place:
    SiLU of the gate, both clamped, their product, instead of one SwiGLU."""
    shexp_clamped: bool = False
    """The shared expert's activation is clamped so."""
    activation: str = "swiglu"
    """"situ" for Kimi K3's gate (scaled tanh times sigmoid, computed in place), else
    SwiGLU (or the ungated activation)."""
    n_latent: int = 0
    """A latent mixture of experts (Kimi K3): the routed experts run at this width,
    projected down from the input and (normed) back up; 0 at the embedding width."""


@dataclass(frozen=True, slots=True)
class RecurrentShape:
    """One block's recurrent mixer: inner width, state size, groups, heads (Mamba-1: the
    time step's rank) and convolution kernel. ``mixer`` "mamba" with ``version`` 2 for
    ``build_mamba2_layer``, 1 for ``build_mamba_layer``; "delta_net" for a gated
    delta-net layer (``build_delta_net_base``: the key heads are the groups, the value
    heads the heads, ``d_state`` each key head's size); "kda" for Kimi delta attention
    (``d_inner`` its heads' width, ``d_state`` a head's size); "shortconv" for LFM2's
    short convolution (``d_inner`` the convolved width, ``d_conv`` the cached columns);
    "plamo2" for PLaMo 2's Mamba mixer (``n_head`` heads); "lightning" for MiniMax-01's
    lightning attention (``n_head`` heads of ``d_state``, ``d_inner`` its gate's width)."""

    d_inner: int
    d_state: int
    n_group: int
    n_head: int
    d_conv: int
    norm: bool = True
    """Mamba-2: the grouped norm of the gated output. Mamba-1: RMS norms of dt, B and C."""
    version: int = 2
    mixer: str = "mamba"
    decay_rank: int = 0
    """KDA: the decay gate's low-rank width (its projection in two), 0 for one projection."""
    gate_rank: int = 0
    """KDA: the output gate's low-rank width, 0 for one projection."""
    dt_rank: int = 0
    """PLaMo 2: the time step's low-rank width (projected with B and C)."""


@dataclass(frozen=True, slots=True)
class BlockShape:
    attention: AttentionShape | None
    feed_forward: FeedForwardShape | None
    recurrent: RecurrentShape | None = None
    weighted_norm: bool = True
    """The input norm has weights. An unweighted one is not pinned to the block's device
    (llama.cpp names only a weighted norm for that): the scheduler runs it where the
    previous block ran."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BlockShape:
        return cls(AttentionShape(**data["attention"]) if data["attention"] else None,
                   FeedForwardShape(**data["feed_forward"]) if data["feed_forward"]
                   else None,
                   RecurrentShape(**data["recurrent"]) if data.get("recurrent") else None,
                   data.get("weighted_norm", True))


@dataclass(frozen=True, slots=True)
class GraphModel:
    """What the compute graph of a model depends on: its widths and blocks, the family
    that builds its graph (:mod:`planner.llamacpp.families`, by its registered name) and
    that family's own fields (a frozen dataclass of the family's, or None)."""

    n_embd: int
    n_vocab: int
    blocks: tuple[BlockShape, ...]
    family: str = "llama"
    position_embedding: bool = False
    """The model adds learned position embeddings to the token rows, on the host."""
    fields: Any = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fields"] = asdict(self.fields) if self.fields is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphModel:
        from planner.llamacpp.graph.family import family_named

        values = dict(data)
        values["blocks"] = tuple(BlockShape.from_dict(block) for block in values["blocks"])
        family = family_named(values.get("family", "llama"))
        if values.get("fields") is not None and family.fields_type is not None:
            values["fields"] = family.fields_type.from_dict(values["fields"])
        return cls(**values)
