"""``minimax-01.cpp``: lightning attention on its recurrent layers (those that keep
recurrent state), softmax attention on the others, and each half of a block adds its
output to its normed input, scaled (``residual_from_norm``)."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph import (
    F32,
    Builder,
    Family,
    ModelReader,
    RecurrentShape,
    graph_inputs,
    register,
)


@register
class MiniMax01(Family):
    architectures = ("minimax-01",)
    residual_from_norm = True

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        """Lightning attention where the layer keeps state: heads of
        ``attention.key_length`` (at least one) from the joint Q, K, V projection, the
        gate's width from ``attn_gate``."""
        w, n_embd = r.widths[index], r.n_embd
        if not ("attn_qkv" in w and "attn_gate" in w and r.layer(index).state_elements):
            return None
        head = r.meta.count("attention.key_length", n_embd // max(1, r.heads[index]),
                            minimum=1)
        return RecurrentShape(w["attn_gate"] // n_embd, head, 1,
                              w["attn_qkv"] // (3 * n_embd * head), 0, mixer="lightning")

    def inputs(self, b: Builder) -> dict[str, Tensor]:
        """The usual inputs, then the lightning layers' slopes and decays."""
        inputs = graph_inputs(b)
        lightning = [block.recurrent for block in b.model.blocks
                     if block.recurrent is not None and block.recurrent.mixer == "lightning"]
        if lightning:
            g, n, host = b.graph, b.n_tokens, b.input_backend
            heads = lightning[0].n_head
            inputs["slopes"] = g.input("slopes", heads * F32, host)
            inputs["q_decay"] = g.input("q_decay_exp", heads * n * F32, host)
            inputs["k_decay"] = g.input("k_decay_exp", heads * n * F32, host)
            inputs["diag_decay"] = g.input("diag_decay_exp", n * n * heads * F32, host)
        return inputs

    def mixer(self, b: Builder, cur: Tensor, shape: RecurrentShape, index: int,
              inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
        return lightning(b, cur, shape, index, inputs, backend, tail_backend)


def lightning(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
               inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """MiniMax-01's lightning attention (its recurrent layers): the state's rows, the joint
    Q, K, V projection, the decayed query against the old state, the decayed ``n_tokens x
    n_tokens`` scores per head against V, the new state from the old one and the decayed
    keys, the output made contiguous, normed and gated, the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, head = ssm.n_head, ssm.d_state
    size = heads * head * n * F32
    state_size = head * head * heads * F32
    kv_old = g.op("GET_ROWS", state_size, (external(f"cache_s_{index}"), inputs["rs_copy"]),
                  "kv_old", backend=backend)
    qkv = g.op("MUL_MAT", 3 * size, (b.w(f"{layer}.attn_qkv"), cur), "QKVcur",
               backend=backend)
    qkv = g.like("UNARY", qkv, (), "QKVcur_silu", backend)

    def decay(name: str) -> Tensor:
        return g.like("UNARY", g.like("SCALE", inputs[name], (), f"{name}_scaled", backend),
                      (), name, backend)

    q_s = g.op("MUL", size, (g.view(qkv, backend=backend), decay("q_decay")), "q_s",
               backend=backend)
    past = g.op("MUL_MAT", size, (g.view(kv_old, backend=backend), g.view(q_s, backend=backend)),
                "qkv_none_diag", backend=backend)
    v = g.op("CONT", size, (g.view(qkv, backend=backend),), "v_trans", backend=backend)
    scores = g.op("MUL_MAT", n * n * heads * F32,
                  (g.view(qkv, backend=backend), g.view(qkv, backend=backend)), "qk",
                  backend=backend)
    scores = g.like("MUL", scores, (decay("diag_decay"),), "qk_s", backend)
    current = g.op("MUL_MAT", size, (v, scores), "qkv_diag", backend=backend)
    out = g.like("ADD", past, (current,), "qkv", backend)
    kept = g.op("MUL", state_size, (g.view(kv_old, backend=backend), inputs["slopes"]),
                "kv_old_s", backend=backend)
    k = g.op("MUL", size, (g.view(qkv, backend=backend), decay("k_decay")), "k_after_decay",
             backend=backend)
    k = g.op("CONT", size, (g.view(k, backend=backend),), "k_after_decay_trans",
             backend=backend)
    new = g.op("MUL_MAT", state_size, (k, v), "kv_cur", backend=backend)
    new = g.like("ADD", kept, (new,), "kv_new", backend)
    g.op("CPY", 0, (new, external(f"cache_s_{index}")), backend=backend)
    gate = g.op("MUL_MAT", ssm.d_inner * n * F32, (b.w(f"{layer}.attn_gate"), cur), "g",
                backend=backend)
    gate = g.like("UNARY", gate, (), "g_sigm", backend)
    out = g.op("CONT", size, (g.view(out, backend=backend),), "qkv_permuted",
               backend=tail_backend)
    out = g.like("RMS_NORM", g.view(out, backend=backend), (), "qkv_norm", backend)
    out = g.like("MUL", out, (b.w(f"{layer}.attn_norm_2"),), "qkv_normed", backend)
    gated = g.like("MUL", gate, (out,), "attn_gated", backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.wo"), gated), "attn_out",
                backend=backend)
