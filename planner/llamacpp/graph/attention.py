"""Attention as llama.cpp's graph builders lay it out (``build_qkv``, ``build_attn``):
plain attention over the KV cache (with or without flash attention), attention without a
cache, absorbed latent attention (MLA) with a lightning indexer's top-k mask, latent
attention without absorption, and the output projection."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph.builder import F16, F32, I32, Builder, norm
from planner.llamacpp.graph.shapes import AttentionShape


def latent_values(b: Builder, attn: AttentionShape, out: Tensor, layer: str, n: int,
                   backend: int) -> Tensor:
    """Latent attention's output decompressed: each head's latent values through
    ``v_b``, made contiguous as the attention's output rows (``build_attn_mla``)."""
    g = b.graph
    values = g.op("MUL_MAT", attn.out_width * n * F32,
                  (b.w(f"{layer}.v_b"), g.view(out, backend=backend)), "fattn_mla",
                  backend=backend)
    merged = g.op("CONT", attn.out_width * n * F32, (g.view(values, backend=backend),),
                  "kqv_out", backend=backend)
    return g.view(merged, "kqv_out", backend=backend)


def attention_core(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                    inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """build_qkv and build_attn up to the attention's output (before the output
    projection), from the normed input ``cur``."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    q_size, k_size = attn.q_width * n * F32, attn.k_width * n * F32
    v_size, out_size = attn.v_width * n * F32, attn.out_width * n * F32
    if not attn.cached:
        return uncached_attention_core(b, cur, attn, index, inputs, backend)
    if attn.fused_qkv:
        qkv = g.op("MUL_MAT", q_size + k_size + v_size, (b.w(f"{layer}.qkv"), cur), "qkv",
                   backend=backend)
        q = g.view(qkv, "q", q_size, backend)
        q_rot = g.op("ROPE", out_size, (q, inputs["pos"]), "Qcur", backend=backend) \
            if attn.rope else q
        v = g.view(qkv, "v", v_size, backend)
        k = g.view(qkv, "k", k_size, backend)
    else:
        # build_qkv: Q (roped at once), then V, then K.
        q = g.op("MUL_MAT", q_size, (b.w(f"{layer}.q"), cur), "q", backend=backend)
        q = g.view(q, "q (reshaped)", backend=backend)
        q_rot = g.op("ROPE", out_size, (q, inputs["pos"]), "Qcur", backend=backend) \
            if attn.rope else q
        v = g.op("MUL_MAT", v_size, (b.w(f"{layer}.v"), cur), "v", backend=backend)
        v = g.view(v, "v (reshaped)", backend=backend)
        k = g.op("MUL_MAT", k_size, (b.w(f"{layer}.k"), cur), "k", backend=backend)
        k = g.view(k, "k (reshaped)", backend=backend)
    k_rot = g.op("ROPE", k_size, (k, inputs["pos"]), "Kcur", backend=backend) \
        if attn.rope else k
    suffix = "_swa" if attn.sliding else ""
    cache_k = external(f"cache_k_{index}")
    cache_v = external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k_rot, backend=backend), inputs[f"k_idxs{suffix}"],
                         cache_k), backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs[f"v_idxs{suffix}"], cache_v),
         backend=backend)
    q_view = g.view(q_rot, "q (permuted)", backend=backend)
    n_kv = b.n_kv_swa if attn.sliding else b.n_kv
    mask = inputs[f"mask{suffix}"]
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", out_size, (q_view, cache_k, cache_v, mask), "kqv",
                   backend=backend)
    else:
        scores = g.op("MUL_MAT", n_kv * n * attn.n_head * F32, (cache_k, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def uncached_attention_core(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                             inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """Attention without a cache (``build_attn_inp_no_cache``): Q, K and V of the ubatch
    alone, K and V cast to f16 for flash attention, a ``n_tokens x n_tokens`` mask."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    projected = {}
    for name, width, rope in (("q", attn.q_width, True), ("k", attn.k_width, True),
                              ("v", attn.v_width, False)):
        t = g.op("MUL_MAT", width * n * F32, (b.w(f"{layer}.{name}"), cur), name,
                 backend=backend)
        t = g.view(t, backend=backend)
        if rope:
            t = g.op("ROPE", (attn.out_width if name == "q" else width) * n * F32,
                     (t, inputs["pos"]), f"{name}_rope", backend=backend)
        projected[name] = t
    out_size = attn.out_width * n * F32
    mask = inputs["mask_self"]
    if b.flash_attn:
        k = g.op("CPY", attn.k_width * n * F16, (g.view(projected["k"], backend=backend),),
                 "k_f16", backend=backend)
        v = g.op("CPY", attn.v_width * n * F16, (g.view(projected["v"], backend=backend),),
                 "v_f16", backend=backend)
        out = g.op("FLASH_ATTN_EXT", out_size, (g.view(projected["q"], backend=backend), k, v,
                                                mask), "kqv", backend=backend)
    else:
        scores = g.op("MUL_MAT", n * n * attn.n_head * F32,
                      (g.view(projected["k"], backend=backend),
                       g.view(projected["q"], backend=backend)), "kq", backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        v = g.op("CONT", attn.v_width * n * F32, (g.view(projected["v"], backend=backend),),
                 "v_cont", backend=backend)
        kqv = g.op("MUL_MAT", out_size, (v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def latent_attention_core(b: Builder, cur: Tensor, attn: AttentionShape, index: int,
                           inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """deepseek2's absorbed latent attention (``build_attn`` with ``v_mla``): the query's
    nope part multiplied into the latent space, the compressed KV normed and cached with
    its roped part, attention in the latent space, then each head's V decompressed."""
    if attn.kv_b_width:
        return decompressed_latent_attention_core(b, cur, attn, index, inputs, backend)
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, rope = attn.n_head, attn.k_width
    if attn.indexer_heads:
        # The lightning indexer's key, normed, roped and rotated, into its cache.
        dim = attn.indexer_dim
        ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer_k"), cur), "indexer_k",
                  backend=backend)
        ik = g.op("NORM", ik.nbytes, (ik,), "indexer_k_norm", backend=backend)
        ik = g.like("MUL", ik, (b.w(f"{layer}.indexer_k_norm"),), "indexer_k", backend)
        ik = g.op("ROPE", ik.nbytes, (g.view(ik, backend=backend), inputs["pos"]),
                  "indexer_k_rope", backend=backend)
        ik = g.op("MUL_MAT", ik.nbytes, (inputs["k_rot"], ik), "indexer_k_rot",
                  backend=backend)
        g.op("SET_ROWS", 0, (g.view(ik, backend=backend), inputs["k_idxs_lid"],
                             external(f"cache_lid_{index}")), backend=backend)
    qr = None
    if attn.q_lora:
        q = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                 backend=backend)
        qr = q = norm(b, q, f"{layer}.q_a", backend)
        q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), q), "q",
                 backend=backend)
    else:
        q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "q",
                 backend=backend)
    q_nope = g.view(q, "q_nope", backend=backend)
    absorbed = g.op("MUL_MAT", heads * attn.kv_lora * n * F32, (b.w(f"{layer}.k_b"), q_nope),
                    "q_nope_absorbed", backend=backend)
    q_pe = g.view(q, "q_pe", backend=backend)
    if attn.rope:
        q_pe = g.op("ROPE", heads * rope * n * F32, (q_pe, inputs["pos"]), "q_pe",
                    backend=backend)
    q_cur = g.op("CONCAT", heads * (attn.kv_lora + rope) * n * F32,
                 (g.view(absorbed, backend=backend), q_pe), "Qcur", backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + rope) * n * F32, (b.w(f"{layer}.kv_a"), cur),
              "kv_cmpr_pe", backend=backend)
    kv_cmpr = g.op("RMS_NORM", attn.kv_lora * n * F32, (g.view(kv, backend=backend),),
                   "kv_cmpr_norm", backend=backend)
    kv_cmpr = g.like("MUL", kv_cmpr, (b.w(f"{layer}.kv_a_norm"),), "kv_cmpr", backend)
    k_pe = g.view(kv, "k_pe", backend=backend)
    if attn.rope:
        k_pe = g.op("ROPE", rope * n * F32, (k_pe, inputs["pos"]), "k_pe", backend=backend)
    k_cur = g.op("CONCAT", (attn.kv_lora + rope) * n * F32,
                 (g.view(kv_cmpr, backend=backend), k_pe), "Kcur", backend=backend)
    cache = external(f"cache_k_{index}")
    # A sliding-window layer writes and reads the sliding-window cache (dots3note).
    suffix = "_swa" if attn.sliding else ""
    g.op("SET_ROWS", 0, (g.view(k_cur, backend=backend), inputs[f"k_idxs{suffix}"], cache),
         backend=backend)
    q_view = g.view(q_cur, "q (permuted)", backend=backend)
    latent = heads * attn.kv_lora * n * F32
    mask = inputs[f"mask{suffix}"]
    if attn.indexer_heads:
        mask = indexer_mask(b, cur, qr, attn, index, inputs, backend)
    elif b.family.shares_top_k and b.top_k is not None:
        # A shared-indexer layer reuses the last indexer's top-k (hy-v4.cpp), with zero
        # rows of its own.
        zeros = g.op("FILL", b.top_k.nbytes // I32 * F32, (), "zeros", backend=backend)
        mask = top_k_mask(b, b.top_k, zeros, inputs, backend)
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", latent, (q_view, cache, cache, mask), "kqv",
                   backend=backend)
    else:
        cells = b.n_kv_swa if attn.sliding else b.n_kv
        scores = g.op("MUL_MAT", cells * n * heads * F32, (cache, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        out = g.op("MUL_MAT", latent, (cache, probs), "kqv", backend=backend)
    out = latent_values(b, attn, out, layer, n, backend)
    if attn.output_gate:
        gate = g.op("MUL_MAT", out.nbytes, (b.w(f"{layer}.attn_gate"), cur), "attn_gate",
                    backend=backend)
        gate = g.like("UNARY", gate, (), "attn_gate_sigmoid", backend)
        out = g.like("MUL", out, (gate,), "mla_gated", backend)
    return out


def decompressed_latent_attention_core(b: Builder, cur: Tensor, attn: AttentionShape,
                                        index: int, inputs: Mapping[str, Tensor],
                                        backend: int) -> Tensor:
    """MiniCPM3's latent attention without absorption: the query through its low-rank
    pair and roped, the compressed KV normed and decompressed into each head's K nope and
    V, V made contiguous, the rope part roped and repeated over the heads beside K nope,
    K and V cached, plain attention."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, rope = attn.n_head, attn.k_width
    q = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
             backend=backend)
    q = norm(b, q, f"{layer}.q_a", backend)
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), q), "q", backend=backend)
    q = g.op("ROPE", q.nbytes, (g.view(q, backend=backend), inputs["pos"]), "q_states",
             backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + rope) * n * F32, (b.w(f"{layer}.kv_a"), cur),
              "kv_pe_compressed", backend=backend)
    kv_cmpr = g.op("RMS_NORM", attn.kv_lora * n * F32, (g.view(kv, backend=backend),),
                   "kv_compressed_norm", backend=backend)
    kv_cmpr = g.like("MUL", kv_cmpr, (b.w(f"{layer}.kv_a_norm"),), "kv_compressed", backend)
    decompressed = g.op("MUL_MAT", attn.kv_b_width * n * F32, (b.w(f"{layer}.kv_b"), kv_cmpr),
                        "kv", backend=backend)
    v = g.op("CONT", attn.out_width * n * F32, (g.view(decompressed, backend=backend),),
             "v_states", backend=backend)
    k_pe = g.op("ROPE", rope * n * F32, (g.view(kv, "k_pe", backend=backend), inputs["pos"]),
                "k_pe", backend=backend)
    k_pe = g.op("REPEAT", heads * rope * n * F32, (k_pe,), "k_pe_repeated", backend=backend)
    k = g.op("CONCAT", attn.q_width * n * F32, (g.view(decompressed, backend=backend), k_pe),
             "k_states", backend=backend)
    cache_k = external(f"cache_k_{index}")
    cache_v = external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k, backend=backend), inputs["k_idxs"], cache_k),
         backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    q_view = g.view(q, "q (permuted)", backend=backend)
    out_size = attn.out_width * n * F32
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", out_size, (q_view, cache_k, cache_v, inputs["mask"]),
                   "kqv", backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * heads * F32, (cache_k, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (inputs["mask"],), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def indexer_mask(b: Builder, cur: Tensor, qr: Tensor | None, attn: AttentionShape,
                  index: int, inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """The lightning indexer's top-k of the cache for each token, as a mask: its query
    heads from the compressed query, roped and rotated, scored against the cached keys
    (``n_kv x n_tokens``), the best ``top_k`` kept (``llm_graph_context::build_attn``
    for DSA)."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    zeros = g.like("FILL", inputs[f"zeros-{index}"], (), "zeros", backend)
    size = attn.indexer_heads * attn.indexer_dim * n * F32
    iq = g.op("MUL_MAT", size, (b.w(f"{layer}.indexer_q_b"), qr if qr is not None else cur),
              "indexer_q", backend=backend)
    iq = g.op("ROPE", size, (g.view(iq, backend=backend), inputs["pos"]), "indexer_q_rope",
              backend=backend)
    iq = g.op("MUL_MAT", size, (inputs["k_rot"], iq), "indexer_q_rot", backend=backend)
    weights = g.op("MUL_MAT", attn.indexer_heads * n * F32, (b.w(f"{layer}.indexer_proj"), cur),
                   "indexer_weights", backend=backend)
    weights = g.op("SCALE", weights.nbytes, (g.view(weights, backend=backend),),
                   "indexer_weights_scaled", backend=backend)
    score = g.op("LIGHTNING_INDEXER", b.n_kv * n * F32,
                 (g.view(iq, backend=backend), external(f"cache_lid_{index}"), weights,
                  inputs["mask_lid"]), "indexer_score", backend=backend)
    top_k = min(attn.indexer_top_k, b.n_kv)
    picked = g.op("TOP_K", top_k * n * I32, (score,), "top_k", backend=backend)
    picked = b.top_k = g.op("CONT", picked.nbytes, (picked,), "top_k_cont", backend=backend)
    return top_k_mask(b, picked, zeros, inputs, backend)


def top_k_mask(b: Builder, picked: Tensor, zeros: Tensor, inputs: Mapping[str, Tensor],
                backend: int) -> Tensor:
    """The causal mask with every cell but each token's top-k masked (build_attn for DSA):
    filled, the picked cells zeroed, the causal mask added."""
    g = b.graph
    mask = inputs["mask"]
    everything = g.op("FILL", mask.nbytes, (mask,), "kq_mask_all", backend=backend)
    unmasked = Tensor("kq_mask_top_k", mask.nbytes, "SET_ROWS",
                      (g.view(everything, backend=backend), g.view(picked, backend=backend),
                       zeros), view_src=everything, backend=backend)
    g.nodes.append(unmasked)
    return g.op("ADD", mask.nbytes, (g.view(unmasked, backend=backend), mask), "kq_mask_dsa",
                backend=backend)


def output_projection(b: Builder, out: Tensor, attn: AttentionShape, index: int,
                       backend: int) -> Tensor:
    tokens = out.nbytes // (attn.out_width * F32)
    return b.graph.op("MUL_MAT", b.model.n_embd * tokens * F32, (b.w(f"blk.{index}.wo"), out),
                      "attn_out", backend=backend)
