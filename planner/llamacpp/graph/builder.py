"""The graph llama.cpp builds for one ubatch, as the families build it: the
:class:`Builder` that holds it, the inputs every graph starts with
(``llm_graph_context::build_inp_*``), the embeddings, a norm and the output head."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.llamacpp.allocator import Graph, Tensor, external
from planner.llamacpp.graph.shapes import GraphModel

if TYPE_CHECKING:
    from planner.llamacpp.graph.family import Family

F32 = 4


F16 = 2


I32 = 4


I64 = 8


@dataclass
class Builder:
    """The graph being built for one ubatch of ``n_tokens`` tokens with ``n_outputs``
    outputs over ``n_kv`` cache cells (``n_kv_swa`` in the sliding-window cache): each
    block runs on its backend in ``backend_of``, the output head on ``output_backend``,
    the inputs and token rows on ``input_backend``; ``family`` is the model's."""

    graph: Graph
    model: GraphModel
    family: Family
    n_tokens: int
    n_outputs: int
    n_kv: int
    n_kv_swa: int
    flash_attn: bool
    backend_of: Sequence[int]
    input_backend: int = 0
    output_backend: int = 0
    weights: dict[str, Tensor] = field(default_factory=dict)
    top_k: Tensor | None = None
    """The last indexer's top-k, which the next layers without an indexer may reuse."""
    shared_mask: Tensor | None = None
    """The last indexer's attention mask, which the next layers without an indexer may
    reuse."""

    def w(self, name: str) -> Tensor:
        tensor = self.weights.get(name)
        if tensor is None:
            tensor = self.weights[name] = external(name)
        return tensor

    def rows(self, tensor: Tensor) -> int:
        """Tokens in a [n_embd, tokens] f32 activation."""
        return tensor.nbytes // (self.model.n_embd * F32)


def token_inputs(b: Builder) -> dict[str, Tensor]:
    """The ubatch's tokens and embeddings, and a mixed batch's, which every graph's
    inputs start with."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = {"tokens": g.input("inp_tokens", n * I32, host),
              "embd": g.input("inp_embd", m.n_embd * n * F32, host)}
    if b.family.mixed_batch:
        inputs["mixed_tokens"] = g.input("inp_mixed_tokens", n * I32, host)
        inputs["mixed_slots"] = g.input("inp_mixed_slots", n * I64, host)
        inputs["mixed_embd"] = g.input("inp_mixed_embd", m.n_embd * n * F32, host)
    return inputs


def graph_inputs(b: Builder) -> dict[str, Tensor]:
    """The graph's inputs, which live on the host, in the order llama.cpp creates them."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = token_inputs(b)
    if any(block.recurrent is not None for block in m.blocks):
        inputs["rs_copy"] = g.input("rs_s_copy", 8 * I32, host)
    indexed = [block.attention for block in m.blocks
               if block.attention is not None and block.attention.indexer_heads] \
        if b.family.dsa_indexer else []
    if indexed:
        dim = indexed[0].indexer_dim
        inputs["k_rot"] = g.input("attn_inp_k_rot", dim * dim * F32, host)
    inputs["pos"] = g.input("inp_pos", n * I32 * b.family.positions_per_token, host)
    # Flash attention takes an f16 mask; without it the mask is f32 and V is cached
    # transposed, so its rows are set element by element (n_embd_v_gqa_max per token).
    mask = F16 if b.flash_attn else F32
    attention = [block.attention for block in m.blocks if block.attention is not None]
    v_rows = 1 if b.flash_attn else max((a.v_width for a in attention), default=1)
    if any(not a.cached for a in attention):
        inputs["mask_self"] = g.input("self_kq_mask", n * n * mask, host)
    attention = [a for a in attention if a.cached]
    full = [a for a in attention if not a.sliding]
    if full:
        inputs["k_idxs"] = g.input("attn_inp_k_idxs", n * I64, host)
        if indexed:
            inputs["k_idxs_lid"] = g.input("attn_inp_k_idxs_lid", n * I64, host)
        if any(not a.kv_lora or a.kv_b_width for a in full):
            inputs["v_idxs"] = g.input("attn_inp_v_idxs", n * v_rows * I64, host)
        # Each indexed layer's zero rows for its top-k mask are a constant of the graph,
        # placed with the inputs (a leaf), where the layer runs: the first before the
        # masks, the others after them, in the order ggml finds them.
        top_k = min(indexed[0].indexer_top_k, b.n_kv) if indexed else 0
        leaves = []
        for index, block in enumerate(m.blocks):
            if block.attention is not None and block.attention.indexer_heads \
                    and b.family.dsa_indexer:
                leaf = Tensor(f"zeros-{index}", top_k * n * F32,
                              backend=b.backend_of[index] if b.backend_of else host)
                inputs[f"zeros-{index}"] = leaf
                leaves.append(leaf)
        g.inputs.extend(leaves[:1])
        inputs["mask"] = g.input("attn_inp_kq_mask", b.n_kv * n * mask, host)
        if indexed:
            inputs["mask_lid"] = g.input("attn_inp_kq_mask_lid", b.n_kv * n * mask, host)
        g.inputs.extend(leaves[1:])
    if any(a.sliding for a in attention):
        inputs["k_idxs_swa"] = g.input("attn_inp_k_idxs_swa", n * I64, host)
        inputs["v_idxs_swa"] = g.input("attn_inp_v_idxs_swa", n * v_rows * I64, host)
        inputs["mask_swa"] = g.input("attn_inp_kq_mask_swa", b.n_kv_swa * n * mask, host)
    inputs["out_ids"] = g.input("out_ids", b.n_outputs * I32, host)
    return inputs


