"""``qwen4exp.cpp``: residual streams mixed by low-rank gates (hyper-connections), a
per-layer n-gram embedding (PLE) added by one block, gated delta-net linear layers and
full-attention layers whose sparse attention (QSA) scores blocks of pooled indexer keys;
its positions are four per token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Graph, Tensor, external
from planner.llamacpp.families.qwen35 import delta_net_shape
from planner.llamacpp.graph import (
    F16,
    F32,
    I32,
    I64,
    AttentionShape,
    BlockShape,
    Builder,
    Family,
    GraphModel,
    ModelReader,
    RecurrentShape,
    delta_net,
    embeddings,
    feed_forward,
    graph_inputs,
    register,
    tail_backend,
)
from planner.llamacpp.graph.reading import MAX_RESIDUAL_STREAMS

# llama-hparams.h: the per-layer n-gram embedding's largest n-gram and head count
# (qwen4exp's load_arch_hparams refuses more).
LLAMA_MAX_PLE_NGRAM = 8
LLAMA_MAX_PLE_HEADS = 64
MAX_PLE_KERNEL = 64
"""Taps of the per-layer embedding's convolution: published models have 4; each tap is
an operation of the graph."""


@dataclass(frozen=True, slots=True)
class Qwen4ExpFields:
    """The residual streams and their gates' low rank; the per-layer embedding's block
    (-1: none), rows per token (``(n-gram size - 1) x heads per n-gram``), their width,
    the convolution's kernel and dilation (the n-gram size); the sparse attention's pool
    (0: dense attention), its indexer's heads and head size and the budget in cells."""

    low_rank_streams: int
    low_rank_width: int
    ple_block: int = -1
    ple_heads: int = 0
    ple_width: int = 0
    ple_kernel: int = 0
    ple_dilation: int = 0
    qsa_pool: int = 0
    qsa_heads: int = 0
    qsa_dim: int = 0
    qsa_top_k: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Qwen4ExpFields:
        return cls(**data)


@register
class Qwen4Exp(Family):
    architectures = ("qwen4exp",)
    fields_type = Qwen4ExpFields
    positions_per_token = 4

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        return delta_net_shape(r, index)

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> Qwen4ExpFields:
        """The bounds qwen4exp's load_arch_hparams puts on its fields: more than one
        stream, one PLE layer, an n-gram of 2 to 8 and at most 64 heads, a kernel the
        taps of ``ple_conv1d``; one compress ratio, above one and dividing the budget."""
        meta = r.meta
        streams = meta.count("hyper_connection.count", minimum=2,
                             maximum=MAX_RESIDUAL_STREAMS,
                             why="a count of one has nothing to mix")
        fields: dict[str, Any] = {
            "low_rank_streams": streams,
            "low_rank_width": meta.count("hyper_connection.low_rank", minimum=1)}
        ple_layers = meta.counts("ple.layers", longest=1, maximum=r.layer_count - 1,
                                 why="llama.cpp supports one per-layer embedding")
        if ple_layers:
            ngram = meta.count("ple.ngram_size", minimum=2, maximum=LLAMA_MAX_PLE_NGRAM)
            heads = (ngram - 1) * meta.count(
                "ple.heads_per_ngram", minimum=1,
                maximum=LLAMA_MAX_PLE_HEADS // (ngram - 1),
                why=f"(n-gram size - 1) x heads per n-gram is at most {LLAMA_MAX_PLE_HEADS}")
            kernel = meta.count("ple.conv_kernel", minimum=1, maximum=MAX_PLE_KERNEL)
            taps = r.widths[ple_layers[0]].get("ple_conv1d", 0)
            channels = streams * r.n_embd
            if taps != kernel * channels:
                raise meta.bad("ple.conv_kernel", f"is not the taps of block "
                               f"{ple_layers[0]}'s ple_conv1d ({taps:,} elements for "
                               f"{channels:,} channels; llama.cpp refuses another shape)",
                               kernel)
            fields.update(ple_block=ple_layers[0], ple_heads=heads,
                          ple_width=meta.count("embedding_length_per_layer_input",
                                               minimum=1),
                          ple_kernel=kernel, ple_dilation=ngram)
        ratios = meta.counts_per_layer("attention.compress_ratios", 0)
        pool = max(ratios, default=0)
        if any(ratio not in (0, pool) for ratio in ratios):
            raise meta.bad("attention.compress_ratios", "must hold one ratio for every "
                           "sparse layer (llama.cpp refuses two)", ratios)
        if pool and any("indexer.q_proj" in w for w in r.widths.values()):
            top_k = meta.count("attention.indexer.top_k", minimum=1)
            if pool == 1 or top_k % pool:
                raise meta.bad("attention.compress_ratios", f"must be a ratio above 1 that "
                               f"divides attention.indexer.top_k ({top_k:,}), as llama.cpp "
                               f"requires", pool)
            fields.update(qsa_pool=pool,
                          qsa_heads=meta.count("attention.indexer.head_count", minimum=1),
                          qsa_dim=meta.count("attention.indexer.key_length", minimum=1),
                          qsa_top_k=top_k)
        return Qwen4ExpFields(**fields)

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        r.require(blocks, "attention or a recurrent mixer", "attention.head_count",
                  lambda block: block.attention is not None or block.recurrent is not None)

    def build(self, b: Builder) -> Graph:
        inputs = graph_inputs(b)
        x = embeddings(b, inputs, copy_on_host=bool(b.model.fields.ple_heads))
        return qwen4exp_graph(b, x, inputs, b.output_backend)


