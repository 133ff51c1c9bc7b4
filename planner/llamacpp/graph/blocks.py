"""The generic block builder: one transformer, recurrent or hybrid block as llama.cpp's
builders lay it out (the input norm, the attention or mixer, the residual, the
feed-forward network, the output rows the last block keeps), for every family that needs
nothing more."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor
from planner.llamacpp.graph.attention import attention_core, output_projection
from planner.llamacpp.graph.builder import F32, Builder, norm
from planner.llamacpp.graph.feed_forward import feed_forward
from planner.llamacpp.graph.recurrent import mamba2, tail_backend
from planner.llamacpp.graph.shapes import BlockShape, FeedForwardShape


def generic_block(b: Builder, x: Tensor, block: BlockShape, index: int, last: bool,
           inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    g, m = b.graph, b.model
    attn, ffn = block.attention, block.feed_forward
    entry = None
    if not block.weighted_norm and index and b.backend_of:
        entry = b.backend_of[index - 1]
    out_rows = b.n_outputs * m.n_embd * F32

    def rows(t: Tensor, name: str) -> Tensor:
        # The last layer keeps only the rows of the tokens that produce outputs.
        return g.op("GET_ROWS", out_rows * t.nbytes // (b.rows(t) * m.n_embd * F32)
                    if t.nbytes else 0, (t, inputs["out_ids"]), name, backend=backend)

    if block.recurrent is not None and attn is not None:
        # Falcon-H1: attention, then the mixer on the input normed again, their sum added
        # to the residual before the last layer keeps its output rows.
        core = attention_core(b, norm(b, x, f"blk.{index}.attn", backend), attn, index,
                               inputs, backend)
        projected = output_projection(b, core, attn, index, backend)
        mixed = mamba2(b, norm(b, x, f"blk.{index}.attn", backend), block.recurrent,
                        index, inputs, backend, tail_backend(b, index))
        cur = g.like("ADD", projected, (mixed,), f"attn_ssm-{index}", backend)
        x = g.like("ADD", cur, (x,), f"ffn_inp-{index}", backend)
        if last:
            x = rows(x, "ffn_inp_rows")
        if ffn is None:
            return x
        out = feed_forward(b, norm(b, x, f"blk.{index}.ffn", backend), ffn, index, backend)
        return g.like("ADD", out, (x,), f"l_out-{index}", backend)
    if block.recurrent is not None:
        normed = norm(b, x, f"blk.{index}.attn", backend, entry)
        cur = b.family.mixer(b, normed, block.recurrent, index, inputs, backend,
                             tail_backend(b, index))
        residual = residual_input(b, x, normed, backend)
        if last:
            cur = rows(cur, "mamba_out_rows")
            residual = rows(residual, "inp_rows")
        x = g.like("ADD", cur, (scaled_residual(b, residual, backend),), f"l_out-{index}",
                   backend)
        if ffn is None:
            return x
        return ffn_block(b, x, ffn, index, backend)
    if attn is None:
        if ffn is None:
            return x
        cur = feed_forward(b, norm(b, x, f"blk.{index}.ffn", backend), ffn, index, backend)
        return g.like("ADD", cur, (x,), f"l_out-{index}", backend)
    normed = norm(b, x, f"blk.{index}.attn", backend, entry)
    core = b.family.attention_core(b, normed, attn, index, inputs, backend)
    if attn.parallel == "ffn_residual_first" and ffn is not None:
        # (ffn + inpL) + attn_out, in the order ggml walks it: the network on the normed
        # input's output rows, the residual's rows and their sum, then the attention's
        # output projected and its rows.
        ffn_out = feed_forward(b, rows(normed, "attn_norm_rows") if last else normed, ffn,
                                index, backend)
        cur = g.like("ADD", ffn_out, (rows(x, "inp_rows") if last else x,),
                     f"ffn_inp-{index}", backend)
        projected = output_projection(b, core, attn, index, backend)
        if last:
            projected = rows(projected, "attn_out_rows")
        return g.like("ADD", cur, (projected,), f"l_out-{index}", backend)
    if attn.parallel and ffn is not None:
        if last:
            core = rows(core, "kqv_rows")
            normed = rows(normed, "attn_norm_rows")
            x = rows(x, "inp_rows")
        if attn.parallel == "ffn_after":
            projected = output_projection(b, core, attn, index, backend)
            ffn_out = feed_forward(b, normed, ffn, index, backend)
        else:
            ffn_out = feed_forward(b, normed, ffn, index, backend)
            projected = output_projection(b, core, attn, index, backend)
        cur = g.like("ADD", ffn_out, (projected,), f"ffn_attn-{index}", backend)
        return g.like("ADD", cur, (x,), f"l_out-{index}", backend)
    cur = output_projection(b, core, attn, index, backend)
    residual = residual_input(b, x, normed, backend)
    if last:
        cur = rows(cur, "attn_out_rows")
        residual = rows(residual, "inp_rows")
    x = g.like("ADD", cur, (scaled_residual(b, residual, backend),), f"ffn_inp-{index}",
               backend)
    if ffn is None:
        return x
    return ffn_block(b, x, ffn, index, backend)


def residual_input(b: Builder, x: Tensor, normed: Tensor, backend: int) -> Tensor:
    """What a block adds its attention (or mixer) output to: its input, or its normed
    input where the model's residual is the norm's output (MiniMax-01)."""
    return normed if b.family.residual_from_norm else x


def scaled_residual(b: Builder, residual: Tensor, backend: int) -> Tensor:
    if not b.family.residual_from_norm:
        return residual
    return b.graph.like("SCALE", residual, (), "residual_scaled", backend)


def ffn_block(b: Builder, x: Tensor, ffn: FeedForwardShape, index: int,
               backend: int) -> Tensor:
    """The feed-forward half of a block: its norm, the network, the residual sum."""
    normed = norm(b, x, f"blk.{index}.ffn", backend)
    out = feed_forward(b, normed, ffn, index, backend)
    residual = scaled_residual(b, residual_input(b, x, normed, backend), backend)
    return b.graph.like("ADD", out, (residual,), f"l_out-{index}", backend)
