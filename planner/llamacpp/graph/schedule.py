"""What ggml's scheduler does with a model's graph (``ggml_backend_sched``): the copies
of tensors a backend reads from another, kept four times over with pipeline
parallelism, and each backend's compute buffer over the graphs llama.cpp reserves."""

from __future__ import annotations

from collections.abc import Sequence

from planner.llamacpp.allocator import Graph, Tensor, buffer_sizes
from planner.llamacpp.graph.builder import Builder
from planner.llamacpp.graph.family import family_named
from planner.llamacpp.graph.shapes import GraphModel


def build_graph(model: GraphModel, *, n_tokens: int, n_outputs: int, n_kv: int,
                n_kv_swa: int = 0, flash_attn: bool = True,
                layer_backends: Sequence[int] | None = None, output_backend: int = 0,
                input_backend: int = 0) -> Graph:
    """The graph of one ubatch of ``n_tokens`` tokens with ``n_outputs`` outputs, as the
    model's family builds it; each block runs on its backend in ``layer_backends``, the
    output head on ``output_backend``, the inputs and the token rows on
    ``input_backend``."""
    backends = list(layer_backends) if layer_backends is not None else \
        [0] * len(model.blocks)
    family = family_named(model.family)
    builder = Builder(Graph(), model, family, n_tokens, n_outputs, n_kv, n_kv_swa or n_kv,
                      flash_attn, backends, input_backend, output_backend)
    return family.build(builder)


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
                    flash_attn: bool = True, n_seqs: int = 1, n_outputs: int | None = None,
                    layer_backends: Sequence[int] | None = None,
                    output_backend: int = 0, input_backend: int = 0,
                    backends: int = 1, copies: int = 1) -> list[int]:
    """Each backend's compute buffer: the larger of the prompt graph (``n_ubatch`` tokens,
    and as many outputs up to ``n_outputs``, llama.cpp's ``n_outputs_max``) and the
    generation graph (one token and output per sequence), as llama.cpp reserves them
    (``llama_context::sched_reserve``)."""
    prompt_outputs = n_ubatch if n_outputs is None else min(n_ubatch, n_outputs)
    graphs = [schedule(build_graph(model, n_tokens=tokens, n_outputs=outputs, n_kv=n_kv,
                                   n_kv_swa=n_kv_swa, flash_attn=flash_attn,
                                   layer_backends=layer_backends,
                                   output_backend=output_backend,
                                   input_backend=input_backend), copies)
              for tokens, outputs in ((n_ubatch, prompt_outputs), (n_seqs, n_seqs))]
    return buffer_sizes(graphs, backends)

