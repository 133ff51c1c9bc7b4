"""``glm5-next.cpp``: four manifold-constrained hyper-connection streams (mHC, on ggml's
fused DSV4_HC operations) around blocks of nope latent attention, whose lightning indexer
scores keys pooled per ``attention.indexer.kpool`` cells (a block without the indexer's
tensors reuses the last selection), and of Kimi delta attention; its networks' and
experts' limited SwiGLU is one fused operation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Graph, Tensor, external
from planner.llamacpp.families.kimi_linear import kda_shape
from planner.llamacpp.graph import (
    F16,
    F32,
    I32,
    I64,
    Activation,
    AttentionShape,
    BlockShape,
    Builder,
    Family,
    ModelReader,
    RecurrentShape,
    embeddings,
    feed_forward,
    kda,
    latent_attention,
    latent_values,
    norm,
    output_projection,
    register,
    tail_backend,
    token_inputs,
)


@dataclass(frozen=True, slots=True)
class PooledIndexer:
    """The residual streams, the cells pooled into one indexer key and whether each
    token also keeps its incomplete last pool (``kpool_select_tail``)."""

    streams: int
    kpool: int
    kpool_tail: bool

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PooledIndexer:
        return cls(**data)


@register
class Glm5Next(Family):
    architectures = ("glm5-next",)
    fields_type = PooledIndexer
    activation = Activation(fused=True, fused_experts=True)

    def attention(self, r: ModelReader, index: int) -> AttentionShape | None:
        return latent_attention(r, index, indexer=True)

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        return kda_shape(r, index)

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> PooledIndexer:
        """The streams (llama.cpp's mHC asserts 4) and the pooling: ``kpool`` above one
        and dividing the indexer's top-k, as glm5-next.cpp asserts."""
        meta = r.meta
        streams = meta.count("hyper_connection.count", minimum=4, maximum=4,
                             why="llama.cpp's mHC supports 4")
        indexed = [block.attention for block in blocks
                   if block.attention is not None and block.attention.indexer_heads]
        top_k = indexed[0].indexer_top_k if indexed else 0
        kpool = 0
        if indexed:
            kpool = meta.count("attention.indexer.kpool", minimum=2, maximum=top_k,
                               why="llama.cpp asserts it is above one and divides the "
                                   "indexer's top_k")
            if top_k % kpool:
                raise meta.bad("attention.indexer.kpool", f"must divide "
                               f"attention.indexer.top_k ({top_k:,}) as llama.cpp asserts",
                               kpool)
        return PooledIndexer(streams, kpool,
                             meta.flag("attention.indexer.kpool_select_tail") and bool(indexed))

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        r.require(blocks, "attention or a recurrent mixer", "attention.head_count",
                  lambda block: block.attention is not None or block.recurrent is not None)
        first = next((block.attention for block in blocks if block.attention is not None),
                     None)
        if first is not None and not first.indexer_heads:
            raise r.meta.bad("attention.indexer.kpool", "is read by no indexer before the "
                             "first attention block, which would reuse a selection nobody "
                             "made (its indexer tensors are missing)",
                             r.meta.raw("attention.indexer.kpool"))

    def build(self, b: Builder) -> Graph:
        inputs = kpool_inputs(b)
        return mixed_hc_graph(b, embeddings(b, inputs), inputs, b.output_backend)


def kpool_pools(pooling: PooledIndexer, top_k: int, n_kv: int) -> tuple[int, int, int]:
    """glm5-next's pooled-indexer sizes in the graph llama.cpp reserves for one sequence
    (the full-cache context of ``llama_memory_hybrid_idx``): the pools read
    (``kpool_pad``: one past the cache's pools, padded to 64), the pools built anew (every
    pool of the cache) and the cells each token selects (the best pools' cells, and the
    incomplete tail's)."""
    kpool = pooling.kpool
    pools = n_kv // kpool
    read = max(64, -(-(pools + 1) // 64) * 64)
    selected = kpool * min(read, top_k // kpool)
    return read, max(pools, 1), selected + (kpool - 1 if pooling.kpool_tail else 0)


def kpool_inputs(b: Builder) -> dict[str, Tensor]:
    """glm5-next's inputs (``build_inp_mem_hybrid_k``, ``build_inp_kpool``), in the order
    its graph first reads them, which is the order ggml places them: the indexer cache's
    rows, the pools built anew and where they go, the pools' cells, their mask and members,
    the tail, the attention's rows, the selection's live slots (f32), the causal mask, the
    recurrent state's rows, the output rows."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = token_inputs(b)
    pooled = [block.attention for block in m.blocks
              if block.attention is not None and block.attention.indexer_heads]
    mask = F16 if b.flash_attn else F32
    if pooled:
        attn = pooled[0]
        read, new, selected = kpool_pools(m.fields, attn.indexer_top_k, b.n_kv)
        kpool = m.fields.kpool
        inputs["k_idxs_idx"] = g.input("idx_k_idxs", n * I64, host)
        inputs["new_pool_idxs"] = g.input("kpool_new_pool_idxs", kpool * new * I32, host)
        inputs["new_pool_rep"] = g.input("kpool_new_pool_rep", new * I64, host)
        inputs["pool_cells"] = g.input("kpool_pool_cells", read * I32, host)
        # The fused lightning indexer reads an f16 mask.
        inputs["pool_mask"] = g.input("kpool_pool_mask", read * n * F16, host)
        inputs["pool_idxs"] = g.input("kpool_pool_idxs", kpool * read * I32, host)
        if m.fields.kpool_tail:
            inputs["tail_idxs"] = g.input("kpool_tail_idxs", (kpool - 1) * n * I32, host)
        inputs["k_idxs"] = g.input("attn_inp_k_idxs", n * I64, host)
        inputs["gather_mask"] = g.input("kpool_gather_mask", selected * n * F32, host)
        inputs["mask"] = g.input("attn_inp_kq_mask", b.n_kv * n * mask, host)
    if any(block.recurrent is not None for block in m.blocks):
        inputs["rs_copy"] = g.input("rs_s_copy", 8 * I32, host)
    inputs["out_ids"] = g.input("out_ids", b.n_outputs * I32, host)
    return inputs


def kpool_attention_core(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                          inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """glm5-next's nope latent attention over its pooled indexer's selection
    (``build_dsa_layer``, ``build_kpool_select``, the scatter path), in the order its
    forward expansions lay it out: the indexer's key (normed, with bias) and pool gate
    cached beside a zeroed pooled slot; the new pools' keys and gates gathered, their
    gates plus the learned position weights soft-maxed over each pool and the keys summed
    by them into the pooled slots; the query's low rank, the indexer's query heads from
    it, every pool's key gathered, the heads' weights and the fused lightning indexer's
    score of each pool; the best pools (top-k, reordered by score through f32 copies)
    expanded to their cells, with the tail's; then the query absorbed and the compressed
    KV cached; the mask built (a filled row repeated per token, the selected cells zeroed
    through their live slots, the causal mask added) and flash attention over the latent
    cache, each head's V decompressed. A layer without an indexer reuses the last mask."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    mask_size = F16 if b.flash_attn else F32
    pooling = b.model.fields
    if attn.indexer_heads:
        heads, dim, kpool = attn.indexer_heads, attn.indexer_dim, pooling.kpool
        read, new, selected = kpool_pools(pooling, attn.indexer_top_k, b.n_kv)
        top = selected // kpool
        cache_idx = external(f"cache_idx_{index}")
        ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.attn_k"), cur), "indexer_k",
                  backend=backend)
        ik = g.like("NORM", ik, (), "indexer_k_norm", backend)
        ik = g.like("MUL", ik, (b.w(f"{layer}.indexer.k_norm"),), "indexer_k_normed", backend)
        ik = g.like("ADD", ik, (b.w(f"{layer}.indexer.k_norm.bias"),), "indexer_k", backend)
        gate = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.kpool_gate"), cur),
                    "indexer_gate", backend=backend)
        packed = g.op("CONCAT", 2 * dim * n * F32, (ik, gate), "indexer_key_gate",
                      backend=backend)
        # The zeroed pooled slot fills a fresh tensor: a leaf the allocator places here.
        zero = g.like("FILL", Tensor("pzero", dim * n * F32, backend=backend), (), "pzero",
                      backend)
        packed = g.op("CONCAT", 3 * dim * n * F32, (packed, zero), "indexer_packed",
                      backend=backend)
        g.op("SET_ROWS", 0, (g.view(packed, backend=backend), inputs["k_idxs_idx"], cache_idx),
             backend=backend)
        rows = g.op("GET_ROWS", 2 * dim * kpool * new * F32,
                    (cache_idx, g.view(inputs["new_pool_idxs"], backend=backend)),
                    "indexer_pool_rows", backend=backend)
        pool = dim * kpool * new * F32
        logits = g.op("ADD", pool, (g.view(rows, backend=backend),
                                    b.w(f"{layer}.indexer.kpool_ape")),
                      "indexer_pool_logits", backend=backend)
        logits = g.op("CONT", pool, (g.view(logits, backend=backend),), "indexer_pool_logits",
                      backend=backend)
        probs = g.like("SOFT_MAX", g.view(logits, backend=backend), (), "indexer_pool_probs",
                       backend)
        keys = g.op("CONT", pool, (g.view(rows, backend=backend),), "indexer_pool_keys",
                    backend=backend)
        weighted = g.like("MUL", g.view(probs, backend=backend), (keys,),
                          "indexer_pool_weighted", backend)
        pooled_new = g.op("SUM_ROWS", dim * new * F32, (weighted,), "indexer_pool_k_new",
                          backend=backend)
        g.op("SET_ROWS", 0, (g.view(pooled_new, backend=backend), inputs["new_pool_rep"],
                             cache_idx), backend=backend)
        qr = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                  backend=backend)
        qr = norm(b, qr, f"{layer}.q_a", backend)
        iq = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.attn_q_b"), qr),
                  "indexer_q", backend=backend)
        keys_read = g.op("GET_ROWS", dim * read * F32, (cache_idx, inputs["pool_cells"]),
                         "indexer_pool_k", backend=backend)
        weights = g.op("MUL_MAT", heads * n * F32, (b.w(f"{layer}.indexer.proj"), cur),
                       "indexer_weights", backend=backend)
        weights = g.like("SCALE", weights, (), "indexer_weights", backend)
        score = g.op("LIGHTNING_INDEXER", read * n * F32,
                     (g.view(iq, backend=backend), g.view(keys_read, backend=backend), weights,
                      inputs["pool_mask"]), "indexer_score", backend=backend)
        picked = g.op("TOP_K", top * n * I32, (score,), "indexer_top_k", backend=backend)
        picked_f32 = g.op("CPY", top * n * F32, (picked,), "indexer_top_k_f32",
                          backend=backend)
        picked_score = g.op("GET_ROWS", top * n * F32, (g.view(score, backend=backend), picked),
                            "indexer_top_k_score", backend=backend)
        order = g.op("ARGSORT", top * n * I32, (g.view(picked_score, backend=backend),),
                     "indexer_top_k_order", backend=backend)
        ordered = g.op("GET_ROWS", top * n * F32, (g.view(picked_f32, backend=backend), order),
                       "indexer_top_k_ordered", backend=backend)
        ordered = g.op("CONT", top * n * F32, (g.view(ordered, backend=backend),),
                       "indexer_top_k_ordered", backend=backend)
        ordered = g.op("CPY", top * n * I32, (ordered,), "indexer_top_k", backend=backend)
        cells = g.op("GET_ROWS", kpool * top * n * I32,
                     (inputs["pool_idxs"], g.view(ordered, backend=backend)), "indexer_sel_idx",
                     backend=backend)
        if pooling.kpool_tail:
            cells = g.op("CONCAT", selected * n * I32,
                         (g.view(cells, backend=backend), inputs["tail_idxs"]),
                         "indexer_sel_idx", backend=backend)
    else:
        qr = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                  backend=backend)
        qr = norm(b, qr, f"{layer}.q_a", backend)
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), qr), "q", backend=backend)
    absorbed = g.op("MUL_MAT", attn.n_head * attn.kv_lora * n * F32,
                    (b.w(f"{layer}.k_b"), g.view(q, backend=backend)), "q_absorbed",
                    backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + attn.k_width) * n * F32,
              (b.w(f"{layer}.kv_a"), cur), "kv_cmpr", backend=backend)
    kv = norm(b, kv, f"{layer}.kv_a", backend)
    cache = external(f"cache_k_{index}")
    g.op("SET_ROWS", 0, (g.view(kv, backend=backend), inputs["k_idxs"], cache), backend=backend)
    if attn.indexer_heads:
        # Each selected slot's cell, or a dump row past the cache for a dead slot, made
        # from the slots' liveness (exp of their mask) in f32; the filled mask, one row
        # per token with the dump rows, the selected cells zeroed; the causal mask added.
        zeros = g.like("FILL", Tensor("kpool_zeros", selected * mask_size, backend=backend), (),
                       "kpool_zeros", backend)
        zeros = g.op("REPEAT", selected * n * mask_size, (zeros,), "kpool_zeros",
                     backend=backend)
        slots = g.op("CPY", selected * n * F32, (cells,), "indexer_sel_idx_f32",
                     backend=backend)
        dump = g.op("ARANGE", selected * F32, (), "kpool_dump", backend=backend)
        slots = g.like("SUB", slots, (dump,), "kpool_slots", backend)
        live = g.like("UNARY", g.view(inputs["gather_mask"], backend=backend), (), "kpool_live",
                      backend)
        slots = g.like("MUL", slots, (live,), "kpool_slots", backend)
        slots = g.like("ADD", slots, (dump,), "kpool_slots", backend)
        slots = g.op("CPY", selected * n * I32, (slots,), "kpool_slots_i32", backend=backend)
        width = (b.n_kv + selected) * mask_size
        everything = g.like("FILL", Tensor("kpool_mask_all", width, backend=backend), (),
                            "kpool_mask_all", backend)
        everything = g.op("REPEAT", width * n, (everything,), "kpool_mask_all",
                          backend=backend)
        unmasked = Tensor("kpool_sel", everything.nbytes, "SET_ROWS",
                          (g.view(zeros, backend=backend), g.view(slots, backend=backend),
                           g.view(everything, backend=backend)), view_src=everything,
                          backend=backend)
        g.nodes.append(unmasked)
        b.shared_mask = g.op("ADD", b.n_kv * n * mask_size,
                            (g.view(unmasked, backend=backend), inputs["mask"]),
                            "kq_mask_dsa", backend=backend)
    mask = b.shared_mask
    assert mask is not None, "a shared-indexer layer follows a pooled indexer's layer"
    latent = attn.n_head * attn.kv_lora * n * F32
    q_view = g.view(absorbed, "q (permuted)", backend=backend)
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", latent, (q_view, cache, cache, mask), "kqv",
                   backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * attn.n_head * F32, (cache, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        values = g.op("CONT", attn.kv_lora * b.n_kv * F16, (cache,), "v_cont",
                      backend=backend)
        out = g.op("MUL_MAT", latent, (values, probs), "kqv", backend=backend)
    return latent_values(b, attn, out, layer, n, backend)


def mixed_hc_graph(b: Builder, embd: Tensor, inputs: Mapping[str, Tensor],
                    output_backend: int) -> Graph:
    """glm5-next's graph (glm5-next.cpp, with ggml's fused DSV4_HC operations, which the
    CPU and RPC backends run): the embedding repeated into ``hc`` residual streams; each
    half of each block flattens and norms the streams, mixes them into the pre, post and
    combination coefficients, reduces the streams by the pre ones (``DSV4_HC_PRE``), runs
    on the sum (the pooled-indexer attention or a KDA mixer, the dense network or the
    experts) and writes every stream back as a mix of all of them plus the output
    (``DSV4_HC_POST``, its post and combination coefficients made only then); the
    output rows kept, the streams averaged, normed, projected. Operations without
    weights run where the one before them ran: a block's first norm of the streams runs
    where the previous block ran, so the next device copies in the norm and the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc, width = m.fields.streams, m.n_embd * F32
    at = b.backend_of[0] if b.backend_of else b.input_backend
    x = g.op("REPEAT", hc * width * n, (embd,), "hc_init", backend=at)

    def pre(x: Tensor, name: str, backend: int, norm_at: int) -> tuple[Tensor, Tensor]:
        """build_hc_pre: the flattened streams normed (at ``norm_at``), mixed, the pre
        coefficients (scaled, biased, sigmoid, offset), the fused reduction. The reduced
        input, and the mixes the post and combination coefficients come from."""
        flat = g.op("RMS_NORM", x.nbytes, (g.view(x, backend=norm_at),), "hc_flat_norm",
                    backend=norm_at)
        mixes = g.op("MUL_MAT", (2 + hc) * hc * n * F32, (b.w(f"{name}_fn"), flat),
                     "hc_mixes", backend=backend)
        coef = g.op("MUL", hc * n * F32, (g.view(mixes, backend=backend),
                                          b.w(f"{name}_scale")), "hc_pre", backend=backend)
        for op in ("ADD", "UNARY", "SCALE"):
            coef = g.like(op, coef, (), "hc_pre", backend)
        return g.op("DSV4_HC_PRE", width * n, (x, coef), "hc_pre_out", backend=backend), mixes

    def post(out: Tensor, residual: Tensor, mixes: Tensor, name: str, backend: int) -> Tensor:
        """build_hc_post: the post coefficients (scaled, biased, sigmoid, doubled), the
        combination's (``DSV4_HC_COMB``), the streams written back (``DSV4_HC_POST``)."""
        coef = g.op("MUL", hc * n * F32, (g.view(mixes, backend=backend),
                                          b.w(f"{name}_scale")), "hc_post", backend=backend)
        for op in ("ADD", "UNARY", "SCALE"):
            coef = g.like(op, coef, (), "hc_post", backend)
        comb = g.op("DSV4_HC_COMB", hc * hc * n * F32, (mixes, b.w(f"{name}_scale")),
                    "hc_comb", backend=backend)
        return g.op("DSV4_HC_POST", hc * width * n, (out, residual, coef, comb), "hc_post_out",
                    backend=backend)

    for index, block in enumerate(m.blocks):
        backend = b.backend_of[index]
        layer = f"blk.{index}"
        residual = x
        cur, mixes = pre(x, f"{layer}.hc_attn", backend, at)
        normed = norm(b, cur, f"{layer}.attn", backend)
        if block.recurrent is not None:
            out = kda(b, normed, block.recurrent, index, inputs, backend,
                       tail_backend(b, index))
        else:
            attn = block.attention
            assert attn is not None
            core = kpool_attention_core(b, normed, attn, index, inputs, backend)
            out = output_projection(b, core, attn, index, backend)
        x = post(out, residual, mixes, f"{layer}.hc_attn", backend)
        if block.feed_forward is not None:
            residual = x
            cur, mixes = pre(x, f"{layer}.hc_ffn", backend, backend)
            out = feed_forward(b, norm(b, cur, f"{layer}.ffn", backend), block.feed_forward,
                                index, backend)
            x = post(out, residual, mixes, f"{layer}.hc_ffn", backend)
        at = backend
    rows = g.op("GET_ROWS", hc * width * b.n_outputs,
                (g.view(x, backend=at), inputs["out_ids"]), "hc_rows", backend=at)
    size = width * b.n_outputs
    mean = g.op("ADD", size, (g.view(rows, backend=at), g.view(rows, backend=at)), "hc_head",
                backend=at)
    for _ in range(hc - 2):
        mean = g.like("ADD", mean, (g.view(rows, backend=at),), "hc_head", at)
    mean = g.like("SCALE", mean, (), "hc_head", at)
    normed = norm(b, mean, "output", output_backend)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), normed),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g
