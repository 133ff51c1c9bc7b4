"""A model as llama.cpp lays it out (:class:`LlamaCppModel`): each block's weights, what it
caches per KV cell and the recurrent state it keeps, the input tensors (host memory) and
the output tensors (the output device), read from a GGUF file or its header, with the
shape of its compute graph (:mod:`planner.llamacpp.graph`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import planner.llamacpp.families  # noqa: F401  (registers every model family)
from planner.llamacpp.graph import (
    AttentionShape,
    BlockShape,
    FeedForwardShape,
    GraphModel,
    graph_model,
)
from planner.llamacpp.settings import _bad, _pad

# llama-hparams.h: the most blocks llama.cpp loads (load_hparams asserts it).
LLAMA_MAX_LAYERS = 512
# Buffers align each tensor to 32 bytes on the CPU and RPC backends (TENSOR_ALIGNMENT).
TENSOR_ALIGNMENT = 32
INPUT_TENSOR_PREFIXES = ("token_embd", "position_embd", "token_types",
                         "per_layer_token_embd")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class LayerLayout:
    """One block: its weights, what it caches per KV cell (K and V rows, and a sparse
    attention's indexer K and V rows) and the f32 recurrent state it keeps per sequence."""

    weight_bytes: int
    key_elements: int
    value_elements: int
    sliding: bool = False
    index_key_elements: int = 0
    index_value_elements: int = 0
    state_elements: int = 0
    compressed_elements: int = 0
    compress_ratio: int = 0
    key_head: int = 0
    """The block's K and V head sizes (llama.cpp's ``n_embd_head_k(il)``,
    ``n_embd_head_v(il)``), which decide the rotation of a quantized cache."""
    value_head: int = 0


@dataclass(frozen=True, slots=True)
class LlamaCppModel:
    """The facts about a model that decide where llama.cpp puts its bytes."""

    name: str
    architecture: str
    native_context_length: int
    embedding_length: int
    vocab_size: int
    head_count: int
    feed_forward_length: int
    layers: tuple[LayerLayout, ...]
    input_bytes: int
    """Input tensors (token_embd, ...): always host memory."""
    output_bytes: int
    """Every other tensor outside the blocks: on the output (last) device."""
    tied_embedding_bytes: int = 0
    """token_embd's size when the model has no output.weight: a second copy goes to the
    output device."""
    sliding_window: int = 0
    latent_attention: bool = False
    per_sequence_streams: bool = False
    """The caches keep one stream per sequence even with ``--kv-unified`` (DeepSeek-V4)."""
    host_mapped_bytes: int = 0
    """What the host maps of the file in a split: from the first input tensor to the end
    of the last (0: just the input tensors)."""
    graph: GraphModel | None = None
    """The shape of its compute graph (from the GGUF file); None: a plain transformer of
    the widths above."""

    def graph_model(self) -> GraphModel:
        """The compute graph's shape: the file's, else a transformer whose every layer
        projects to ``embedding_length`` queries and to its cached K and V widths, and
        runs a gated feed-forward network of ``feed_forward_length``."""
        if self.graph is not None:
            return self.graph
        blocks = tuple(
            BlockShape(AttentionShape(self.embedding_length, layer.key_elements,
                                      layer.value_elements, self.embedding_length,
                                      max(1, self.head_count), sliding=layer.sliding)
                       if layer.key_elements else None,
                       FeedForwardShape(self.feed_forward_length))
            for layer in self.layers)
        return GraphModel(self.embedding_length, self.vocab_size, blocks)

    @property
    def layer_count(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layers"] = [asdict(layer) for layer in self.layers]
        data["graph"] = self.graph.to_dict() if self.graph is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LlamaCppModel:
        values = dict(data)
        values["layers"] = tuple(LayerLayout(**layer) for layer in values["layers"])
        if values.get("graph") is not None:
            values["graph"] = GraphModel.from_dict(values["graph"])
        return cls(**values)


def _aligned(size: int, alignment: int = TENSOR_ALIGNMENT) -> int:
    return _pad(size, alignment)


def model_from_gguf(path: str | Path) -> LlamaCppModel:
    """The llama.cpp layout of the GGUF model at ``path`` (any shard of a split model)."""
    if not isinstance(path, str | Path):
        raise _bad("path")("must be a file path", path)

    from planner.models.gguf_file import read_shards
    from planner.models.gguf_spec import from_gguf

    spec = from_gguf(path)  # validates the file and the architecture
    headers = read_shards(path)
    tensors = [tensor for header in headers for tensor in header.tensors]
    return model_from_header(spec.name, headers[0].metadata, tensors, str(headers[0].path))


def model_from_header(name: str, metadata: Mapping[str, Any], tensors: Sequence[Any],
                      where: str = "model") -> LlamaCppModel:
    """The llama.cpp layout of a model from its GGUF metadata and tensor table (entries
    with ``name``, ``type_name`` and ``n_bytes``)."""
    from planner.models.gguf_metadata import GgufMetadata
    from planner.models.gguf_spec import token_embedding
    from planner.models.layer_memory import model_memory

    meta = GgufMetadata.of_model(metadata, where, most_layers=LLAMA_MAX_LAYERS)
    arch, layers_n = meta.architecture, meta.layer_count
    memory = model_memory(meta)
    weights = [0] * layers_n
    input_bytes = output_bytes = 0
    token_embd = None
    has_output = False
    inputs = []
    for position, tensor in enumerate(tensors):
        size = _aligned(tensor.n_bytes)
        match = _BLOCK.match(tensor.name)
        if match is not None:
            weights[int(match[1])] += size
        elif tensor.name.startswith(INPUT_TENSOR_PREFIXES):
            inputs.append(position)
            if tensor.name == "token_embd.weight":
                token_embd = tensor
        else:
            output_bytes += size
            has_output = has_output or tensor.name == "output.weight"
    input_bytes = sum(_aligned(tensors[position].n_bytes) for position in inputs)
    # The host maps the file from its first input tensor to the end of its last
    # (llama_model::load_tensors, CPU_Mapped): tensors stored between them count too.
    mapped = sum(_aligned(tensor.n_bytes)
                 for tensor in tensors[inputs[0]:inputs[-1] + 1]) if inputs else 0
    embedding, vocab = token_embedding(metadata, tensors, arch, where)
    heads = meta.counts_per_layer("attention.head_count", 0)
    ffn = meta.counts_per_layer("feed_forward_length", 4 * embedding)
    tied = _aligned(token_embd.n_bytes) if token_embd is not None and not has_output else 0
    layers = tuple(
        LayerLayout(weights[i], layer.key_elements, layer.value_elements, layer.sliding,
                    layer.index_key_elements, layer.index_value_elements,
                    layer.state_elements, layer.compressed_elements, layer.compress_ratio,
                    layer.key_head, layer.value_head)
        for i, layer in enumerate(memory.layers))
    return LlamaCppModel(
        name=name, architecture=arch, native_context_length=meta.count("context_length"),
        embedding_length=embedding, vocab_size=vocab, head_count=max(heads),
        feed_forward_length=max(ffn) or 4 * embedding, layers=layers, input_bytes=input_bytes,
        output_bytes=output_bytes, tied_embedding_bytes=tied,
        sliding_window=memory.sliding_window,
        latent_attention=any(layer.key_elements > 0 and layer.value_elements == 0
                             for layer in memory.layers),
        per_sequence_streams=arch == "deepseek4",
        host_mapped_bytes=mapped,
        graph=graph_model(meta, tensors, memory),
    )
