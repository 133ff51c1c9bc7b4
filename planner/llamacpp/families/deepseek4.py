"""``deepseek4.cpp``: DeepSeek-V4's graph of its own. Four hyper-connection streams
around every block; attention over a sliding window of single K rows, compressed per
layer (``attention.compress_ratios``: 0, 4 for CSA read through a lightning indexer,
128 for HCA), with low-rank queries and a grouped low-rank output projection; a mixture
of experts scored by sqrt(softplus), its leading ``hash_layer_count`` layers routed by
token id; limited SwiGLU fused; no mixed token/embedding input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Graph, Tensor
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
    register,
)
from planner.llamacpp.graph.reading import MAX_RESIDUAL_STREAMS


@dataclass(frozen=True, slots=True)
class CompressedAttention:
    """The residual streams; each main-graph layer's compression ratio (the
    next-token-prediction layers after them run in a graph of their own); the leading
    layers that pick their experts by token id; the output projection's groups and
    their rank."""

    streams: int
    compress_ratios: tuple[int, ...]
    hash_routed_layers: int
    output_groups: int
    output_lora: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompressedAttention:
        return cls(**{**data, "compress_ratios": tuple(data["compress_ratios"])})


@register
class DeepSeek4(Family):
    architectures = ("deepseek4",)
    fields_type = CompressedAttention
    mixed_batch = False
    activation = Activation(fused=True, fused_experts=True)

    def attention(self, r: ModelReader, index: int) -> AttentionShape | None:
        """Heads of ``attention.key_length`` (one K row per token, no V) where the block
        has ``attn_kv``, the query's low rank, and the lightning indexer where the block
        has its tensors."""
        w, heads = r.widths[index], r.heads[index]
        if not heads or "attn_kv" not in w:
            return None
        head = r.meta.count("attention.key_length", minimum=1)
        i_heads, i_dim, i_top = r.indexer() if "indexer.attn_q_b" in w else (0, 0, 0)
        return AttentionShape(heads * head, head, 0, heads * head, heads,
                              sliding=r.layer(index).sliding,
                              q_lora=r.meta.count("attention.q_lora_rank", minimum=1),
                              indexer_heads=i_heads, indexer_dim=i_dim, indexer_top_k=i_top)

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> CompressedAttention:
        """The streams, the ratios (0, 4 or 128: the compressions llama.cpp caches) of
        the main graph's layers, the hash-routed layers and the output's groups (at most
        the heads) and rank."""
        meta = r.meta
        ratios = meta.counts_per_layer("attention.compress_ratios", 0)
        for index, ratio in enumerate(ratios):
            if ratio not in (0, CSA_RATIO, HCA_RATIO):
                raise meta.bad("attention.compress_ratios", f"entry {index} must be 0, "
                               f"{CSA_RATIO} or {HCA_RATIO} (the compressions llama.cpp "
                               f"caches)", ratio)
        nextn = meta.count("nextn_predict_layers", 0, maximum=r.layer_count)
        heads = max(r.heads, default=0)
        return CompressedAttention(
            meta.count("hyper_connection.count", minimum=1, maximum=MAX_RESIDUAL_STREAMS),
            tuple(ratios[:len(ratios) - nextn]),
            meta.count("hash_layer_count", 0, maximum=r.layer_count),
            meta.count("attention.output_group_count", minimum=1, maximum=max(1, heads)),
            meta.count("attention.output_lora_rank", minimum=1))

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        nextn = r.meta.count("nextn_predict_layers", 0, maximum=r.layer_count)
        main = blocks[:len(blocks) - nextn]
        r.require(main, "attention", "attention.head_count",
                  lambda block: block.attention is not None)
        r.require(main, "routed experts", "expert_count",
                  lambda block: block.feed_forward is not None
                  and block.feed_forward.n_expert > 0)

    def build(self, b: Builder) -> Graph:
        return dsv4_graph(b, b.output_backend)


# llama-kv-cache-dsv4.h: the compression ratio of a CSA layer (compressed attention read
# through the lightning indexer's top-k) and of an HCA layer (heavily compressed, read
# whole); the compressed caches hold their cells in multiples of the KV padding.
CSA_RATIO = 4


HCA_RATIO = 128


COMPRESSED_KV_PADDING = 256


def compressed_cells(n_ctx: int, ratio: int) -> int:
    """Cells of a compressed cache (``dsv4_comp_size`` padded to 256)."""
    cells = max(1, -(-n_ctx // ratio))
    return -(-cells // COMPRESSED_KV_PADDING) * COMPRESSED_KV_PADDING


class Expanding:
    """Tensors made as a builder goes that join the graph only when a root is expanded
    (``ggml_build_forward_expand``: each tensor after its sources, depth first, in source
    order). The order the nodes run in is the order they are first reached from the
    roots the builder expands, not the order they are made; deepseek4.cpp expands its
    cache writes, queries and residuals early, so that order decides what is alive at
    once."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.seen: set[int] = set()

    @staticmethod
    def op(op: str, nbytes: int, srcs: Sequence[Tensor], name: str,
           inplace: bool = False) -> Tensor:
        """An operation; ``inplace`` when its result has its first source's layout."""
        return Tensor(name, nbytes, op, tuple(srcs),
                      layout=srcs[0].layout if inplace else object())

    @staticmethod
    def view(src: Tensor, name: str = "", nbytes: int | None = None) -> Tensor:
        root = src.view_src or src
        return Tensor(name or f"{src.name} (view)", src.nbytes if nbytes is None else nbytes,
                      "VIEW", (src,), view_src=root, layout=src.layout
                      if nbytes is None else object(), external=root.external)

    def expand(self, root: Tensor) -> None:
        stack: list[tuple[Tensor, bool]] = [(root, False)]
        while stack:
            tensor, ready = stack.pop()
            if id(tensor) in self.seen:
                continue
            if not ready:
                stack.append((tensor, True))
                stack.extend((src, False) for src in reversed(tensor.srcs)
                             if id(src) not in self.seen)
                continue
            self.seen.add(id(tensor))
            if tensor.external or (tensor.op == "NONE" and not tensor.is_input):
                continue  # a weight, a cache, or a constant allocated where first used
            (self.graph.inputs if tensor.is_input else self.graph.nodes).append(tensor)


