"""``falcon.cpp`` and ``plamo.cpp``: the feed-forward network runs beside the attention,
on the block's normed input, and the block adds both to its input. Falcon-40B's blocks
norm their input twice (``attn_norm_2`` for the attention, ``attn_norm`` for the network):
ggml reaches the network's norm only after the attention, so the two are not alive at
once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.llamacpp.allocator import Tensor
from planner.llamacpp.graph import (
    BlockShape,
    Builder,
    Family,
    ModelReader,
    feed_forward,
    norm,
    output_projection,
    register,
)
from planner.llamacpp.graph.blocks import generic_block


@dataclass(frozen=True, slots=True)
class FalconNorms:
    """Whether the blocks norm the attention's input apart (``attn_norm_2``)."""

    attention_norm: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FalconNorms:
        return cls(**data)


@register
class Falcon(Family):
    architectures = ("falcon", "plamo")
    parallel = "ffn_first"
    fields_type = FalconNorms

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> FalconNorms:
        return FalconNorms(all("attn_norm_2" in r.widths[index]
                               for index in range(r.layer_count)))

    def block(self, b: Builder, x: Tensor, shape: BlockShape, index: int, last: bool,
              inputs: Mapping[str, Tensor], backend: int) -> Tensor:
        attn, ffn = shape.attention, shape.feed_forward
        if not b.model.fields.attention_norm or attn is None or ffn is None:
            return generic_block(b, x, shape, index, last, inputs, backend)
        g = b.graph
        layer = f"blk.{index}"
        core = self.attention_core(b, norm(b, x, f"{layer}.attn_2", backend), attn, index,
                                   inputs, backend)
        projected = output_projection(b, core, attn, index, backend)
        normed = norm(b, x, f"{layer}.attn", backend)
        if last:
            out_rows = b.n_outputs * b.model.n_embd * 4
            projected, x, normed = (
                g.op("GET_ROWS", out_rows, (t, inputs["out_ids"]), name, backend=backend)
                for t, name in ((projected, "attn_out_rows"), (x, "inp_rows"),
                                (normed, "attn_norm_rows")))
        ffn_out = feed_forward(b, normed, ffn, index, backend)
        cur = g.like("ADD", ffn_out, (projected,), f"ffn_attn-{index}", backend)
        return g.like("ADD", cur, (x,), f"l_out-{index}", backend)
