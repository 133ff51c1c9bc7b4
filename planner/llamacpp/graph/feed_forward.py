"""Feed-forward networks and mixtures of experts as llama.cpp builds them
(``build_ffn``, ``build_moe_ffn``): gated or not, fused up and gate, clamped SwiGLU, Kimi
K3's SiTU, shared experts, a dense network beside the experts and latent experts."""

from __future__ import annotations

from collections.abc import Callable

from planner.llamacpp.allocator import Tensor
from planner.llamacpp.graph.builder import F32, I32, Builder, norm
from planner.llamacpp.graph.shapes import FeedForwardShape


def feed_forward(b: Builder, cur: Tensor, ffn: FeedForwardShape, index: int,
                  backend: int) -> Tensor:
    """The feed-forward network or mixture of experts on the normed input ``cur``."""
    layer = f"blk.{index}"
    if ffn.n_expert:
        if ffn.n_latent:
            latent = b.graph.op("MUL_MAT", ffn.n_latent * b.rows(cur) * F32,
                                (b.w(f"{layer}.routed_down"), cur), "routed_in",
                                backend=backend)
            out = moe(b, latent, ffn, layer, backend)
            out = norm(b, out, f"{layer}.routed", backend)
            out = b.graph.op("MUL_MAT", cur.nbytes, (b.w(f"{layer}.routed_up"), out),
                             "routed_out", backend=backend)
        else:
            out = moe(b, cur, ffn, layer, backend)
        if ffn.n_ff_shexp:
            shared = mlp(b, cur, FeedForwardShape(ffn.n_ff_shexp, clamped=ffn.shexp_clamped,
                                                   activation=ffn.activation),
                          f"{layer}.shexp", backend)
            out = b.graph.like("ADD", out, (shared,), "ffn_out", backend)
        if ffn.n_ff_dense:
            dense = mlp(b, cur, FeedForwardShape(ffn.n_ff_dense), layer, backend)
            out = b.graph.like("ADD", dense, (out,), "ffn_out", backend)
            out = b.graph.like("SCALE", out, (), "ffn_out_scaled", backend)
        return out
    return mlp(b, cur, ffn, layer, backend)


def mlp(b: Builder, cur: Tensor, ffn: FeedForwardShape, layer: str,
         backend: int) -> Tensor:
    g = b.graph
    if not ffn.n_ff:
        return g.like("UNARY", cur, (), "ffn_act", backend)
    size = ffn.n_ff * b.rows(cur) * F32
    if ffn.fused_up:
        up = g.op("MUL_MAT", 2 * size, (b.w(f"{layer}.up"), cur), "ffn_up", backend=backend)
        act = g.op("SWIGLU", size, (up,), "ffn_swiglu", backend=backend)
    elif ffn.gated and ffn.activation == "situ":
        gate = g.op("MUL_MAT", size, (b.w(f"{layer}.gate"), cur), "ffn_gate",
                    backend=backend)
        act = situ(b, gate, lambda: g.op("MUL_MAT", size, (b.w(f"{layer}.up"), cur), "ffn_up",
                                          backend=backend), backend)
    elif ffn.gated and ffn.clamped:
        gate = g.op("MUL_MAT", size, (b.w(f"{layer}.gate"), cur), "ffn_gate",
                    backend=backend)
        gate = g.like("CLAMP", g.like("UNARY", gate, (), "ffn_silu", backend), (),
                      "ffn_silu_clamped", backend)
        up = g.op("MUL_MAT", size, (b.w(f"{layer}.up"), cur), "ffn_up", backend=backend)
        up = g.like("CLAMP", up, (), "ffn_up_clamped", backend)
        act = g.like("MUL", gate, (up,), "ffn_swiglu_limited", backend)
    elif ffn.gated:
        gate = g.op("MUL_MAT", size, (b.w(f"{layer}.gate"), cur), "ffn_gate",
                    backend=backend)
        up = g.op("MUL_MAT", size, (b.w(f"{layer}.up"), cur), "ffn_up", backend=backend)
        act = g.op("SWIGLU", size, (gate, up), "ffn_swiglu", backend=backend)
    else:
        up = g.op("MUL_MAT", size, (b.w(f"{layer}.up"), cur), "ffn_up", backend=backend)
        act = g.like("UNARY", up, (), "ffn_act", backend)
    return g.op("MUL_MAT", cur.nbytes, (b.w(f"{layer}.down"), act), "ffn_down",
                backend=backend)