def qsa_pools(model: GraphModel, n_kv: int) -> tuple[int, int, int, int]:
    """qwen4exp's pool counts in the graph llama.cpp reserves (a full cache:
    ``llama_memory_hybrid_idx_context``): the pools of ``n_kv`` cells, the pooled-key list
    padded past them (``kpool_pad``: one more, to 64), the top pools each token keeps and
    the cells it selects (the top pools' members and the incomplete tail)."""
    pool = model.fields.qsa_pool
    real = max(1, n_kv // pool)
    padded = max(64, -(-(n_kv // pool + 1) // 64) * 64)
    top = min(padded, model.fields.qsa_top_k // pool)
    return real, padded, top, pool * top + pool - 1


def qwen4exp_inputs(b: Builder, inputs: dict[str, Tensor]) -> None:
    """The inputs qwen4exp adds to the usual ones: the sparse attention's shared k-pool
    inputs (``build_inp_kpool``: the indexer cache's rows, each pool's cell and members,
    the pool mask, each token's tail cells, the pools to re-pool with their cells and
    positions) and the per-layer embedding's rows (``build_inp_ple``)."""
    g, m, n, host = b.graph, b.model, b.n_tokens, b.input_backend
    if m.fields.qsa_pool:
        pool = m.fields.qsa_pool
        new, padded, _, _ = qsa_pools(m, b.n_kv)
        inputs["qsa_k_idxs"] = g.input("qsa_k_idxs", n * I64, host)
        inputs["pool_cells"] = g.input("pool_cells", padded * I32, host)
        inputs["pool_idxs"] = g.input("pool_idxs", pool * padded * I32, host)
        inputs["pool_mask"] = g.input("pool_mask", padded * n * F16, host)
        inputs["tail_idxs"] = g.input("tail_idxs", (pool - 1) * n * I32, host)
        inputs["new_pool_idxs"] = g.input("new_pool_idxs", pool * new * I32, host)
        inputs["new_pool_rep"] = g.input("new_pool_rep", new * I64, host)
        inputs["new_pool_pos"] = g.input("new_pool_pos", 4 * new * I32, host)
    if m.fields.ple_heads:
        inputs["ple_rows"] = g.input("ple_rows", m.fields.ple_heads * n * I32, host)


def qwen4exp_graph(b: Builder, embd: Tensor, inputs: dict[str, Tensor],
                    output_backend: int) -> Graph:
    """qwen4exp's graph (qwen4exp.cpp): the embedding repeated into the residual streams
    (``hc_init``); the per-layer embedding gathered on the host and added to the streams
    by its block (``build_ple``); each half of each block reads the streams' gated mean
    (``build_hc_mix``, fused) and scatters its output back into every stream
    (``build_hc_combine``, fused); the last block keeps the output rows of its attention
    output, its scatter weights and the streams; the head's mixer (unfused) is the output
    norm. Nodes are laid out in the order ggml's depth-first expansion finds them: a
    mixer's scatter projection runs only when its combine does, after the half's output.
    The first norm of a block's mixer has no weights, so it runs where the previous block
    ran: the next device copies in that norm and the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc, width = m.fields.low_rank_streams, m.n_embd * F32
    qwen4exp_inputs(b, inputs)
    host = b.input_backend
    first = b.backend_of[0] if b.backend_of else host
    ple = None
    if m.fields.ple_heads:
        ple = g.op("GET_ROWS", m.fields.ple_heads * m.fields.ple_width * n * F32,
                   (b.w("per_layer_token_embd.weight"), inputs["ple_rows"]), "ple_embd",
                   backend=host)
    x = g.op("REPEAT", hc * width * n, (g.view(embd, backend=embd.backend),), "hc_init",
             backend=first)
    at = first
    last = len(m.blocks) - 1
    for index, block in enumerate(m.blocks):
        backend = b.backend_of[index] if b.backend_of else host
        layer = f"blk.{index}"
        if index == m.fields.ple_block and ple is not None:
            x = per_layer_embedding(b, x, ple, index, inputs, backend)
            at = backend
        cur, xn = hc_mix(b, x, f"{layer}.hc_attn", backend, at)
        if block.recurrent is not None:
            out = delta_net(b, cur, block.recurrent, index, inputs, backend,
                             tail_backend(b, index))
        else:
            assert block.attention is not None
            out = qwen4exp_attention(b, cur, block.attention, index, inputs, backend)
        residual = x
        if index == last:
            out = g.op("GET_ROWS", width * b.n_outputs, (out, inputs["out_ids"]),
                       "attn_out_rows", backend=backend)
            residual = g.op("GET_ROWS", hc * width * b.n_outputs,
                            (g.view(x, backend=x.backend), inputs["out_ids"]), "hc_rows",
                            backend=backend)
        x = hc_combine(b, residual, out, xn, f"{layer}.hc_attn", backend,
                        inputs["out_ids"] if index == last else None)
        if block.feed_forward is not None:
            cur, xn = hc_mix(b, x, f"{layer}.hc_ffn", backend, backend)
            out = feed_forward(b, cur, block.feed_forward, index, backend)
            x = hc_combine(b, x, out, xn, f"{layer}.hc_ffn", backend, None)
        at = backend
    cur, _ = hc_mix(b, x, "output_hc", output_backend, at, fused=False)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), cur),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g


def hc_mix(b: Builder, x: Tensor, name: str, backend: int, norm_at: int,
            fused: bool = True) -> tuple[Tensor, Tensor]:
    """qwen4exp's ``build_hc_mix`` up to the mean: the streams normed (the norm without
    weights at ``norm_at``) and scaled, the low-rank gates, the gated mean of the streams
    (one ``DSV4_HC_PRE``, or unfused for the head: the sigmoid, the product in place, the
    first stream made contiguous and the others added). The mean, and the normed streams
    the scatter projection reads later."""
    g, m = b.graph, b.model
    hc, width = m.fields.low_rank_streams, m.n_embd * F32
    tokens = x.nbytes // (hc * width)
    size = hc * width * tokens
    normed = g.op("RMS_NORM", size, (x,), "hc_norm_rms", backend=norm_at)
    normed = g.like("MUL", normed, (b.w(f"{name}_norm"),), "hc_norm", backend)
    flat = g.view(normed, "hc_norm (flat)", backend=backend)
    low = g.op("MUL_MAT", m.fields.low_rank_width * tokens * F32,
               (b.w(f"{name}_down"), flat), "hc_lo", backend=backend)
    low = g.like("UNARY", g.like("SCALE", low, (), "hc_lo_scaled", backend), (), "hc_lo_silu",
                 backend)
    gate = g.op("MUL_MAT", size, (b.w(f"{name}_up"), low), "hc_gate", backend=backend)
    if fused:
        mixed = g.op("DSV4_HC_PRE", width * tokens, (g.view(flat, backend=backend),
                                                     g.view(gate, backend=backend)),
                     "hc_mixed", backend=backend)
        return mixed, flat
    gate = g.like("UNARY", gate, (), "hc_gate_sigmoid", backend)
    gated = g.like("MUL", flat, (gate,), "hc_gated", backend)
    mixed = g.op("CONT", width * tokens, (g.view(gated, backend=backend),), "hc_mixed",
                 backend=backend)
    for _ in range(1, hc):
        mixed = g.like("ADD", mixed, (g.view(gated, backend=backend),), "hc_mixed", backend)
    return g.like("SCALE", mixed, (), "hc_mixed", backend), flat


def hc_combine(b: Builder, residual: Tensor, out: Tensor, xn: Tensor, name: str,
                backend: int, out_ids: Tensor | None) -> Tensor:
    """qwen4exp's ``build_hc_combine`` (fused): the mixer's scatter projection of its
    normed streams (the output rows of it in the last block), its weights (scaled,
    sigmoid, doubled in place) and every stream plus the half's output times its
    weight."""
    g, m = b.graph, b.model
    tokens = out.nbytes // (m.n_embd * F32)
    inject = g.op("MUL_MAT", b.rows(xn) * F32, (b.w(f"{name}_inject"), xn), "hc_inject",
                  backend=backend)
    if out_ids is not None:
        inject = g.op("GET_ROWS", m.fields.low_rank_streams * tokens * F32, (inject, out_ids),
                      "hc_inject_rows", backend=backend)
    weights = g.like("SCALE", inject, (), "hc_scatter_scaled", backend)
    weights = g.like("SCALE", g.like("UNARY", weights, (), "hc_scatter", backend), (),
                     "hc_scatter_doubled", backend)
    return g.op("DSV4_HC_POST", residual.nbytes, (out, residual, weights), "hc_combine",
                backend=backend)


def per_layer_embedding(b: Builder, x: Tensor, embd: Tensor, index: int,
                  inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """qwen4exp's ``build_ple``, in the order ggml expands it (from the write-back of the
    convolution's history): the history's cached rows; the value projected and repeated
    over the streams; the key projected and normed per stream, the streams normed as the
    query, their per-stream score and gate; the gated value; it normed, concatenated after
    the history (whose tail is written back); the dilated convolution as a sum of shifted
    copies, each made contiguous and scaled by its tap; SiLU, made contiguous, added with
    the gated value to the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc = m.fields.low_rank_streams
    channels = hc * m.n_embd
    size = channels * n * F32
    layer = f"blk.{index}"
    history = (m.fields.ple_kernel - 1) * m.fields.ple_dilation
    rows = g.op("GET_ROWS", history * channels * F32,
                (external(f"cache_p_{index}"), inputs["rs_copy"]), "ple_conv_state",
                backend=backend)
    value = g.op("MUL_MAT", m.n_embd * n * F32, (b.w(f"{layer}.ple_value"), embd),
                 "ple_value", backend=backend)
    value = g.op("REPEAT", size, (g.view(value, backend=backend),), "ple_value_streams",
                 backend=backend)
    key = g.op("MUL_MAT", size, (b.w(f"{layer}.ple_key"), embd), "ple_key", backend=backend)
    key = g.like("RMS_NORM", g.view(key, backend=backend), (), "ple_key_norm", backend)
    key = g.like("MUL", key, (b.w(f"{layer}.ple_norm_key"),), "ple_key_normed", backend)
    query = g.op("RMS_NORM", size, (x,), "ple_query_norm", backend=backend)
    query = g.like("MUL", query, (b.w(f"{layer}.ple_norm_query"),), "ple_query", backend)
    score = g.like("MUL", key, (query,), "ple_key_query", backend)
    score = g.op("SUM_ROWS", hc * n * F32, (score,), "ple_score", backend=backend)
    score = g.like("SCALE", score, (), "ple_score_scaled", backend)
    sign = g.op("UNARY", score.nbytes, (score,), "ple_sign", backend=backend)
    magnitude = g.op("UNARY", score.nbytes, (score,), "ple_abs", backend=backend)
    magnitude = g.like("SQRT", g.like("CLAMP", magnitude, (), "ple_clamped", backend), (),
                       "ple_magnitude", backend)
    gate = g.like("UNARY", g.like("MUL", sign, (magnitude,), "ple_signed", backend), (),
                  "ple_gate", backend)
    gated = g.like("MUL", value, (gate,), "ple_gated_value", backend)
    normed = g.op("RMS_NORM", size, (g.view(gated, backend=backend),), "ple_conv_norm",
                  backend=backend)
    normed = g.like("MUL", normed, (b.w(f"{layer}.ple_norm_conv"),), "ple_conv_normed",
                    backend)
    padded = g.op("CONCAT", (history + n) * channels * F32,
                  (g.view(rows, backend=backend), g.view(normed, backend=backend)),
                  "ple_conv_input", backend=backend)
    tail = g.op("CONT", history * channels * F32, (g.view(padded, backend=backend),),
                "ple_conv_tail", backend=backend)
    g.op("CPY", 0, (tail, external(f"cache_p_{index}")), backend=backend)
    conv = None
    for tap in range(m.fields.ple_kernel):
        shifted = g.op("CONT", size, (g.view(padded, backend=backend),), f"ple_shift_{tap}",
                       backend=backend)
        weight = g.op("CONT", channels * F32, (b.w(f"{layer}.ple_conv1d"),), "ple_tap",
                      backend=backend)
        term = g.like("MUL", shifted, (weight,), "ple_term", backend)
        conv = term if conv is None else g.like("ADD", conv, (term,), "ple_conv", backend)
    assert conv is not None
    conv = g.like("UNARY", conv, (), "ple_conv_silu", backend)
    conv = g.op("CONT", size, (conv,), "ple_conv_out", backend=backend)
    summed = g.like("ADD", gated, (g.view(conv, backend=backend),), "ple_sum", backend)
    return g.like("ADD", x, (summed,), "ple_out", backend)


def qwen4exp_attention(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                        inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """qwen4exp's full-attention layer (``build_layer_attn``), in ggml's expansion order:
    the sparse attention's selection (with pooled keys); Q (with its gate), K and V
    projected, normed, roped and cached; the selection mask (else the causal mask) and
    flash attention over it; the gate made contiguous and applied, the output
    projection."""
    g, m, n = b.graph, b.model, b.n_tokens
    layer = f"blk.{index}"
    selection = qsa_select(b, cur, index, inputs, backend) if m.fields.qsa_pool else None
    q_full = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "Qcur_full",
                  backend=backend)
    q = g.op("RMS_NORM", attn.out_width * n * F32, (g.view(q_full, backend=backend),),
             "Qcur_normed", backend=backend)
    q = g.like("MUL", q, (b.w(f"{layer}.attn_q_norm"),), "Qcur_normed", backend)
    q = g.like("ROPE", q, (inputs["pos"],), "Qcur", backend)
    v = g.op("MUL_MAT", attn.v_width * n * F32, (b.w(f"{layer}.v"), cur), "Vcur",
             backend=backend)
    k = g.op("MUL_MAT", attn.k_width * n * F32, (b.w(f"{layer}.k"), cur), "Kcur",
             backend=backend)
    k = g.like("RMS_NORM", g.view(k, backend=backend), (), "Kcur_normed", backend)
    k = g.like("MUL", k, (b.w(f"{layer}.attn_k_norm"),), "Kcur_normed", backend)
    k = g.like("ROPE", k, (inputs["pos"],), "Kcur", backend)
    cache_k, cache_v = external(f"cache_k_{index}"), external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (k, inputs["k_idxs"], cache_k), backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    mask = qsa_mask(b, *selection, inputs, backend) if selection else inputs["mask"]
    out_size = attn.out_width * n * F32
    if b.flash_attn:
        core = g.op("FLASH_ATTN_EXT", out_size,
                    (g.view(q, backend=backend), cache_k, cache_v, mask), "kqv",
                    backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * attn.n_head * F32,
                      (cache_k, g.view(q, backend=backend)), "kq", backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        core = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                    backend=backend)
    core = g.view(core, "kqv_out", backend=backend)
    gate = g.op("CONT", out_size, (g.view(q_full, backend=backend),), "gate_reshaped",
                backend=backend)
    gate = g.like("UNARY", gate, (), "gate_sigmoid", backend)
    gated = g.like("MUL", core, (gate,), "attn_gated", backend)
    return g.op("MUL_MAT", m.n_embd * n * F32, (b.w(f"{layer}.wo"), gated), "attn_output",
                backend=backend)


def qsa_select(b: Builder, cur: Tensor, index: int, inputs: Mapping[str, Tensor],
                backend: int) -> tuple[Tensor, Tensor, Tensor]:
    """qwen4exp's ``build_qsa_sel`` up to the selected cells: the indexer's raw key cached
    beside a zero pooled slot; the pools this ubatch completes gathered from the indexer
    cache, averaged, normed, roped and scattered back; the pooled keys gathered; the
    indexer's query heads projected, normed (out of place: the norm reads a reshaped
    projection) and roped, and scored against them; the top pools' member cells and the
    incomplete tail. The cells, the scores and the top pools."""
    g, m, n = b.graph, b.model, b.n_tokens
    layer = f"blk.{index}"
    pool, dim, heads = m.fields.qsa_pool, m.fields.qsa_dim, m.fields.qsa_heads
    new, padded, top, selected = qsa_pools(m, b.n_kv)
    cache_idx = external(f"cache_idx_{index}")
    raw = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.k_proj"), cur),
               "indexer_k_raw", backend=backend)
    zero = g.op("FILL", dim * n * F32, (), "indexer_pzero", backend=backend)
    packed = g.op("CONCAT", 2 * dim * n * F32, (raw, zero), "indexer_k_packed",
                  backend=backend)
    g.op("SET_ROWS", 0, (g.view(packed, backend=backend), inputs["qsa_k_idxs"], cache_idx),
         backend=backend)
    members = g.op("GET_ROWS", dim * pool * new * F32, (cache_idx, inputs["new_pool_idxs"]),
                   "indexer_pool_rows", backend=backend)
    pooled = g.op("CONT", dim * new * F32, (g.view(members, backend=backend),),
                  "indexer_pool_sum", backend=backend)
    for _ in range(1, pool):
        pooled = g.like("ADD", pooled, (g.view(members, backend=backend),),
                        "indexer_pool_sum", backend)
    for op in ("SCALE", "RMS_NORM", "MUL"):
        pooled = g.like(op, pooled, (), "indexer_pool_k", backend)
    pooled = g.like("ROPE", g.view(pooled, backend=backend), (inputs["new_pool_pos"],),
                    "indexer_pool_k_new", backend)
    g.op("SET_ROWS", 0, (g.view(pooled, backend=backend), inputs["new_pool_rep"], cache_idx),
         backend=backend)
    q = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.q_proj"), cur),
             "indexer_q", backend=backend)
    q = g.like("RMS_NORM", g.view(q, backend=backend), (), "indexer_q_norm", backend)
    q = g.like("MUL", q, (b.w(f"{layer}.indexer.q_norm"),), "indexer_q_normed", backend)
    q = g.like("ROPE", q, (inputs["pos"],), "indexer_q", backend)
    keys = g.op("GET_ROWS", dim * padded * F32, (cache_idx, inputs["pool_cells"]),
                "indexer_k", backend=backend)
    weights = g.op("FILL", heads * n * F32, (), "indexer_weights", backend=backend)
    score = g.op("LIGHTNING_INDEXER", padded * n * F32,
                 (q, g.view(keys, backend=backend), weights, inputs["pool_mask"]),
                 "indexer_score", backend=backend)
    picked = g.op("TOP_K", top * n * I32, (score,), "indexer_top_k", backend=backend)
    cells = g.op("GET_ROWS", pool * top * n * I32,
                 (inputs["pool_idxs"], g.view(picked, backend=backend)), "indexer_sel_rows",
                 backend=backend)
    cells = g.op("CONCAT", selected * n * I32,
                 (g.view(cells, backend=backend), inputs["tail_idxs"]), "indexer_sel_idx",
                 backend=backend)
    return cells, score, picked


def qsa_mask(b: Builder, cells: Tensor, score: Tensor, picked: Tensor,
              inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """The rest of ``build_qsa_sel``, expanded when the attention reads it: an all-masked
    row per token (with a dump row per selected slot), zeros, the selected cells' indices
    as floats, each slot live where its pool scored (or its tail cell exists), dead slots
    sent to their own dump rows by a cumulative sum, the indices back to integers, the
    zeros set at them and the causal mask added."""
    g, m, n = b.graph, b.model, b.n_tokens
    pool = m.fields.qsa_pool
    _, _, top, selected = qsa_pools(m, b.n_kv)
    mask_type = F16 if b.flash_attn else F32
    everything = g.op("FILL", (b.n_kv + selected) * mask_type, (), "kq_mask_all",
                      backend=backend)
    everything = g.op("REPEAT", (b.n_kv + selected) * n * mask_type, (everything,),
                      "kq_mask_all", backend=backend)
    zeros = g.op("FILL", selected * mask_type, (), "kq_mask_zeros", backend=backend)
    zeros = g.op("REPEAT", selected * n * mask_type, (zeros,), "kq_mask_zeros",
                 backend=backend)
    index_f = g.op("CPY", selected * n * F32, (cells,), "indexer_sel_f32", backend=backend)
    live = g.op("GET_ROWS", top * n * F32, (g.view(score, backend=backend), picked),
                "indexer_top_score", backend=backend)
    live = g.like("CLAMP", g.like("SCALE", live, (), "indexer_live", backend), (),
                  "indexer_live", backend)
    live = g.op("REPEAT", pool * top * n * F32, (live,), "indexer_live_pool", backend=backend)
    tail = g.op("CPY", (pool - 1) * n * F32, (inputs["tail_idxs"],), "indexer_live_tail",
                backend=backend)
    tail = g.like("CLAMP", g.like("SCALE", tail, (), "indexer_live_tail", backend), (),
                  "indexer_live_tail", backend)
    live = g.op("CONCAT", selected * n * F32, (g.view(live, backend=backend), tail),
                "indexer_live", backend=backend)
    dump = g.op("FILL", live.nbytes, (live,), "indexer_ones", backend=backend)
    dump = g.op("CUMSUM", live.nbytes, (dump,), "indexer_dump", backend=backend)
    dump = g.like("SCALE", dump, (), "indexer_dump", backend)
    index_f = g.like("SUB", index_f, (dump,), "indexer_sel_live", backend)
    index_f = g.like("MUL", index_f, (live,), "indexer_sel_live", backend)
    index_f = g.like("ADD", index_f, (dump,), "indexer_sel_live", backend)
    index_i = g.op("CPY", selected * n * I32, (index_f,), "indexer_sel_i32", backend=backend)
    unmasked = Tensor("indexer_sel_rows", everything.nbytes, "SET_ROWS",
                      (g.view(everything, backend=backend), zeros,
                       g.view(index_i, backend=backend)), view_src=everything,
                      backend=backend)
    g.nodes.append(unmasked)
    return g.op("ADD", b.n_kv * n * mask_type,
                (g.view(unmasked, backend=backend), inputs["mask"]), "indexer_sel",
                backend=backend)