def embeddings(b: Builder, inputs: Mapping[str, Tensor], *, copy_on_host: bool = False
               ) -> Tensor:
    """build_inp_embd: the token rows (on the host, beside token_embd) and the mixed
    token/embedding branch, whose copy runs where the first layer does (on the host with
    ``copy_on_host``: a gather on the host comes between)."""
    g, m, n = b.graph, b.model, b.n_tokens
    size = m.n_embd * n * F32
    tok = b.w("token_embd.weight")
    # The mixed branch's copy has no weights: the scheduler runs it where the next node
    # with weights runs, the first layer, or the host where position embeddings follow
    # or where a gather on the host (qwen4exp's per-layer embedding) comes between.
    host = b.input_backend
    first = host if m.position_embedding or copy_on_host or not b.backend_of \
        else b.backend_of[0]
    embd = g.op("GET_ROWS", size, (tok, inputs["tokens"]), "embd", backend=host)
    if b.family.mixed_batch:
        rows = g.op("GET_ROWS", size, (tok, inputs["mixed_tokens"]), "mixed_rows",
                    backend=host)
        copy = g.op("DUP", size, (inputs["mixed_embd"],), "mixed_copy", backend=first)
        # set_rows returns a view of its destination, which nothing reads: the copy
        # stays allocated to the end of the graph.
        target = Tensor("mixed_set_rows", size, "SET_ROWS",
                        (rows, inputs["mixed_slots"], copy), view_src=copy, backend=first)
        g.nodes.append(target)
    if m.position_embedding:
        positions = g.op("GET_ROWS", size, (b.w("position_embd.weight"), inputs["pos"]),
                         "pos_embd", backend=host)
        # The sum has no weights: the scheduler runs it where the first layer runs.
        embd = g.like("ADD", embd, (positions,), "inpL",
                      b.backend_of[0] if b.backend_of else host)
    return embd


def norm(b: Builder, x: Tensor, name: str, backend: int,
          norm_backend: int | None = None) -> Tensor:
    g = b.graph
    normed = g.op("RMS_NORM", x.nbytes, (x,), f"norm-{name}",
                  backend=backend if norm_backend is None else norm_backend)
    return g.like("MUL", normed, (b.w(f"{name}.norm"),), f"{name}_norm", backend)


def output_head(b: Builder, x: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
    """The output norm and the logits of the ubatch's outputs, on the output backend;
    a family that keeps the output rows after the norm (the next-token head's input)
    gathers them there."""
    g, m = b.graph, b.model
    normed = norm(b, x, "output", b.output_backend)
    if b.family.rows_after_output_norm:
        normed = g.op("GET_ROWS", m.n_embd * b.n_outputs * F32, (normed, inputs["out_ids"]),
                      "result_norm", backend=b.output_backend)
    return logits(b, normed)


def logits(b: Builder, x: Tensor) -> Tensor:
    """The output projection of the normed rows ``x``: the graph's output."""
    result = b.graph.op("MUL_MAT", b.model.n_vocab * b.n_outputs * F32,
                        (b.w("output.weight"), x), "result_output", backend=b.output_backend)
    result.is_output = True
    return result