def assign_backends(graph: Graph, weights: set[int], cpu: int) -> None:
    """The backend of every node and view, as ``ggml_backend_sched_split_graph`` picks
    them: an input on the CPU, a view of a weight or cache where that lives, an
    operation reading a weight where the weight lives (but ROPE and FLASH_ATTN_EXT);
    then each device's assignment spread down and up the graph over unassigned nodes
    (views skipped, the CPU's not spread), then any backend's; a node still unassigned
    goes where most of its sources are, a view where its source is, a constant where its
    reader runs."""
    nodes = graph.nodes
    backend: dict[int, int] = {}
    for tensor in graph.inputs:
        backend[id(tensor)] = cpu
    for node in nodes:
        root = node.view_src
        if root is not None and root.external:
            backend[id(node)] = root.backend
        elif node.op not in ("ROPE", "FLASH_ATTN_EXT"):
            pinned = next((src for src in node.srcs if id(src) in weights), None)
            if pinned is not None:
                backend[id(node)] = pinned.backend
    ops = [node for node in nodes if node.op != "VIEW"]
    for order, skip_cpu in ((ops, True), (ops[::-1], True), (ops, False), (ops[::-1], False)):
        current = -1
        for node in order:
            assigned = backend.get(id(node))
            if assigned is not None:
                current = -1 if skip_cpu and assigned == cpu else assigned
            elif current != -1:
                backend[id(node)] = current
    for node in ops:
        if id(node) not in backend:
            counts: dict[int, int] = {}
            for src in node.srcs:
                where = backend.get(id(src.view_src or src), src.backend if src.external
                                    else None)
                if where is not None:
                    counts[where] = counts.get(where, 0) + 1
            # The first backend with the most sources, the first of all with none.
            backend[id(node)] = max(sorted(counts), key=lambda b: counts[b]) if counts \
                else 0
    for node in nodes:
        if node.op == "VIEW" and id(node) not in backend:
            root = node.view_src
            assert root is not None
            backend[id(node)] = root.backend if root.external else backend[id(root)]
        node.backend = backend[id(node)]
        for src in node.srcs:
            if not src.external and id(src) not in backend:
                backend[id(src)] = node.backend  # a constant: where it is read
                src.backend = node.backend


