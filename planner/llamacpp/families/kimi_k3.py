"""``kimi-k3.cpp``: Kimi Linear's blocks (KDA layers between latent-attention layers
whose rope part is not roped, the attention's output gated) with cross-layer residual
attention (``attn_res.block_size``) and the SiTU activation in its networks and experts
(a scaled tanh times a sigmoid, in place)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Tensor
from planner.llamacpp.families.kimi_linear import KimiLinear
from planner.llamacpp.graph import (
    F32,
    Activation,
    BlockShape,
    Builder,
    Family,
    ModelReader,
    feed_forward,
    kda,
    norm,
    output_projection,
    register,
    tail_backend,
)


@dataclass(frozen=True, slots=True)
class ResidualStack:
    """Every ``block`` blocks, the block's input is banked for the cross-layer residual
    attention."""

    block: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResidualStack:
        return cls(**data)


@register
class KimiK3(KimiLinear):
    architectures = ("kimi-k3",)
    fields_type = ResidualStack
    activation = Activation(kind="situ")

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> ResidualStack:
        return ResidualStack(r.meta.count("attn_res.block_size", minimum=1))

    def blocks(self, b: Builder, x: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
        return stacked_blocks(self, b, x, inputs)


def residual_mix(b: Builder, stack: list[Tensor], x: Tensor, name: str,
                  backend: int, norm_backend: int) -> Tensor:
    """Kimi K3's ``res_mix``: the banked inputs and the running sum ``x`` each scored (an
    RMS norm, a weighted row sum), a softmax over the scores, the banked inputs mixed by
    their weights (one ``DSV4_HC_PRE``) plus ``x`` times its own. The norms have no
    weights: the scheduler runs them where the previous node ran (``norm_backend``)."""
    g, n = b.graph, b.rows(x)
    bank = stack[-1]
    scores = g.op("RMS_NORM", bank.nbytes, (bank,), "res_stack_norm", backend=norm_backend)
    scores = g.like("MUL", scores, (b.w(f"{name}.res_score"),), "res_stack_scored", backend)
    scores = g.op("SUM_ROWS", len(stack) * n * F32, (scores,), "res_stack_score",
                  backend=backend)
    own = g.op("RMS_NORM", x.nbytes, (x,), "res_cur_norm", backend=norm_backend)
    own = g.like("MUL", own, (b.w(f"{name}.res_score"),), "res_cur_scored", backend)
    own = g.op("SUM_ROWS", n * F32, (own,), "res_cur_score", backend=backend)
    probs = g.op("CONCAT", (len(stack) + 1) * n * F32, (scores, own), "res_scores",
                 backend=backend)
    probs = g.like("SOFT_MAX", probs, (), "res_probs", backend)
    weights = g.op("CONT", len(stack) * n * F32, (g.view(probs, backend=backend),),
                   "res_probs_stack", backend=backend)
    mixed = g.op("DSV4_HC_PRE", x.nbytes, (bank, weights), "res_mixed", backend=backend)
    weight = g.op("CONT", n * F32, (g.view(probs, backend=backend),), "res_probs_cur",
                  backend=backend)
    scaled = g.op("MUL", x.nbytes, (x, weight), "res_cur", layout=x.layout, backend=backend)
    return g.like("ADD", mixed, (scaled,), "res_mix", backend)


def stacked_blocks(family: Family, b: Builder, x: Tensor,
                   inputs: Mapping[str, Tensor]) -> Tensor:
    """Kimi K3's blocks with cross-layer residual attention (``res_push``, ``res_mix``):
    every ``block`` blocks (the family's field) the block's input is banked (concatenated to
    the bank) and the running sum restarts from the attention's output; each half reads a
    mix of the bank and the running sum; the output reads one too."""
    g, m = b.graph, b.model
    backends, output_backend = b.backend_of, b.output_backend
    stack: list[Tensor] = []
    for index, block in enumerate(m.blocks):
        backend = backends[index]
        layer = f"blk.{index}"
        previous = backends[index - 1] if index else backend
        cur = residual_mix(b, stack, x, f"{layer}.attn", backend, previous) if stack else x
        banked = index % m.fields.block == 0
        if banked:
            # The bank holds a reshaped view of the input: a tensor of its own, which a
            # device reading it from another one copies apart from the input itself.
            checkpoint = g.view(x, "res_checkpoint", backend=x.backend)
            stack.append(checkpoint if not stack else g.op(
                "CONCAT", stack[-1].nbytes + x.nbytes, (stack[-1], checkpoint), "res_stack",
                backend=backend))
        normed = norm(b, cur, f"{layer}.attn", backend)
        if block.recurrent is not None:
            cur = kda(b, normed, block.recurrent, index, inputs, backend,
                       tail_backend(b, index))
        elif block.attention is not None:
            core = family.attention_core(b, normed, block.attention, index, inputs,
                                         backend)
            cur = output_projection(b, core, block.attention, index, backend)
        x = cur if banked else g.like("ADD", x, (cur,), f"prefix_sum_attn-{index}", backend)
        if block.feed_forward is None:
            continue
        cur = residual_mix(b, stack, x, f"{layer}.ffn", backend, backend)
        out = feed_forward(b, norm(b, cur, f"{layer}.ffn", backend), block.feed_forward,
                            index, backend)
        x = g.like("ADD", x, (out,), f"l_out-{index}", backend)
    if stack:
        x = residual_mix(b, stack, x, "output", output_backend, backends[-1])
    return g.op("GET_ROWS", m.n_embd * b.n_outputs * F32, (x, inputs["out_ids"]),
                "out_rows", backend=output_backend)
