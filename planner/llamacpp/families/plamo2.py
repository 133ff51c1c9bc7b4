"""``plamo2.cpp``: PLaMo 2's Mamba mixers (``ssm_in``, ``ssm_conv1d``, ``ssm_x``) beside
attention blocks."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph import F32, Builder, Family, ModelReader, RecurrentShape, register


@register
class Plamo2(Family):
    architectures = ("plamo2",)

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        """The mixer's widths (``ssm.*``, each at least one) and its time step's rank: what
        ``ssm_x`` projects to beyond B and C."""
        w = r.widths[index]
        if not ("ssm_in" in w and "ssm_conv1d" in w and "ssm_x" in w):
            return None
        d_inner, d_state = r.ssm("inner_size"), r.ssm("state_size")
        dt_rank = w["ssm_x"] // d_inner - 2 * d_state
        if dt_rank < 0:
            raise r.meta.bad("ssm.state_size", f"leaves block {index}'s ssm_x, "
                             f"{w['ssm_x'] // d_inner:,} columns per inner row, no room for "
                             f"B and C of that size", d_state)
        return RecurrentShape(d_inner, d_state, 1, r.ssm("time_step_rank"),
                              r.ssm("conv_kernel"), mixer="plamo2", dt_rank=dt_rank)

    def mixer(self, b: Builder, cur: Tensor, shape: RecurrentShape, index: int,
              inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
        return plamo2_mamba(b, cur, shape, index, inputs, backend, tail_backend)


def plamo2_mamba(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
                  inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """PLaMo 2's Mamba mixer (``build_plamo2_mamba_layer``): the input projection (z and
    x) made contiguous per head, x split off contiguous and convolved over its cached and
    new columns, B, C and the time step projected from it and RMS-normed, the time step's
    heads projected, the selective scan (its output and the new state), the skip, the
    gate and the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    d_inner, d_state = ssm.d_inner, ssm.d_state
    size = d_inner * n * F32
    g.op("GET_ROWS", (ssm.d_conv - 1) * d_inner * F32,
         (external(f"cache_r_{index}"), inputs["rs_copy"]), "conv_states", backend=backend)
    zx = g.op("MUL_MAT", 2 * size, (b.w(f"{layer}.ssm_in"), cur), "mamba_in_proj",
              backend=backend)
    zx = g.op("CONT", 2 * size, (g.view(zx, backend=backend),), "mamba_in_proj_out",
              backend=backend)
    x = g.op("CONT", size, (g.view(zx, backend=backend),), "mamba_x_split", backend=backend)
    conv_x = g.op("CONCAT", (ssm.d_conv - 1 + n) * d_inner * F32,
                  (g.view(x, backend=backend),), "mamba_conv1d_input", backend=backend)
    g.op("CPY", 0, (conv_x, external(f"cache_r_{index}")), backend=backend)
    x = g.op("SSM_CONV", size, (conv_x, b.w(f"{layer}.ssm_conv1d")), "mamba_conv1d",
             backend=backend)
    x = g.like("UNARY", x, (), "mamba_conv1d_silu", backend)
    bcdt = g.op("MUL_MAT", (ssm.dt_rank + 2 * d_state) * n * F32, (b.w(f"{layer}.ssm_x"), x),
                "mamba_bcdt_proj", backend=backend)
    dt = g.op("RMS_NORM", ssm.dt_rank * n * F32, (g.view(bcdt, backend=backend),),
              "mamba_dt_norm", backend=backend)
    dt = g.like("MUL", dt, (b.w(f"{layer}.ssm_dt_norm"),), "mamba_dt_normed", backend)
    dt = g.op("MUL_MAT", ssm.n_head * n * F32, (b.w(f"{layer}.ssm_dt"), dt), "mamba_dt",
              backend=backend)
    dt = g.like("ADD", dt, (b.w(f"{layer}.ssm_dt.bias"),), "mamba_dt_proj", backend)
    normed = []
    for name in ("b", "c"):
        part = g.op("RMS_NORM", d_state * n * F32, (g.view(bcdt, backend=backend),),
                    f"mamba_{name}_norm", backend=backend)
        normed.append(g.like("MUL", part, (b.w(f"{layer}.ssm_{name}_norm"),),
                             f"mamba_{name}_normed", backend))
    scan = g.op("SSM_SCAN", size + d_state * d_inner * F32,
                (external(f"cache_s_{index}"), g.view(x, backend=backend), dt,
                 *(g.view(t, backend=backend) for t in normed), inputs["rs_copy"]),
                "mamba_ssm_scan", backend=backend)
    g.op("CPY", 0, (g.view(scan, backend=backend), external(f"cache_s_{index}")),
         backend=backend)
    z = g.op("CONT", size, (g.view(zx, backend=backend),), "mamba_z_split", backend=tail_backend)
    skip = g.like("MUL", x, (b.w(f"{layer}.ssm_d"),), "mamba_x_d", backend)
    y = g.like("ADD", skip, (g.view(scan, backend=backend),), "mamba_y_add_d", backend)
    y = g.op("SWIGLU", size, (z, y), "mamba_y_swiglu_z", backend=backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.ssm_out"),
                                                      g.view(y, backend=backend)),
                "mamba_out_proj", backend=backend)
