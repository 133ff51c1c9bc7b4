"""The graph llama.cpp builds for one ubatch of a model, tensor by tensor, for
:mod:`planner.llamacpp.allocator` to allocate.

A model's :class:`GraphModel` is read from its GGUF file by its architecture's
:class:`Family` (:mod:`planner.llamacpp.families`, one module per llama.cpp model family,
registered with :func:`register`): the embedding width, the vocabulary, each block's
attention, feed-forward network or experts and recurrent mixer (projection widths from the
tensors' element counts), and the family's own fields. :func:`build_graph` has the family
lay out the tensors in the order llama.cpp's graph builders create them
(``llm_graph_context``: ``build_inp_embd``, ``build_qkv``, ``build_attn``, ``build_ffn``,
``build_moe_ffn``, the output head), with the sizes they have at ``n_tokens`` tokens and
``n_kv`` cache cells, and which of them an element-wise operation may overwrite in place;
most families do it with the one generic block builder (:mod:`.blocks`).
:func:`schedule` adds what ggml's scheduler adds when the layers are split over backends:
copies of the tensors a backend reads from another, kept four times over with pipeline
parallelism; :func:`compute_buffers` gives each backend's compute buffer.
"""

from planner.llamacpp.graph.attention import (
    attention_core,
    latent_attention_core,
    latent_values,
    output_projection,
)
from planner.llamacpp.graph.builder import (
    F16,
    F32,
    I32,
    I64,
    Builder,
    embeddings,
    graph_inputs,
    logits,
    norm,
    output_head,
    token_inputs,
)
from planner.llamacpp.graph.family import (
    Family,
    architectures,
    family_named,
    family_of,
    graph_model,
    register,
)
from planner.llamacpp.graph.feed_forward import feed_forward
from planner.llamacpp.graph.reading import (
    Activation,
    ModelReader,
    latent_attention,
    plain_attention,
)
from planner.llamacpp.graph.recurrent import delta_net, kda, strided_view, tail_backend
from planner.llamacpp.graph.schedule import build_graph, compute_buffers, schedule
from planner.llamacpp.graph.shapes import (
    AttentionShape,
    BlockShape,
    FeedForwardShape,
    GraphModel,
    RecurrentShape,
)

__all__ = [
    "F16", "F32", "I32", "I64", "Activation", "AttentionShape", "BlockShape", "Builder",
    "Family", "FeedForwardShape", "GraphModel", "ModelReader", "RecurrentShape",
    "architectures", "attention_core", "build_graph", "compute_buffers", "delta_net",
    "embeddings", "family_named", "family_of", "feed_forward", "graph_inputs",
    "graph_model", "kda", "latent_attention", "latent_attention_core", "latent_values",
    "logits", "norm", "output_head", "output_projection", "plain_attention", "register",
    "schedule", "strided_view", "tail_backend", "token_inputs",
]
