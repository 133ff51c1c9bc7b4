"""The recurrent mixers llama.cpp's hybrid and state-space builders share
(``llm_build_mamba_base``, ``llm_build_delta_net_base``): Mamba-1 and Mamba-2 layers, gated
delta-net layers and Kimi delta attention, with the convolution over cached and new
columns they run, and where a recurrent block's tail runs on a split."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph.builder import F32, Builder
from planner.llamacpp.graph.shapes import RecurrentShape


def conv_step(b: Builder, ssm: RecurrentShape, index: int, inputs: Mapping[str, Tensor],
               backend: int, conv_dim: int, n: int, project: Callable[[], Tensor],
               name: str) -> tuple[Tensor, Tensor]:
    """The convolution both Mamba layers run over the cached and new columns: the cached
    columns gathered, the input projection (``project``, built between them as llama.cpp
    does, which decides what is alive at once), the two concatenated and written back to
    the cache, convolved, biased and SiLU'd (``name``, ``name_b``, ``name_silu``). Returns
    the projection and the convolved columns."""
    g = b.graph
    layer = f"blk.{index}"
    conv_rows = g.op("GET_ROWS", (ssm.d_conv - 1) * conv_dim * F32,
                     (external(f"cache_r_{index}"), inputs["rs_copy"]), "conv_states",
                     backend=backend)
    projected = project()
    conv_x = g.op("CONCAT", (ssm.d_conv - 1 + n) * conv_dim * F32,
                  (g.view(conv_rows, backend=backend), g.view(projected, backend=backend)),
                  "conv_x", backend=backend)
    g.op("CPY", 0, (g.view(conv_x, backend=backend), external(f"cache_r_{index}")),
         backend=backend)
    x = g.op("SSM_CONV", conv_dim * n * F32, (conv_x, b.w(f"{layer}.ssm_conv1d")), name,
             backend=backend)
    x = g.like("ADD", x, (b.w(f"{layer}.ssm_conv1d_b"),), f"{name}_b", backend)
    return projected, g.like("UNARY", x, (), f"{name}_silu", backend)


def mamba2(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
            inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """build_mamba2_layer: the input projection (z, x, B, C and dt), the convolution over
    the cached and new columns, the selective scan (its output and the new state), the
    gate and the grouped norm, the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    conv_dim = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
    projected, x = conv_step(
        b, ssm, index, inputs, backend, conv_dim, n, lambda: g.op(
            "MUL_MAT", (2 * ssm.d_inner + 2 * ssm.n_group * ssm.d_state + ssm.n_head) * n
            * F32, (b.w(f"{layer}.ssm_in"), cur), "zxBCdt", backend=backend), "xBC")
    dt = g.op("CONT", ssm.n_head * n * F32, (g.view(projected, backend=backend),), "dt",
              backend=backend)
    dt = g.like("ADD", dt, (b.w(f"{layer}.ssm_dt_b"),), "dt_b", backend)
    scan = g.op("SSM_SCAN", (ssm.d_inner * n + ssm.d_state * ssm.d_inner) * F32,
                (external(f"cache_s_{index}"), g.view(x, backend=backend), dt,
                 g.view(x, backend=backend), inputs["rs_copy"]), "y_ssm", backend=backend)
    g.op("CPY", 0, (g.view(scan, backend=backend), external(f"cache_s_{index}")),
         backend=backend)
    z = g.op("CONT", ssm.d_inner * n * F32,
             (strided_view(b, projected, ssm.d_inner, n, backend),), "z", backend=tail_backend)
    skip = g.op("MUL", ssm.d_inner * n * F32, (g.view(x, backend=backend),
                                               b.w(f"{layer}.ssm_d")), "x_d",
                backend=backend)
    y = g.like("ADD", skip, (g.view(scan, backend=backend),), "mamba2_y_add_d", backend)
    y = g.op("SWIGLU", ssm.d_inner * n * F32, (z, y), "y_gated", backend=backend)
    if ssm.norm:
        y = g.op("RMS_NORM", y.nbytes, (g.view(y, backend=backend),), "y_norm",
                 backend=backend)
        y = g.like("MUL", y, (b.w(f"{layer}.ssm_norm"),), "y_normed", backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.ssm_out"),
                                                      g.view(y, backend=backend)),
                "mamba_out", backend=backend)


