"""``hy-v4.cpp``: hyper-connection residual streams (iHC) around blocks of latent
attention with a lightning indexer (DSA; a block without the indexer's tensors reuses the
last top-k) and a mixture of experts whose limited SwiGLU is one fused operation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Graph, Tensor
from planner.llamacpp.graph import (
    F32,
    Activation,
    BlockShape,
    Builder,
    Family,
    ModelReader,
    embeddings,
    feed_forward,
    graph_inputs,
    latent_attention_core,
    norm,
    output_projection,
    register,
)
from planner.llamacpp.graph.reading import MAX_RESIDUAL_STREAMS


@dataclass(frozen=True, slots=True)
class HyperConnections:
    """The residual streams each token carries."""

    streams: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HyperConnections:
        return cls(**data)


@register
class HyV4(Family):
    architectures = ("hy_v4",)
    fields_type = HyperConnections
    dsa_indexer = True
    shares_top_k = True
    activation = Activation(fused_experts=True)

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> HyperConnections:
        return HyperConnections(r.meta.count("hyper_connection.count", minimum=1,
                                             maximum=MAX_RESIDUAL_STREAMS))

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        r.require(blocks, "attention", "attention.head_count",
                  lambda block: block.attention is not None)
        r.require(blocks, "a feed-forward network", "feed_forward_length",
                  lambda block: block.feed_forward is not None)

    def build(self, b: Builder) -> Graph:
        inputs = graph_inputs(b)
        return hc_graph(b, embeddings(b, inputs), inputs, b.output_backend)


def hc_graph(b: Builder, embd: Tensor, inputs: Mapping[str, Tensor],
              output_backend: int) -> Graph:
    """hy_v4's graph (hy-v4.cpp): the embedding repeated into ``hc`` residual streams;
    each half of each block reduces them (``build_hc_pre``: the streams cast, flattened
    and normed, mixed into ``2 hc`` coefficients, the weighted sum of the streams), runs
    on the sum and writes every stream back (``build_hc_post``: the residual cast, each
    stream plus the output times its coefficient, concatenated and cast); the output
    rows kept, the streams reduced once more (``build_hc_head``), normed, projected.
    Operations without weights run where the one before them ran (the scheduler's
    expansion): the cast and norm of a block's first reduction run where the previous
    block ran, so the next device copies in the norm, the residual and each stream's
    strided view, as well as the last indexer's top-k a shared-indexer layer reads."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc, width = m.fields.streams, m.n_embd * F32
    stream = width * n
    at = b.backend_of[0] if b.backend_of else b.input_backend
    x = g.op("REPEAT", hc * stream, (embd,), "hc_init", backend=at)

    def reduce(x: Tensor, fn: str, backend: int, pre_at: int,
               tokens: int) -> tuple[Tensor, Tensor]:
        """hy_v4_hc_reduce after the coefficients: ``x`` cast, each stream's view times
        its coefficient, summed, cast; the cast and the norm run at ``pre_at``. The
        sum, and the mixes the post coefficients come from."""
        cast = g.op("CPY", hc * width * tokens, (x,), "hc_x_f32", backend=pre_at)
        flat = g.op("RMS_NORM", cast.nbytes, (g.view(x, backend=x.backend),), "hc_flat_norm",
                    backend=pre_at)
        mixes = g.op("MUL_MAT", 2 * hc * tokens * F32, (b.w(fn), flat), "hc_mixes",
                     backend=backend)
        pre = g.op("MUL", hc * tokens * F32, (g.view(mixes, backend=backend),), "hc_pre",
                   backend=backend)
        for op in ("ADD", "UNARY", "SCALE"):
            pre = g.like(op, pre, (), "hc_pre", backend)
        total = None
        size = width * tokens
        for index in range(hc):
            # A stream's strided view (rows hc streams apart) spans the other streams of
            # all but its last row: what a copy of it holds.
            view = g.view(cast, f"hc_stream_{index}", (tokens - 1) * hc * width + width,
                          cast.backend)
            term = g.op("MUL", size, (view, g.view(pre, backend=backend)), "hc_term",
                        backend=backend)
            total = term if total is None else g.like("ADD", total, (term,), "hc_sum",
                                                      backend)
        assert total is not None
        return g.op("CPY", size, (total,), "hc_reduced", backend=backend), mixes

    def post(out: Tensor, residual: Tensor, mixes: Tensor, mixes_backend: int) -> Tensor:
        """build_hc_post: the residual cast, the output cast, the post coefficients
        (from the reduction's mixes) cast, each stream plus the output times its
        coefficient, concatenated, cast back."""
        res = g.op("CPY", residual.nbytes, (residual,), "hc_res_f32", backend=mixes_backend)
        x_f32 = g.op("CPY", out.nbytes, (out,), "hc_out_f32", backend=mixes_backend)
        coef = g.op("MUL", hc * n * F32, (g.view(mixes, backend=mixes_backend),), "hc_post",
                    backend=mixes_backend)
        for op in ("ADD", "UNARY", "SCALE", "SCALE", "CPY"):
            coef = g.like(op, coef, (), "hc_post", mixes_backend)
        joined = None
        for _ in range(hc):
            term = g.op("MUL", stream, (x_f32, g.view(coef, backend=mixes_backend)),
                        "hc_post_term", backend=mixes_backend)
            term = g.op("ADD", stream, (g.view(res, backend=mixes_backend), term),
                        "hc_post_stream", backend=mixes_backend)
            joined = term if joined is None else g.op(
                "CONCAT", joined.nbytes + stream, (joined, term), "hc_post_concat",
                backend=mixes_backend)
        assert joined is not None
        return g.op("CPY", joined.nbytes, (joined,), "hc_out", backend=mixes_backend)

    for index, block in enumerate(m.blocks):
        backend = b.backend_of[index]
        attn, ffn = block.attention, block.feed_forward
        assert attn is not None and ffn is not None
        layer = f"blk.{index}"
        residual = x
        cur, mixes = reduce(x, f"{layer}.hc_attn_fn", backend, at, n)
        normed = norm(b, cur, f"{layer}.attn", backend)
        core = latent_attention_core(b, normed, attn, index, inputs, backend)
        x = post(output_projection(b, core, attn, index, backend), residual, mixes,
                 backend)
        residual = x
        cur, mixes = reduce(x, f"{layer}.hc_ffn_fn", backend, backend, n)
        out = feed_forward(b, norm(b, cur, f"{layer}.ffn", backend), ffn, index, backend)
        x = post(out, residual, mixes, backend)
        at = backend
    rows = g.op("GET_ROWS", hc * width * b.n_outputs, (g.view(x, backend=at),
                                                         inputs["out_ids"]),
                "hc_rows", backend=at)
    cur, _ = reduce(rows, "output_hc_fn", output_backend, at, b.n_outputs)
    normed = norm(b, cur, "output", output_backend)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), normed),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g
