"""``hrm-text.cpp``: HRM-Text's stacks of blocks run in cycles: ``h_cycles`` times,
``l_cycles`` low-level stacks on the matrices of the first stack's blocks, then one
high-level stack on the next stack's; each cycle runs its own cache slots (the file's
blocks, with their own scales and caches)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Graph, Tensor, external
from planner.llamacpp.graph import (
    F32,
    BlockShape,
    Builder,
    Family,
    ModelReader,
    embeddings,
    graph_inputs,
    register,
)
from planner.llamacpp.graph.feed_forward import mlp


@dataclass(frozen=True, slots=True)
class HrmStacks:
    """Layers per stack, the high-level and low-level cycles, and whether the Q, K and V
    projections add the stack's biases and each slot scales its projections by its own
    scales (``blk.N.attn_q.scale``)."""

    layers_per_stack: int
    h_cycles: int
    l_cycles: int
    qkv_bias: bool = False
    slot_scales: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HrmStacks:
        return cls(**data)


@register
class HrmText(Family):
    architectures = ("hrm_text",)
    fields_type = HrmStacks

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> HrmStacks:
        """Each of the stacks and cycles at least one, and the file's blocks exactly the
        cache slots they make (llama.cpp asserts it)."""
        meta, n_layer = r.meta, r.layer_count
        lps = meta.count("hrm.layers_per_stack", minimum=1, maximum=n_layer)
        h_cycles = meta.count("hrm.h_cycles", minimum=1, maximum=n_layer)
        l_cycles = meta.count("hrm.l_cycles", minimum=1, maximum=n_layer)
        if lps * h_cycles * (l_cycles + 1) != n_layer:
            raise meta.bad("hrm.l_cycles", f"makes {lps} x {h_cycles} x ({l_cycles} + 1) = "
                           f"{lps * h_cycles * (l_cycles + 1):,} cache slots, but the model "
                           f"has {n_layer} blocks (llama.cpp asserts they are equal)",
                           l_cycles)
        return HrmStacks(lps, h_cycles, l_cycles, "blk.0.attn_q.bias" in r.names,
                         "blk.0.attn_q.scale" in r.names)

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        r.require(blocks, "attention", "attention.head_count",
                  lambda block: block.attention is not None)
        r.require(blocks, "a feed-forward network", "feed_forward_length",
                  lambda block: block.feed_forward is not None)

    def build(self, b: Builder) -> Graph:
        inputs = graph_inputs(b)
        return hrm_graph(b, embeddings(b, inputs), inputs, b.output_backend)


def hrm_matrix_block(stacks: HrmStacks, slot: int) -> int:
    """The block whose matrices HRM-Text's slot (cache slot, block index) runs: the first
    stack's blocks for a low-level cycle, the second stack's for the high-level one
    (``llama_model_hrm_text::load_arch_tensors``)."""
    lps, l_cycles = stacks.layers_per_stack, stacks.l_cycles
    cycle = (slot // lps) % (l_cycles + 1)
    return (lps if cycle == l_cycles else 0) + slot % lps


def hrm_graph(b: Builder, embd: Tensor, inputs: Mapping[str, Tensor],
               output_backend: int) -> Graph:
    """HRM-Text's graph (hrm-text.cpp): ``h_cycles`` times, ``l_cycles`` low-level stacks
    on ``zH + zL`` then a high-level one; each slot's matrices are those of blocks 0 or 1
    (on their devices), its scales and cache its own. The scheduler runs each operation
    with a weight where that weight lives (a slot's scales and cache on the slot's device,
    the matrices and biases on theirs) and every other one where the operation before it
    ran (``ggml_backend_sched_split_graph``, expanding down): a slot on another device
    than its matrices crosses between the two at each projection, its scale and its bias,
    at the cache and the attention, and back."""
    g, m, n = b.graph, b.model, b.n_tokens
    size = m.n_embd * n * F32
    lps = m.fields.layers_per_stack
    at = b.backend_of[0]

    def run(x: Tensor, slot: int) -> Tensor:
        nonlocal at
        block = hrm_matrix_block(m.fields, slot)
        attn, ffn = m.blocks[block].attention, m.blocks[block].feed_forward
        assert attn is not None and ffn is not None
        mats, own = b.backend_of[block], b.backend_of[slot]
        layer = f"blk.{block}"
        normed = g.op("RMS_NORM", size, (x,), f"attn_norm-{slot}", backend=at)

        def project(name: str, width: int) -> Tensor:
            nonlocal at
            out = g.op("MUL_MAT", width * n * F32, (b.w(f"{layer}.{name}"), normed), name,
                       backend=mats)
            at = mats
            if m.fields.slot_scales:
                out = g.like("MUL", out, (b.w(f"blk.{slot}.{name}.scale"),), f"{name}_s",
                             own)
                at = own
            if m.fields.qkv_bias:
                out = g.like("ADD", out, (b.w(f"{layer}.{name}.bias"),), f"{name}_b", mats)
                at = mats
            return out

        q = project("q", attn.q_width)
        q = g.op("ROPE", q.nbytes, (g.view(q, backend=at), inputs["pos"]), "Qcur",
                 backend=at)
        q_at = at
        v = project("v", attn.v_width)
        v_at = at
        k = project("k", attn.k_width)
        k = g.op("ROPE", k.nbytes, (g.view(k, backend=at), inputs["pos"]), "Kcur",
                 backend=at)
        cache_k, cache_v = external(f"cache_k_{slot}"), external(f"cache_v_{slot}")
        g.op("SET_ROWS", 0, (g.view(k, backend=at), inputs["k_idxs"], cache_k), backend=own)
        g.op("SET_ROWS", 0, (g.view(v, backend=v_at), inputs["v_idxs"], cache_v),
             backend=own)
        at = own
        out_size = attn.out_width * n * F32
        if b.flash_attn:
            core = g.op("FLASH_ATTN_EXT", out_size,
                        (g.view(q, backend=q_at), cache_k, cache_v, inputs["mask"]), "kqv",
                        backend=at)
        else:
            scores = g.op("MUL_MAT", b.n_kv * n * attn.n_head * F32,
                          (cache_k, g.view(q, backend=q_at)), "kq", backend=at)
            probs = g.like("SOFT_MAX", scores, (inputs["mask"],), "kq_soft_max", at)
            kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=at)
            core = g.op("CONT", out_size, (g.view(kqv, backend=at),), "kqv_merged_cont",
                        backend=at)
        core = g.view(core, "kqv_out", backend=at)
        gate = g.op("MUL_MAT", out_size, (b.w(f"{layer}.attn_gate"), normed), "attn_gate",
                    backend=mats)
        at = mats
        gate = g.like("UNARY", gate, (), "attn_gate_sigmoid", at)
        gated = g.op("MUL", out_size, (core, gate), "attn_gated", backend=at)
        out = g.op("MUL_MAT", size, (b.w(f"{layer}.wo"), gated), "attn_out", backend=mats)
        if m.fields.slot_scales:
            out = g.like("MUL", out, (b.w(f"blk.{slot}.wo.scale"),), "attn_out_s", own)
            at = own
        x = g.like("ADD", out, (x,), f"attn_add-{slot}", at)
        normed = g.op("RMS_NORM", size, (x,), f"ffn_norm-{slot}", backend=at)
        out = mlp(b, normed, ffn, layer, mats)
        at = mats
        return g.like("ADD", out, (x,), f"l_out-{slot}", at)

    def stack(x: Tensor, first: int) -> Tensor:
        for slot in range(first, first + lps):
            x = run(x, slot)
        return g.op("RMS_NORM", size, (x,), f"stack_norm-{first}", backend=at)

    z_h, z_l = embd, b.w("hrm.z_l_init")
    slot = 0
    for _ in range(m.fields.h_cycles):
        for _ in range(m.fields.l_cycles):
            if slot == 0:
                # zH + zL_init: the sum reads a weight, so it runs where the weight lives
                # (with block 0's).
                entry = g.like("ADD", z_h, (z_l,), "hrm_in", b.backend_of[0])
            else:
                entry = g.like("ADD", z_h, (z_l,), "hrm_in", at)
            z_l = stack(entry, slot)
            slot += lps
        z_h = stack(g.like("ADD", z_h, (z_l,), "hrm_in", at), slot)
        slot += lps
    rows = g.op("GET_ROWS", m.n_embd * b.n_outputs * F32, (z_h, inputs["out_ids"]),
                "result_norm", backend=at)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), rows),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g