def dsv4_graph(b: Builder, output_backend: int) -> Graph:
    """DeepSeek-V4's graph (deepseek4.cpp), with llama.cpp's fused hyper-connection
    operations (on by default where the layer's device runs them): the token rows
    repeated into ``hc`` residual streams; each half of a block normed whole and mixed
    into coefficients, reduced to one row (``DSV4_HC_PRE``) and written back to every
    stream (``DSV4_HC_POST``); the output rows reduced once more without the fused
    operation (``build_hc_head``: each stream's strided view times its coefficient).
    Attention: low-rank queries normed and roped, one K row per token into the
    sliding-window cache; a compressed layer first feeds its compressor (the ubatch's
    rows with the compressor state, gathered in blocks, softmax-pooled, normed, roped,
    written to its compressed cache; the state's last rows kept) and attends over the
    sliding window and its compressed cache, a CSA layer through the lightning indexer's
    top-k (its queries ``indexer_heads x indexer_dim`` per token, rotated), an HCA layer
    through all of it; the output de-roped and projected through grouped low-rank
    matrices. The mixture of experts is scored by sqrt(softplus) with a selection bias,
    beside a shared expert. The backends are those ggml's scheduler picks, so on a
    split each device copies in the streams and their norm from the one before."""
    g, m, n = b.graph, b.model, b.n_tokens
    e = Expanding(g)
    hc, width = m.fields.streams, m.n_embd * F32
    host = b.input_backend
    weights: set[int] = set()

    def backend_of(index: int) -> int:
        return b.backend_of[index] if b.backend_of else host

    def weight(name: str, where: int) -> Tensor:
        tensor = b.weights.get(name)
        if tensor is None:
            tensor = b.weights[name] = Tensor(name, 0, external=True, backend=where)
            weights.add(id(tensor))
        return tensor

    def cache(name: str, where: int) -> Tensor:
        return b.weights.setdefault(name, Tensor(name, 0, external=True, backend=where))

    def inp(name: str, nbytes: int) -> Tensor:
        return Tensor(name, nbytes, is_input=True, backend=host)

    def write(name: str, target: Tensor, rows: Tensor, idxs: Tensor) -> Tensor:
        """set_rows into ``target``: a view of it, allocated with it."""
        return Tensor(name, 0, "SET_ROWS", (target, rows, idxs), view_src=target)

    def norm(x: Tensor, w: Tensor, name: str) -> Tensor:
        return e.op("MUL", x.nbytes, (e.op("RMS_NORM", x.nbytes, (x,), f"{name}_rms",
                                           inplace=True), w), name, inplace=True)

    def rows(count: int) -> int:
        return count * n * F32

    # Inputs (build_inp_embd, build_inp_pos, build_inp_out_ids, build_inp_dsv4).
    tokens = inp("inp_tokens", n * I32)
    embd_rows = e.op("GET_ROWS", width * n, (weight("token_embd.weight", host), tokens),
                     "embd")
    e.expand(embd_rows)
    e.expand(inp("inp_embd", width * n))
    # Flash attention reads f16 masks, the fused lightning indexer always does.
    mask_type = F16 if b.flash_attn else F32
    raw_mask = inp("attn_inp_kq_mask", b.n_kv_swa * n * mask_type)
    e.expand(raw_mask)
    pos = inp("inp_pos", n * I32)
    out_ids = inp("inp_out_ids", b.n_outputs * I32)
    k_idxs = inp("attn_inp_k_idxs", n * I64)
    compressed_inputs: dict[str, dict[str, Tensor]] = {}
    for kind, ratio, overlap in (("csa", CSA_RATIO, True), ("hca", HCA_RATIO, False),
                                 ("lid", CSA_RATIO, True)):
        # llama_kv_cache_dsv4_context's reserve plan: the blocks a ubatch of one
        # sequence may close, the state rows it keeps (two blocks' worth for the
        # overlapping CSA compressors, one for HCA), no rollback rows.
        blocks = n // ratio + 1
        state = (2 if overlap else 1) * ratio
        compressed_inputs[kind] = {
            "state_pos": inp(f"dsv4_{kind}_state_pos", n * I32),
            "persist_src": inp(f"dsv4_{kind}_state_persist_src_idxs", min(n, state) * I32),
            "persist_dst": inp(f"dsv4_{kind}_state_persist_dst_idxs", min(n, state) * I32),
            "read": inp(f"dsv4_{kind}_state_read_idxs",
                        (2 if overlap else 1) * ratio * blocks * I32),
            "write_idxs": inp(f"dsv4_{kind}_state_write_idxs", blocks * I64),
            "write_pos": inp(f"dsv4_{kind}_state_write_pos", blocks * I32),
            "mask": inp(f"dsv4_{kind}_kq_mask", compressed_cells(b.n_kv, ratio) * n
                        * (F16 if kind == "lid" else mask_type))}
    # The indexer's cache rotates its keys (and so the queries) by a Hadamard matrix.
    indexed = [block.attention.indexer_dim for block in m.blocks
               if block.attention is not None and block.attention.indexer_dim]
    lid_rot = inp("attn_inp_k_rot", indexed[0] ** 2 * F32 if indexed else 0)

    def hc_pre(x: Tensor, fn: str, scale: str, base: str, where: int,
               tokens: int) -> tuple[Tensor, Tensor, Tensor]:
        """build_hc_pre: the streams flattened and normed, mixed into the pre, post and
        combination coefficients, the fused reduction. Returns it, post, comb."""
        mix = (2 + hc) * hc
        flat = e.view(x, "hc_flat")
        flat_norm = e.op("RMS_NORM", x.nbytes, (flat,), "hc_flat_norm", inplace=True)
        mixes = e.op("MUL_MAT", mix * tokens * F32, (weight(fn, where), flat_norm),
                     "hc_mixes")
        strided = hc * F32 + (tokens - 1) * mix * F32

        def coefficients(name: str) -> Tensor:
            c = e.op("MUL", hc * tokens * F32,
                     (e.view(mixes, name, strided), e.view(weight(scale, where))), name)
            c = e.op("ADD", c.nbytes, (c, e.view(weight(base, where))), name, inplace=True)
            c = e.op("UNARY", c.nbytes, (c,), name, inplace=True)
            return e.op("SCALE", c.nbytes, (c,), name, inplace=True)

        pre = coefficients("hc_pre")
        post = coefficients("hc_post")
        comb = e.op("DSV4_HC_COMB", hc * hc * tokens * F32,
                    (mixes, weight(scale, where), weight(base, where)), "hc_comb")
        return e.op("DSV4_HC_PRE", width * tokens, (x, pre), "hc_pre_out"), post, comb

    def hc_post(out: Tensor, residual: Tensor, post: Tensor, comb: Tensor) -> Tensor:
        return e.op("DSV4_HC_POST", residual.nbytes, (out, residual, post, comb), "hc_out")

    def compress(kind: str, kv: Tensor, score: Tensor, norm_w: Tensor, ratio: int,
                 dim: int, index: int, where: int) -> Tensor:
        """build_{overlap,hca}_compressed_kv_from_state: the state's rows beside the
        ubatch's, gathered ``ratio`` (twice over when overlapping) per block, each
        block's softmax-weighted sum, normed and roped."""
        put = compressed_inputs[kind]
        overlap = ratio == CSA_RATIO
        blocks = n // ratio + 1
        plane = (2 if overlap else 1) * dim
        state = (2 if overlap else 1) * ratio
        sources = []
        for name, rows_in in (("kv", kv), ("score", score)):
            state_view = e.view(cache(f"{kind}_state_{name}_{index}", where),
                                f"{kind}_base_{name}")
            joined = e.op("CONCAT", plane * (state + n) * F32, (state_view, rows_in),
                          f"{kind}_source_{name}")
            if overlap:
                # A zero row (or -inf for the scores) appended for the padded reads.
                row = e.op("SCALE", plane * F32, (e.view(joined, nbytes=plane * F32),),
                           f"{kind}_zero_row")
                joined = e.op("CONCAT", joined.nbytes + plane * F32,
                              (joined, e.view(row)), f"{kind}_source_{name}_padded")
            sources.append(joined)
        per_block = (2 if overlap else 1) * ratio
        parts = []
        for joined, name in zip(sources, ("kv", "score"), strict=True):
            gathered = e.op("GET_ROWS", plane * per_block * blocks * F32,
                            (joined, put["read"]), f"{kind}_{name}_rows")
            if overlap:
                halves = [e.op("CONT", dim * ratio * blocks * F32,
                               (e.view(gathered, nbytes=gathered.nbytes),),
                               f"{kind}_{name}_{half}") for half in ("prev", "cur")]
                gathered = e.op("CONCAT", dim * per_block * blocks * F32,
                                (e.view(halves[0]), e.view(halves[1])), f"{kind}_{name}s")
            parts.append(e.op("CONT", dim * per_block * blocks * F32,
                              (e.view(gathered, nbytes=gathered.nbytes),),
                              f"{kind}_{name}_t"))
        values, scores = parts
        probs = e.op("SOFT_MAX", scores.nbytes, (scores,), f"{kind}_weights", inplace=True)
        pooled = e.op("MUL", values.nbytes, (values, probs), f"{kind}_pooled", inplace=True)
        pooled = e.op("SUM_ROWS", dim * blocks * F32, (pooled,), f"{kind}_sum")
        comp = e.op("CONT", pooled.nbytes, (e.view(pooled, nbytes=pooled.nbytes),),
                    f"{kind}_comp")
        comp = norm(comp, norm_w, f"{kind}_comp_norm")
        return e.op("ROPE", comp.nbytes, (comp, put["write_pos"]), f"{kind}_comp_rope",
                    inplace=True)

    def compressor(kind: str, cur: Tensor, layer: str, prefix: str, where: int, ratio: int,
                   dim: int, index: int) -> Tensor:
        """A compressor's projections and pooled rows written to its cache, its state's
        last rows kept; the cache write (the root ggml expands)."""
        put = compressed_inputs[kind]
        overlap = ratio == CSA_RATIO
        plane = (2 if overlap else 1) * dim
        state = (2 if overlap else 1) * ratio
        kv = e.op("MUL_MAT", rows(plane), (weight(f"{layer}.{prefix}_kv", where), cur),
                  f"{kind}_state_kv")
        score = e.op("MUL_MAT", rows(plane), (weight(f"{layer}.{prefix}_gate", where), cur),
                     f"{kind}_state_score")
        ape = e.op("GET_ROWS", rows(plane), (weight(f"{layer}.{prefix}_ape", where),
                                             put["state_pos"]), f"{kind}_ape_rows")
        score = e.op("ADD", score.nbytes, (score, ape), f"{kind}_state_score_ape",
                     inplace=True)
        comp = compress(kind, kv, score, weight(f"{layer}.{prefix}_norm", where), ratio, dim,
                        index, where)
        if kind == "lid":
            flat = e.view(comp, "lid_comp_flat")
            comp = e.view(e.op("MUL_MAT", comp.nbytes, (lid_rot, flat), "lid_comp_rot"))
        e.expand(write(f"{kind}_write", cache(f"cache_{kind}_{index}", where),
                       e.view(comp), put["write_idxs"]))
        for rows_in, name in ((kv, "kv"), (score, "score")):
            kept = e.op("GET_ROWS", plane * min(n, state) * F32, (rows_in, put["persist_src"]),
                        f"{kind}_persist_{name}")
            e.expand(write(f"{kind}_persist_{name}_write",
                           cache(f"{kind}_state_{name}_{index}", where), kept,
                           put["persist_dst"]))
        return comp

    def attention(cur: Tensor, index: int, where: int) -> Tensor:
        """build_attention_impl for one layer of the main graph."""
        attn = m.blocks[index].attention
        assert attn is not None
        layer = f"blk.{index}"
        heads, dim = attn.n_head, attn.k_width
        ratio = m.fields.compress_ratios[index]
        qr = e.op("MUL_MAT", rows(attn.q_lora), (weight(f"{layer}.attn_q_a", where), cur),
                  "qr")
        qr = norm(qr, weight(f"{layer}.attn_q_a_norm", where), "qr_norm")
        q = e.op("MUL_MAT", rows(heads * dim), (weight(f"{layer}.attn_q_b", where), qr), "q")
        q = e.op("RMS_NORM", q.nbytes, (e.view(q, "q (reshaped)"),), "q_norm", inplace=True)
        q = e.op("ROPE", q.nbytes, (q, pos), "q", inplace=True)
        kv = e.op("MUL_MAT", rows(dim), (weight(f"{layer}.attn_kv", where), cur), "kv")
        kv = norm(kv, weight(f"{layer}.attn_kv_a_norm", where), "kv_norm")
        kv = e.op("ROPE", kv.nbytes, (e.view(kv, "kv (reshaped)"), pos), "kv", inplace=True)
        top_k = None
        compressed = None
        if ratio == HCA_RATIO:
            compressor("hca", cur, layer, "attn_compressor", where, ratio, dim, index)
            compressed = compressed_inputs["hca"]
        elif ratio == CSA_RATIO:
            compressor("csa", cur, layer, "attn_compressor", where, ratio, dim, index)
            compressor("lid", cur, layer, "indexer_compressor", where, ratio,
                       attn.indexer_dim, index)
            compressed = compressed_inputs["csa"]
            # build_lid_top_k: the indexer's query heads from the low-rank query, roped
            # and rotated, scored (fused) against the indexer's cache with per-head
            # weights, the best cells of each token kept.
            size = rows(attn.indexer_heads * attn.indexer_dim)
            iq = e.op("MUL_MAT", size, (weight(f"{layer}.indexer.attn_q_b", where), qr),
                      "lid_q")
            iq = e.op("ROPE", size, (e.view(iq, "lid_q (reshaped)"), pos), "lid_q_rope",
                      inplace=True)
            iq = e.view(e.op("MUL_MAT", size, (lid_rot, e.view(iq, "lid_q (flat)")),
                             "lid_q_rot"))
            iw = e.op("MUL_MAT", rows(attn.indexer_heads),
                      (weight(f"{layer}.indexer.proj", where), cur), "lid_weights")
            iw = e.op("SCALE", iw.nbytes, (iw,), "lid_weights", inplace=True)
            cells = compressed_cells(b.n_kv, CSA_RATIO)
            score = e.op("LIGHTNING_INDEXER", rows(cells),
                         (e.view(iq), e.view(cache(f"cache_lid_{index}", where)),
                          e.view(iw), compressed_inputs["lid"]["mask"]), "lid_score")
            picked = e.op("TOP_K", min(attn.indexer_top_k, cells) * n * I32, (score,),
                          "lid_top_k")
            top_k = e.op("CONT", picked.nbytes, (picked,), "lid_top_k")
        e.expand(q)
        e.expand(kv)
        e.expand(write("raw_write", cache(f"cache_k_{index}", where), e.view(kv), k_idxs))
        raw_k = e.view(cache(f"cache_k_{index}", where), "raw_k")
        if compressed is None:
            keys, mask = raw_k, raw_mask
        else:
            kind = "csa" if ratio == CSA_RATIO else "hca"
            cells = compressed_cells(b.n_kv, ratio)
            keys = e.op("CONCAT", dim * (b.n_kv_swa + cells) * F16,
                        (raw_k, e.view(cache(f"cache_{kind}_{index}", where))), "k_all")
            comp_mask = compressed["mask"]
            if top_k is not None:
                # build_top_k_mask: every cell masked, the picked cells zeroed, the
                # causal mask added.
                everything = e.op("FILL", comp_mask.nbytes, (comp_mask,), "kq_mask_all",
                                  inplace=True)
                zeros = Tensor("zeros", top_k.nbytes // I32 * mask_type)
                zeros = e.op("FILL", zeros.nbytes, (zeros,), "zeros", inplace=True)
                unmasked = Tensor("kq_mask_top_k", comp_mask.nbytes, "SET_ROWS",
                                  (e.view(everything), zeros, e.view(top_k)),
                                  view_src=everything)
                comp_mask = e.op("ADD", comp_mask.nbytes, (e.view(unmasked), comp_mask),
                                 "csa_top_k_mask")
            mask = e.op("CONCAT", raw_mask.nbytes + comp_mask.nbytes, (raw_mask, comp_mask),
                        "kq_mask")
        sinks = weight(f"{layer}.attn_sinks", where)
        if b.flash_attn:
            out = e.op("FLASH_ATTN_EXT", rows(heads * dim),
                       (e.view(q), e.view(keys), e.view(keys), mask, sinks), "kqv")
        else:
            cells = keys.nbytes // (dim * F16) if compressed is not None else b.n_kv_swa
            scores = e.op("MUL_MAT", rows(cells * heads), (e.view(keys), e.view(q)), "kq")
            scores = e.op("SOFT_MAX", scores.nbytes, (scores, mask, sinks), "kq_soft_max",
                          inplace=True)
            values = e.op("CONT", dim * cells * F16, (e.view(keys),), "v_cont")
            out = e.op("MUL_MAT", rows(heads * dim), (values, scores), "kqv")
            out = e.op("CONT", out.nbytes, (e.view(out),), "kqv_merged_cont")
        out = e.view(out, "attn_out_2d")
        e.expand(out)
        out = e.op("ROPE_BACK", out.nbytes, (e.view(out), pos), "attn_derope", inplace=True)
        grouped = e.op("MUL_MAT", rows(m.fields.output_groups * m.fields.output_lora),
                       (weight(f"{layer}.attn_output_a", where), e.view(e.view(out))),
                       "attn_wo_a")
        grouped = e.op("CONT", grouped.nbytes, (e.view(grouped),), "attn_wo_a_cont")
        return e.op("MUL_MAT", width * n, (weight(f"{layer}.attn_output_b", where), grouped),
                    "attn_out")

    def feed_forward(cur: Tensor, index: int, where: int) -> Tensor:
        """build_moe_ffn (sqrt-softplus scores, a selection bias, normalized weights) and
        the shared expert, added; the experts' weights and sum expanded early. A
        hash-routed layer looks its experts up by token (``ffn_gate_tid2eid``) instead
        of ranking the biased scores."""
        ffn = m.blocks[index].feed_forward
        assert ffn is not None
        layer = f"blk.{index}"
        k, experts = ffn.n_expert_used, ffn.n_expert
        logits = e.op("MUL_MAT", rows(experts), (weight(f"{layer}.ffn_gate_inp", where), cur),
                      "ffn_moe_logits")
        probs = e.op("UNARY", logits.nbytes, (logits,), "ffn_moe_softplus", inplace=True)
        probs = e.op("SQRT", probs.nbytes, (probs,), "ffn_moe_probs", inplace=True)
        if index < m.fields.hash_routed_layers:
            chosen = e.op("GET_ROWS", k * n * I32,
                          (weight(f"{layer}.ffn_gate_tid2eid", where), tokens),
                          "ffn_moe_hash_experts")
        else:
            biased = e.op("ADD", probs.nbytes, (probs, weight(f"{layer}.exp_probs_b", where)),
                          "ffn_moe_probs_biased")
            order = e.op("ARGSORT", experts * n * I32, (biased,), "ffn_moe_argsort")
            chosen = e.view(order, "ffn_moe_topk", k * n * I32)
        share = e.op("GET_ROWS", rows(k), (e.view(probs), chosen), "ffn_moe_weights")
        if ffn.norm_weights:
            total = e.op("SUM_ROWS", rows(1), (e.view(share),), "ffn_moe_weights_sum")
            total = e.op("CLAMP", total.nbytes, (total,), "ffn_moe_weights_sum", inplace=True)
            share = e.op("DIV", share.nbytes, (e.view(share), total), "ffn_moe_weights_norm")
        share = e.view(share)
        e.expand(share)
        x = e.view(cur)
        size = rows(ffn.n_ff * k)
        up = e.op("MUL_MAT_ID", size, (weight(f"{layer}.ffn_up_exps", where), x, chosen),
                  "ffn_moe_up")
        gate = e.op("MUL_MAT_ID", size, (weight(f"{layer}.ffn_gate_exps", where), x, chosen),
                    "ffn_moe_gate")
        act = e.op("GLU", size, (gate, up), "ffn_moe_swiglu_limited")
        down = e.op("MUL_MAT_ID", width * k * n,
                    (weight(f"{layer}.ffn_down_exps", where), act, chosen), "ffn_moe_down")
        down = e.op("MUL", down.nbytes, (down, share), "ffn_moe_weighted", inplace=True)
        e.expand(down)
        views = [e.view(down, f"ffn_moe_weighted ({i})", width * n) for i in range(k)]
        for view in views:
            e.expand(view)
        total = views[0]
        for view in views[1:]:
            total = e.op("ADD", width * n, (total, view), "ffn_moe_out")
            e.expand(total)
        shared = ffn.n_ff_shexp
        if not shared:
            return total
        up = e.op("MUL_MAT", rows(shared), (weight(f"{layer}.ffn_up_shexp", where), cur),
                  "ffn_up")
        gate = e.op("MUL_MAT", rows(shared), (weight(f"{layer}.ffn_gate_shexp", where), cur),
                    "ffn_gate")
        act = e.op("GLU", rows(shared), (gate, up), "ffn_swiglu_limited")
        down = e.op("MUL_MAT", width * n, (weight(f"{layer}.ffn_down_shexp", where), act),
                    "ffn_shexp")
        return e.op("ADD", width * n, (total, down), "ffn_out", inplace=True)

    x = e.op("REPEAT", hc * width * n, (e.view(embd_rows),), "hc_init")
    for index in range(len(m.fields.compress_ratios)):
        where = backend_of(index)
        layer = f"blk.{index}"
        residual = x
        cur, post, comb = hc_pre(x, f"{layer}.hc_attn_fn", f"{layer}.hc_attn_scale",
                                 f"{layer}.hc_attn_base", where, n)
        cur = norm(cur, weight(f"{layer}.attn_norm", where), "attn_norm")
        x = hc_post(attention(cur, index, where), residual, post, comb)
        residual = x
        cur, post, comb = hc_pre(x, f"{layer}.hc_ffn_fn", f"{layer}.hc_ffn_scale",
                                 f"{layer}.hc_ffn_base", where, n)
        for root in (residual, post, comb):
            e.expand(root)
        cur = norm(cur, weight(f"{layer}.ffn_norm", where), "ffn_norm")
        x = hc_post(feed_forward(cur, index, where), residual, post, comb)
    # The output rows of every stream, reduced once more (build_hc_head, unfused).
    outputs = b.n_outputs
    x = e.op("GET_ROWS", hc * width * outputs, (e.view(x, "hc_flat"), out_ids), "hc_rows")
    flat_norm = e.op("RMS_NORM", x.nbytes, (e.view(x, "hc_flat"),), "hc_head_norm",
                     inplace=True)
    mixes = e.op("MUL_MAT", hc * outputs * F32,
                 (weight("output_hc_fn.weight", output_backend), flat_norm), "hc_head_mixes")
    pre = e.op("MUL", mixes.nbytes, (mixes, weight("output_hc_scale.weight", output_backend)),
               "hc_head_pre", inplace=True)
    pre = e.op("ADD", pre.nbytes, (pre, weight("output_hc_base.weight", output_backend)),
               "hc_head_pre", inplace=True)
    pre = e.op("UNARY", pre.nbytes, (pre,), "hc_head_pre", inplace=True)
    pre = e.op("SCALE", pre.nbytes, (pre,), "hc_head_pre", inplace=True)
    reduced = None
    for stream in range(hc):
        view = e.view(x, f"hc_stream_{stream}", (outputs - 1) * hc * width + width)
        term = e.op("MUL", width * outputs, (view, e.view(pre)), "hc_head_term")
        reduced = term if reduced is None else e.op("ADD", term.nbytes, (reduced, term),
                                                    "hc_head", inplace=True)
    assert reduced is not None
    normed = norm(reduced, weight("output_norm.weight", output_backend), "result_norm")
    logits = e.op("MUL_MAT", m.n_vocab * outputs * F32,
                  (weight("output.weight", output_backend), normed), "result_output")
    logits.is_output = True
    e.expand(logits)
    assign_backends(g, weights, host)
    return g
