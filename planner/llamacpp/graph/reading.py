"""How a model's blocks are read from its GGUF file: the widths of its tensors, its
checked metadata (:class:`~planner.models.gguf_metadata.GgufMetadata`) and each layer's
cache (:mod:`planner.models.layer_memory`), and the shapes the generic reading makes of
them (attention, feed-forward network or experts), which a family adjusts or replaces."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.graph.shapes import AttentionShape, BlockShape, FeedForwardShape
from planner.models.gguf_metadata import GgufMetadata
from planner.models.layer_memory import LayerMemory, ModelMemory

# llama-hparams.h: the most experts a model may have (load_hparams asserts it, and that a
# model with experts uses at least one and at most all of them per token).
LLAMA_MAX_EXPERTS = 1024
MAX_RESIDUAL_STREAMS = 16
"""Hyper-connection residual streams a model may have: published models have 4; each
stream adds operations to every half-block of the graph."""
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)\.weight$")


def elements(tensor: Any) -> int:
    """Elements of a tensor from its bytes and type."""
    from planner.models.gguf_file import GGML_TYPES

    block, size = next((block, size) for name, block, size in GGML_TYPES.values()
                       if name == tensor.type_name)
    return int(tensor.n_bytes) // size * block


class ModelReader:
    """What a family reads a model's graph from: the checked metadata, the tensors (and
    each block's weights' element counts by name, ``attn_q`` for ``blk.N.attn_q.weight``)
    and each layer's cache, with the values every family reads once."""

    def __init__(self, meta: GgufMetadata, tensors: Sequence[Any],
                 memory: ModelMemory) -> None:
        self.meta, self.tensors, self.memory = meta, tensors, memory
        n_layer = meta.layer_count
        self.widths: dict[int, dict[str, int]] = {i: {} for i in range(n_layer)}
        for tensor in tensors:
            match = _BLOCK.match(tensor.name)
            if match is not None and int(match[1]) < n_layer:
                self.widths[int(match[1])][match[2]] = elements(tensor)
        self.names = {t.name for t in tensors}
        self.n_embd = meta.count("embedding_length", minimum=1)
        token_embd = self.tensor("token_embd.weight")
        if token_embd is not None and (elements(token_embd) % self.n_embd
                                       or elements(token_embd) < self.n_embd):
            raise meta.bad("embedding_length", f"is not the width of token_embd's rows (its "
                           f"{elements(token_embd):,} elements are no whole number of "
                           f"rows)", self.n_embd)
        self.clamp_exp = meta.reals_per_layer("swiglu_clamp_exp")
        self.clamp_shexp = meta.reals_per_layer("swiglu_clamp_shexp")
        self.heads = meta.counts_per_layer("attention.head_count", 0)
        self.ffn = meta.counts_per_layer("feed_forward_length", 0)
        self.n_expert = meta.count("expert_count", 0, maximum=LLAMA_MAX_EXPERTS)
        self.n_used = meta.counts_per_layer("expert_used_count", 0, maximum=self.n_expert,
                                            why="at most the model's expert_count")

    @property
    def architecture(self) -> str:
        return self.meta.architecture

    @property
    def layer_count(self) -> int:
        return self.meta.layer_count

    def tensor(self, name: str) -> Any:
        return next((t for t in self.tensors if t.name == name), None)

    def layer(self, index: int) -> LayerMemory:
        return self.memory.layers[index]

    def vocabulary(self) -> int:
        """``vocab_size``, else the rows of ``token_embd``."""
        if self.meta.has("vocab_size"):
            return self.meta.count("vocab_size", minimum=1)
        token_embd = self.tensor("token_embd.weight")
        return elements(token_embd) // self.n_embd if token_embd is not None else 0

    def indexer(self) -> tuple[int, int, int]:
        """A lightning indexer's heads, head size and top-k (each at least one)."""
        meta = self.meta
        return (meta.count("attention.indexer.head_count", minimum=1),
                meta.count("attention.indexer.key_length", minimum=1),
                meta.count("attention.indexer.top_k", minimum=1))

    def latent_rank(self, index: int) -> int:
        """``attention.kv_lora_rank``: the compressed KV width, at least one and within the
        width ``attn_kv_a_mqa`` projects to (the rest is the rope part)."""
        return self.meta.count("attention.kv_lora_rank", minimum=1,
                               maximum=max(1, self.widths[index]["attn_kv_a_mqa"]
                                           // self.n_embd),
                               why="within the width attn_kv_a_mqa projects to")

    def ssm(self, name: str) -> int:
        """A required ``ssm.*`` size, at least one."""
        return self.meta.count(f"ssm.{name}", minimum=1)

    def ssm_groups(self) -> int:
        """``ssm.group_count``, one when absent or zero."""
        return max(1, self.meta.count("ssm.group_count", 0))

    def require(self, blocks: Sequence[BlockShape], what: str, name: str,
                needs: Callable[[BlockShape], bool]) -> None:
        """Refuse a model one of whose blocks lacks what its graph needs on every block,
        naming the key that left it out."""
        for index, block in enumerate(blocks):
            if not needs(block):
                raise self.meta.bad(name, f"leaves block {index} of this {self.architecture} "
                                    f"model without {what}, which its graph needs on every "
                                    f"block", self.meta.raw(name))


def latent_attention(r: ModelReader, index: int, *, rope: bool = True,
                     indexer: bool = False) -> AttentionShape | None:
    """Latent attention (MLA), absorbed (``attn_k_b``) or not (``attn_kv_b``), when the
    block has its tensors; ``indexer``: the block runs a lightning indexer where it has
    the indexer's tensors."""
    w, n_embd, heads = r.widths[index], r.n_embd, r.heads[index]
    if not heads or "attn_kv_a_mqa" not in w or "attn_output" not in w:
        return None
    sliding = r.layer(index).sliding
    if "attn_k_b" in w:
        kv_lora = r.latent_rank(index)
        q_lora = w["attn_q_a"] // n_embd if "attn_q_a" in w else 0
        q_width = (w["attn_q_b"] // q_lora) if q_lora else w.get("attn_q", 0) // n_embd
        i_heads, i_dim, i_top = r.indexer() if indexer and "indexer.attn_q_b" in w \
            else (0, 0, 0)
        return AttentionShape(
            q_width, w["attn_kv_a_mqa"] // n_embd - kv_lora, 0, w["attn_output"] // n_embd,
            heads, sliding=sliding, kv_lora=kv_lora, q_lora=q_lora, rope=rope,
            output_gate=w.get("attn_gate", 0) == w["attn_output"],
            indexer_heads=i_heads, indexer_dim=i_dim, indexer_top_k=i_top)
    if "attn_kv_b" in w and "attn_q_b" in w:
        kv_lora = r.latent_rank(index)
        q_lora = w["attn_q_a"] // n_embd
        return AttentionShape(
            w["attn_q_b"] // q_lora, w["attn_kv_a_mqa"] // n_embd - kv_lora, 0,
            w["attn_output"] // n_embd, heads, sliding=sliding, kv_lora=kv_lora,
            q_lora=q_lora, kv_b_width=w["attn_kv_b"] // kv_lora)
    return None


def plain_attention(r: ModelReader, index: int, *, parallel: str = "",
                    rope: bool = True) -> AttentionShape | None:
    """Attention from its projections (``attn_q``, ``attn_k``, ``attn_v`` or a fused
    ``attn_qkv``, and ``attn_output``), else from the metadata's head sizes where the
    layer keeps a cache but its projections are not there to measure."""
    w, n_embd, heads = r.widths[index], r.n_embd, r.heads[index]
    layer = r.layer(index)
    if heads and ("attn_q" in w or "attn_qkv" in w) and "attn_output" in w:
        out_width = w["attn_output"] // n_embd
        if "attn_qkv" in w:
            qkv = w["attn_qkv"] // n_embd
            k_width = v_width = (qkv - out_width) // 2
            q_width = qkv - k_width - v_width
        else:
            q_width = w["attn_q"] // n_embd
            k_width = w.get("attn_k", 0) // n_embd
            v_width = w.get("attn_v", 0) // n_embd
        return AttentionShape(q_width, k_width, v_width, out_width, heads,
                              sliding=layer.sliding, fused_qkv="attn_qkv" in w,
                              parallel=parallel, cached=r.memory.kind != "none",
                              rope=rope and "position_embd.weight" not in r.names)
    if heads and layer.key_elements:
        head_k = r.meta.count("attention.key_length", n_embd // heads)
        head_v = r.meta.count("attention.value_length", n_embd // heads)
        return AttentionShape(heads * head_k, layer.key_elements,
                              layer.value_elements or layer.key_elements,
                              heads * head_v, heads, sliding=layer.sliding,
                              parallel=parallel)
    return None


@dataclass(frozen=True, slots=True)
class Activation:
    """How a family computes its networks' gated activation: ``clamped`` (a per-layer
    ``swiglu_clamp`` limit clamps it, computed in place) unless the family fuses the
    limited activation into one operation (``fused``, for a dense network or shared
    expert, ``fused_experts`` for the routed experts); ``kind`` "swiglu" or "situ"."""

    kind: str = "swiglu"
    fused: bool = False
    fused_experts: bool = False


def feed_forward(r: ModelReader, index: int, activation: Activation = Activation(), *,
                 dense_beside_experts: bool = False) -> FeedForwardShape | None:
    """The block's mixture of experts (``ffn_gate_inp`` and the stacked experts), dense
    network (``ffn_down``) or, for a block without tensors, the metadata's
    ``feed_forward_length``;
    ``dense_beside_experts``: a dense network runs beside the experts."""
    w, n_embd = r.widths[index], r.n_embd
    clamp_exp, clamp_shexp = r.clamp_exp[index], r.clamp_shexp[index]
    if "ffn_gate_inp" in w and r.n_expert and "ffn_down_exps" in w:
        if not r.n_used[index]:
            raise r.meta.bad("expert_used_count", f"is 0 for block {index}, whose "
                             f"{r.n_expert} routed experts need at least one per token "
                             f"(llama.cpp asserts it)", r.meta.raw("expert_used_count"))
        n_latent = w["ffn_routed_down"] // n_embd if "ffn_routed_down" in w else 0
        n_ff_exp = w["ffn_down_exps"] // ((n_latent or n_embd) * r.n_expert)
        return FeedForwardShape(
            n_ff_exp, gated="ffn_gate_exps" in w or "ffn_gate_up_exps" in w,
            fused_up="ffn_gate_up_exps" in w, n_expert=r.n_expert,
            n_expert_used=r.n_used[index], n_ff_shexp=w.get("ffn_down_shexp", 0) // n_embd,
            norm_weights=r.meta.flag("expert_weights_norm"),
            n_ff_dense=w.get("ffn_down", 0) // n_embd if dense_beside_experts else 0,
            clamped=clamp_exp > 0 and not activation.fused_experts,
            shexp_clamped=clamp_shexp > 0 and not activation.fused,
            activation=activation.kind, n_latent=n_latent)
    if "ffn_down" in w:
        fused = "ffn_gate" not in w and w.get("ffn_up", 0) == 2 * w["ffn_down"]
        return FeedForwardShape(w["ffn_down"] // n_embd, gated="ffn_gate" in w or fused,
                                fused_up=fused,
                                clamped="ffn_gate" in w and clamp_shexp > 0
                                and not activation.fused, activation=activation.kind)
    if not w and r.ffn[index]:
        # A block without tensors of its own (hrm_text's slots run their stack's).
        return FeedForwardShape(r.ffn[index])
    return None
