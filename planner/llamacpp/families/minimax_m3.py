"""``minimax-m3.cpp``: multi-scale sparse attention (MSA). The layers with an indexer
(``indexer.q_proj``) score the cached indexer keys of the positions by blocks of
``attention.indexer.block_size``, keep the best blocks and attend (with flash attention)
only to their cells; without flash attention they are plain attention."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph import (
    F16,
    F32,
    I32,
    AttentionShape,
    BlockShape,
    Builder,
    Family,
    ModelReader,
    graph_inputs,
    register,
)


@dataclass(frozen=True, slots=True)
class SparseAttention:
    """The indexer's position block."""

    block: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SparseAttention:
        return cls(**data)


@register
class MiniMaxM3(Family):
    architectures = ("minimax-m3",)
    fields_type = SparseAttention

    def attention(self, r: ModelReader, index: int) -> AttentionShape | None:
        shape = super().attention(r, index)
        if shape is not None and "indexer.q_proj" in r.widths[index]:
            heads, dim, top_k = r.indexer()
            shape = replace(shape, indexer_heads=heads, indexer_dim=dim, indexer_top_k=top_k)
        return shape

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> SparseAttention | None:
        if not any(block.attention is not None and block.attention.indexer_heads
                   for block in blocks):
            return None
        return SparseAttention(r.meta.count("attention.indexer.block_size", minimum=1))

    def inputs(self, b: Builder) -> dict[str, Tensor]:
        """The usual inputs, then (with flash attention) the sparse attention's: each
        position's indexer cache slot, the positions' mask, each block's bias and each
        cell's block."""
        inputs = graph_inputs(b)
        if b.flash_attn and b.model.fields is not None:
            g, n, host = b.graph, b.n_tokens, b.input_backend
            block = b.model.fields.block
            positions = msa_positions(block)
            inputs["msa_pos_slot"] = g.input("msa_pos_slot", positions * I32, host)
            inputs["msa_pos_mask"] = g.input("msa_pos_mask", positions * n * F32, host)
            inputs["msa_bias"] = g.input("msa_bias", positions // block * n * F32, host)
            inputs["msa_cell_blk"] = g.input("msa_cell_blk", b.n_kv * I32, host)
        return inputs

    def attention_core(self, b: Builder, cur: Tensor, shape: AttentionShape, index: int,
                       inputs: Mapping[str, Tensor], backend: int) -> Tensor:
        if shape.indexer_heads and b.flash_attn:
            return sparse_attention_core(b, cur, shape, index, inputs, backend)
        return super().attention_core(b, cur, shape, index, inputs, backend)


MSA_MIN_POSITIONS = 256


def msa_positions(block: int) -> int:
    """The positions MiniMax-M3's sparse attention indexes in the graph llama.cpp
    reserves (``llama_kv_cache_msa_context::get_n_pos`` on an empty cache), padded to
    the indexer's block."""
    return -(-MSA_MIN_POSITIONS // block) * block


def sparse_attention_core(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                           inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """MiniMax-M3's multi-scale sparse attention (``build_attn_msa_fa``, a batch of one
    stream): the indexer's key normed, roped and cached; Q, K and V cached; the indexer's
    cached keys gathered by position and scored against its normed, roped query heads,
    pooled per block and biased, the best blocks kept; their mask made (the block mask
    expanded to the cache's cells and added to the causal mask) and flash attention over
    it. The one-token graph, far smaller, is laid out the same."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, dim = attn.indexer_heads, attn.indexer_dim
    block = b.model.fields.block
    positions = msa_positions(block)
    blocks = positions // block
    top = min(attn.indexer_top_k, blocks)
    cache_idx = external(f"cache_idx_{index}")
    ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.k_proj"), cur), "indexer_k",
              backend=backend)
    ik = g.op("RMS_NORM", ik.nbytes, (g.view(ik, backend=backend),), "indexer_k_norm",
              backend=backend)
    ik = g.like("MUL", ik, (b.w(f"{layer}.indexer.k_norm"),), "indexer_k_normed", backend)
    ik = g.op("ROPE", ik.nbytes, (ik, inputs["pos"]), "indexer_k_rope", backend=backend)
    g.op("SET_ROWS", 0, (g.view(ik, backend=backend), inputs["k_idxs"], cache_idx),
         backend=backend)
    out_size = attn.out_width * n * F32
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "q", backend=backend)
    q = g.op("ROPE", out_size, (g.view(q, backend=backend), inputs["pos"]), "Qcur",
             backend=backend)
    k = g.op("MUL_MAT", attn.k_width * n * F32, (b.w(f"{layer}.k"), cur), "k", backend=backend)
    k = g.op("ROPE", k.nbytes, (g.view(k, backend=backend), inputs["pos"]), "Kcur",
             backend=backend)
    v = g.op("MUL_MAT", attn.v_width * n * F32, (b.w(f"{layer}.v"), cur), "v", backend=backend)
    cache_k, cache_v = external(f"cache_k_{index}"), external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k, backend=backend), inputs["k_idxs"], cache_k),
         backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    keys = g.op("GET_ROWS", positions * dim * F32, (cache_idx, inputs["msa_pos_slot"]),
                "indexer_keys", backend=backend)
    iq = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.q_proj"), cur),
              "indexer_q", backend=backend)
    iq = g.op("RMS_NORM", iq.nbytes, (g.view(iq, backend=backend),), "indexer_q_norm",
              backend=backend)
    iq = g.like("MUL", iq, (b.w(f"{layer}.indexer.q_norm"),), "indexer_q_normed", backend)
    iq = g.op("ROPE", iq.nbytes, (iq, inputs["pos"]), "indexer_q_rope", backend=backend)
    scores = g.op("MUL_MAT", positions * heads * n * F32, (keys, g.view(iq, backend=backend)),
                  "msa_scores", backend=backend)
    scores = g.like("ADD", scores, (g.view(inputs["msa_pos_mask"], backend=backend),),
                    "msa_scores_masked", backend)
    pooled = g.op("POOL_2D", blocks * heads * n * F32, (scores,), "msa_bs", backend=backend)
    pooled = g.like("ADD", pooled, (g.view(inputs["msa_bias"], backend=backend),), "msa_bsf",
                    backend)
    picked = g.op("TOP_K", top * heads * n * I32, (pooled,), "msa_top_k", backend=backend)
    zero = g.op("CPY", top * heads * n * F32, (picked,), "msa_top_k_f32", backend=backend)
    zero = g.like("SCALE", zero, (), "msa_zero", backend)
    floor = g.op("SCALE", blocks * n * F32, (g.view(inputs["msa_bias"], backend=backend),),
                 "msa_ninf", backend=backend)
    floor = g.op("CPY", blocks * n * F16, (floor,), "msa_ninf_f16", backend=backend)
    floor = g.op("REPEAT", blocks * heads * n * F16, (floor,), "msa_ninf_heads",
                 backend=backend)
    unmasked = Tensor("msa_block_mask_rows", floor.nbytes, "SET_ROWS",
                      (g.view(floor, backend=backend), zero, g.view(picked, backend=backend)),
                      view_src=floor, backend=backend)
    g.nodes.append(unmasked)
    block_mask = g.op("CONT", floor.nbytes, (g.view(unmasked, backend=backend),),
                      "msa_block_mask", backend=backend)
    block_mask = g.op("CONT", floor.nbytes, (g.view(block_mask, backend=backend),),
                      "msa_block_mask_t", backend=backend)
    cells = g.op("GET_ROWS", n * heads * b.n_kv * F32, (block_mask, inputs["msa_cell_blk"]),
                 "msa_cell_mask", backend=backend)
    cells = g.op("CONT", cells.nbytes, (g.view(cells, backend=backend),), "msa_cell_mask_t",
                 backend=backend)
    causal = g.op("CPY", b.n_kv * n * F32, (inputs["mask"],), "msa_causal_f32",
                  backend=backend)
    mask = g.like("ADD", cells, (g.view(causal, backend=backend),), "msa_mask", backend)
    mask = g.op("CPY", b.n_kv * n * heads * F16, (mask,), "msa_mask4", backend=backend)
    out = g.op("FLASH_ATTN_EXT", out_size, (g.view(q, backend=backend), cache_k, cache_v, mask),
               "msa_fattn", backend=backend)
    out = g.op("CONT", out_size, (g.view(out, backend=backend),), "msa_fattn_cont",
               backend=backend)
    return g.view(out, "kqv_out", backend=backend)
