"""``talkie.cpp``: OLMo's unweighted input norms, and the embeddings normed once (the
blocks start from them) and kept to the end: each block adds them, scaled by its
``layer_output_scale``, to its output (the last block only their output rows)."""

from __future__ import annotations

from collections.abc import Mapping

from planner.llamacpp.allocator import Tensor
from planner.llamacpp.families.olmo import Olmo
from planner.llamacpp.graph import Builder, register


@register
class Talkie(Olmo):
    architectures = ("talkie",)

    def blocks(self, b: Builder, x: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
        g = b.graph
        if not b.model.blocks:
            return x
        # The norm has no weights: the scheduler runs it where the first layer runs.
        x = skip = g.op("RMS_NORM", x.nbytes, (x,), "embd_norm", backend=b.backend_of[0])
        last = len(b.model.blocks) - 1
        for index, shape in enumerate(b.model.blocks):
            backend = b.backend_of[index]
            x = self.block(b, x, shape, index, index == last, inputs, backend)
            kept = skip if index != last else g.op(
                "GET_ROWS", x.nbytes, (skip, inputs["out_ids"]), "skip_rows", backend=backend)
            scaled = g.op("MUL", kept.nbytes, (kept, b.w(f"blk.{index}.layer_output_scale")),
                          "skip", backend=backend)
            x = g.like("ADD", x, (scaled,), f"l_out-{index}", backend)
        return x
