"""The graph llama.cpp builds for one ubatch, tensor by tensor, for
:mod:`planner.compute_graph` to allocate.

A model is described by its :class:`GraphModel`: the embedding width, the vocabulary and
each block's attention, feed-forward network or mixture of experts, read from the GGUF
metadata and tensor table by :func:`graph_model` (projection widths from the tensors'
element counts). :func:`build_graph` lays out the tensors in the order llama.cpp's graph
builders create them (``llm_graph_context``: ``build_inp_embd``, ``build_qkv``,
``build_attn``, ``build_ffn``, ``build_moe_ffn``, the output head), with the sizes they
have at ``n_tokens`` tokens and ``n_kv`` cache cells, and which of them an element-wise
operation may overwrite in place. :func:`schedule` adds what ggml's scheduler adds when
the layers are split over backends: copies of the tensors a backend reads from another,
kept four times over with pipeline parallelism.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.compute_graph import Graph, Tensor, buffer_sizes, external
from planner.models.gguf_metadata import GgufMetadata
from planner.models.layer_memory import ModelMemory

F32 = 4
F16 = 2
I32 = 4
I64 = 8

# Blocks that run the feed-forward network beside the attention, on the same normed input
# (llama.cpp's builders): the network before the attention's output projection, or after.
FFN_BEFORE_OUTPUT_PROJECTION = frozenset({"command-r", "cohere2", "cohere2moe", "falcon",
                                          "plamo"})
# Of those, the blocks that add the residual to the network's output before the
# attention's (``(ffn + inpL) + attn_out``; falcon and plamo add the attention's first): the
# graph keeps the residual's output rows, then projects the attention's output.
RESIDUAL_BEFORE_ATTENTION = frozenset({"command-r", "cohere2", "cohere2moe"})
FFN_AFTER_OUTPUT_PROJECTION = frozenset({"phi2"})
# Latent attention without rotary embedding on its rope part (Kimi's MLA).
LATENT_WITHOUT_ROPE = frozenset({"kimi-linear", "kimi-k3"})
# Multi-scale sparse attention (MiniMax-M3), and the positions its indexer covers when
# llama.cpp reserves the graph (get_n_pos on an empty cache: at least 256).
MSA_INDEXER = frozenset({"minimax-m3"})
MSA_MIN_POSITIONS = 256
# Sparse attention whose lightning indexer picks each token's top-k cells
# (llm_graph_context::build_attn for DSA); glm5-next and qwen4exp pool their keys instead.
DSA_INDEXER = frozenset({"deepseek32", "glm-dsa", "hy_v4", "dots3note"})
# llm_arch_supports_mixed_batch: the architectures without the mixed token/embedding
# input branch.
NO_MIXED_BATCH = frozenset({"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash",
                            "gemma4-assistant"})
# Architectures that rope only their sliding-window layers: the full-attention layers take
# no positions (cohere2.cpp; cohere2moe.cpp ropes its leading dense layers too).
ROPE_ON_SLIDING_ONLY = frozenset({"cohere2", "cohere2moe"})
# Architectures whose recurrent blocks are Mamba-2 mixers (build_mamba2_layer), and those
# whose are Mamba-1 mixers (build_mamba_layer).
MAMBA2 = frozenset({"mamba2", "nemotron_h", "nemotron_h_moe", "granitehybrid"})
MAMBA1 = frozenset({"mamba", "jamba"})
# Architectures whose recurrent blocks are lightning attention layers (MiniMax-01).
LIGHTNING = frozenset({"minimax-01"})
# Architectures whose recurrent blocks are PLaMo 2's Mamba mixers.
PLAMO2_MAMBA = frozenset({"plamo2"})
# A SwiGLU limit (swiglu_clamp_exp, swiglu_clamp_shexp) clamps the activation in place
# (build_ffn, build_moe_ffn), but for these architectures, whose limited SwiGLU is one
# fused operation like the unlimited one: for a dense network or shared expert, and for
# the routed experts.
FUSED_CLAMP = frozenset({"deepseek4", "glm5-next"})
FUSED_CLAMP_EXPERTS = FUSED_CLAMP | {"maple", "hy_v4"}
# Architectures whose recurrent blocks are Kimi delta attention layers (kimi-linear's
# builder), and those whose are gated delta-net layers with a joint Q, K, V projection
# (qwen35's builder), both on build_delta_net_base.
KDA = frozenset({"kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next"})
DELTA_NET = frozenset({"qwen35", "qwen35moe", "qwen3next"})
# Blocks that run attention and a Mamba-2 mixer side by side on the same input and add
# them (Falcon-H1).
ATTENTION_BESIDE_MIXER = frozenset({"falcon-h1"})
# Builders that give their blocks no feed-forward multiplication even when the file has
# experts (refact's builds build_ffn without weights).
NO_FFN_WEIGHTS = frozenset({"refact"})
# Architectures that keep the output rows after the output norm (h_nextn, the next-token
# head's input; llama.cpp's default embeddings_nextn_masked = false), not in the last block.
ROWS_AFTER_OUTPUT_NORM = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "gemma4", "glm-dsa",
    "glm4moe", "glm5-next", "hy_v3", "mimo2", "nemotron_h_moe", "nemotron_h", "gpt-oss",
    "qwen35", "qwen35moe", "qwen3next", "qwen4exp", "step35"})
# Architectures whose residual is hyper-connection streams with their own graph here.
HYPER_CONNECTIONS = frozenset({"hy_v4", "deepseek4"})
# Manifold-constrained hyper-connections on ggml's fused DSV4_HC operations, each stream
# written back a mix of all of them, around blocks of nope latent attention whose indexer
# scores keys pooled per ``kpool`` cells (glm5-next.cpp).
POOLED_INDEXER_HYPER_CONNECTIONS = frozenset({"glm5-next"})
# DeepSeek-V4: compressed attention (per-layer compress_ratios) and a graph of its own.
COMPRESSED_ATTENTION = frozenset({"deepseek4"})
# qwen4exp.cpp: hyper-connection streams mixed by low-rank gates, a per-layer n-gram
# embedding (PLE) on one linear layer, gated delta-net linear layers and full-attention
# layers whose sparse attention (QSA) scores blocks of pooled indexer keys.
QWEN4EXP = frozenset({"qwen4exp"})
# Kimi K3: cross-layer residual attention (attn_res.block_size) and the SiTU activation.
RESIDUAL_STACK = frozenset({"kimi-k3"})
SITU = frozenset({"kimi-k3"})
# Architectures whose blocks add each half's output to the normed input, scaled.
RESIDUAL_FROM_NORM = frozenset({"minimax-01"})
# Architectures whose blocks norm their input without weights (olmo.cpp, talkie.cpp).
UNWEIGHTED_INPUT_NORM = frozenset({"olmo", "talkie"})
# Architectures that add the normed embeddings, scaled, to every block's output.
EMBEDDING_SKIP = frozenset({"talkie"})
# Blocks that run a dense feed-forward network beside the experts on the same normed input
# and add the two (grok's builder: the experts first, then the dense network while the
# experts' sum is held).
DENSE_BESIDE_EXPERTS = frozenset({"grok"})


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """One block's attention: the widths its projections produce per token, and whether
    it reads the sliding-window cache."""

    q_width: int
    """The query projection's output (with the gate, for gated attention)."""
    k_width: int
    v_width: int
    out_width: int
    """The attention's output before the output projection (heads x value head size),
    which is also the roped query's width."""
    n_head: int
    sliding: bool = False
    fused_qkv: bool = False
    parallel: str = ""
    """A parallel block: "ffn_first" (the feed-forward network before the output
    projection), "ffn_residual_first" (the network, its sum with the residual, then the
    output projection) or "ffn_after"; "" for a sequential block."""
    kv_lora: int = 0
    """Latent attention (MLA, absorbed): the compressed KV width; 0 for plain attention.
    ``q_width`` is then the query heads' nope + rope, ``k_width`` the rope part."""
    q_lora: int = 0
    output_gate: bool = False
    """The attention's output is gated by a sigmoid of its own projection (Kimi K3)."""
    kv_b_width: int = 0
    """Latent attention without absorption (MiniCPM3): the heads' decompressed K nope and
    V width, cached as plain K and V; 0 for absorbed latent attention."""
    cached: bool = True
    """False for an encoder or a diffusion model: K and V go straight to the attention."""
    rope: bool = True
    """False where learned position embeddings replace rotary ones (GPT-2, MPT, ...)."""
    indexer_heads: int = 0
    """A sparse attention's lightning indexer (DSA): its heads, head size and top-k."""
    indexer_dim: int = 0
    indexer_top_k: int = 0
    msa_block: int = 0
    """Multi-scale sparse attention (MiniMax-M3): the indexer's position block; the
    indexer's heads, head size and top-k blocks are the fields above."""
    indexer_kpool: int = 0
    """glm5-next's indexer: the cells pooled into one key (its heads, head size and top-k
    cells are the fields above); 0 on a layer that reuses the last indexer's selection."""
    indexer_kpool_tail: bool = False
    """The selection also keeps each token's incomplete last pool (kpool_select_tail)."""
    output_groups: int = 0
    """DeepSeek-V4's grouped low-rank output projection: its groups and their rank."""
    output_lora: int = 0


@dataclass(frozen=True, slots=True)
class FeedForwardShape:
    """One block's feed-forward network, or mixture of experts when ``n_expert``."""

    n_ff: int
    gated: bool = True
    fused_up: bool = False
    """The up projection yields gate and up together (a GLU on one tensor)."""
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_shexp: int = 0
    norm_weights: bool = False
    n_ff_dense: int = 0
    """A dense network run beside the experts (after them) and added to their sum."""
    clamped: bool = False
    """The gated activation is clamped (a ``swiglu_clamp`` limit) and computed in place:
    SiLU of the gate, both clamped, their product, instead of one SwiGLU."""
    shexp_clamped: bool = False
    """The shared expert's activation is clamped so."""
    activation: str = "swiglu"
    """"situ" for Kimi K3's gate (scaled tanh times sigmoid, computed in place), else
    SwiGLU (or the ungated activation)."""
    n_latent: int = 0
    """A latent mixture of experts (Kimi K3): the routed experts run at this width,
    projected down from the input and (normed) back up; 0 at the embedding width."""


@dataclass(frozen=True, slots=True)
class RecurrentShape:
    """One block's recurrent mixer: inner width, state size, groups, heads (Mamba-1: the
    time step's rank) and convolution kernel. ``mixer`` "mamba" with ``version`` 2 for
    ``build_mamba2_layer``, 1 for ``build_mamba_layer``; "delta_net" for a gated
    delta-net layer (``build_delta_net_base``: the key heads are the groups, the value
    heads the heads, ``d_state`` each key head's size); "kda" for Kimi delta attention
    (``d_inner`` its heads' width, ``d_state`` a head's size); "shortconv" for LFM2's
    short convolution (``d_inner`` the convolved width, ``d_conv`` the cached columns);
    "plamo2" for PLaMo 2's Mamba mixer (``n_head`` heads); "lightning" for MiniMax-01's
    lightning attention (``n_head`` heads of ``d_state``, ``d_inner`` its gate's width)."""

    d_inner: int
    d_state: int
    n_group: int
    n_head: int
    d_conv: int
    norm: bool = True
    """Mamba-2: the grouped norm of the gated output. Mamba-1: RMS norms of dt, B and C."""
    version: int = 2
    mixer: str = "mamba"
    decay_rank: int = 0
    """KDA: the decay gate's low-rank width (its projection in two), 0 for one projection."""
    gate_rank: int = 0
    """KDA: the output gate's low-rank width, 0 for one projection."""
    dt_rank: int = 0
    """PLaMo 2: the time step's low-rank width (projected with B and C)."""


@dataclass(frozen=True, slots=True)
class BlockShape:
    attention: AttentionShape | None
    feed_forward: FeedForwardShape | None
    recurrent: RecurrentShape | None = None
    weighted_norm: bool = True
    """The input norm has weights. An unweighted one is not pinned to the block's device
    (llama.cpp names only a weighted norm for that): the scheduler runs it where the
    previous block ran."""


@dataclass(frozen=True, slots=True)
class GraphModel:
    """What the compute graph of a model depends on."""

    n_embd: int
    n_vocab: int
    blocks: tuple[BlockShape, ...]
    mixed_batch: bool = True
    """llama.cpp builds the mixed token/embedding input branch (most architectures)."""
    position_embedding: bool = False
    """The model adds learned position embeddings to the token rows, on the host."""
    positions_per_token: int = 1
    embedding_skip: bool = False
    """The normed embeddings are kept to the end and each block adds them, scaled, to its
    output (talkie)."""
    residual_stack_block: int = 0
    """Kimi K3's cross-layer residual attention: every this many blocks the block's input
    is banked, and each half of a block (and the output) reads a softmax mix of the banked
    inputs and the running sum; 0 for a plain residual stream."""
    residual_from_norm: bool = False
    """Each half of a block adds its output to its normed input, scaled, not to its input
    (MiniMax-01)."""
    rows_after_output_norm: bool = False
    """The rows of the tokens that produce outputs are kept after the output norm (the
    norm is the next-token head's input), not in the last block."""
    hc_streams: int = 0
    """Hyper-connections (hy-v4.cpp's iHC): the residual is this many streams per token,
    each half of a block reads their weighted sum and writes each stream back; 0 for a
    plain residual."""
    hc_mixed: bool = False
    """The hyper-connections are glm5-next's: fused operations, each stream written back
    a mix of all the streams, around pooled-indexer attention and KDA blocks."""
    compress_ratios: tuple[int, ...] = ()
    """DeepSeek-V4 (deepseek4.cpp): each layer's KV compression ratio (0, 4 for CSA
    through the lightning indexer, 128 for HCA); its graph is its own (``hc_streams``
    residual streams, compressed attention). Empty for every other architecture."""
    hash_routed_layers: int = 0
    """DeepSeek-V4's leading layers that pick their experts by token id."""
    low_rank_streams: int = 0
    """qwen4exp's hyper-connections: the residual is this many streams per token, each
    half of a block reads their gated mean (``build_hc_mix``, the gates from a low-rank
    pair of projections) and scatters its output back into each stream
    (``build_hc_combine``); 0 for a plain residual."""
    low_rank_width: int = 0
    """The width of the low-rank pair the mixers' gates come from."""
    ple_block: int = -1
    """qwen4exp's per-layer n-gram embedding (``build_ple``): the block that adds it to
    the streams (one at most), the rows each token gathers, each row's width, the
    depthwise convolution's kernel and its dilation (the n-gram size)."""
    ple_heads: int = 0
    ple_width: int = 0
    ple_kernel: int = 0
    ple_dilation: int = 0
    qsa_pool: int = 0
    """qwen4exp's sparse attention (``build_qsa_sel``): indexer keys pooled in blocks of
    this many cells, its query heads and head size, and the top-k budget in cells; 0 for
    dense attention."""
    qsa_heads: int = 0
    qsa_dim: int = 0
    qsa_top_k: int = 0
    hrm_layers_per_stack: int = 0
    """HRM-Text's recurrent stacks (hrm-text.cpp): layers per stack, and the cycles. Each
    cycle runs its own cache slots (blocks), ``l_cycles`` low-level stacks on the matrices
    of the first stack's blocks then one high-level stack on the next stack's; 0 for a
    plain stack of blocks."""
    hrm_h_cycles: int = 0
    hrm_l_cycles: int = 0
    hrm_qkv_bias: bool = False
    """HRM-Text's Q, K and V projections add the (shared) stack's biases."""
    hrm_slot_scales: bool = False
    """Each HRM-Text slot scales its Q, K, V and output projections by its own scales
    (``blk.N.attn_q.scale``), stored with the slot's block, not with the matrices."""

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphModel:
        values = dict(data)
        values["compress_ratios"] = tuple(values.get("compress_ratios", ()))
        values["blocks"] = tuple(
            BlockShape(AttentionShape(**block["attention"]) if block["attention"] else None,
                       FeedForwardShape(**block["feed_forward"]) if block["feed_forward"]
                       else None,
                       RecurrentShape(**block["recurrent"]) if block.get("recurrent")
                       else None, block.get("weighted_norm", True))
            for block in values["blocks"])
        return cls(**values)


@dataclass
class _Builder:
    graph: Graph
    model: GraphModel
    n_tokens: int
    n_outputs: int
    n_kv: int
    n_kv_swa: int
    flash_attn: bool
    backend_of: Sequence[int]
    input_backend: int = 0
    weights: dict[str, Tensor] = field(default_factory=dict)
    top_k: Tensor | None = None
    """The last indexer's top-k, which the next layers without an indexer reuse (hy_v4's
    shared-indexer layers)."""
    kpool_mask: Tensor | None = None
    """The last pooled indexer's mask, which glm5-next's shared-indexer layers reuse."""

    def w(self, name: str) -> Tensor:
        tensor = self.weights.get(name)
        if tensor is None:
            tensor = self.weights[name] = external(name)
        return tensor

    def rows(self, tensor: Tensor) -> int:
        """Tokens in a [n_embd, tokens] f32 activation."""
        return tensor.nbytes // (self.model.n_embd * F32)


def _token_inputs(b: _Builder) -> dict[str, Tensor]:
    """The ubatch's tokens and embeddings, and a mixed batch's, which every graph's
    inputs start with."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = {"tokens": g.input("inp_tokens", n * I32, host),
              "embd": g.input("inp_embd", m.n_embd * n * F32, host)}
    if m.mixed_batch:
        inputs["mixed_tokens"] = g.input("inp_mixed_tokens", n * I32, host)
        inputs["mixed_slots"] = g.input("inp_mixed_slots", n * I64, host)
        inputs["mixed_embd"] = g.input("inp_mixed_embd", m.n_embd * n * F32, host)
    return inputs


def _latent_values(b: _Builder, attn: AttentionShape, out: Tensor, layer: str, n: int,
                   backend: int) -> Tensor:
    """Latent attention's output decompressed: each head's latent values through
    ``v_b``, made contiguous as the attention's output rows (``build_attn_mla``)."""
    g = b.graph
    values = g.op("MUL_MAT", attn.out_width * n * F32,
                  (b.w(f"{layer}.v_b"), g.view(out, backend=backend)), "fattn_mla",
                  backend=backend)
    merged = g.op("CONT", attn.out_width * n * F32, (g.view(values, backend=backend),),
                  "kqv_out", backend=backend)
    return g.view(merged, "kqv_out", backend=backend)


