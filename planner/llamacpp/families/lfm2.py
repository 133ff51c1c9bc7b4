"""``lfm2.cpp`` and ``lfm2moe.cpp``: short-convolution blocks (``shortconv.in_proj``,
``shortconv.conv``) beside attention blocks."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor, external
from planner.llamacpp.graph import F32, Builder, Family, ModelReader, RecurrentShape, register


@register
class Lfm2(Family):
    architectures = ("lfm2", "lfm2moe")

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        """A short convolution of a third of the input projection's width, over
        ``shortconv.l_cache - 1`` cached columns."""
        w = r.widths[index]
        if "shortconv.in_proj" not in w or "shortconv.conv" not in w:
            return None
        return RecurrentShape(w["shortconv.in_proj"] // (3 * r.n_embd), 0, 1, 0,
                              r.meta.count("shortconv.l_cache", minimum=1) - 1,
                              mixer="shortconv")

    def mixer(self, b: Builder, cur: Tensor, shape: RecurrentShape, index: int,
              inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
        return shortconv(b, cur, shape, index, inputs, backend, tail_backend)


def shortconv(b: Builder, cur: Tensor, ssm: RecurrentShape, index: int,
               inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """LFM2's short-convolution block (``build_shortconv_block``): the input projection
    into B, C and x, B times x convolved over the cached and new columns, gated by C, the
    output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    size = ssm.d_inner * n * F32
    bcx = g.op("MUL_MAT", 3 * size, (b.w(f"{layer}.shortconv.in_proj"), cur), "conv_in_proj",
               backend=backend)
    bx = g.op("MUL", size, (g.view(bcx, backend=backend), g.view(bcx, backend=backend)),
              "bx", backend=backend)
    conv_x = g.op("CONCAT", (ssm.d_conv + n) * ssm.d_inner * F32,
                  (g.view(bx, backend=backend),), "conv_x", backend=backend)
    g.op("CPY", 0, (g.view(conv_x, backend=backend), external(f"cache_r_{index}")),
         backend=backend)
    conv = g.op("SSM_CONV", size, (conv_x, b.w(f"{layer}.shortconv.conv")), "conv",
                backend=backend)
    y = g.like("MUL", conv, (g.view(bcx, backend=tail_backend),), "conv_gated", backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.shortconv.out_proj"), y),
                "conv_out_proj", backend=backend)