def delta_net(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
               inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """A gated delta-net layer (qwen35's ``build_layer_attn_linear`` on
    ``llm_build_delta_net_base``): the joint Q, K, V projection, the convolution over the
    cached and new columns, Q and K L2-normed, the decay gate and beta from their own
    projections, the fused ``GATED_DELTA_NET`` (its output and the new state), the output
    normed and gated by z's projection, the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    key_dim = ssm.d_state * ssm.n_group
    value_dim = ssm.d_inner
    conv_dim = 2 * key_dim + value_dim
    head_v = value_dim // max(1, ssm.n_head)
    qkv = g.op("MUL_MAT", conv_dim * n * F32, (b.w(f"{layer}.attn_qkv"), cur),
               "linear_attn_qkv_mixed", backend=backend)
    conv_rows = g.op("GET_ROWS", (ssm.d_conv - 1) * conv_dim * F32,
                     (external(f"cache_r_{index}"), inputs["rs_copy"]), "conv_states",
                     backend=backend)
    conv_x = g.op("CONCAT", (ssm.d_conv - 1 + n) * conv_dim * F32,
                  (g.view(conv_rows, backend=backend), g.view(qkv, backend=backend)),
                  "conv_input", backend=backend)
    g.op("CPY", 0, (g.view(conv_x, backend=backend), external(f"cache_r_{index}")),
         backend=backend)
    state = g.op("GET_ROWS", head_v * head_v * ssm.n_head * F32,
                 (external(f"cache_s_{index}"), inputs["rs_copy"]), "state_predelta",
                 backend=backend)
    x = g.op("SSM_CONV", conv_dim * n * F32, (conv_x, b.w(f"{layer}.ssm_conv1d")),
             "conv_output_raw", backend=backend)
    x = g.like("UNARY", x, (), "conv_output_silu", backend)
    q = g.op("RMS_NORM", key_dim * n * F32, (g.view(x, backend=backend),), "q_conv_norm",
             backend=backend)
    q = g.like("SCALE", q, (), "q_conv_predelta", backend)
    k = g.op("RMS_NORM", key_dim * n * F32, (g.view(x, backend=backend),), "k_conv_norm",
             backend=backend)
    k = g.like("SCALE", k, (), "k_conv_predelta", backend)
    alpha = g.op("MUL_MAT", ssm.n_head * n * F32, (b.w(f"{layer}.ssm_alpha"), cur), "alpha",
                 backend=backend)
    alpha = g.like("ADD", alpha, (b.w(f"{layer}.ssm_dt.bias"),), "alpha_biased", backend)
    alpha = g.like("UNARY", alpha, (), "a_softplus", backend)
    gate = g.like("MUL", alpha, (b.w(f"{layer}.ssm_a"),), "gate", backend)
    beta = g.op("MUL_MAT", ssm.n_head * n * F32, (b.w(f"{layer}.ssm_beta"), cur), "beta",
                backend=backend)
    beta = g.like("UNARY", beta, (), "beta_sigmoid", backend)
    out = g.op("GATED_DELTA_NET", (value_dim * n + head_v * head_v * ssm.n_head) * F32,
               (q, k, g.view(x, backend=backend), g.view(gate, backend=backend), beta, state),
               "gdn", backend=backend)
    g.op("CPY", 0, (g.view(out, backend=backend), external(f"cache_s_{index}")),
         backend=backend)
    normed = g.op("RMS_NORM", value_dim * n * F32, (g.view(out, backend=backend),),
                  "attn_output_norm", backend=backend)
    normed = g.like("MUL", normed, (b.w(f"{layer}.ssm_norm"),), "attn_output_normed", backend)
    z = g.op("MUL_MAT", value_dim * n * F32, (b.w(f"{layer}.attn_gate"), cur), "z",
             backend=tail_backend)
    z = g.like("UNARY", g.view(z, backend=backend), (), "z_silu", backend)
    y = g.like("MUL", normed, (z,), "final_output", backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.ssm_out"),
                                                      g.view(y, backend=backend)),
                "linear_attn_out", backend=backend)


def kda(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
         inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """A Kimi delta attention layer (kimi-linear's recurrent block on
    ``llm_build_delta_net_base``): Q, K and V each projected and convolved over its cached
    and new columns, Q and K L2-normed, the decay gate (one or two projections) and beta,
    the fused ``GATED_DELTA_NET``, its output made contiguous, normed and gated by the
    output gate's projections, made contiguous again, the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    width = ssm.d_inner
    size = width * n * F32
    g.op("GET_ROWS", (ssm.d_conv - 1) * 3 * width * F32,
         (external(f"cache_r_{index}"), inputs["rs_copy"]), "conv_states", backend=backend)
    conv_inputs = []
    for name in ("q", "k", "v"):
        projected = g.op("MUL_MAT", size, (b.w(f"{layer}.attn_{name}"), cur), name,
                         backend=backend)
        conv_x = g.op("CONCAT", (ssm.d_conv - 1 + n) * width * F32,
                      (g.view(projected, backend=backend),), f"conv_{name}", backend=backend)
        g.op("CPY", 0, (g.view(conv_x, backend=backend), external(f"cache_r_{index}")),
             backend=backend)
        conv_inputs.append(conv_x)
    state = g.op("GET_ROWS", ssm.d_state * width * F32,
                 (external(f"cache_s_{index}"), inputs["rs_copy"]), "state", backend=backend)
    convolved = []
    for name, conv_x in zip(("q", "k", "v"), conv_inputs, strict=True):
        x = g.op("SSM_CONV", size, (conv_x, b.w(f"{layer}.ssm_conv1d_{name}")),
                 f"kda_{name}_conv", backend=backend)
        x = g.like("UNARY", g.view(x, backend=backend), (), f"kda_{name}_silu", backend)
        if name != "v":
            x = g.op("RMS_NORM", size, (x,), f"kda_{name}_norm", backend=backend)
            x = g.like("SCALE", x, (), f"kda_{name}_l2", backend)
        convolved.append(x)

    def gate(name: str, rank: int) -> Tensor:
        if rank:
            low = g.op("MUL_MAT", rank * n * F32, (b.w(f"{layer}.ssm_{name}_a"), cur),
                       f"{name}_a", backend=backend)
            return g.op("MUL_MAT", size, (b.w(f"{layer}.ssm_{name}_b"), low), f"{name}_b",
                        backend=backend)
        return g.op("MUL_MAT", size, (b.w(f"{layer}.ssm_{name}"), cur), name, backend=backend)

    decay = gate("f", ssm.decay_rank)
    decay = g.like("ADD", decay, (b.w(f"{layer}.ssm_dt.bias"),), "decay_biased", backend)
    decay = g.like("UNARY", decay, (), "decay_softplus", backend)
    decay = g.like("MUL", g.view(decay, backend=backend), (b.w(f"{layer}.ssm_a"),),
                   "kda_g1", backend)
    beta = g.op("MUL_MAT", ssm.n_head * n * F32, (b.w(f"{layer}.ssm_beta"), cur), "beta",
                backend=backend)
    beta = g.like("UNARY", g.view(beta, backend=backend), (), "kda_beta", backend)
    out = g.op("GATED_DELTA_NET", size + ssm.d_state * width * F32,
               (*convolved, g.view(decay, backend=backend), beta, state), "kda",
               backend=backend)
    g.op("CPY", 0, (g.view(out, backend=backend), external(f"cache_s_{index}")),
         backend=backend)
    y = g.op("CONT", size, (g.view(out, backend=backend),), "attn_output", backend=backend)
    y = g.op("RMS_NORM", size, (g.view(y, backend=backend),), "kda_norm", backend=backend)
    y = g.like("MUL", y, (b.w(f"{layer}.ssm_norm"),), "kda_normed", backend)
    output_gate = gate("g", ssm.gate_rank)
    output_gate = g.like("UNARY", g.view(output_gate, backend=backend), (), "kda_g2",
                         backend)
    y = g.like("MUL", y, (output_gate,), "kda_gated", backend)
    y = g.op("CONT", size, (y,), "kda_gated_cont", backend=tail_backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.wo"), y), "kda_out",
                backend=backend)


def strided_view(b: Builder, src: Tensor, width: int, n: int, backend: int) -> Tensor:
    """A view of ``width`` f32 columns of each of ``n`` rows of ``src``: as a tensor of
    its own (a scheduler's copy of it) it spans every row but the last one's tail."""
    row = src.nbytes // max(1, n)
    return b.graph.view(src, f"{src.name} (columns)", (n - 1) * row + width * F32, backend)


def tail_backend(b: Builder, index: int) -> int:
    """Where a recurrent block's gate input (z's contiguous copy) runs. ggml expands a
    recurrent block's tail (z, the skip, the gate and the output projection) only when
    the next block reads it, after that block (one that starts with its mixer, not
    with attention) has placed its state rows on its own backend; z's copy has no
    weights, so the scheduler runs it there, on the next block's backend (and copies z
    and the copy across)."""
    backend = b.backend_of[index] if b.backend_of else b.input_backend
    following = index + 1
    if b.backend_of and following < len(b.model.blocks) \
            and b.model.blocks[following].recurrent is not None \
            and b.model.blocks[following].attention is None:
        return b.backend_of[following]
    return backend


def mamba1(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
            inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """build_mamba_layer: the input projection (x and z), the convolution over the cached
    and new columns, x's projection to dt, B and C (each RMS-normed where the model has
    those norms), dt's projection, the selective scan (its output and the new state),
    the skip, the gate and the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    d_inner, d_state, rank = ssm.d_inner, ssm.d_state, ssm.n_head
    xz, x = conv_step(b, ssm, index, inputs, backend, d_inner, n, lambda: g.op(
        "MUL_MAT", 2 * d_inner * n * F32, (b.w(f"{layer}.ssm_in"), cur), "xz",
        backend=backend), "x")
    x_db = g.op("MUL_MAT", (rank + 2 * d_state) * n * F32, (b.w(f"{layer}.ssm_x"), x),
                "x_db", backend=backend)
    if ssm.norm:
        parts = []
        for name, width in (("dt", rank), ("B", d_state), ("C", d_state)):
            part = g.op("RMS_NORM", width * n * F32, (g.view(x_db, backend=backend),),
                        f"{name}_norm", backend=backend)
            parts.append(g.like("MUL", part, (b.w(f"{layer}.ssm_{name}_norm"),), name,
                                backend))
        dt, B, C = parts
    else:
        dt = g.op("CONT", rank * n * F32, (g.view(x_db, backend=backend),), "dt",
                  backend=backend)
        B = C = g.view(x_db, backend=backend)
    dt = g.op("MUL_MAT", d_inner * n * F32, (b.w(f"{layer}.ssm_dt"), dt), "dt_proj",
              backend=backend)
    dt = g.like("ADD", dt, (b.w(f"{layer}.ssm_dt_b"),), "dt_b", backend)
    scan = g.op("SSM_SCAN", (d_inner * n + d_state * d_inner) * F32,
                (external(f"cache_s_{index}"), g.view(x, backend=backend), dt, B, C,
                 inputs["rs_copy"]), "y_ssm", backend=backend)
    g.op("CPY", 0, (g.view(scan, backend=backend), external(f"cache_s_{index}")),
         backend=backend)
    z = g.op("CONT", d_inner * n * F32, (strided_view(b, xz, d_inner, n, backend),), "z",
             backend=tail_backend)
    skip = g.op("MUL", d_inner * n * F32, (x, b.w(f"{layer}.ssm_d")), "x_d",
                backend=backend)
    y = g.like("ADD", skip, (g.view(scan, backend=backend),), "y_add_d", backend)
    y = g.op("SWIGLU", d_inner * n * F32, (z, y), "y_gated", backend=backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.ssm_out"), y),
                "mamba_out", backend=backend)