def _inputs(b: _Builder) -> dict[str, Tensor]:
    """The graph's inputs, which live on the host, in the order llama.cpp creates them."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = _token_inputs(b)
    if any(block.recurrent is not None for block in m.blocks):
        inputs["rs_copy"] = g.input("rs_s_copy", 8 * I32, host)
    indexed = [block.attention for block in m.blocks
               if block.attention is not None and block.attention.indexer_heads
               and not block.attention.msa_block]
    if indexed:
        dim = indexed[0].indexer_dim
        inputs["k_rot"] = g.input("attn_inp_k_rot", dim * dim * F32, host)
    inputs["pos"] = g.input("inp_pos", n * I32 * m.positions_per_token, host)
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
                    and not block.attention.msa_block:
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
    sparse = [a for a in attention if a.msa_block] if b.flash_attn else []
    if sparse:
        positions = msa_positions(sparse[0].msa_block)
        inputs["msa_pos_slot"] = g.input("msa_pos_slot", positions * I32, host)
        inputs["msa_pos_mask"] = g.input("msa_pos_mask", positions * n * F32, host)
        inputs["msa_bias"] = g.input("msa_bias", positions // sparse[0].msa_block * n * F32,
                                     host)
        inputs["msa_cell_blk"] = g.input("msa_cell_blk", b.n_kv * I32, host)
    lightning = [block.recurrent for block in m.blocks
                 if block.recurrent is not None and block.recurrent.mixer == "lightning"]
    if lightning:
        heads = lightning[0].n_head
        inputs["slopes"] = g.input("slopes", heads * F32, host)
        inputs["q_decay"] = g.input("q_decay_exp", heads * n * F32, host)
        inputs["k_decay"] = g.input("k_decay_exp", heads * n * F32, host)
        inputs["diag_decay"] = g.input("diag_decay_exp", n * n * heads * F32, host)
    return inputs


def _embeddings(b: _Builder, inputs: Mapping[str, Tensor]) -> Tensor:
    """build_inp_embd: the token rows (on the host, beside token_embd) and the mixed
    token/embedding branch, whose copy runs where the first layer does."""
    g, m, n = b.graph, b.model, b.n_tokens
    size = m.n_embd * n * F32
    tok = b.w("token_embd.weight")
    # The mixed branch's copy has no weights: the scheduler runs it where the next node
    # with weights runs, the first layer, or the host where position embeddings follow
    # or where a gather on the host (qwen4exp's per-layer embedding) comes between.
    host = b.input_backend
    first = host if m.position_embedding or m.ple_heads or not b.backend_of \
        else b.backend_of[0]
    embd = g.op("GET_ROWS", size, (tok, inputs["tokens"]), "embd", backend=host)
    if m.mixed_batch:
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


def _norm(b: _Builder, x: Tensor, name: str, backend: int,
          norm_backend: int | None = None) -> Tensor:
    g = b.graph
    normed = g.op("RMS_NORM", x.nbytes, (x,), f"norm-{name}",
                  backend=backend if norm_backend is None else norm_backend)
    return g.like("MUL", normed, (b.w(f"{name}.norm"),), f"{name}_norm", backend)


def _attention_core(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                    inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """build_qkv and build_attn up to the attention's output (before the output
    projection), from the normed input ``cur``."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    q_size, k_size = attn.q_width * n * F32, attn.k_width * n * F32
    v_size, out_size = attn.v_width * n * F32, attn.out_width * n * F32
    if not attn.cached:
        return _uncached_attention_core(b, cur, attn, index, inputs, backend)
    if attn.msa_block and b.flash_attn:
        return _sparse_attention_core(b, cur, attn, index, inputs, backend)
    if attn.fused_qkv:
        qkv = g.op("MUL_MAT", q_size + k_size + v_size, (b.w(f"{layer}.qkv"), cur), "qkv",
                   backend=backend)
        q = g.view(qkv, "q", q_size, backend)
        q_rot = g.op("ROPE", out_size, (q, inputs["pos"]), "Qcur", backend=backend) \
            if attn.rope else q
        v = g.view(qkv, "v", v_size, backend)
        k = g.view(qkv, "k", k_size, backend)
    else:
        # build_qkv: Q (roped at once), then V, then K.
        q = g.op("MUL_MAT", q_size, (b.w(f"{layer}.q"), cur), "q", backend=backend)
        q = g.view(q, "q (reshaped)", backend=backend)
        q_rot = g.op("ROPE", out_size, (q, inputs["pos"]), "Qcur", backend=backend) \
            if attn.rope else q
        v = g.op("MUL_MAT", v_size, (b.w(f"{layer}.v"), cur), "v", backend=backend)
        v = g.view(v, "v (reshaped)", backend=backend)
        k = g.op("MUL_MAT", k_size, (b.w(f"{layer}.k"), cur), "k", backend=backend)
        k = g.view(k, "k (reshaped)", backend=backend)
    k_rot = g.op("ROPE", k_size, (k, inputs["pos"]), "Kcur", backend=backend) \
        if attn.rope else k
    suffix = "_swa" if attn.sliding else ""
    cache_k = external(f"cache_k_{index}")
    cache_v = external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k_rot, backend=backend), inputs[f"k_idxs{suffix}"],
                         cache_k), backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs[f"v_idxs{suffix}"], cache_v),
         backend=backend)
    q_view = g.view(q_rot, "q (permuted)", backend=backend)
    n_kv = b.n_kv_swa if attn.sliding else b.n_kv
    mask = inputs[f"mask{suffix}"]
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", out_size, (q_view, cache_k, cache_v, mask), "kqv",
                   backend=backend)
    else:
        scores = g.op("MUL_MAT", n_kv * n * attn.n_head * F32, (cache_k, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def msa_positions(block: int) -> int:
    """The positions MiniMax-M3's sparse attention indexes in the graph llama.cpp
    reserves (``llama_kv_cache_msa_context::get_n_pos`` on an empty cache), padded to
    the indexer's block."""
    return -(-MSA_MIN_POSITIONS // block) * block


def _sparse_attention_core(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                           inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """MiniMax-M3's multi-scale sparse attention (``build_attn_msa_fa``, a batch of one
    stream): the indexer's key normed, roped and cached; Q, K and V cached; the indexer's
    cached keys gathered by position and scored against its normed, roped query heads,
    pooled per block and biased, the best blocks kept; their mask made (the block mask
    expanded to the cache's cells and added to the causal mask) and flash attention over
    it. The one-token graph, far smaller, is laid out the same."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, dim = attn.indexer_heads, attn.indexer_dim
    positions = msa_positions(attn.msa_block)
    blocks = positions // attn.msa_block
    top = min(attn.indexer_top_k, blocks)
    cache_idx = external(f"cache_idx_{index}")
    ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.k_proj"), cur), "indexer_k",
              backend=backend)
    ik = g.op("RMS_NORM", ik.nbytes, (g.view(ik, backend=backend),), "indexer_k_norm",
              backend=backend)
    ik = g.like("MUL", ik, (b.w(f"{layer}.indexer.k_norm"),), "indexer_k_normed", backend)
    ik = g.op("ROPE", ik.nbytes, (ik, inputs["pos"]), "indexer_k_rope", backend=backend)
    g.op("SET_ROWS", 0, (g.view(ik, backend=backend), inputs["k_idxs"], cache_idx),
         backend=backend)
    out_size = attn.out_width * n * F32
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "q", backend=backend)
    q = g.op("ROPE", out_size, (g.view(q, backend=backend), inputs["pos"]), "Qcur",
             backend=backend)
    k = g.op("MUL_MAT", attn.k_width * n * F32, (b.w(f"{layer}.k"), cur), "k", backend=backend)
    k = g.op("ROPE", k.nbytes, (g.view(k, backend=backend), inputs["pos"]), "Kcur",
             backend=backend)
    v = g.op("MUL_MAT", attn.v_width * n * F32, (b.w(f"{layer}.v"), cur), "v", backend=backend)
    cache_k, cache_v = external(f"cache_k_{index}"), external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k, backend=backend), inputs["k_idxs"], cache_k),
         backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    keys = g.op("GET_ROWS", positions * dim * F32, (cache_idx, inputs["msa_pos_slot"]),
                "indexer_keys", backend=backend)
    iq = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.q_proj"), cur),
              "indexer_q", backend=backend)
    iq = g.op("RMS_NORM", iq.nbytes, (g.view(iq, backend=backend),), "indexer_q_norm",
              backend=backend)
    iq = g.like("MUL", iq, (b.w(f"{layer}.indexer.q_norm"),), "indexer_q_normed", backend)
    iq = g.op("ROPE", iq.nbytes, (iq, inputs["pos"]), "indexer_q_rope", backend=backend)
    scores = g.op("MUL_MAT", positions * heads * n * F32, (keys, g.view(iq, backend=backend)),
                  "msa_scores", backend=backend)
    scores = g.like("ADD", scores, (g.view(inputs["msa_pos_mask"], backend=backend),),
                    "msa_scores_masked", backend)
    pooled = g.op("POOL_2D", blocks * heads * n * F32, (scores,), "msa_bs", backend=backend)
    pooled = g.like("ADD", pooled, (g.view(inputs["msa_bias"], backend=backend),), "msa_bsf",
                    backend)
    picked = g.op("TOP_K", top * heads * n * I32, (pooled,), "msa_top_k", backend=backend)
    zero = g.op("CPY", top * heads * n * F32, (picked,), "msa_top_k_f32", backend=backend)
    zero = g.like("SCALE", zero, (), "msa_zero", backend)
    floor = g.op("SCALE", blocks * n * F32, (g.view(inputs["msa_bias"], backend=backend),),
                 "msa_ninf", backend=backend)
    floor = g.op("CPY", blocks * n * F16, (floor,), "msa_ninf_f16", backend=backend)
    floor = g.op("REPEAT", blocks * heads * n * F16, (floor,), "msa_ninf_heads",
                 backend=backend)
    unmasked = Tensor("msa_block_mask_rows", floor.nbytes, "SET_ROWS",
                      (g.view(floor, backend=backend), zero, g.view(picked, backend=backend)),
                      view_src=floor, backend=backend)
    g.nodes.append(unmasked)
    block_mask = g.op("CONT", floor.nbytes, (g.view(unmasked, backend=backend),),
                      "msa_block_mask", backend=backend)
    block_mask = g.op("CONT", floor.nbytes, (g.view(block_mask, backend=backend),),
                      "msa_block_mask_t", backend=backend)
    cells = g.op("GET_ROWS", n * heads * b.n_kv * F32, (block_mask, inputs["msa_cell_blk"]),
                 "msa_cell_mask", backend=backend)
    cells = g.op("CONT", cells.nbytes, (g.view(cells, backend=backend),), "msa_cell_mask_t",
                 backend=backend)
    causal = g.op("CPY", b.n_kv * n * F32, (inputs["mask"],), "msa_causal_f32",
                  backend=backend)
    mask = g.like("ADD", cells, (g.view(causal, backend=backend),), "msa_mask", backend)
    mask = g.op("CPY", b.n_kv * n * heads * F16, (mask,), "msa_mask4", backend=backend)
    out = g.op("FLASH_ATTN_EXT", out_size, (g.view(q, backend=backend), cache_k, cache_v, mask),
               "msa_fattn", backend=backend)
    out = g.op("CONT", out_size, (g.view(out, backend=backend),), "msa_fattn_cont",
               backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def _uncached_attention_core(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                             inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """Attention without a cache (``build_attn_inp_no_cache``): Q, K and V of the ubatch
    alone, K and V cast to f16 for flash attention, a ``n_tokens x n_tokens`` mask."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    projected = {}
    for name, width, rope in (("q", attn.q_width, True), ("k", attn.k_width, True),
                              ("v", attn.v_width, False)):
        t = g.op("MUL_MAT", width * n * F32, (b.w(f"{layer}.{name}"), cur), name,
                 backend=backend)
        t = g.view(t, backend=backend)
        if rope:
            t = g.op("ROPE", (attn.out_width if name == "q" else width) * n * F32,
                     (t, inputs["pos"]), f"{name}_rope", backend=backend)
        projected[name] = t
    out_size = attn.out_width * n * F32
    mask = inputs["mask_self"]
    if b.flash_attn:
        k = g.op("CPY", attn.k_width * n * F16, (g.view(projected["k"], backend=backend),),
                 "k_f16", backend=backend)
        v = g.op("CPY", attn.v_width * n * F16, (g.view(projected["v"], backend=backend),),
                 "v_f16", backend=backend)
        out = g.op("FLASH_ATTN_EXT", out_size, (g.view(projected["q"], backend=backend), k, v,
                                                mask), "kqv", backend=backend)
    else:
        scores = g.op("MUL_MAT", n * n * attn.n_head * F32,
                      (g.view(projected["k"], backend=backend),
                       g.view(projected["q"], backend=backend)), "kq", backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        v = g.op("CONT", attn.v_width * n * F32, (g.view(projected["v"], backend=backend),),
                 "v_cont", backend=backend)
        kqv = g.op("MUL_MAT", out_size, (v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def _latent_attention_core(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                           inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """deepseek2's absorbed latent attention (``build_attn`` with ``v_mla``): the query's
    nope part multiplied into the latent space, the compressed KV normed and cached with
    its roped part, attention in the latent space, then each head's V decompressed."""
    if attn.kv_b_width:
        return _decompressed_latent_attention_core(b, cur, attn, index, inputs, backend)
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, rope = attn.n_head, attn.k_width
    if attn.indexer_heads:
        # The lightning indexer's key, normed, roped and rotated, into its cache.
        dim = attn.indexer_dim
        ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer_k"), cur), "indexer_k",
                  backend=backend)
        ik = g.op("NORM", ik.nbytes, (ik,), "indexer_k_norm", backend=backend)
        ik = g.like("MUL", ik, (b.w(f"{layer}.indexer_k_norm"),), "indexer_k", backend)
        ik = g.op("ROPE", ik.nbytes, (g.view(ik, backend=backend), inputs["pos"]),
                  "indexer_k_rope", backend=backend)
        ik = g.op("MUL_MAT", ik.nbytes, (inputs["k_rot"], ik), "indexer_k_rot",
                  backend=backend)
        g.op("SET_ROWS", 0, (g.view(ik, backend=backend), inputs["k_idxs_lid"],
                             external(f"cache_lid_{index}")), backend=backend)
    qr = None
    if attn.q_lora:
        q = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                 backend=backend)
        qr = q = _norm(b, q, f"{layer}.q_a", backend)
        q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), q), "q",
                 backend=backend)
    else:
        q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "q",
                 backend=backend)
    q_nope = g.view(q, "q_nope", backend=backend)
    absorbed = g.op("MUL_MAT", heads * attn.kv_lora * n * F32, (b.w(f"{layer}.k_b"), q_nope),
                    "q_nope_absorbed", backend=backend)
    q_pe = g.view(q, "q_pe", backend=backend)
    if attn.rope:
        q_pe = g.op("ROPE", heads * rope * n * F32, (q_pe, inputs["pos"]), "q_pe",
                    backend=backend)
    q_cur = g.op("CONCAT", heads * (attn.kv_lora + rope) * n * F32,
                 (g.view(absorbed, backend=backend), q_pe), "Qcur", backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + rope) * n * F32, (b.w(f"{layer}.kv_a"), cur),
              "kv_cmpr_pe", backend=backend)
    kv_cmpr = g.op("RMS_NORM", attn.kv_lora * n * F32, (g.view(kv, backend=backend),),
                   "kv_cmpr_norm", backend=backend)
    kv_cmpr = g.like("MUL", kv_cmpr, (b.w(f"{layer}.kv_a_norm"),), "kv_cmpr", backend)
    k_pe = g.view(kv, "k_pe", backend=backend)
    if attn.rope:
        k_pe = g.op("ROPE", rope * n * F32, (k_pe, inputs["pos"]), "k_pe", backend=backend)
    k_cur = g.op("CONCAT", (attn.kv_lora + rope) * n * F32,
                 (g.view(kv_cmpr, backend=backend), k_pe), "Kcur", backend=backend)
    cache = external(f"cache_k_{index}")
    # A sliding-window layer writes and reads the sliding-window cache (dots3note).
    suffix = "_swa" if attn.sliding else ""
    g.op("SET_ROWS", 0, (g.view(k_cur, backend=backend), inputs[f"k_idxs{suffix}"], cache),
         backend=backend)
    q_view = g.view(q_cur, "q (permuted)", backend=backend)
    latent = heads * attn.kv_lora * n * F32
    mask = inputs[f"mask{suffix}"]
    if attn.indexer_heads:
        mask = _indexer_mask(b, cur, qr, attn, index, inputs, backend)
    elif b.model.hc_streams and b.top_k is not None:
        # A shared-indexer layer reuses the last indexer's top-k (hy-v4.cpp), with zero
        # rows of its own.
        zeros = g.op("FILL", b.top_k.nbytes // I32 * F32, (), "zeros", backend=backend)
        mask = _top_k_mask(b, b.top_k, zeros, inputs, backend)
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", latent, (q_view, cache, cache, mask), "kqv",
                   backend=backend)
    else:
        cells = b.n_kv_swa if attn.sliding else b.n_kv
        scores = g.op("MUL_MAT", cells * n * heads * F32, (cache, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        out = g.op("MUL_MAT", latent, (cache, probs), "kqv", backend=backend)
    out = _latent_values(b, attn, out, layer, n, backend)
    if attn.output_gate:
        gate = g.op("MUL_MAT", out.nbytes, (b.w(f"{layer}.attn_gate"), cur), "attn_gate",
                    backend=backend)
        gate = g.like("UNARY", gate, (), "attn_gate_sigmoid", backend)
        out = g.like("MUL", out, (gate,), "mla_gated", backend)
    return out


def _decompressed_latent_attention_core(b: _Builder, cur: Tensor, attn: AttentionShape,
                                        index: int, inputs: Mapping[str, Tensor],
                                        backend: int) -> Tensor:
    """MiniCPM3's latent attention without absorption: the query through its low-rank
    pair and roped, the compressed KV normed and decompressed into each head's K nope and
    V, V made contiguous, the rope part roped and repeated over the heads beside K nope,
    K and V cached, plain attention."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    heads, rope = attn.n_head, attn.k_width
    q = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
             backend=backend)
    q = _norm(b, q, f"{layer}.q_a", backend)
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), q), "q", backend=backend)
    q = g.op("ROPE", q.nbytes, (g.view(q, backend=backend), inputs["pos"]), "q_states",
             backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + rope) * n * F32, (b.w(f"{layer}.kv_a"), cur),
              "kv_pe_compressed", backend=backend)
    kv_cmpr = g.op("RMS_NORM", attn.kv_lora * n * F32, (g.view(kv, backend=backend),),
                   "kv_compressed_norm", backend=backend)
    kv_cmpr = g.like("MUL", kv_cmpr, (b.w(f"{layer}.kv_a_norm"),), "kv_compressed", backend)
    decompressed = g.op("MUL_MAT", attn.kv_b_width * n * F32, (b.w(f"{layer}.kv_b"), kv_cmpr),
                        "kv", backend=backend)
    v = g.op("CONT", attn.out_width * n * F32, (g.view(decompressed, backend=backend),),
             "v_states", backend=backend)
    k_pe = g.op("ROPE", rope * n * F32, (g.view(kv, "k_pe", backend=backend), inputs["pos"]),
                "k_pe", backend=backend)
    k_pe = g.op("REPEAT", heads * rope * n * F32, (k_pe,), "k_pe_repeated", backend=backend)
    k = g.op("CONCAT", attn.q_width * n * F32, (g.view(decompressed, backend=backend), k_pe),
             "k_states", backend=backend)
    cache_k = external(f"cache_k_{index}")
    cache_v = external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (g.view(k, backend=backend), inputs["k_idxs"], cache_k),
         backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    q_view = g.view(q, "q (permuted)", backend=backend)
    out_size = attn.out_width * n * F32
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", out_size, (q_view, cache_k, cache_v, inputs["mask"]),
                   "kqv", backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * heads * F32, (cache_k, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (inputs["mask"],), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        out = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                   backend=backend)
    return g.view(out, "kqv_out", backend=backend)


def _indexer_mask(b: _Builder, cur: Tensor, qr: Tensor | None, attn: AttentionShape,
                  index: int, inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """The lightning indexer's top-k of the cache for each token, as a mask: its query
    heads from the compressed query, roped and rotated, scored against the cached keys
    (``n_kv x n_tokens``), the best ``top_k`` kept (``llm_graph_context::build_attn``
    for DSA)."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    zeros = g.like("FILL", inputs[f"zeros-{index}"], (), "zeros", backend)
    size = attn.indexer_heads * attn.indexer_dim * n * F32
    iq = g.op("MUL_MAT", size, (b.w(f"{layer}.indexer_q_b"), qr if qr is not None else cur),
              "indexer_q", backend=backend)
    iq = g.op("ROPE", size, (g.view(iq, backend=backend), inputs["pos"]), "indexer_q_rope",
              backend=backend)
    iq = g.op("MUL_MAT", size, (inputs["k_rot"], iq), "indexer_q_rot", backend=backend)
    weights = g.op("MUL_MAT", attn.indexer_heads * n * F32, (b.w(f"{layer}.indexer_proj"), cur),
                   "indexer_weights", backend=backend)
    weights = g.op("SCALE", weights.nbytes, (g.view(weights, backend=backend),),
                   "indexer_weights_scaled", backend=backend)
    score = g.op("LIGHTNING_INDEXER", b.n_kv * n * F32,
                 (g.view(iq, backend=backend), external(f"cache_lid_{index}"), weights,
                  inputs["mask_lid"]), "indexer_score", backend=backend)
    top_k = min(attn.indexer_top_k, b.n_kv)
    picked = g.op("TOP_K", top_k * n * I32, (score,), "top_k", backend=backend)
    picked = b.top_k = g.op("CONT", picked.nbytes, (picked,), "top_k_cont", backend=backend)
    return _top_k_mask(b, picked, zeros, inputs, backend)


def _top_k_mask(b: _Builder, picked: Tensor, zeros: Tensor, inputs: Mapping[str, Tensor],
                backend: int) -> Tensor:
    """The causal mask with every cell but each token's top-k masked (build_attn for DSA):
    filled, the picked cells zeroed, the causal mask added."""
    g = b.graph
    mask = inputs["mask"]
    everything = g.op("FILL", mask.nbytes, (mask,), "kq_mask_all", backend=backend)
    unmasked = Tensor("kq_mask_top_k", mask.nbytes, "SET_ROWS",
                      (g.view(everything, backend=backend), g.view(picked, backend=backend),
                       zeros), view_src=everything, backend=backend)
    g.nodes.append(unmasked)
    return g.op("ADD", mask.nbytes, (g.view(unmasked, backend=backend), mask), "kq_mask_dsa",
                backend=backend)


def _conv_step(b: _Builder, ssm: RecurrentShape, index: int, inputs: Mapping[str, Tensor],
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


def _mamba2(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
            inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """build_mamba2_layer: the input projection (z, x, B, C and dt), the convolution over
    the cached and new columns, the selective scan (its output and the new state), the
    gate and the grouped norm, the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    conv_dim = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
    projected, x = _conv_step(
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
             (_strided_view(b, projected, ssm.d_inner, n, backend),), "z", backend=tail_backend)
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


def _delta_net(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
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


def _kda(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
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


def _shortconv(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
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


def _plamo2_mamba(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
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


def _lightning(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
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


def _strided_view(b: _Builder, src: Tensor, width: int, n: int, backend: int) -> Tensor:
    """A view of ``width`` f32 columns of each of ``n`` rows of ``src``: as a tensor of
    its own (a scheduler's copy of it) it spans every row but the last one's tail."""
    row = src.nbytes // max(1, n)
    return b.graph.view(src, f"{src.name} (columns)", (n - 1) * row + width * F32, backend)


def _tail_backend(b: _Builder, index: int) -> int:
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


def _mamba1(b: _Builder, cur: Tensor, ssm: RecurrentShape, index: int,
            inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
    """build_mamba_layer: the input projection (x and z), the convolution over the cached
    and new columns, x's projection to dt, B and C (each RMS-normed where the model has
    those norms), dt's projection, the selective scan (its output and the new state),
    the skip, the gate and the output projection."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    d_inner, d_state, rank = ssm.d_inner, ssm.d_state, ssm.n_head
    xz, x = _conv_step(b, ssm, index, inputs, backend, d_inner, n, lambda: g.op(
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
    z = g.op("CONT", d_inner * n * F32, (_strided_view(b, xz, d_inner, n, backend),), "z",
             backend=tail_backend)
    skip = g.op("MUL", d_inner * n * F32, (x, b.w(f"{layer}.ssm_d")), "x_d",
                backend=backend)
    y = g.like("ADD", skip, (g.view(scan, backend=backend),), "y_add_d", backend)
    y = g.op("SWIGLU", d_inner * n * F32, (z, y), "y_gated", backend=backend)
    return g.op("MUL_MAT", b.model.n_embd * n * F32, (b.w(f"{layer}.ssm_out"), y),
                "mamba_out", backend=backend)


def _output_projection(b: _Builder, out: Tensor, attn: AttentionShape, index: int,
                       backend: int) -> Tensor:
    tokens = out.nbytes // (attn.out_width * F32)
    return b.graph.op("MUL_MAT", b.model.n_embd * tokens * F32, (b.w(f"blk.{index}.wo"), out),
                      "attn_out", backend=backend)


def _feed_forward(b: _Builder, cur: Tensor, ffn: FeedForwardShape, index: int,
                  backend: int) -> Tensor:
    """The feed-forward network or mixture of experts on the normed input ``cur``."""
    layer = f"blk.{index}"
    if ffn.n_expert:
        if ffn.n_latent:
            latent = b.graph.op("MUL_MAT", ffn.n_latent * b.rows(cur) * F32,
                                (b.w(f"{layer}.routed_down"), cur), "routed_in",
                                backend=backend)
            out = _moe(b, latent, ffn, layer, backend)
            out = _norm(b, out, f"{layer}.routed", backend)
            out = b.graph.op("MUL_MAT", cur.nbytes, (b.w(f"{layer}.routed_up"), out),
                             "routed_out", backend=backend)
        else:
            out = _moe(b, cur, ffn, layer, backend)
        if ffn.n_ff_shexp:
            shared = _mlp(b, cur, FeedForwardShape(ffn.n_ff_shexp, clamped=ffn.shexp_clamped,
                                                   activation=ffn.activation),
                          f"{layer}.shexp", backend)
            out = b.graph.like("ADD", out, (shared,), "ffn_out", backend)
        if ffn.n_ff_dense:
            dense = _mlp(b, cur, FeedForwardShape(ffn.n_ff_dense), layer, backend)
            out = b.graph.like("ADD", dense, (out,), "ffn_out", backend)
            out = b.graph.like("SCALE", out, (), "ffn_out_scaled", backend)
        return out
    return _mlp(b, cur, ffn, layer, backend)


def _mlp(b: _Builder, cur: Tensor, ffn: FeedForwardShape, layer: str,
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
        act = _situ(b, gate, lambda: g.op("MUL_MAT", size, (b.w(f"{layer}.up"), cur), "ffn_up",
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


def _situ(b: _Builder, gate: Tensor, up_projection: Callable[[], Tensor],
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


def _moe(b: _Builder, cur: Tensor, ffn: FeedForwardShape, layer: str,
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
        act = _situ(b, gate, lambda: g.op("MUL_MAT_ID", size, (b.w(f"{layer}.up_exps"), x, topk),
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


def _block(b: _Builder, x: Tensor, block: BlockShape, index: int, last: bool,
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
        core = _attention_core(b, _norm(b, x, f"blk.{index}.attn", backend), attn, index,
                               inputs, backend)
        projected = _output_projection(b, core, attn, index, backend)
        mixed = _mamba2(b, _norm(b, x, f"blk.{index}.attn", backend), block.recurrent,
                        index, inputs, backend, _tail_backend(b, index))
        cur = g.like("ADD", projected, (mixed,), f"attn_ssm-{index}", backend)
        x = g.like("ADD", cur, (x,), f"ffn_inp-{index}", backend)
        if last:
            x = rows(x, "ffn_inp_rows")
        if ffn is None:
            return x
        out = _feed_forward(b, _norm(b, x, f"blk.{index}.ffn", backend), ffn, index, backend)
        return g.like("ADD", out, (x,), f"l_out-{index}", backend)
    if block.recurrent is not None:
        normed = _norm(b, x, f"blk.{index}.attn", backend, entry)
        mixer = {"delta_net": _delta_net, "kda": _kda, "shortconv": _shortconv,
                 "plamo2": _plamo2_mamba, "lightning": _lightning}.get(
            block.recurrent.mixer, _mamba2 if block.recurrent.version == 2 else _mamba1)
        cur = mixer(b, normed, block.recurrent, index, inputs, backend,
                    _tail_backend(b, index))
        residual = _residual(b, x, normed, backend)
        if last:
            cur = rows(cur, "mamba_out_rows")
            residual = rows(residual, "inp_rows")
        x = g.like("ADD", cur, (_scaled_residual(b, residual, backend),), f"l_out-{index}",
                   backend)
        if ffn is None:
            return x
        return _ffn_block(b, x, ffn, index, backend)
    if attn is None:
        if ffn is None:
            return x
        cur = _feed_forward(b, _norm(b, x, f"blk.{index}.ffn", backend), ffn, index, backend)
        return g.like("ADD", cur, (x,), f"l_out-{index}", backend)
    normed = _norm(b, x, f"blk.{index}.attn", backend, entry)
    core = (_latent_attention_core if attn.kv_lora else _attention_core)(
        b, normed, attn, index, inputs, backend)
    if attn.parallel == "ffn_residual_first" and ffn is not None:
        # (ffn + inpL) + attn_out, in the order ggml walks it: the network on the normed
        # input's output rows, the residual's rows and their sum, then the attention's
        # output projected and its rows.
        ffn_out = _feed_forward(b, rows(normed, "attn_norm_rows") if last else normed, ffn,
                                index, backend)
        cur = g.like("ADD", ffn_out, (rows(x, "inp_rows") if last else x,),
                     f"ffn_inp-{index}", backend)
        projected = _output_projection(b, core, attn, index, backend)
        if last:
            projected = rows(projected, "attn_out_rows")
        return g.like("ADD", cur, (projected,), f"l_out-{index}", backend)
    if attn.parallel and ffn is not None:
        if last:
            core = rows(core, "kqv_rows")
            normed = rows(normed, "attn_norm_rows")
            x = rows(x, "inp_rows")
        if attn.parallel == "ffn_after":
            projected = _output_projection(b, core, attn, index, backend)
            ffn_out = _feed_forward(b, normed, ffn, index, backend)
        else:
            ffn_out = _feed_forward(b, normed, ffn, index, backend)
            projected = _output_projection(b, core, attn, index, backend)
        cur = g.like("ADD", ffn_out, (projected,), f"ffn_attn-{index}", backend)
        return g.like("ADD", cur, (x,), f"l_out-{index}", backend)
    cur = _output_projection(b, core, attn, index, backend)
    residual = _residual(b, x, normed, backend)
    if last:
        cur = rows(cur, "attn_out_rows")
        residual = rows(residual, "inp_rows")
    x = g.like("ADD", cur, (_scaled_residual(b, residual, backend),), f"ffn_inp-{index}",
               backend)
    if ffn is None:
        return x
    return _ffn_block(b, x, ffn, index, backend)


def _residual(b: _Builder, x: Tensor, normed: Tensor, backend: int) -> Tensor:
    """What a block adds its attention (or mixer) output to: its input, or its normed
    input where the model's residual is the norm's output (MiniMax-01)."""
    return normed if b.model.residual_from_norm else x


def _scaled_residual(b: _Builder, residual: Tensor, backend: int) -> Tensor:
    if not b.model.residual_from_norm:
        return residual
    return b.graph.like("SCALE", residual, (), "residual_scaled", backend)


def _ffn_block(b: _Builder, x: Tensor, ffn: FeedForwardShape, index: int,
               backend: int) -> Tensor:
    """The feed-forward half of a block: its norm, the network, the residual sum."""
    normed = _norm(b, x, f"blk.{index}.ffn", backend)
    out = _feed_forward(b, normed, ffn, index, backend)
    residual = _scaled_residual(b, _residual(b, x, normed, backend), backend)
    return b.graph.like("ADD", out, (residual,), f"l_out-{index}", backend)


def _residual_mix(b: _Builder, stack: list[Tensor], x: Tensor, name: str,
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


def _stacked_blocks(b: _Builder, x: Tensor, inputs: Mapping[str, Tensor],
                    backends: Sequence[int], output_backend: int) -> Tensor:
    """Kimi K3's blocks with cross-layer residual attention (``res_push``, ``res_mix``):
    every ``residual_stack_block`` blocks the block's input is banked (concatenated to
    the bank) and the running sum restarts from the attention's output; each half reads a
    mix of the bank and the running sum; the output reads one too."""
    g, m = b.graph, b.model
    stack: list[Tensor] = []
    for index, block in enumerate(m.blocks):
        backend = backends[index]
        layer = f"blk.{index}"
        previous = backends[index - 1] if index else backend
        cur = _residual_mix(b, stack, x, f"{layer}.attn", backend, previous) if stack else x
        banked = index % m.residual_stack_block == 0
        if banked:
            # The bank holds a reshaped view of the input: a tensor of its own, which a
            # device reading it from another one copies apart from the input itself.
            checkpoint = g.view(x, "res_checkpoint", backend=x.backend)
            stack.append(checkpoint if not stack else g.op(
                "CONCAT", stack[-1].nbytes + x.nbytes, (stack[-1], checkpoint), "res_stack",
                backend=backend))
        normed = _norm(b, cur, f"{layer}.attn", backend)
        if block.recurrent is not None:
            cur = _kda(b, normed, block.recurrent, index, inputs, backend,
                       _tail_backend(b, index))
        elif block.attention is not None:
            core = _latent_attention_core(b, normed, block.attention, index, inputs, backend) \
                if block.attention.kv_lora else \
                _attention_core(b, normed, block.attention, index, inputs, backend)
            cur = _output_projection(b, core, block.attention, index, backend)
        x = cur if banked else g.like("ADD", x, (cur,), f"prefix_sum_attn-{index}", backend)
        if block.feed_forward is None:
            continue
        cur = _residual_mix(b, stack, x, f"{layer}.ffn", backend, backend)
        out = _feed_forward(b, _norm(b, cur, f"{layer}.ffn", backend), block.feed_forward,
                            index, backend)
        x = g.like("ADD", x, (out,), f"l_out-{index}", backend)
    if stack:
        x = _residual_mix(b, stack, x, "output", output_backend, backends[-1])
    return g.op("GET_ROWS", m.n_embd * b.n_outputs * F32, (x, inputs["out_ids"]),
                "out_rows", backend=output_backend)


def build_graph(model: GraphModel, *, n_tokens: int, n_outputs: int, n_kv: int,
                n_kv_swa: int = 0, flash_attn: bool = True,
                layer_backends: Sequence[int] | None = None, output_backend: int = 0,
                input_backend: int = 0) -> Graph:
    """The graph of one ubatch of ``n_tokens`` tokens with ``n_outputs`` outputs; each
    block runs on its backend in ``layer_backends``, the output head on
    ``output_backend``, the inputs and the token rows on ``input_backend``."""
    backends = list(layer_backends) if layer_backends is not None else \
        [0] * len(model.blocks)
    b = _Builder(Graph(), model, n_tokens, n_outputs, n_kv, n_kv_swa or n_kv, flash_attn,
                 backends, input_backend)
    if model.compress_ratios:
        return _dsv4_graph(b, output_backend)
    inputs = _kpool_inputs(b) if model.hc_mixed else _inputs(b)
    x = _embeddings(b, inputs)
    last = len(model.blocks) - 1
    skip = None
    if model.embedding_skip and model.blocks:
        # The norm has no weights: the scheduler runs it where the first layer runs.
        x = skip = b.graph.op("RMS_NORM", x.nbytes, (x,), "embd_norm", backend=backends[0])
    if model.hrm_layers_per_stack:
        return _hrm_graph(b, x, inputs, output_backend)
    if model.hc_streams and model.hc_mixed:
        return _mixed_hc_graph(b, x, inputs, output_backend)
    if model.low_rank_streams:
        return _qwen4exp_graph(b, x, inputs, output_backend)
    if model.hc_streams:
        return _hc_graph(b, x, inputs, output_backend)
    if model.residual_stack_block:
        x = _stacked_blocks(b, x, inputs, backends, output_backend)
    for index, block in enumerate(model.blocks if not model.residual_stack_block else ()):
        x = _block(b, x, block, index, index == last and not model.rows_after_output_norm,
                   inputs, backends[index])
        if skip is not None:
            kept = skip if index != last else b.graph.op(
                "GET_ROWS", x.nbytes, (skip, inputs["out_ids"]), "skip_rows",
                backend=backends[index])
            scaled = b.graph.op("MUL", kept.nbytes,
                                (kept, b.w(f"blk.{index}.layer_output_scale")), "skip",
                                backend=backends[index])
            x = b.graph.like("ADD", x, (scaled,), f"l_out-{index}", backends[index])
    normed = _norm(b, x, "output", output_backend)
    if model.rows_after_output_norm:
        normed = b.graph.op("GET_ROWS", model.n_embd * n_outputs * F32,
                            (normed, inputs["out_ids"]), "result_norm", backend=output_backend)
    logits = b.graph.op("MUL_MAT", model.n_vocab * n_outputs * F32,
                        (b.w("output.weight"), normed), "result_output",
                        backend=output_backend)
    logits.is_output = True
    return b.graph


def _hc_graph(b: _Builder, embd: Tensor, inputs: Mapping[str, Tensor],
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
    hc, width = m.hc_streams, m.n_embd * F32
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
        normed = _norm(b, cur, f"{layer}.attn", backend)
        core = _latent_attention_core(b, normed, attn, index, inputs, backend)
        x = post(_output_projection(b, core, attn, index, backend), residual, mixes,
                 backend)
        residual = x
        cur, mixes = reduce(x, f"{layer}.hc_ffn_fn", backend, backend, n)
        out = _feed_forward(b, _norm(b, cur, f"{layer}.ffn", backend), ffn, index, backend)
        x = post(out, residual, mixes, backend)
        at = backend
    rows = g.op("GET_ROWS", hc * width * b.n_outputs, (g.view(x, backend=at),
                                                         inputs["out_ids"]),
                "hc_rows", backend=at)
    cur, _ = reduce(rows, "output_hc_fn", output_backend, at, b.n_outputs)
    normed = _norm(b, cur, "output", output_backend)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), normed),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g


def kpool_pools(attn: AttentionShape, n_kv: int) -> tuple[int, int, int]:
    """glm5-next's pooled-indexer sizes in the graph llama.cpp reserves for one sequence
    (the full-cache context of ``llama_memory_hybrid_idx``): the pools read
    (``kpool_pad``: one past the cache's pools, padded to 64), the pools built anew (every
    pool of the cache) and the cells each token selects (the best pools' cells, and the
    incomplete tail's)."""
    kpool = attn.indexer_kpool
    pools = n_kv // kpool
    read = max(64, -(-(pools + 1) // 64) * 64)
    selected = kpool * min(read, attn.indexer_top_k // kpool)
    return read, max(pools, 1), selected + (kpool - 1 if attn.indexer_kpool_tail else 0)


def _kpool_inputs(b: _Builder) -> dict[str, Tensor]:
    """glm5-next's inputs (``build_inp_mem_hybrid_k``, ``build_inp_kpool``), in the order
    its graph first reads them, which is the order ggml places them: the indexer cache's
    rows, the pools built anew and where they go, the pools' cells, their mask and members,
    the tail, the attention's rows, the selection's live slots (f32), the causal mask, the
    recurrent state's rows, the output rows."""
    g, m, n = b.graph, b.model, b.n_tokens
    host = b.input_backend
    inputs = _token_inputs(b)
    pooled = [block.attention for block in m.blocks
              if block.attention is not None and block.attention.indexer_kpool]
    mask = F16 if b.flash_attn else F32
    if pooled:
        attn = pooled[0]
        read, new, selected = kpool_pools(attn, b.n_kv)
        kpool = attn.indexer_kpool
        inputs["k_idxs_idx"] = g.input("idx_k_idxs", n * I64, host)
        inputs["new_pool_idxs"] = g.input("kpool_new_pool_idxs", kpool * new * I32, host)
        inputs["new_pool_rep"] = g.input("kpool_new_pool_rep", new * I64, host)
        inputs["pool_cells"] = g.input("kpool_pool_cells", read * I32, host)
        # The fused lightning indexer reads an f16 mask.
        inputs["pool_mask"] = g.input("kpool_pool_mask", read * n * F16, host)
        inputs["pool_idxs"] = g.input("kpool_pool_idxs", kpool * read * I32, host)
        if attn.indexer_kpool_tail:
            inputs["tail_idxs"] = g.input("kpool_tail_idxs", (kpool - 1) * n * I32, host)
        inputs["k_idxs"] = g.input("attn_inp_k_idxs", n * I64, host)
        inputs["gather_mask"] = g.input("kpool_gather_mask", selected * n * F32, host)
        inputs["mask"] = g.input("attn_inp_kq_mask", b.n_kv * n * mask, host)
    if any(block.recurrent is not None for block in m.blocks):
        inputs["rs_copy"] = g.input("rs_s_copy", 8 * I32, host)
    inputs["out_ids"] = g.input("out_ids", b.n_outputs * I32, host)
    return inputs


def _kpool_attention_core(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                          inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """glm5-next's nope latent attention over its pooled indexer's selection
    (``build_dsa_layer``, ``build_kpool_select``, the scatter path), in the order its
    forward expansions lay it out: the indexer's key (normed, with bias) and pool gate
    cached beside a zeroed pooled slot; the new pools' keys and gates gathered, their
    gates plus the learned position weights soft-maxed over each pool and the keys summed
    by them into the pooled slots; the query's low rank, the indexer's query heads from
    it, every pool's key gathered, the heads' weights and the fused lightning indexer's
    score of each pool; the best pools (top-k, reordered by score through f32 copies)
    expanded to their cells, with the tail's; then the query absorbed and the compressed
    KV cached; the mask built (a filled row repeated per token, the selected cells zeroed
    through their live slots, the causal mask added) and flash attention over the latent
    cache, each head's V decompressed. A layer without an indexer reuses the last mask."""
    g, n = b.graph, b.rows(cur)
    layer = f"blk.{index}"
    mask_size = F16 if b.flash_attn else F32
    if attn.indexer_kpool:
        heads, dim, kpool = attn.indexer_heads, attn.indexer_dim, attn.indexer_kpool
        read, new, selected = kpool_pools(attn, b.n_kv)
        top = selected // kpool
        cache_idx = external(f"cache_idx_{index}")
        ik = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.attn_k"), cur), "indexer_k",
                  backend=backend)
        ik = g.like("NORM", ik, (), "indexer_k_norm", backend)
        ik = g.like("MUL", ik, (b.w(f"{layer}.indexer.k_norm"),), "indexer_k_normed", backend)
        ik = g.like("ADD", ik, (b.w(f"{layer}.indexer.k_norm.bias"),), "indexer_k", backend)
        gate = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.kpool_gate"), cur),
                    "indexer_gate", backend=backend)
        packed = g.op("CONCAT", 2 * dim * n * F32, (ik, gate), "indexer_key_gate",
                      backend=backend)
        # The zeroed pooled slot fills a fresh tensor: a leaf the allocator places here.
        zero = g.like("FILL", Tensor("pzero", dim * n * F32, backend=backend), (), "pzero",
                      backend)
        packed = g.op("CONCAT", 3 * dim * n * F32, (packed, zero), "indexer_packed",
                      backend=backend)
        g.op("SET_ROWS", 0, (g.view(packed, backend=backend), inputs["k_idxs_idx"], cache_idx),
             backend=backend)
        rows = g.op("GET_ROWS", 2 * dim * kpool * new * F32,
                    (cache_idx, g.view(inputs["new_pool_idxs"], backend=backend)),
                    "indexer_pool_rows", backend=backend)
        pool = dim * kpool * new * F32
        logits = g.op("ADD", pool, (g.view(rows, backend=backend),
                                    b.w(f"{layer}.indexer.kpool_ape")),
                      "indexer_pool_logits", backend=backend)
        logits = g.op("CONT", pool, (g.view(logits, backend=backend),), "indexer_pool_logits",
                      backend=backend)
        probs = g.like("SOFT_MAX", g.view(logits, backend=backend), (), "indexer_pool_probs",
                       backend)
        keys = g.op("CONT", pool, (g.view(rows, backend=backend),), "indexer_pool_keys",
                    backend=backend)
        weighted = g.like("MUL", g.view(probs, backend=backend), (keys,),
                          "indexer_pool_weighted", backend)
        pooled_new = g.op("SUM_ROWS", dim * new * F32, (weighted,), "indexer_pool_k_new",
                          backend=backend)
        g.op("SET_ROWS", 0, (g.view(pooled_new, backend=backend), inputs["new_pool_rep"],
                             cache_idx), backend=backend)
        qr = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                  backend=backend)
        qr = _norm(b, qr, f"{layer}.q_a", backend)
        iq = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.attn_q_b"), qr),
                  "indexer_q", backend=backend)
        keys_read = g.op("GET_ROWS", dim * read * F32, (cache_idx, inputs["pool_cells"]),
                         "indexer_pool_k", backend=backend)
        weights = g.op("MUL_MAT", heads * n * F32, (b.w(f"{layer}.indexer.proj"), cur),
                       "indexer_weights", backend=backend)
        weights = g.like("SCALE", weights, (), "indexer_weights", backend)
        score = g.op("LIGHTNING_INDEXER", read * n * F32,
                     (g.view(iq, backend=backend), g.view(keys_read, backend=backend), weights,
                      inputs["pool_mask"]), "indexer_score", backend=backend)
        picked = g.op("TOP_K", top * n * I32, (score,), "indexer_top_k", backend=backend)
        picked_f32 = g.op("CPY", top * n * F32, (picked,), "indexer_top_k_f32",
                          backend=backend)
        picked_score = g.op("GET_ROWS", top * n * F32, (g.view(score, backend=backend), picked),
                            "indexer_top_k_score", backend=backend)
        order = g.op("ARGSORT", top * n * I32, (g.view(picked_score, backend=backend),),
                     "indexer_top_k_order", backend=backend)
        ordered = g.op("GET_ROWS", top * n * F32, (g.view(picked_f32, backend=backend), order),
                       "indexer_top_k_ordered", backend=backend)
        ordered = g.op("CONT", top * n * F32, (g.view(ordered, backend=backend),),
                       "indexer_top_k_ordered", backend=backend)
        ordered = g.op("CPY", top * n * I32, (ordered,), "indexer_top_k", backend=backend)
        cells = g.op("GET_ROWS", kpool * top * n * I32,
                     (inputs["pool_idxs"], g.view(ordered, backend=backend)), "indexer_sel_idx",
                     backend=backend)
        if attn.indexer_kpool_tail:
            cells = g.op("CONCAT", selected * n * I32,
                         (g.view(cells, backend=backend), inputs["tail_idxs"]),
                         "indexer_sel_idx", backend=backend)
    else:
        qr = g.op("MUL_MAT", attn.q_lora * n * F32, (b.w(f"{layer}.q_a"), cur), "q_a",
                  backend=backend)
        qr = _norm(b, qr, f"{layer}.q_a", backend)
    q = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q_b"), qr), "q", backend=backend)
    absorbed = g.op("MUL_MAT", attn.n_head * attn.kv_lora * n * F32,
                    (b.w(f"{layer}.k_b"), g.view(q, backend=backend)), "q_absorbed",
                    backend=backend)
    kv = g.op("MUL_MAT", (attn.kv_lora + attn.k_width) * n * F32,
              (b.w(f"{layer}.kv_a"), cur), "kv_cmpr", backend=backend)
    kv = _norm(b, kv, f"{layer}.kv_a", backend)
    cache = external(f"cache_k_{index}")
    g.op("SET_ROWS", 0, (g.view(kv, backend=backend), inputs["k_idxs"], cache), backend=backend)
    if attn.indexer_kpool:
        # Each selected slot's cell, or a dump row past the cache for a dead slot, made
        # from the slots' liveness (exp of their mask) in f32; the filled mask, one row
        # per token with the dump rows, the selected cells zeroed; the causal mask added.
        zeros = g.like("FILL", Tensor("kpool_zeros", selected * mask_size, backend=backend), (),
                       "kpool_zeros", backend)
        zeros = g.op("REPEAT", selected * n * mask_size, (zeros,), "kpool_zeros",
                     backend=backend)
        slots = g.op("CPY", selected * n * F32, (cells,), "indexer_sel_idx_f32",
                     backend=backend)
        dump = g.op("ARANGE", selected * F32, (), "kpool_dump", backend=backend)
        slots = g.like("SUB", slots, (dump,), "kpool_slots", backend)
        live = g.like("UNARY", g.view(inputs["gather_mask"], backend=backend), (), "kpool_live",
                      backend)
        slots = g.like("MUL", slots, (live,), "kpool_slots", backend)
        slots = g.like("ADD", slots, (dump,), "kpool_slots", backend)
        slots = g.op("CPY", selected * n * I32, (slots,), "kpool_slots_i32", backend=backend)
        width = (b.n_kv + selected) * mask_size
        everything = g.like("FILL", Tensor("kpool_mask_all", width, backend=backend), (),
                            "kpool_mask_all", backend)
        everything = g.op("REPEAT", width * n, (everything,), "kpool_mask_all",
                          backend=backend)
        unmasked = Tensor("kpool_sel", everything.nbytes, "SET_ROWS",
                          (g.view(zeros, backend=backend), g.view(slots, backend=backend),
                           g.view(everything, backend=backend)), view_src=everything,
                          backend=backend)
        g.nodes.append(unmasked)
        b.kpool_mask = g.op("ADD", b.n_kv * n * mask_size,
                            (g.view(unmasked, backend=backend), inputs["mask"]),
                            "kq_mask_dsa", backend=backend)
    mask = b.kpool_mask
    assert mask is not None, "a shared-indexer layer follows a pooled indexer's layer"
    latent = attn.n_head * attn.kv_lora * n * F32
    q_view = g.view(absorbed, "q (permuted)", backend=backend)
    if b.flash_attn:
        out = g.op("FLASH_ATTN_EXT", latent, (q_view, cache, cache, mask), "kqv",
                   backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * attn.n_head * F32, (cache, q_view), "kq",
                      backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        values = g.op("CONT", attn.kv_lora * b.n_kv * F16, (cache,), "v_cont",
                      backend=backend)
        out = g.op("MUL_MAT", latent, (values, probs), "kqv", backend=backend)
    return _latent_values(b, attn, out, layer, n, backend)


def _mixed_hc_graph(b: _Builder, embd: Tensor, inputs: Mapping[str, Tensor],
                    output_backend: int) -> Graph:
    """glm5-next's graph (glm5-next.cpp, with ggml's fused DSV4_HC operations, which the
    CPU and RPC backends run): the embedding repeated into ``hc`` residual streams; each
    half of each block flattens and norms the streams, mixes them into the pre, post and
    combination coefficients, reduces the streams by the pre ones (``DSV4_HC_PRE``), runs
    on the sum (the pooled-indexer attention or a KDA mixer, the dense network or the
    experts) and writes every stream back as a mix of all of them plus the output
    (``DSV4_HC_POST``, its post and combination coefficients made only then); the
    output rows kept, the streams averaged, normed, projected. Operations without
    weights run where the one before them ran: a block's first norm of the streams runs
    where the previous block ran, so the next device copies in the norm and the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc, width = m.hc_streams, m.n_embd * F32
    at = b.backend_of[0] if b.backend_of else b.input_backend
    x = g.op("REPEAT", hc * width * n, (embd,), "hc_init", backend=at)

    def pre(x: Tensor, name: str, backend: int, norm_at: int) -> tuple[Tensor, Tensor]:
        """build_hc_pre: the flattened streams normed (at ``norm_at``), mixed, the pre
        coefficients (scaled, biased, sigmoid, offset), the fused reduction. The reduced
        input, and the mixes the post and combination coefficients come from."""
        flat = g.op("RMS_NORM", x.nbytes, (g.view(x, backend=norm_at),), "hc_flat_norm",
                    backend=norm_at)
        mixes = g.op("MUL_MAT", (2 + hc) * hc * n * F32, (b.w(f"{name}_fn"), flat),
                     "hc_mixes", backend=backend)
        coef = g.op("MUL", hc * n * F32, (g.view(mixes, backend=backend),
                                          b.w(f"{name}_scale")), "hc_pre", backend=backend)
        for op in ("ADD", "UNARY", "SCALE"):
            coef = g.like(op, coef, (), "hc_pre", backend)
        return g.op("DSV4_HC_PRE", width * n, (x, coef), "hc_pre_out", backend=backend), mixes

    def post(out: Tensor, residual: Tensor, mixes: Tensor, name: str, backend: int) -> Tensor:
        """build_hc_post: the post coefficients (scaled, biased, sigmoid, doubled), the
        combination's (``DSV4_HC_COMB``), the streams written back (``DSV4_HC_POST``)."""
        coef = g.op("MUL", hc * n * F32, (g.view(mixes, backend=backend),
                                          b.w(f"{name}_scale")), "hc_post", backend=backend)
        for op in ("ADD", "UNARY", "SCALE"):
            coef = g.like(op, coef, (), "hc_post", backend)
        comb = g.op("DSV4_HC_COMB", hc * hc * n * F32, (mixes, b.w(f"{name}_scale")),
                    "hc_comb", backend=backend)
        return g.op("DSV4_HC_POST", hc * width * n, (out, residual, coef, comb), "hc_post_out",
                    backend=backend)

    for index, block in enumerate(m.blocks):
        backend = b.backend_of[index]
        layer = f"blk.{index}"
        residual = x
        cur, mixes = pre(x, f"{layer}.hc_attn", backend, at)
        normed = _norm(b, cur, f"{layer}.attn", backend)
        if block.recurrent is not None:
            out = _kda(b, normed, block.recurrent, index, inputs, backend,
                       _tail_backend(b, index))
        else:
            attn = block.attention
            assert attn is not None
            core = _kpool_attention_core(b, normed, attn, index, inputs, backend)
            out = _output_projection(b, core, attn, index, backend)
        x = post(out, residual, mixes, f"{layer}.hc_attn", backend)
        if block.feed_forward is not None:
            residual = x
            cur, mixes = pre(x, f"{layer}.hc_ffn", backend, backend)
            out = _feed_forward(b, _norm(b, cur, f"{layer}.ffn", backend), block.feed_forward,
                                index, backend)
            x = post(out, residual, mixes, f"{layer}.hc_ffn", backend)
        at = backend
    rows = g.op("GET_ROWS", hc * width * b.n_outputs,
                (g.view(x, backend=at), inputs["out_ids"]), "hc_rows", backend=at)
    size = width * b.n_outputs
    mean = g.op("ADD", size, (g.view(rows, backend=at), g.view(rows, backend=at)), "hc_head",
                backend=at)
    for _ in range(hc - 2):
        mean = g.like("ADD", mean, (g.view(rows, backend=at),), "hc_head", at)
    mean = g.like("SCALE", mean, (), "hc_head", at)
    normed = _norm(b, mean, "output", output_backend)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), normed),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g


def qsa_pools(model: GraphModel, n_kv: int) -> tuple[int, int, int, int]:
    """qwen4exp's pool counts in the graph llama.cpp reserves (a full cache:
    ``llama_memory_hybrid_idx_context``): the pools of ``n_kv`` cells, the pooled-key list
    padded past them (``kpool_pad``: one more, to 64), the top pools each token keeps and
    the cells it selects (the top pools' members and the incomplete tail)."""
    pool = model.qsa_pool
    real = max(1, n_kv // pool)
    padded = max(64, -(-(n_kv // pool + 1) // 64) * 64)
    top = min(padded, model.qsa_top_k // pool)
    return real, padded, top, pool * top + pool - 1


def _qwen4exp_inputs(b: _Builder, inputs: dict[str, Tensor]) -> None:
    """The inputs qwen4exp adds to the usual ones: the sparse attention's shared k-pool
    inputs (``build_inp_kpool``: the indexer cache's rows, each pool's cell and members,
    the pool mask, each token's tail cells, the pools to re-pool with their cells and
    positions) and the per-layer embedding's rows (``build_inp_ple``)."""
    g, m, n, host = b.graph, b.model, b.n_tokens, b.input_backend
    if m.qsa_pool:
        pool = m.qsa_pool
        new, padded, _, _ = qsa_pools(m, b.n_kv)
        inputs["qsa_k_idxs"] = g.input("qsa_k_idxs", n * I64, host)
        inputs["pool_cells"] = g.input("pool_cells", padded * I32, host)
        inputs["pool_idxs"] = g.input("pool_idxs", pool * padded * I32, host)
        inputs["pool_mask"] = g.input("pool_mask", padded * n * F16, host)
        inputs["tail_idxs"] = g.input("tail_idxs", (pool - 1) * n * I32, host)
        inputs["new_pool_idxs"] = g.input("new_pool_idxs", pool * new * I32, host)
        inputs["new_pool_rep"] = g.input("new_pool_rep", new * I64, host)
        inputs["new_pool_pos"] = g.input("new_pool_pos", 4 * new * I32, host)
    if m.ple_heads:
        inputs["ple_rows"] = g.input("ple_rows", m.ple_heads * n * I32, host)


def _qwen4exp_graph(b: _Builder, embd: Tensor, inputs: dict[str, Tensor],
                    output_backend: int) -> Graph:
    """qwen4exp's graph (qwen4exp.cpp): the embedding repeated into the residual streams
    (``hc_init``); the per-layer embedding gathered on the host and added to the streams
    by its block (``build_ple``); each half of each block reads the streams' gated mean
    (``build_hc_mix``, fused) and scatters its output back into every stream
    (``build_hc_combine``, fused); the last block keeps the output rows of its attention
    output, its scatter weights and the streams; the head's mixer (unfused) is the output
    norm. Nodes are laid out in the order ggml's depth-first expansion finds them: a
    mixer's scatter projection runs only when its combine does, after the half's output.
    The first norm of a block's mixer has no weights, so it runs where the previous block
    ran: the next device copies in that norm and the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc, width = m.low_rank_streams, m.n_embd * F32
    _qwen4exp_inputs(b, inputs)
    host = b.input_backend
    first = b.backend_of[0] if b.backend_of else host
    ple = None
    if m.ple_heads:
        ple = g.op("GET_ROWS", m.ple_heads * m.ple_width * n * F32,
                   (b.w("per_layer_token_embd.weight"), inputs["ple_rows"]), "ple_embd",
                   backend=host)
    x = g.op("REPEAT", hc * width * n, (g.view(embd, backend=embd.backend),), "hc_init",
             backend=first)
    at = first
    last = len(m.blocks) - 1
    for index, block in enumerate(m.blocks):
        backend = b.backend_of[index] if b.backend_of else host
        layer = f"blk.{index}"
        if index == m.ple_block and ple is not None:
            x = _qwen4exp_ple(b, x, ple, index, inputs, backend)
            at = backend
        cur, xn = _hc_mix(b, x, f"{layer}.hc_attn", backend, at)
        if block.recurrent is not None:
            out = _delta_net(b, cur, block.recurrent, index, inputs, backend,
                             _tail_backend(b, index))
        else:
            assert block.attention is not None
            out = _qwen4exp_attention(b, cur, block.attention, index, inputs, backend)
        residual = x
        if index == last:
            out = g.op("GET_ROWS", width * b.n_outputs, (out, inputs["out_ids"]),
                       "attn_out_rows", backend=backend)
            residual = g.op("GET_ROWS", hc * width * b.n_outputs,
                            (g.view(x, backend=x.backend), inputs["out_ids"]), "hc_rows",
                            backend=backend)
        x = _hc_combine(b, residual, out, xn, f"{layer}.hc_attn", backend,
                        inputs["out_ids"] if index == last else None)
        if block.feed_forward is not None:
            cur, xn = _hc_mix(b, x, f"{layer}.hc_ffn", backend, backend)
            out = _feed_forward(b, cur, block.feed_forward, index, backend)
            x = _hc_combine(b, x, out, xn, f"{layer}.hc_ffn", backend, None)
        at = backend
    cur, _ = _hc_mix(b, x, "output_hc", output_backend, at, fused=False)
    logits = g.op("MUL_MAT", m.n_vocab * b.n_outputs * F32, (b.w("output.weight"), cur),
                  "result_output", backend=output_backend)
    logits.is_output = True
    return g


# --- DeepSeek-V4 (deepseek4.cpp) --------------------------------------------------------

# llama-kv-cache-dsv4.h: the compression ratio of a CSA layer (compressed attention read
# through the lightning indexer's top-k) and of an HCA layer (heavily compressed, read
# whole); the compressed caches hold their cells in multiples of the KV padding.
CSA_RATIO = 4
HCA_RATIO = 128
COMPRESSED_KV_PADDING = 256


def _compressed_cells(n_ctx: int, ratio: int) -> int:
    """Cells of a compressed cache (``dsv4_comp_size`` padded to 256)."""
    cells = max(1, -(-n_ctx // ratio))
    return -(-cells // COMPRESSED_KV_PADDING) * COMPRESSED_KV_PADDING


class _Expanding:
    """Tensors made as a builder goes that join the graph only when a root is expanded
    (``ggml_build_forward_expand``: each tensor after its sources, depth first, in source
    order). The order the nodes run in is the order they are first reached from the
    roots the builder expands, not the order they are made; deepseek4.cpp expands its
    cache writes, queries and residuals early, so that order decides what is alive at
    once."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.seen: set[int] = set()

    @staticmethod
    def op(op: str, nbytes: int, srcs: Sequence[Tensor], name: str,
           inplace: bool = False) -> Tensor:
        """An operation; ``inplace`` when its result has its first source's layout."""
        return Tensor(name, nbytes, op, tuple(srcs),
                      layout=srcs[0].layout if inplace else object())

    @staticmethod
    def view(src: Tensor, name: str = "", nbytes: int | None = None) -> Tensor:
        root = src.view_src or src
        return Tensor(name or f"{src.name} (view)", src.nbytes if nbytes is None else nbytes,
                      "VIEW", (src,), view_src=root, layout=src.layout
                      if nbytes is None else object(), external=root.external)

    def expand(self, root: Tensor) -> None:
        stack: list[tuple[Tensor, bool]] = [(root, False)]
        while stack:
            tensor, ready = stack.pop()
            if id(tensor) in self.seen:
                continue
            if not ready:
                stack.append((tensor, True))
                stack.extend((src, False) for src in reversed(tensor.srcs)
                             if id(src) not in self.seen)
                continue
            self.seen.add(id(tensor))
            if tensor.external or (tensor.op == "NONE" and not tensor.is_input):
                continue  # a weight, a cache, or a constant allocated where first used
            (self.graph.inputs if tensor.is_input else self.graph.nodes).append(tensor)


def _assign_backends(graph: Graph, weights: set[int], cpu: int) -> None:
    """The backend of every node and view, as ``ggml_backend_sched_split_graph`` picks
    them: an input on the CPU, a view of a weight or cache where that lives, an
    operation reading a weight where the weight lives (but ROPE and FLASH_ATTN_EXT);
    then each device's assignment spread down and up the graph over unassigned nodes
    (views skipped, the CPU's not spread), then any backend's; a node still unassigned
    goes where most of its sources are, a view where its source is, a constant where its
    reader runs."""
    nodes = graph.nodes
    backend: dict[int, int] = {}
    for tensor in graph.inputs:
        backend[id(tensor)] = cpu
    for node in nodes:
        root = node.view_src
        if root is not None and root.external:
            backend[id(node)] = root.backend
        elif node.op not in ("ROPE", "FLASH_ATTN_EXT"):
            pinned = next((src for src in node.srcs if id(src) in weights), None)
            if pinned is not None:
                backend[id(node)] = pinned.backend
    ops = [node for node in nodes if node.op != "VIEW"]
    for order, skip_cpu in ((ops, True), (ops[::-1], True), (ops, False), (ops[::-1], False)):
        current = -1
        for node in order:
            assigned = backend.get(id(node))
            if assigned is not None:
                current = -1 if skip_cpu and assigned == cpu else assigned
            elif current != -1:
                backend[id(node)] = current
    for node in ops:
        if id(node) not in backend:
            counts: dict[int, int] = {}
            for src in node.srcs:
                where = backend.get(id(src.view_src or src), src.backend if src.external
                                    else None)
                if where is not None:
                    counts[where] = counts.get(where, 0) + 1
            # The first backend with the most sources, the first of all with none.
            backend[id(node)] = max(sorted(counts), key=lambda b: counts[b]) if counts \
                else 0
    for node in nodes:
        if node.op == "VIEW" and id(node) not in backend:
            root = node.view_src
            assert root is not None
            backend[id(node)] = root.backend if root.external else backend[id(root)]
        node.backend = backend[id(node)]
        for src in node.srcs:
            if not src.external and id(src) not in backend:
                backend[id(src)] = node.backend  # a constant: where it is read
                src.backend = node.backend


def _dsv4_graph(b: _Builder, output_backend: int) -> Graph:
    """DeepSeek-V4's graph (deepseek4.cpp), with llama.cpp's fused hyper-connection
    operations (on by default where the layer's device runs them): the token rows
    repeated into ``hc`` residual streams; each half of a block normed whole and mixed
    into coefficients, reduced to one row (``DSV4_HC_PRE``) and written back to every
    stream (``DSV4_HC_POST``); the output rows reduced once more without the fused
    operation (``build_hc_head``: each stream's strided view times its coefficient).
    Attention: low-rank queries normed and roped, one K row per token into the
    sliding-window cache; a compressed layer first feeds its compressor (the ubatch's
    rows with the compressor state, gathered in blocks, softmax-pooled, normed, roped,
    written to its compressed cache; the state's last rows kept) and attends over the
    sliding window and its compressed cache, a CSA layer through the lightning indexer's
    top-k (its queries ``indexer_heads x indexer_dim`` per token, rotated), an HCA layer
    through all of it; the output de-roped and projected through grouped low-rank
    matrices. The mixture of experts is scored by sqrt(softplus) with a selection bias,
    beside a shared expert. The backends are those ggml's scheduler picks, so on a
    split each device copies in the streams and their norm from the one before."""
    g, m, n = b.graph, b.model, b.n_tokens
    e = _Expanding(g)
    hc, width = m.hc_streams, m.n_embd * F32
    host = b.input_backend
    weights: set[int] = set()

    def backend_of(index: int) -> int:
        return b.backend_of[index] if b.backend_of else host

    def weight(name: str, where: int) -> Tensor:
        tensor = b.weights.get(name)
        if tensor is None:
            tensor = b.weights[name] = Tensor(name, 0, external=True, backend=where)
            weights.add(id(tensor))
        return tensor

    def cache(name: str, where: int) -> Tensor:
        return b.weights.setdefault(name, Tensor(name, 0, external=True, backend=where))

    def inp(name: str, nbytes: int) -> Tensor:
        return Tensor(name, nbytes, is_input=True, backend=host)

    def write(name: str, target: Tensor, rows: Tensor, idxs: Tensor) -> Tensor:
        """set_rows into ``target``: a view of it, allocated with it."""
        return Tensor(name, 0, "SET_ROWS", (target, rows, idxs), view_src=target)

    def norm(x: Tensor, w: Tensor, name: str) -> Tensor:
        return e.op("MUL", x.nbytes, (e.op("RMS_NORM", x.nbytes, (x,), f"{name}_rms",
                                           inplace=True), w), name, inplace=True)

    def rows(count: int) -> int:
        return count * n * F32

    # Inputs (build_inp_embd, build_inp_pos, build_inp_out_ids, build_inp_dsv4).
    tokens = inp("inp_tokens", n * I32)
    embd_rows = e.op("GET_ROWS", width * n, (weight("token_embd.weight", host), tokens),
                     "embd")
    e.expand(embd_rows)
    e.expand(inp("inp_embd", width * n))
    # Flash attention reads f16 masks, the fused lightning indexer always does.
    mask_type = F16 if b.flash_attn else F32
    raw_mask = inp("attn_inp_kq_mask", b.n_kv_swa * n * mask_type)
    e.expand(raw_mask)
    pos = inp("inp_pos", n * I32)
    out_ids = inp("inp_out_ids", b.n_outputs * I32)
    k_idxs = inp("attn_inp_k_idxs", n * I64)
    compressed_inputs: dict[str, dict[str, Tensor]] = {}
    for kind, ratio, overlap in (("csa", CSA_RATIO, True), ("hca", HCA_RATIO, False),
                                 ("lid", CSA_RATIO, True)):
        # llama_kv_cache_dsv4_context's reserve plan: the blocks a ubatch of one
        # sequence may close, the state rows it keeps (two blocks' worth for the
        # overlapping CSA compressors, one for HCA), no rollback rows.
        blocks = n // ratio + 1
        state = (2 if overlap else 1) * ratio
        compressed_inputs[kind] = {
            "state_pos": inp(f"dsv4_{kind}_state_pos", n * I32),
            "persist_src": inp(f"dsv4_{kind}_state_persist_src_idxs", min(n, state) * I32),
            "persist_dst": inp(f"dsv4_{kind}_state_persist_dst_idxs", min(n, state) * I32),
            "read": inp(f"dsv4_{kind}_state_read_idxs",
                        (2 if overlap else 1) * ratio * blocks * I32),
            "write_idxs": inp(f"dsv4_{kind}_state_write_idxs", blocks * I64),
            "write_pos": inp(f"dsv4_{kind}_state_write_pos", blocks * I32),
            "mask": inp(f"dsv4_{kind}_kq_mask", _compressed_cells(b.n_kv, ratio) * n
                        * (F16 if kind == "lid" else mask_type))}
    # The indexer's cache rotates its keys (and so the queries) by a Hadamard matrix.
    indexed = [block.attention.indexer_dim for block in m.blocks
               if block.attention is not None and block.attention.indexer_dim]
    lid_rot = inp("attn_inp_k_rot", indexed[0] ** 2 * F32 if indexed else 0)

    def hc_pre(x: Tensor, fn: str, scale: str, base: str, where: int,
               tokens: int) -> tuple[Tensor, Tensor, Tensor]:
        """build_hc_pre: the streams flattened and normed, mixed into the pre, post and
        combination coefficients, the fused reduction. Returns it, post, comb."""
        mix = (2 + hc) * hc
        flat = e.view(x, "hc_flat")
        flat_norm = e.op("RMS_NORM", x.nbytes, (flat,), "hc_flat_norm", inplace=True)
        mixes = e.op("MUL_MAT", mix * tokens * F32, (weight(fn, where), flat_norm),
                     "hc_mixes")
        strided = hc * F32 + (tokens - 1) * mix * F32

        def coefficients(name: str) -> Tensor:
            c = e.op("MUL", hc * tokens * F32,
                     (e.view(mixes, name, strided), e.view(weight(scale, where))), name)
            c = e.op("ADD", c.nbytes, (c, e.view(weight(base, where))), name, inplace=True)
            c = e.op("UNARY", c.nbytes, (c,), name, inplace=True)
            return e.op("SCALE", c.nbytes, (c,), name, inplace=True)

        pre = coefficients("hc_pre")
        post = coefficients("hc_post")
        comb = e.op("DSV4_HC_COMB", hc * hc * tokens * F32,
                    (mixes, weight(scale, where), weight(base, where)), "hc_comb")
        return e.op("DSV4_HC_PRE", width * tokens, (x, pre), "hc_pre_out"), post, comb

    def hc_post(out: Tensor, residual: Tensor, post: Tensor, comb: Tensor) -> Tensor:
        return e.op("DSV4_HC_POST", residual.nbytes, (out, residual, post, comb), "hc_out")

    def compress(kind: str, kv: Tensor, score: Tensor, norm_w: Tensor, ratio: int,
                 dim: int, index: int, where: int) -> Tensor:
        """build_{overlap,hca}_compressed_kv_from_state: the state's rows beside the
        ubatch's, gathered ``ratio`` (twice over when overlapping) per block, each
        block's softmax-weighted sum, normed and roped."""
        put = compressed_inputs[kind]
        overlap = ratio == CSA_RATIO
        blocks = n // ratio + 1
        plane = (2 if overlap else 1) * dim
        state = (2 if overlap else 1) * ratio
        sources = []
        for name, rows_in in (("kv", kv), ("score", score)):
            state_view = e.view(cache(f"{kind}_state_{name}_{index}", where),
                                f"{kind}_base_{name}")
            joined = e.op("CONCAT", plane * (state + n) * F32, (state_view, rows_in),
                          f"{kind}_source_{name}")
            if overlap:
                # A zero row (or -inf for the scores) appended for the padded reads.
                row = e.op("SCALE", plane * F32, (e.view(joined, nbytes=plane * F32),),
                           f"{kind}_zero_row")
                joined = e.op("CONCAT", joined.nbytes + plane * F32,
                              (joined, e.view(row)), f"{kind}_source_{name}_padded")
            sources.append(joined)
        per_block = (2 if overlap else 1) * ratio
        parts = []
        for joined, name in zip(sources, ("kv", "score"), strict=True):
            gathered = e.op("GET_ROWS", plane * per_block * blocks * F32,
                            (joined, put["read"]), f"{kind}_{name}_rows")
            if overlap:
                halves = [e.op("CONT", dim * ratio * blocks * F32,
                               (e.view(gathered, nbytes=gathered.nbytes),),
                               f"{kind}_{name}_{half}") for half in ("prev", "cur")]
                gathered = e.op("CONCAT", dim * per_block * blocks * F32,
                                (e.view(halves[0]), e.view(halves[1])), f"{kind}_{name}s")
            parts.append(e.op("CONT", dim * per_block * blocks * F32,
                              (e.view(gathered, nbytes=gathered.nbytes),),
                              f"{kind}_{name}_t"))
        values, scores = parts
        probs = e.op("SOFT_MAX", scores.nbytes, (scores,), f"{kind}_weights", inplace=True)
        pooled = e.op("MUL", values.nbytes, (values, probs), f"{kind}_pooled", inplace=True)
        pooled = e.op("SUM_ROWS", dim * blocks * F32, (pooled,), f"{kind}_sum")
        comp = e.op("CONT", pooled.nbytes, (e.view(pooled, nbytes=pooled.nbytes),),
                    f"{kind}_comp")
        comp = norm(comp, norm_w, f"{kind}_comp_norm")
        return e.op("ROPE", comp.nbytes, (comp, put["write_pos"]), f"{kind}_comp_rope",
                    inplace=True)

    def compressor(kind: str, cur: Tensor, layer: str, prefix: str, where: int, ratio: int,
                   dim: int, index: int) -> Tensor:
        """A compressor's projections and pooled rows written to its cache, its state's
        last rows kept; the cache write (the root ggml expands)."""
        put = compressed_inputs[kind]
        overlap = ratio == CSA_RATIO
        plane = (2 if overlap else 1) * dim
        state = (2 if overlap else 1) * ratio
        kv = e.op("MUL_MAT", rows(plane), (weight(f"{layer}.{prefix}_kv", where), cur),
                  f"{kind}_state_kv")
        score = e.op("MUL_MAT", rows(plane), (weight(f"{layer}.{prefix}_gate", where), cur),
                     f"{kind}_state_score")
        ape = e.op("GET_ROWS", rows(plane), (weight(f"{layer}.{prefix}_ape", where),
                                             put["state_pos"]), f"{kind}_ape_rows")
        score = e.op("ADD", score.nbytes, (score, ape), f"{kind}_state_score_ape",
                     inplace=True)
        comp = compress(kind, kv, score, weight(f"{layer}.{prefix}_norm", where), ratio, dim,
                        index, where)
        if kind == "lid":
            flat = e.view(comp, "lid_comp_flat")
            comp = e.view(e.op("MUL_MAT", comp.nbytes, (lid_rot, flat), "lid_comp_rot"))
        e.expand(write(f"{kind}_write", cache(f"cache_{kind}_{index}", where),
                       e.view(comp), put["write_idxs"]))
        for rows_in, name in ((kv, "kv"), (score, "score")):
            kept = e.op("GET_ROWS", plane * min(n, state) * F32, (rows_in, put["persist_src"]),
                        f"{kind}_persist_{name}")
            e.expand(write(f"{kind}_persist_{name}_write",
                           cache(f"{kind}_state_{name}_{index}", where), kept,
                           put["persist_dst"]))
        return comp

    def attention(cur: Tensor, index: int, where: int) -> Tensor:
        """build_attention_impl for one layer of the main graph."""
        attn = m.blocks[index].attention
        assert attn is not None
        layer = f"blk.{index}"
        heads, dim = attn.n_head, attn.k_width
        ratio = m.compress_ratios[index]
        qr = e.op("MUL_MAT", rows(attn.q_lora), (weight(f"{layer}.attn_q_a", where), cur),
                  "qr")
        qr = norm(qr, weight(f"{layer}.attn_q_a_norm", where), "qr_norm")
        q = e.op("MUL_MAT", rows(heads * dim), (weight(f"{layer}.attn_q_b", where), qr), "q")
        q = e.op("RMS_NORM", q.nbytes, (e.view(q, "q (reshaped)"),), "q_norm", inplace=True)
        q = e.op("ROPE", q.nbytes, (q, pos), "q", inplace=True)
        kv = e.op("MUL_MAT", rows(dim), (weight(f"{layer}.attn_kv", where), cur), "kv")
        kv = norm(kv, weight(f"{layer}.attn_kv_a_norm", where), "kv_norm")
        kv = e.op("ROPE", kv.nbytes, (e.view(kv, "kv (reshaped)"), pos), "kv", inplace=True)
        top_k = None
        compressed = None
        if ratio == HCA_RATIO:
            compressor("hca", cur, layer, "attn_compressor", where, ratio, dim, index)
            compressed = compressed_inputs["hca"]
        elif ratio == CSA_RATIO:
            compressor("csa", cur, layer, "attn_compressor", where, ratio, dim, index)
            compressor("lid", cur, layer, "indexer_compressor", where, ratio,
                       attn.indexer_dim, index)
            compressed = compressed_inputs["csa"]
            # build_lid_top_k: the indexer's query heads from the low-rank query, roped
            # and rotated, scored (fused) against the indexer's cache with per-head
            # weights, the best cells of each token kept.
            size = rows(attn.indexer_heads * attn.indexer_dim)
            iq = e.op("MUL_MAT", size, (weight(f"{layer}.indexer.attn_q_b", where), qr),
                      "lid_q")
            iq = e.op("ROPE", size, (e.view(iq, "lid_q (reshaped)"), pos), "lid_q_rope",
                      inplace=True)
            iq = e.view(e.op("MUL_MAT", size, (lid_rot, e.view(iq, "lid_q (flat)")),
                             "lid_q_rot"))
            iw = e.op("MUL_MAT", rows(attn.indexer_heads),
                      (weight(f"{layer}.indexer.proj", where), cur), "lid_weights")
            iw = e.op("SCALE", iw.nbytes, (iw,), "lid_weights", inplace=True)
            cells = _compressed_cells(b.n_kv, CSA_RATIO)
            score = e.op("LIGHTNING_INDEXER", rows(cells),
                         (e.view(iq), e.view(cache(f"cache_lid_{index}", where)),
                          e.view(iw), compressed_inputs["lid"]["mask"]), "lid_score")
            picked = e.op("TOP_K", min(attn.indexer_top_k, cells) * n * I32, (score,),
                          "lid_top_k")
            top_k = e.op("CONT", picked.nbytes, (picked,), "lid_top_k")
        e.expand(q)
        e.expand(kv)
        e.expand(write("raw_write", cache(f"cache_k_{index}", where), e.view(kv), k_idxs))
        raw_k = e.view(cache(f"cache_k_{index}", where), "raw_k")
        if compressed is None:
            keys, mask = raw_k, raw_mask
        else:
            kind = "csa" if ratio == CSA_RATIO else "hca"
            cells = _compressed_cells(b.n_kv, ratio)
            keys = e.op("CONCAT", dim * (b.n_kv_swa + cells) * F16,
                        (raw_k, e.view(cache(f"cache_{kind}_{index}", where))), "k_all")
            comp_mask = compressed["mask"]
            if top_k is not None:
                # build_top_k_mask: every cell masked, the picked cells zeroed, the
                # causal mask added.
                everything = e.op("FILL", comp_mask.nbytes, (comp_mask,), "kq_mask_all",
                                  inplace=True)
                zeros = Tensor("zeros", top_k.nbytes // I32 * mask_type)
                zeros = e.op("FILL", zeros.nbytes, (zeros,), "zeros", inplace=True)
                unmasked = Tensor("kq_mask_top_k", comp_mask.nbytes, "SET_ROWS",
                                  (e.view(everything), zeros, e.view(top_k)),
                                  view_src=everything)
                comp_mask = e.op("ADD", comp_mask.nbytes, (e.view(unmasked), comp_mask),
                                 "csa_top_k_mask")
            mask = e.op("CONCAT", raw_mask.nbytes + comp_mask.nbytes, (raw_mask, comp_mask),
                        "kq_mask")
        sinks = weight(f"{layer}.attn_sinks", where)
        if b.flash_attn:
            out = e.op("FLASH_ATTN_EXT", rows(heads * dim),
                       (e.view(q), e.view(keys), e.view(keys), mask, sinks), "kqv")
        else:
            cells = keys.nbytes // (dim * F16) if compressed is not None else b.n_kv_swa
            scores = e.op("MUL_MAT", rows(cells * heads), (e.view(keys), e.view(q)), "kq")
            scores = e.op("SOFT_MAX", scores.nbytes, (scores, mask, sinks), "kq_soft_max",
                          inplace=True)
            values = e.op("CONT", dim * cells * F16, (e.view(keys),), "v_cont")
            out = e.op("MUL_MAT", rows(heads * dim), (values, scores), "kqv")
            out = e.op("CONT", out.nbytes, (e.view(out),), "kqv_merged_cont")
        out = e.view(out, "attn_out_2d")
        e.expand(out)
        out = e.op("ROPE_BACK", out.nbytes, (e.view(out), pos), "attn_derope", inplace=True)
        grouped = e.op("MUL_MAT", rows(attn.output_groups * attn.output_lora),
                       (weight(f"{layer}.attn_output_a", where), e.view(e.view(out))),
                       "attn_wo_a")
        grouped = e.op("CONT", grouped.nbytes, (e.view(grouped),), "attn_wo_a_cont")
        return e.op("MUL_MAT", width * n, (weight(f"{layer}.attn_output_b", where), grouped),
                    "attn_out")

    def feed_forward(cur: Tensor, index: int, where: int) -> Tensor:
        """build_moe_ffn (sqrt-softplus scores, a selection bias, normalized weights) and
        the shared expert, added; the experts' weights and sum expanded early. A
        hash-routed layer looks its experts up by token (``ffn_gate_tid2eid``) instead
        of ranking the biased scores."""
        ffn = m.blocks[index].feed_forward
        assert ffn is not None
        layer = f"blk.{index}"
        k, experts = ffn.n_expert_used, ffn.n_expert
        logits = e.op("MUL_MAT", rows(experts), (weight(f"{layer}.ffn_gate_inp", where), cur),
                      "ffn_moe_logits")
        probs = e.op("UNARY", logits.nbytes, (logits,), "ffn_moe_softplus", inplace=True)
        probs = e.op("SQRT", probs.nbytes, (probs,), "ffn_moe_probs", inplace=True)
        if index < m.hash_routed_layers:
            chosen = e.op("GET_ROWS", k * n * I32,
                          (weight(f"{layer}.ffn_gate_tid2eid", where), tokens),
                          "ffn_moe_hash_experts")
        else:
            biased = e.op("ADD", probs.nbytes, (probs, weight(f"{layer}.exp_probs_b", where)),
                          "ffn_moe_probs_biased")
            order = e.op("ARGSORT", experts * n * I32, (biased,), "ffn_moe_argsort")
            chosen = e.view(order, "ffn_moe_topk", k * n * I32)
        share = e.op("GET_ROWS", rows(k), (e.view(probs), chosen), "ffn_moe_weights")
        if ffn.norm_weights:
            total = e.op("SUM_ROWS", rows(1), (e.view(share),), "ffn_moe_weights_sum")
            total = e.op("CLAMP", total.nbytes, (total,), "ffn_moe_weights_sum", inplace=True)
            share = e.op("DIV", share.nbytes, (e.view(share), total), "ffn_moe_weights_norm")
        share = e.view(share)
        e.expand(share)
        x = e.view(cur)
        size = rows(ffn.n_ff * k)
        up = e.op("MUL_MAT_ID", size, (weight(f"{layer}.ffn_up_exps", where), x, chosen),
                  "ffn_moe_up")
        gate = e.op("MUL_MAT_ID", size, (weight(f"{layer}.ffn_gate_exps", where), x, chosen),
                    "ffn_moe_gate")
        act = e.op("GLU", size, (gate, up), "ffn_moe_swiglu_limited")
        down = e.op("MUL_MAT_ID", width * k * n,
                    (weight(f"{layer}.ffn_down_exps", where), act, chosen), "ffn_moe_down")
        down = e.op("MUL", down.nbytes, (down, share), "ffn_moe_weighted", inplace=True)
        e.expand(down)
        views = [e.view(down, f"ffn_moe_weighted ({i})", width * n) for i in range(k)]
        for view in views:
            e.expand(view)
        total = views[0]
        for view in views[1:]:
            total = e.op("ADD", width * n, (total, view), "ffn_moe_out")
            e.expand(total)
        shared = ffn.n_ff_shexp
        if not shared:
            return total
        up = e.op("MUL_MAT", rows(shared), (weight(f"{layer}.ffn_up_shexp", where), cur),
                  "ffn_up")
        gate = e.op("MUL_MAT", rows(shared), (weight(f"{layer}.ffn_gate_shexp", where), cur),
                    "ffn_gate")
        act = e.op("GLU", rows(shared), (gate, up), "ffn_swiglu_limited")
        down = e.op("MUL_MAT", width * n, (weight(f"{layer}.ffn_down_shexp", where), act),
                    "ffn_shexp")
        return e.op("ADD", width * n, (total, down), "ffn_out", inplace=True)

    x = e.op("REPEAT", hc * width * n, (e.view(embd_rows),), "hc_init")
    for index in range(len(m.compress_ratios)):
        where = backend_of(index)
        layer = f"blk.{index}"
        residual = x
        cur, post, comb = hc_pre(x, f"{layer}.hc_attn_fn", f"{layer}.hc_attn_scale",
                                 f"{layer}.hc_attn_base", where, n)
        cur = norm(cur, weight(f"{layer}.attn_norm", where), "attn_norm")
        x = hc_post(attention(cur, index, where), residual, post, comb)
        residual = x
        cur, post, comb = hc_pre(x, f"{layer}.hc_ffn_fn", f"{layer}.hc_ffn_scale",
                                 f"{layer}.hc_ffn_base", where, n)
        for root in (residual, post, comb):
            e.expand(root)
        cur = norm(cur, weight(f"{layer}.ffn_norm", where), "ffn_norm")
        x = hc_post(feed_forward(cur, index, where), residual, post, comb)
    # The output rows of every stream, reduced once more (build_hc_head, unfused).
    outputs = b.n_outputs
    x = e.op("GET_ROWS", hc * width * outputs, (e.view(x, "hc_flat"), out_ids), "hc_rows")
    flat_norm = e.op("RMS_NORM", x.nbytes, (e.view(x, "hc_flat"),), "hc_head_norm",
                     inplace=True)
    mixes = e.op("MUL_MAT", hc * outputs * F32,
                 (weight("output_hc_fn.weight", output_backend), flat_norm), "hc_head_mixes")
    pre = e.op("MUL", mixes.nbytes, (mixes, weight("output_hc_scale.weight", output_backend)),
               "hc_head_pre", inplace=True)
    pre = e.op("ADD", pre.nbytes, (pre, weight("output_hc_base.weight", output_backend)),
               "hc_head_pre", inplace=True)
    pre = e.op("UNARY", pre.nbytes, (pre,), "hc_head_pre", inplace=True)
    pre = e.op("SCALE", pre.nbytes, (pre,), "hc_head_pre", inplace=True)
    reduced = None
    for stream in range(hc):
        view = e.view(x, f"hc_stream_{stream}", (outputs - 1) * hc * width + width)
        term = e.op("MUL", width * outputs, (view, e.view(pre)), "hc_head_term")
        reduced = term if reduced is None else e.op("ADD", term.nbytes, (reduced, term),
                                                    "hc_head", inplace=True)
    assert reduced is not None
    normed = norm(reduced, weight("output_norm.weight", output_backend), "result_norm")
    logits = e.op("MUL_MAT", m.n_vocab * outputs * F32,
                  (weight("output.weight", output_backend), normed), "result_output")
    logits.is_output = True
    e.expand(logits)
    _assign_backends(g, weights, host)
    return g


def _hc_mix(b: _Builder, x: Tensor, name: str, backend: int, norm_at: int,
            fused: bool = True) -> tuple[Tensor, Tensor]:
    """qwen4exp's ``build_hc_mix`` up to the mean: the streams normed (the norm without
    weights at ``norm_at``) and scaled, the low-rank gates, the gated mean of the streams
    (one ``DSV4_HC_PRE``, or unfused for the head: the sigmoid, the product in place, the
    first stream made contiguous and the others added). The mean, and the normed streams
    the scatter projection reads later."""
    g, m = b.graph, b.model
    hc, width = m.low_rank_streams, m.n_embd * F32
    tokens = x.nbytes // (hc * width)
    size = hc * width * tokens
    normed = g.op("RMS_NORM", size, (x,), "hc_norm_rms", backend=norm_at)
    normed = g.like("MUL", normed, (b.w(f"{name}_norm"),), "hc_norm", backend)
    flat = g.view(normed, "hc_norm (flat)", backend=backend)
    low = g.op("MUL_MAT", m.low_rank_width * tokens * F32, (b.w(f"{name}_down"), flat), "hc_lo",
               backend=backend)
    low = g.like("UNARY", g.like("SCALE", low, (), "hc_lo_scaled", backend), (), "hc_lo_silu",
                 backend)
    gate = g.op("MUL_MAT", size, (b.w(f"{name}_up"), low), "hc_gate", backend=backend)
    if fused:
        mixed = g.op("DSV4_HC_PRE", width * tokens, (g.view(flat, backend=backend),
                                                     g.view(gate, backend=backend)),
                     "hc_mixed", backend=backend)
        return mixed, flat
    gate = g.like("UNARY", gate, (), "hc_gate_sigmoid", backend)
    gated = g.like("MUL", flat, (gate,), "hc_gated", backend)
    mixed = g.op("CONT", width * tokens, (g.view(gated, backend=backend),), "hc_mixed",
                 backend=backend)
    for _ in range(1, hc):
        mixed = g.like("ADD", mixed, (g.view(gated, backend=backend),), "hc_mixed", backend)
    return g.like("SCALE", mixed, (), "hc_mixed", backend), flat


def _hc_combine(b: _Builder, residual: Tensor, out: Tensor, xn: Tensor, name: str,
                backend: int, out_ids: Tensor | None) -> Tensor:
    """qwen4exp's ``build_hc_combine`` (fused): the mixer's scatter projection of its
    normed streams (the output rows of it in the last block), its weights (scaled,
    sigmoid, doubled in place) and every stream plus the half's output times its
    weight."""
    g, m = b.graph, b.model
    tokens = out.nbytes // (m.n_embd * F32)
    inject = g.op("MUL_MAT", b.rows(xn) * F32, (b.w(f"{name}_inject"), xn), "hc_inject",
                  backend=backend)
    if out_ids is not None:
        inject = g.op("GET_ROWS", m.low_rank_streams * tokens * F32, (inject, out_ids),
                      "hc_inject_rows", backend=backend)
    weights = g.like("SCALE", inject, (), "hc_scatter_scaled", backend)
    weights = g.like("SCALE", g.like("UNARY", weights, (), "hc_scatter", backend), (),
                     "hc_scatter_doubled", backend)
    return g.op("DSV4_HC_POST", residual.nbytes, (out, residual, weights), "hc_combine",
                backend=backend)


def _qwen4exp_ple(b: _Builder, x: Tensor, embd: Tensor, index: int,
                  inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """qwen4exp's ``build_ple``, in the order ggml expands it (from the write-back of the
    convolution's history): the history's cached rows; the value projected and repeated
    over the streams; the key projected and normed per stream, the streams normed as the
    query, their per-stream score and gate; the gated value; it normed, concatenated after
    the history (whose tail is written back); the dilated convolution as a sum of shifted
    copies, each made contiguous and scaled by its tap; SiLU, made contiguous, added with
    the gated value to the streams."""
    g, m, n = b.graph, b.model, b.n_tokens
    hc = m.low_rank_streams
    channels = hc * m.n_embd
    size = channels * n * F32
    layer = f"blk.{index}"
    history = (m.ple_kernel - 1) * m.ple_dilation
    rows = g.op("GET_ROWS", history * channels * F32,
                (external(f"cache_p_{index}"), inputs["rs_copy"]), "ple_conv_state",
                backend=backend)
    value = g.op("MUL_MAT", m.n_embd * n * F32, (b.w(f"{layer}.ple_value"), embd),
                 "ple_value", backend=backend)
    value = g.op("REPEAT", size, (g.view(value, backend=backend),), "ple_value_streams",
                 backend=backend)
    key = g.op("MUL_MAT", size, (b.w(f"{layer}.ple_key"), embd), "ple_key", backend=backend)
    key = g.like("RMS_NORM", g.view(key, backend=backend), (), "ple_key_norm", backend)
    key = g.like("MUL", key, (b.w(f"{layer}.ple_norm_key"),), "ple_key_normed", backend)
    query = g.op("RMS_NORM", size, (x,), "ple_query_norm", backend=backend)
    query = g.like("MUL", query, (b.w(f"{layer}.ple_norm_query"),), "ple_query", backend)
    score = g.like("MUL", key, (query,), "ple_key_query", backend)
    score = g.op("SUM_ROWS", hc * n * F32, (score,), "ple_score", backend=backend)
    score = g.like("SCALE", score, (), "ple_score_scaled", backend)
    sign = g.op("UNARY", score.nbytes, (score,), "ple_sign", backend=backend)
    magnitude = g.op("UNARY", score.nbytes, (score,), "ple_abs", backend=backend)
    magnitude = g.like("SQRT", g.like("CLAMP", magnitude, (), "ple_clamped", backend), (),
                       "ple_magnitude", backend)
    gate = g.like("UNARY", g.like("MUL", sign, (magnitude,), "ple_signed", backend), (),
                  "ple_gate", backend)
    gated = g.like("MUL", value, (gate,), "ple_gated_value", backend)
    normed = g.op("RMS_NORM", size, (g.view(gated, backend=backend),), "ple_conv_norm",
                  backend=backend)
    normed = g.like("MUL", normed, (b.w(f"{layer}.ple_norm_conv"),), "ple_conv_normed",
                    backend)
    padded = g.op("CONCAT", (history + n) * channels * F32,
                  (g.view(rows, backend=backend), g.view(normed, backend=backend)),
                  "ple_conv_input", backend=backend)
    tail = g.op("CONT", history * channels * F32, (g.view(padded, backend=backend),),
                "ple_conv_tail", backend=backend)
    g.op("CPY", 0, (tail, external(f"cache_p_{index}")), backend=backend)
    conv = None
    for tap in range(m.ple_kernel):
        shifted = g.op("CONT", size, (g.view(padded, backend=backend),), f"ple_shift_{tap}",
                       backend=backend)
        weight = g.op("CONT", channels * F32, (b.w(f"{layer}.ple_conv1d"),), "ple_tap",
                      backend=backend)
        term = g.like("MUL", shifted, (weight,), "ple_term", backend)
        conv = term if conv is None else g.like("ADD", conv, (term,), "ple_conv", backend)
    assert conv is not None
    conv = g.like("UNARY", conv, (), "ple_conv_silu", backend)
    conv = g.op("CONT", size, (conv,), "ple_conv_out", backend=backend)
    summed = g.like("ADD", gated, (g.view(conv, backend=backend),), "ple_sum", backend)
    return g.like("ADD", x, (summed,), "ple_out", backend)


def _qwen4exp_attention(b: _Builder, cur: Tensor, attn: AttentionShape, index: int,
                        inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """qwen4exp's full-attention layer (``build_layer_attn``), in ggml's expansion order:
    the sparse attention's selection (with pooled keys); Q (with its gate), K and V
    projected, normed, roped and cached; the selection mask (else the causal mask) and
    flash attention over it; the gate made contiguous and applied, the output
    projection."""
    g, m, n = b.graph, b.model, b.n_tokens
    layer = f"blk.{index}"
    selection = _qsa_select(b, cur, index, inputs, backend) if m.qsa_pool else None
    q_full = g.op("MUL_MAT", attn.q_width * n * F32, (b.w(f"{layer}.q"), cur), "Qcur_full",
                  backend=backend)
    q = g.op("RMS_NORM", attn.out_width * n * F32, (g.view(q_full, backend=backend),),
             "Qcur_normed", backend=backend)
    q = g.like("MUL", q, (b.w(f"{layer}.attn_q_norm"),), "Qcur_normed", backend)
    q = g.like("ROPE", q, (inputs["pos"],), "Qcur", backend)
    v = g.op("MUL_MAT", attn.v_width * n * F32, (b.w(f"{layer}.v"), cur), "Vcur",
             backend=backend)
    k = g.op("MUL_MAT", attn.k_width * n * F32, (b.w(f"{layer}.k"), cur), "Kcur",
             backend=backend)
    k = g.like("RMS_NORM", g.view(k, backend=backend), (), "Kcur_normed", backend)
    k = g.like("MUL", k, (b.w(f"{layer}.attn_k_norm"),), "Kcur_normed", backend)
    k = g.like("ROPE", k, (inputs["pos"],), "Kcur", backend)
    cache_k, cache_v = external(f"cache_k_{index}"), external(f"cache_v_{index}")
    g.op("SET_ROWS", 0, (k, inputs["k_idxs"], cache_k), backend=backend)
    g.op("SET_ROWS", 0, (g.view(v, backend=backend), inputs["v_idxs"], cache_v),
         backend=backend)
    mask = _qsa_mask(b, *selection, inputs, backend) if selection else inputs["mask"]
    out_size = attn.out_width * n * F32
    if b.flash_attn:
        core = g.op("FLASH_ATTN_EXT", out_size,
                    (g.view(q, backend=backend), cache_k, cache_v, mask), "kqv",
                    backend=backend)
    else:
        scores = g.op("MUL_MAT", b.n_kv * n * attn.n_head * F32,
                      (cache_k, g.view(q, backend=backend)), "kq", backend=backend)
        probs = g.like("SOFT_MAX", scores, (mask,), "kq_soft_max", backend)
        kqv = g.op("MUL_MAT", out_size, (cache_v, probs), "kqv", backend=backend)
        core = g.op("CONT", out_size, (g.view(kqv, backend=backend),), "kqv_merged_cont",
                    backend=backend)
    core = g.view(core, "kqv_out", backend=backend)
    gate = g.op("CONT", out_size, (g.view(q_full, backend=backend),), "gate_reshaped",
                backend=backend)
    gate = g.like("UNARY", gate, (), "gate_sigmoid", backend)
    gated = g.like("MUL", core, (gate,), "attn_gated", backend)
    return g.op("MUL_MAT", m.n_embd * n * F32, (b.w(f"{layer}.wo"), gated), "attn_output",
                backend=backend)


def _qsa_select(b: _Builder, cur: Tensor, index: int, inputs: Mapping[str, Tensor],
                backend: int) -> tuple[Tensor, Tensor, Tensor]:
    """qwen4exp's ``build_qsa_sel`` up to the selected cells: the indexer's raw key cached
    beside a zero pooled slot; the pools this ubatch completes gathered from the indexer
    cache, averaged, normed, roped and scattered back; the pooled keys gathered; the
    indexer's query heads projected, normed (out of place: the norm reads a reshaped
    projection) and roped, and scored against them; the top pools' member cells and the
    incomplete tail. The cells, the scores and the top pools."""
    g, m, n = b.graph, b.model, b.n_tokens
    layer = f"blk.{index}"
    pool, dim, heads = m.qsa_pool, m.qsa_dim, m.qsa_heads
    new, padded, top, selected = qsa_pools(m, b.n_kv)
    cache_idx = external(f"cache_idx_{index}")
    raw = g.op("MUL_MAT", dim * n * F32, (b.w(f"{layer}.indexer.k_proj"), cur),
               "indexer_k_raw", backend=backend)
    zero = g.op("FILL", dim * n * F32, (), "indexer_pzero", backend=backend)
    packed = g.op("CONCAT", 2 * dim * n * F32, (raw, zero), "indexer_k_packed",
                  backend=backend)
    g.op("SET_ROWS", 0, (g.view(packed, backend=backend), inputs["qsa_k_idxs"], cache_idx),
         backend=backend)
    members = g.op("GET_ROWS", dim * pool * new * F32, (cache_idx, inputs["new_pool_idxs"]),
                   "indexer_pool_rows", backend=backend)
    pooled = g.op("CONT", dim * new * F32, (g.view(members, backend=backend),),
                  "indexer_pool_sum", backend=backend)
    for _ in range(1, pool):
        pooled = g.like("ADD", pooled, (g.view(members, backend=backend),),
                        "indexer_pool_sum", backend)
    for op in ("SCALE", "RMS_NORM", "MUL"):
        pooled = g.like(op, pooled, (), "indexer_pool_k", backend)
    pooled = g.like("ROPE", g.view(pooled, backend=backend), (inputs["new_pool_pos"],),
                    "indexer_pool_k_new", backend)
    g.op("SET_ROWS", 0, (g.view(pooled, backend=backend), inputs["new_pool_rep"], cache_idx),
         backend=backend)
    q = g.op("MUL_MAT", heads * dim * n * F32, (b.w(f"{layer}.indexer.q_proj"), cur),
             "indexer_q", backend=backend)
    q = g.like("RMS_NORM", g.view(q, backend=backend), (), "indexer_q_norm", backend)
    q = g.like("MUL", q, (b.w(f"{layer}.indexer.q_norm"),), "indexer_q_normed", backend)
    q = g.like("ROPE", q, (inputs["pos"],), "indexer_q", backend)
    keys = g.op("GET_ROWS", dim * padded * F32, (cache_idx, inputs["pool_cells"]),
                "indexer_k", backend=backend)
    weights = g.op("FILL", heads * n * F32, (), "indexer_weights", backend=backend)
    score = g.op("LIGHTNING_INDEXER", padded * n * F32,
                 (q, g.view(keys, backend=backend), weights, inputs["pool_mask"]),
                 "indexer_score", backend=backend)
    picked = g.op("TOP_K", top * n * I32, (score,), "indexer_top_k", backend=backend)
    cells = g.op("GET_ROWS", pool * top * n * I32,
                 (inputs["pool_idxs"], g.view(picked, backend=backend)), "indexer_sel_rows",
                 backend=backend)
    cells = g.op("CONCAT", selected * n * I32,
                 (g.view(cells, backend=backend), inputs["tail_idxs"]), "indexer_sel_idx",
                 backend=backend)
    return cells, score, picked


def _qsa_mask(b: _Builder, cells: Tensor, score: Tensor, picked: Tensor,
              inputs: Mapping[str, Tensor], backend: int) -> Tensor:
    """The rest of ``build_qsa_sel``, expanded when the attention reads it: an all-masked
    row per token (with a dump row per selected slot), zeros, the selected cells' indices
    as floats, each slot live where its pool scored (or its tail cell exists), dead slots
    sent to their own dump rows by a cumulative sum, the indices back to integers, the
    zeros set at them and the causal mask added."""
    g, m, n = b.graph, b.model, b.n_tokens
    pool = m.qsa_pool
    _, _, top, selected = qsa_pools(m, b.n_kv)
    mask_type = F16 if b.flash_attn else F32
    everything = g.op("FILL", (b.n_kv + selected) * mask_type, (), "kq_mask_all",
                      backend=backend)
    everything = g.op("REPEAT", (b.n_kv + selected) * n * mask_type, (everything,),
                      "kq_mask_all", backend=backend)
    zeros = g.op("FILL", selected * mask_type, (), "kq_mask_zeros", backend=backend)
    zeros = g.op("REPEAT", selected * n * mask_type, (zeros,), "kq_mask_zeros",
                 backend=backend)
    index_f = g.op("CPY", selected * n * F32, (cells,), "indexer_sel_f32", backend=backend)
    live = g.op("GET_ROWS", top * n * F32, (g.view(score, backend=backend), picked),
                "indexer_top_score", backend=backend)
    live = g.like("CLAMP", g.like("SCALE", live, (), "indexer_live", backend), (),
                  "indexer_live", backend)
    live = g.op("REPEAT", pool * top * n * F32, (live,), "indexer_live_pool", backend=backend)
    tail = g.op("CPY", (pool - 1) * n * F32, (inputs["tail_idxs"],), "indexer_live_tail",
                backend=backend)
    tail = g.like("CLAMP", g.like("SCALE", tail, (), "indexer_live_tail", backend), (),
                  "indexer_live_tail", backend)
    live = g.op("CONCAT", selected * n * F32, (g.view(live, backend=backend), tail),
                "indexer_live", backend=backend)
    dump = g.op("FILL", live.nbytes, (live,), "indexer_ones", backend=backend)
    dump = g.op("CUMSUM", live.nbytes, (dump,), "indexer_dump", backend=backend)
    dump = g.like("SCALE", dump, (), "indexer_dump", backend)
    index_f = g.like("SUB", index_f, (dump,), "indexer_sel_live", backend)
    index_f = g.like("MUL", index_f, (live,), "indexer_sel_live", backend)
    index_f = g.like("ADD", index_f, (dump,), "indexer_sel_live", backend)
    index_i = g.op("CPY", selected * n * I32, (index_f,), "indexer_sel_i32", backend=backend)
    unmasked = Tensor("indexer_sel_rows", everything.nbytes, "SET_ROWS",
                      (g.view(everything, backend=backend), zeros,
                       g.view(index_i, backend=backend)), view_src=everything,
                      backend=backend)
    g.nodes.append(unmasked)
    return g.op("ADD", b.n_kv * n * mask_type,
                (g.view(unmasked, backend=backend), inputs["mask"]), "indexer_sel",
                backend=backend)


def hrm_matrix_block(model: GraphModel, slot: int) -> int:
    """The block whose matrices HRM-Text's slot (cache slot, block index) runs: the first
    stack's blocks for a low-level cycle, the second stack's for the high-level one
    (``llama_model_hrm_text::load_arch_tensors``)."""
    lps, l_cycles = model.hrm_layers_per_stack, model.hrm_l_cycles
    cycle = (slot // lps) % (l_cycles + 1)
    return (lps if cycle == l_cycles else 0) + slot % lps


def _hrm_graph(b: _Builder, embd: Tensor, inputs: Mapping[str, Tensor],
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
    lps = m.hrm_layers_per_stack
    at = b.backend_of[0]

    def run(x: Tensor, slot: int) -> Tensor:
        nonlocal at
        block = hrm_matrix_block(m, slot)
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
            if m.hrm_slot_scales:
                out = g.like("MUL", out, (b.w(f"blk.{slot}.{name}.scale"),), f"{name}_s",
                             own)
                at = own
            if m.hrm_qkv_bias:
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
        if m.hrm_slot_scales:
            out = g.like("MUL", out, (b.w(f"blk.{slot}.wo.scale"),), "attn_out_s", own)
            at = own
        x = g.like("ADD", out, (x,), f"attn_add-{slot}", at)
        normed = g.op("RMS_NORM", size, (x,), f"ffn_norm-{slot}", backend=at)
        out = _mlp(b, normed, ffn, layer, mats)
        at = mats
        return g.like("ADD", out, (x,), f"l_out-{slot}", at)

    def stack(x: Tensor, first: int) -> Tensor:
        for slot in range(first, first + lps):
            x = run(x, slot)
        return g.op("RMS_NORM", size, (x,), f"stack_norm-{first}", backend=at)

    z_h, z_l = embd, b.w("hrm.z_l_init")
    slot = 0
    for _ in range(m.hrm_h_cycles):
        for _ in range(m.hrm_l_cycles):
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


def schedule(graph: Graph, copies: int) -> Graph:
    """The graph ggml's scheduler allocates (``ggml_backend_sched_split_graph``): a node
    that reads a tensor another backend produced (or an input, which lives on the host)
    reads a copy made on its own backend; with pipeline parallelism (``copies`` > 1) each
    such copy, and each input, is kept ``copies`` times over and never freed."""
    out = Graph()
    for tensor in graph.inputs:
        out.inputs.append(tensor)
        if not tensor.is_input:
            continue  # a constant of the graph (a leaf): placed once, where it is used
        tensor.is_output = tensor.is_output or copies > 1
        for index in range(1, copies):
            out.inputs.append(Tensor(f"{tensor.name}#{index}", tensor.nbytes, is_input=True,
                                     is_output=True, backend=tensor.backend))
    made: dict[tuple[int, int], Tensor] = {}
    for node in graph.nodes:
        srcs = []
        for src in node.srcs:
            if src.external or src.backend == node.backend:
                srcs.append(src)
                continue
            key = (id(src), node.backend)
            copy = made.get(key)
            if copy is None:
                copy = made[key] = Tensor(f"{src.name}#{node.backend}", src.nbytes,
                                          is_input=copies > 1, is_output=copies > 1,
                                          backend=node.backend)
                # The source stays until the copy is made, at the start of the split.
                out.nodes.append(Tensor(f"{src.name} (copy)", src.nbytes, "NONE", (src,),
                                        view_src=src, backend=src.backend))
                if copies > 1:
                    for index in range(copies):
                        out.inputs.append(copy if index == 0 else Tensor(
                            f"{copy.name}#{index}", src.nbytes, is_input=True,
                            is_output=True, backend=node.backend))
                else:
                    out.nodes.append(copy)
            srcs.append(copy)
        node.srcs = tuple(srcs)
        out.nodes.append(node)
    return out


def compute_buffers(model: GraphModel, *, n_ubatch: int, n_kv: int, n_kv_swa: int = 0,
                    flash_attn: bool = True, n_seqs: int = 1,
                    layer_backends: Sequence[int] | None = None,
                    output_backend: int = 0, input_backend: int = 0,
                    backends: int = 1, copies: int = 1) -> list[int]:
    """Each backend's compute buffer: the larger of the prompt graph (``n_ubatch`` tokens
    and outputs) and the generation graph (one token per sequence), as llama.cpp reserves
    them (``llama_context::sched_reserve``)."""
    graphs = [schedule(build_graph(model, n_tokens=tokens, n_outputs=tokens, n_kv=n_kv,
                                   n_kv_swa=n_kv_swa, flash_attn=flash_attn,
                                   layer_backends=layer_backends,
                                   output_backend=output_backend,
                                   input_backend=input_backend), copies)
              for tokens in (n_ubatch, n_seqs)]
    return buffer_sizes(graphs, backends)


# --- a GGUF model's graph shape ----------------------------------------------------------

_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)\.weight$")


def _elements(tensor: Any) -> int:
    """Elements of a tensor from its bytes and type."""
    from planner.models.gguf_reader import GGML_TYPES

    block, size = next((block, size) for name, block, size in GGML_TYPES.values()
                       if name == tensor.type_name)
    return int(tensor.n_bytes) // size * block


# llama-hparams.h: the most experts a model may have (load_hparams asserts it, and that a
# model with experts uses at least one and at most all of them per token).
LLAMA_MAX_EXPERTS = 1024
# llama-hparams.h: the per-layer n-gram embedding's largest n-gram and head count
# (qwen4exp's load_arch_hparams refuses more).
LLAMA_MAX_PLE_NGRAM = 8
LLAMA_MAX_PLE_HEADS = 64
MAX_PLE_KERNEL = 64
"""Taps of qwen4exp's per-layer embedding convolution: published models have 4; each tap
is an operation of the graph."""
MAX_RESIDUAL_STREAMS = 16
"""Hyper-connection residual streams a model may have: published models have 4 (and
glm5-next must have 4); each stream adds operations to every half-block of the graph."""


def _hrm_fields(meta: GgufMetadata, names: set[str]) -> dict[str, Any]:
    """HRM-Text's stacks and cycles (``hrm.layers_per_stack``, ``hrm.h_cycles``,
    ``hrm.l_cycles``; each at least one, and the file's blocks exactly the cache slots they
    make, as llama.cpp asserts) and whether its projections carry biases and per-slot
    scales."""
    if meta.architecture != "hrm_text":
        return {}
    n_layer = meta.layer_count
    lps = meta.count("hrm.layers_per_stack", minimum=1, maximum=n_layer)
    h_cycles = meta.count("hrm.h_cycles", minimum=1, maximum=n_layer)
    l_cycles = meta.count("hrm.l_cycles", minimum=1, maximum=n_layer)
    if lps * h_cycles * (l_cycles + 1) != n_layer:
        raise meta.bad("hrm.l_cycles", f"makes {lps} x {h_cycles} x ({l_cycles} + 1) = "
                       f"{lps * h_cycles * (l_cycles + 1):,} cache slots, but the model has "
                       f"{n_layer} blocks (llama.cpp asserts they are equal)", l_cycles)
    return {"hrm_layers_per_stack": lps, "hrm_h_cycles": h_cycles, "hrm_l_cycles": l_cycles,
            "hrm_qkv_bias": "blk.0.attn_q.bias" in names,
            "hrm_slot_scales": "blk.0.attn_q.scale" in names}


def _main_layer_ratios(meta: GgufMetadata) -> tuple[int, ...]:
    """DeepSeek-V4's compression ratio of each layer of the main graph (the
    next-token-prediction layers after them run in a graph of their own): 0, 4 (CSA) or
    128 (HCA), the ratios its caches know (llama_kv_cache_dsv4)."""
    ratios = meta.counts_per_layer("attention.compress_ratios", 0)
    for index, ratio in enumerate(ratios):
        if ratio not in (0, CSA_RATIO, HCA_RATIO):
            raise meta.bad("attention.compress_ratios", f"entry {index} must be 0, "
                           f"{CSA_RATIO} or {HCA_RATIO} (the compressions llama.cpp caches)",
                           ratio)
    nextn = meta.count("nextn_predict_layers", 0, maximum=meta.layer_count)
    return tuple(ratios[:len(ratios) - nextn])


def _qwen4exp_fields(meta: GgufMetadata,
                     widths: Mapping[int, Mapping[str, int]]) -> dict[str, Any]:
    """qwen4exp's hyper-connection streams and their gates' low rank, its per-layer
    embedding (``ple.*``: its block, ``(n-gram size - 1) x heads per n-gram`` rows of
    ``embedding_length_per_layer_input`` per token, the convolution's kernel, dilated by
    the n-gram size) and its sparse attention (the indexer's heads, head size and budget,
    keys pooled by the layers' one compress ratio, where a layer has an indexer), with
    the bounds qwen4exp's load_arch_hparams puts on them."""
    if meta.architecture not in QWEN4EXP:
        return {}
    fields: dict[str, Any] = {
        "low_rank_streams": meta.count("hyper_connection.count", minimum=2,
                                       maximum=MAX_RESIDUAL_STREAMS,
                                       why="a count of one has nothing to mix"),
        "low_rank_width": meta.count("hyper_connection.low_rank", minimum=1),
        "positions_per_token": 4}
    ple_layers = meta.counts("ple.layers", longest=1, maximum=meta.layer_count - 1,
                             why="llama.cpp supports one per-layer embedding")
    if ple_layers:
        ngram = meta.count("ple.ngram_size", minimum=2, maximum=LLAMA_MAX_PLE_NGRAM)
        heads = (ngram - 1) * meta.count(
            "ple.heads_per_ngram", minimum=1, maximum=LLAMA_MAX_PLE_HEADS // (ngram - 1),
            why=f"(n-gram size - 1) x heads per n-gram is at most {LLAMA_MAX_PLE_HEADS}")
        kernel = meta.count("ple.conv_kernel", minimum=1, maximum=MAX_PLE_KERNEL)
        taps = widths[ple_layers[0]].get("ple_conv1d", 0)
        channels = fields["low_rank_streams"] * meta.count("embedding_length", minimum=1)
        if taps != kernel * channels:
            raise meta.bad("ple.conv_kernel", f"is not the taps of block {ple_layers[0]}'s "
                           f"ple_conv1d ({taps:,} elements for {channels:,} channels; "
                           f"llama.cpp refuses another shape)", kernel)
        fields.update(ple_block=ple_layers[0], ple_heads=heads,
                      ple_width=meta.count("embedding_length_per_layer_input", minimum=1),
                      ple_kernel=kernel, ple_dilation=ngram)
    ratios = meta.counts_per_layer("attention.compress_ratios", 0)
    pool = max(ratios, default=0)
    if any(ratio not in (0, pool) for ratio in ratios):
        raise meta.bad("attention.compress_ratios", "must hold one ratio for every sparse "
                       "layer (llama.cpp refuses two)", ratios)
    if pool and any("indexer.q_proj" in w for w in widths.values()):
        top_k = meta.count("attention.indexer.top_k", minimum=1)
        if pool == 1 or top_k % pool:
            raise meta.bad("attention.compress_ratios", f"must be a ratio above 1 that "
                           f"divides attention.indexer.top_k ({top_k:,}), as llama.cpp "
                           f"requires", pool)
        fields.update(qsa_pool=pool, qsa_heads=meta.count("attention.indexer.head_count",
                                                          minimum=1),
                      qsa_dim=meta.count("attention.indexer.key_length", minimum=1),
                      qsa_top_k=top_k)
    return fields


def _indexer(meta: GgufMetadata) -> tuple[int, int, int]:
    """A lightning indexer's heads, head size and top-k (each at least one)."""
    return (meta.count("attention.indexer.head_count", minimum=1),
            meta.count("attention.indexer.key_length", minimum=1),
            meta.count("attention.indexer.top_k", minimum=1))


def _latent_rank(meta: GgufMetadata, w: Mapping[str, int], n_embd: int) -> int:
    """``attention.kv_lora_rank``: the compressed KV width, at least one and within the
    width ``attn_kv_a_mqa`` projects to (the rest is the rope part)."""
    return meta.count("attention.kv_lora_rank", minimum=1,
                      maximum=max(1, w["attn_kv_a_mqa"] // n_embd),
                      why="within the width attn_kv_a_mqa projects to")


def _require(meta: GgufMetadata, blocks: Sequence[BlockShape], what: str, name: str,
             needs: Callable[[BlockShape], bool]) -> None:
    """Refuse a model one of whose blocks lacks what its graph needs on every layer."""
    for index, block in enumerate(blocks):
        if not needs(block):
            raise meta.bad(name, f"leaves block {index} of this {meta.architecture} model "
                           f"without {what}, which its graph needs on every block",
                           meta.raw(name))


def graph_model(meta: GgufMetadata, tensors: Sequence[Any],
                memory: ModelMemory) -> GraphModel:
    """The graph-relevant shape of a GGUF model: the metadata's head counts and expert
    counts (read through ``meta``, checked), the tensors' widths and each layer's cache
    (``memory``, llama.cpp's rules of :mod:`planner.models.layer_memory`)."""
    arch = meta.architecture
    n_layer = meta.layer_count
    clamp_exps = meta.reals_per_layer("swiglu_clamp_exp")
    clamp_shexp = meta.reals_per_layer("swiglu_clamp_shexp")
    activation = "situ" if arch in SITU else "swiglu"
    widths: dict[int, dict[str, int]] = {i: {} for i in range(n_layer)}
    for tensor in tensors:
        match = _BLOCK.match(tensor.name)
        if match is not None and int(match[1]) < n_layer:
            widths[int(match[1])][match[2]] = _elements(tensor)
    n_embd = meta.count("embedding_length", minimum=1)
    token_embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    if token_embd is not None and (_elements(token_embd) % n_embd
                                   or _elements(token_embd) < n_embd):
        raise meta.bad("embedding_length", f"is not the width of token_embd's rows (its "
                       f"{_elements(token_embd):,} elements are no whole number of rows)",
                       n_embd)
    heads = meta.counts_per_layer("attention.head_count", 0)
    ffn = meta.counts_per_layer("feed_forward_length", 0)
    n_expert = meta.count("expert_count", 0, maximum=LLAMA_MAX_EXPERTS)
    n_used = meta.counts_per_layer("expert_used_count", 0, maximum=n_expert,
                                   why="at most the model's expert_count")
    names = {t.name for t in tensors}
    positions = "position_embd.weight" in names
    lead = meta.count("leading_dense_block_count", 0) if arch == "cohere2moe" else 0
    parallel = ("ffn_residual_first" if arch in RESIDUAL_BEFORE_ATTENTION else
                "ffn_first" if arch in FFN_BEFORE_OUTPUT_PROJECTION else
                "ffn_after" if arch in FFN_AFTER_OUTPUT_PROJECTION else "")

    def ssm(name: str, minimum: int = 1) -> int:
        return meta.count(f"ssm.{name}", minimum=minimum)

    blocks = []
    for index in range(n_layer):
        w = widths[index]
        layer = memory.layers[index]
        attention = None
        if arch in COMPRESSED_ATTENTION and heads[index] and "attn_kv" in w:
            head = meta.count("attention.key_length", minimum=1)
            i_heads, i_dim, i_top = _indexer(meta) if "indexer.attn_q_b" in w else (0, 0, 0)
            attention = AttentionShape(
                heads[index] * head, head, 0, heads[index] * head, heads[index],
                sliding=layer.sliding, q_lora=meta.count("attention.q_lora_rank", minimum=1),
                output_groups=meta.count("attention.output_group_count", minimum=1,
                                         maximum=heads[index]),
                output_lora=meta.count("attention.output_lora_rank", minimum=1),
                indexer_heads=i_heads, indexer_dim=i_dim, indexer_top_k=i_top)
        elif heads[index] and "attn_kv_a_mqa" in w and "attn_k_b" in w and "attn_output" in w:
            kv_lora = _latent_rank(meta, w, n_embd)
            q_lora = w["attn_q_a"] // n_embd if "attn_q_a" in w else 0
            q_width = (w["attn_q_b"] // q_lora) if q_lora else w.get("attn_q", 0) // n_embd
            pooled = arch in POOLED_INDEXER_HYPER_CONNECTIONS and "indexer.attn_q_b" in w
            i_heads, i_dim, i_top = _indexer(meta) if (arch in DSA_INDEXER or pooled) \
                and "indexer.attn_q_b" in w else (0, 0, 0)
            kpool = 0
            if pooled:
                kpool = meta.count("attention.indexer.kpool", minimum=2, maximum=i_top,
                                   why="llama.cpp asserts it is above one and divides the "
                                       "indexer's top_k")
                if i_top % kpool:
                    raise meta.bad("attention.indexer.kpool", f"must divide "
                                   f"attention.indexer.top_k ({i_top:,}) as llama.cpp "
                                   f"asserts", kpool)
            attention = AttentionShape(
                q_width, w["attn_kv_a_mqa"] // n_embd - kv_lora, 0, w["attn_output"] // n_embd,
                heads[index], sliding=layer.sliding, kv_lora=kv_lora, q_lora=q_lora,
                rope=arch not in LATENT_WITHOUT_ROPE,
                output_gate=w.get("attn_gate", 0) == w["attn_output"],
                indexer_heads=i_heads, indexer_dim=i_dim, indexer_top_k=i_top,
                indexer_kpool=kpool,
                indexer_kpool_tail=meta.flag("attention.indexer.kpool_select_tail")
                and pooled)
        elif heads[index] and "attn_kv_a_mqa" in w and "attn_kv_b" in w \
                and "attn_q_b" in w and "attn_output" in w:
            kv_lora = _latent_rank(meta, w, n_embd)
            q_lora = w["attn_q_a"] // n_embd
            attention = AttentionShape(
                w["attn_q_b"] // q_lora, w["attn_kv_a_mqa"] // n_embd - kv_lora, 0,
                w["attn_output"] // n_embd, heads[index], sliding=layer.sliding,
                kv_lora=kv_lora, q_lora=q_lora, kv_b_width=w["attn_kv_b"] // kv_lora)
        elif heads[index] and ("attn_q" in w or "attn_qkv" in w) and "attn_output" in w:
            out_width = w["attn_output"] // n_embd
            if "attn_qkv" in w:
                qkv = w["attn_qkv"] // n_embd
                k_width = v_width = (qkv - out_width) // 2
                q_width = qkv - k_width - v_width
            else:
                q_width = w["attn_q"] // n_embd
                k_width = w.get("attn_k", 0) // n_embd
                v_width = w.get("attn_v", 0) // n_embd
            sparse = arch in MSA_INDEXER and "indexer.q_proj" in w
            i_heads, i_dim, i_top = _indexer(meta) if sparse else (0, 0, 0)
            msa_block = meta.count("attention.indexer.block_size", minimum=1) \
                if sparse else 0
            attention = AttentionShape(q_width, k_width, v_width, out_width, heads[index],
                                       sliding=layer.sliding, fused_qkv="attn_qkv" in w,
                                       parallel=parallel, cached=memory.kind != "none",
                                       rope=not positions and (
                                           arch not in ROPE_ON_SLIDING_ONLY or layer.sliding
                                           or index < lead),
                                       indexer_heads=i_heads, indexer_dim=i_dim,
                                       indexer_top_k=i_top, msa_block=msa_block)
        elif heads[index] and layer.key_elements:
            # No projection tensors to measure: the widths the metadata gives.
            head_k = meta.count("attention.key_length", n_embd // heads[index])
            head_v = meta.count("attention.value_length", n_embd // heads[index])
            attention = AttentionShape(heads[index] * head_k, layer.key_elements,
                                       layer.value_elements or layer.key_elements,
                                       heads[index] * head_v, heads[index],
                                       sliding=layer.sliding, parallel=parallel)
        feed_forward = None
        if arch in NO_FFN_WEIGHTS and "ffn_down" not in w:
            feed_forward = FeedForwardShape(0, gated=False)
        elif "ffn_gate_inp" in w and n_expert and ("ffn_down_exps" in w):
            if not n_used[index]:
                raise meta.bad("expert_used_count", f"is 0 for block {index}, whose "
                               f"{n_expert} routed experts need at least one per token "
                               f"(llama.cpp asserts it)", meta.raw("expert_used_count"))
            n_latent = w["ffn_routed_down"] // n_embd if "ffn_routed_down" in w else 0
            n_ff_exp = w["ffn_down_exps"] // ((n_latent or n_embd) * n_expert)
            shared = w.get("ffn_down_shexp", 0) // n_embd
            feed_forward = FeedForwardShape(
                n_ff_exp, gated="ffn_gate_exps" in w or "ffn_gate_up_exps" in w,
                fused_up="ffn_gate_up_exps" in w, n_expert=n_expert,
                n_expert_used=n_used[index], n_ff_shexp=shared,
                norm_weights=meta.flag("expert_weights_norm"),
                n_ff_dense=w.get("ffn_down", 0) // n_embd if arch in DENSE_BESIDE_EXPERTS
                else 0, clamped=clamp_exps[index] > 0 and arch not in FUSED_CLAMP_EXPERTS,
                shexp_clamped=clamp_shexp[index] > 0 and arch not in FUSED_CLAMP,
                activation=activation, n_latent=n_latent)
        elif "ffn_down" in w:
            n_ff = w["ffn_down"] // n_embd
            fused = "ffn_gate" not in w and w.get("ffn_up", 0) == 2 * w["ffn_down"]
            feed_forward = FeedForwardShape(n_ff, gated="ffn_gate" in w or fused,
                                            fused_up=fused,
                                            clamped="ffn_gate" in w and clamp_shexp[index] > 0
                                            and arch not in FUSED_CLAMP,
                                            activation=activation)
        elif not any(name.startswith("ffn") for name in w) and ffn[index]:
            feed_forward = FeedForwardShape(ffn[index])
        recurrent = None
        if "ssm_in" in w and "ssm_conv1d" in w and arch in MAMBA2 | ATTENTION_BESIDE_MIXER:
            recurrent = RecurrentShape(ssm("inner_size"), ssm("state_size"),
                                       max(1, ssm("group_count", 0)), ssm("time_step_rank"),
                                       ssm("conv_kernel"), norm="ssm_norm" in w)
            if arch not in ATTENTION_BESIDE_MIXER:
                attention = None
        elif "ssm_conv1d" in w and ("ssm_beta" in w or "ssm_ba" in w) \
                and arch in DELTA_NET | QWEN4EXP:
            recurrent = RecurrentShape(ssm("inner_size"), ssm("state_size"),
                                       max(1, ssm("group_count", 0)), ssm("time_step_rank"),
                                       ssm("conv_kernel"), mixer="delta_net")
            attention = None
        elif "ssm_conv1d_q" in w and "ssm_f_a" in w and arch in KDA:
            width = (w["attn_q"] if "attn_q" in w else w.get("attn_qkv", 0) // 3) // n_embd
            head = meta.count("kda.head_dim", minimum=1)
            recurrent = RecurrentShape(
                width, head, 1, width // head, ssm("conv_kernel"),
                mixer="kda", decay_rank=w["ssm_f_a"] // n_embd if "ssm_f_b" in w else 0,
                gate_rank=w["ssm_g_a"] // n_embd if "ssm_g_b" in w else 0)
            attention = None
        elif "ssm_in" in w and "ssm_conv1d" in w and "ssm_x" in w and arch in PLAMO2_MAMBA:
            d_inner, d_state = ssm("inner_size"), ssm("state_size")
            dt_rank = w["ssm_x"] // d_inner - 2 * d_state
            if dt_rank < 0:
                raise meta.bad("ssm.state_size", f"leaves block {index}'s ssm_x, "
                               f"{w['ssm_x'] // d_inner:,} columns per inner row, no room for "
                               f"B and C of that size", d_state)
            recurrent = RecurrentShape(d_inner, d_state, 1, ssm("time_step_rank"),
                                       ssm("conv_kernel"), mixer="plamo2", dt_rank=dt_rank)
            attention = None
        elif arch in LIGHTNING and "attn_qkv" in w and "attn_gate" in w \
                and layer.state_elements:
            head = meta.count("attention.key_length", n_embd // max(1, heads[index]),
                              minimum=1)
            recurrent = RecurrentShape(w["attn_gate"] // n_embd, head, 1,
                                       w["attn_qkv"] // (3 * n_embd * head), 0,
                                       mixer="lightning")
            attention = None
        elif "shortconv.in_proj" in w and "shortconv.conv" in w:
            width = w["shortconv.in_proj"] // (3 * n_embd)
            recurrent = RecurrentShape(width, 0, 1, 0,
                                       meta.count("shortconv.l_cache", minimum=1) - 1,
                                       mixer="shortconv")
            attention = None
        elif "ssm_in" in w and "ssm_conv1d" in w and arch in MAMBA1:
            norms = meta.flag("ssm.dt_b_c_rms") or all(
                f"ssm_{name}_norm" in w for name in ("dt", "b", "c"))
            recurrent = RecurrentShape(ssm("inner_size"), ssm("state_size"), 1,
                                       ssm("time_step_rank"), ssm("conv_kernel"), norm=norms,
                                       version=1)
            attention = None
        blocks.append(BlockShape(attention, feed_forward, recurrent,
                                 weighted_norm=arch not in UNWEIGHTED_INPUT_NORM))
    if meta.has("vocab_size"):
        vocab = meta.count("vocab_size", minimum=1)
    else:
        vocab = _elements(token_embd) // n_embd if token_embd is not None else 0
    hc_streams = 0
    if arch in HYPER_CONNECTIONS | POOLED_INDEXER_HYPER_CONNECTIONS:
        fixed = arch in POOLED_INDEXER_HYPER_CONNECTIONS
        hc_streams = meta.count("hyper_connection.count", minimum=4 if fixed else 1,
                                maximum=4 if fixed else MAX_RESIDUAL_STREAMS,
                                why="llama.cpp's mHC supports 4" if fixed else "")
    if arch in HYPER_CONNECTIONS - COMPRESSED_ATTENTION or arch == "hrm_text":
        _require(meta, blocks, "attention", "attention.head_count",
                 lambda block: block.attention is not None)
        _require(meta, blocks, "a feed-forward network", "feed_forward_length",
                 lambda block: block.feed_forward is not None)
    if arch in POOLED_INDEXER_HYPER_CONNECTIONS | QWEN4EXP:
        _require(meta, blocks, "attention or a recurrent mixer", "attention.head_count",
                 lambda block: block.attention is not None or block.recurrent is not None)
    if arch in POOLED_INDEXER_HYPER_CONNECTIONS:
        first = next((block.attention for block in blocks if block.attention is not None),
                     None)
        if first is not None and not first.indexer_kpool:
            raise meta.bad("attention.indexer.kpool", "is read by no indexer before the "
                           "first attention block, which would reuse a selection nobody "
                           "made (its indexer tensors are missing)", meta.raw(
                               "attention.indexer.kpool"))
    compress_ratios: tuple[int, ...] = ()
    hash_routed = 0
    if arch in COMPRESSED_ATTENTION:
        compress_ratios = _main_layer_ratios(meta)
        hash_routed = meta.count("hash_layer_count", 0, maximum=n_layer)
        main = blocks[:len(compress_ratios)]
        _require(meta, main, "attention", "attention.head_count",
                 lambda block: block.attention is not None)
        _require(meta, main, "routed experts", "expert_count",
                 lambda block: block.feed_forward is not None
                 and block.feed_forward.n_expert > 0)
    return GraphModel(n_embd, vocab, tuple(blocks), position_embedding=positions,
                      mixed_batch=arch not in NO_MIXED_BATCH,
                      embedding_skip=arch in EMBEDDING_SKIP,
                      rows_after_output_norm=arch in ROWS_AFTER_OUTPUT_NORM,
                      residual_from_norm=arch in RESIDUAL_FROM_NORM,
                      residual_stack_block=meta.count("attn_res.block_size", minimum=1)
                      if arch in RESIDUAL_STACK else 0,
                      hc_streams=hc_streams,
                      hc_mixed=arch in POOLED_INDEXER_HYPER_CONNECTIONS,
                      compress_ratios=compress_ratios, hash_routed_layers=hash_routed,
                      **_hrm_fields(meta, names), **_qwen4exp_fields(meta, widths))