def situ(b: Builder, gate: Tensor, up_projection: Callable[[], Tensor],
          backend: int) -> Tensor:
    """Kimi K3's SiTU: the gate scaled, through tanh and scaled back (a new tensor, as the
    gate is read twice), times the gate's sigmoid (in place), then the up projection
    (made only now), through the same scaled tanh, multiplied in (in place)."""
    g = b.graph
    scaled = g.op("SCALE", gate.nbytes, (gate,), "situ_scaled", layout=gate.layout,
                  backend=backend)
    scaled = g.like("SCALE", g.like("UNARY", scaled, (), "situ_tanh", backend), (),
                    "situ_tanh_scaled", backend)
    sigmoid = g.like("UNARY", gate, (), "situ_sigmoid", backend)
    act = g.like("MUL", scaled, (sigmoid,), "situ_gate", backend)
    up = up_projection()
    up = g.like("SCALE", g.like("UNARY", g.like("SCALE", up, (), "up_scaled", backend), (),
                                "up_tanh", backend), (), "up_tanh_scaled", backend)
    return g.like("MUL", act, (up,), "ffn_situ", backend)


def moe(b: Builder, cur: Tensor, ffn: FeedForwardShape, layer: str,
         backend: int) -> Tensor:
    """build_moe_ffn: router, top-k, the experts' multiplications and their sum (at the
    latent width for a latent mixture)."""
    g = b.graph
    width = ffn.n_latent or b.model.n_embd
    n = cur.nbytes // (width * F32)
    e, k = ffn.n_expert, ffn.n_expert_used
    logits = g.op("MUL_MAT", e * n * F32, (b.w(f"{layer}.gate_inp"), cur), "ffn_moe_logits",
                  backend=backend)
    probs = g.like("SOFT_MAX", logits, (), "ffn_moe_probs", backend)
    probs_view = g.view(probs, backend=backend)
    argsort = g.op("ARGSORT", e * n * I32, (probs,), "ffn_moe_argsort", backend=backend)
    topk = g.view(argsort, "ffn_moe_topk", k * n * I32, backend)
    weights = g.op("GET_ROWS", k * n * F32, (probs_view, topk), "ffn_moe_weights",
                   backend=backend)
    if ffn.norm_weights:
        view = g.view(weights, backend=backend)
        total = g.op("SUM_ROWS", n * F32, (view,), "ffn_moe_weights_sum", backend=backend)
        total = g.like("CLAMP", total, (), "ffn_moe_weights_sum_clamped", backend)
        weights = g.op("DIV", k * n * F32, (view, total), "ffn_moe_weights_norm",
                       backend=backend)
    weights = g.view(weights, backend=backend)
    x = g.view(cur, backend=backend)
    size = ffn.n_ff * k * n * F32
    if ffn.fused_up:
        up = g.op("MUL_MAT_ID", 2 * size, (b.w(f"{layer}.gate_up_exps"), x, topk),
                  "ffn_moe_gate_up", backend=backend)
        act = g.op("SWIGLU", size, (up,), "ffn_moe_swiglu", backend=backend)
    elif ffn.gated and ffn.activation == "situ":
        gate = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.gate_exps"), x, topk), "ffn_moe_gate",
                    backend=backend)
        act = situ(b, gate, lambda: g.op("MUL_MAT_ID", size, (b.w(f"{layer}.up_exps"), x, topk),
                                          "ffn_moe_up", backend=backend), backend)
    elif ffn.gated and ffn.clamped:
        gate = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.gate_exps"), x, topk), "ffn_moe_gate",
                    backend=backend)
        gate = g.like("CLAMP", g.like("UNARY", gate, (), "ffn_moe_silu", backend), (),
                      "ffn_moe_silu_clamped", backend)
        up = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.up_exps"), x, topk), "ffn_moe_up",
                  backend=backend)
        up = g.like("CLAMP", up, (), "ffn_moe_up_clamped", backend)
        act = g.like("MUL", gate, (up,), "ffn_moe_swiglu_limited", backend)
    elif ffn.gated:
        gate = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.gate_exps"), x, topk), "ffn_moe_gate",
                    backend=backend)
        up = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.up_exps"), x, topk), "ffn_moe_up",
                  backend=backend)
        act = g.op("SWIGLU", size, (gate, up), "ffn_moe_swiglu", backend=backend)
    else:
        up = g.op("MUL_MAT_ID", size, (b.w(f"{layer}.up_exps"), x, topk), "ffn_moe_up",
                  backend=backend)
        act = g.like("UNARY", up, (), "ffn_moe_act", backend)
    experts = g.op("MUL_MAT_ID", width * k * n * F32,
                   (b.w(f"{layer}.down_exps"), act, topk), "ffn_moe_down", backend=backend)
    weighted = g.like("MUL", experts, (weights,), "ffn_moe_weighted", backend)
    views = [g.view(weighted, f"ffn_moe_weighted ({i})", cur.nbytes, backend)
             for i in range(k)]
    out = g.op("ADD", cur.nbytes, (views[0], views[1] if k > 1 else views[0]),
               "ffn_moe_out", backend=backend)
    for view in views[2:]:
        out = g.like("ADD", out, (view,), "ffn_moe_out", backend)
    return out
