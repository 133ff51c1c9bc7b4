"""A llama.cpp model family (:class:`Family`): the architectures whose graph it builds,
how it reads their blocks from a GGUF file and how it builds their graph; and the
registry of every family, by the architecture names each serves.

A family that needs nothing more than llama.cpp's usual block (attention or a recurrent
mixer, then a feed-forward network or experts, each with its norm and residual) only
names its architectures; the others set a trait or override a step. Each family lives in
its own module of :mod:`planner.llamacpp.families` and registers itself with
:func:`register`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from planner.llamacpp.allocator import Graph, Tensor
from planner.llamacpp.graph import attention, recurrent
from planner.llamacpp.graph.blocks import generic_block
from planner.llamacpp.graph.builder import Builder, embeddings, graph_inputs, output_head
from planner.llamacpp.graph.reading import (
    Activation,
    ModelReader,
    feed_forward,
    latent_attention,
    plain_attention,
)
from planner.llamacpp.graph.shapes import (
    AttentionShape,
    BlockShape,
    FeedForwardShape,
    GraphModel,
    RecurrentShape,
)
from planner.models.gguf_metadata import GgufMetadata
from planner.models.layer_memory import ModelMemory


class Family:
    """How llama.cpp builds the graph of the architectures in :attr:`architectures`.

    The traits below are llama.cpp's usual graph; a family changes the ones its builders
    change. Reading (:meth:`read`) makes each block's shape from the file (the generic
    reading of :mod:`planner.llamacpp.graph.reading`, which :meth:`attention`,
    :meth:`feed_forward` and :meth:`recurrent` may adjust) and the family's own
    :attr:`fields_type` (:meth:`fields`); building (:meth:`build`) lays out the graph of a
    ubatch (:meth:`inputs`, the embeddings, :meth:`blocks`, the output head)."""

    architectures: ClassVar[tuple[str, ...]] = ()
    """The ``general.architecture`` names the family serves; the first names it."""
    fields_type: ClassVar[Any] = None
    """The family's own fields (a frozen dataclass with ``from_dict``), or None."""

    mixed_batch: ClassVar[bool] = True
    """llama.cpp builds the mixed token/embedding input branch
    (``llm_arch_supports_mixed_batch``)."""
    rows_after_output_norm: ClassVar[bool] = False
    """The output rows are kept after the output norm (the next-token head's input), not
    in the last block."""
    weighted_input_norm: ClassVar[bool] = True
    """The blocks' input norm has weights (else the scheduler runs it where the block
    before ran)."""
    residual_from_norm: ClassVar[bool] = False
    """Each half of a block adds its output to its normed input, scaled (MiniMax-01)."""
    positions_per_token: ClassVar[int] = 1
    dsa_indexer: ClassVar[bool] = False
    """The latent attention's lightning indexer picks each token's top-k cells (DSA):
    its rotation, its cache's rows and mask are graph inputs."""
    shares_top_k: ClassVar[bool] = False
    """A block without an indexer reuses the last indexer's top-k."""
    flash_attention: ClassVar[bool] = True
    """False where llama.cpp runs the model without flash attention whatever -fa says."""
    parallel: ClassVar[str] = ""
    """The blocks run the feed-forward network beside the attention
    (:attr:`AttentionShape.parallel`)."""
    latent_rope: ClassVar[bool] = True
    """The latent attention ropes its rope part."""
    activation: ClassVar[Activation] = Activation()
    dense_beside_experts: ClassVar[bool] = False
    """A dense network runs beside the experts and is added to their sum."""

    @property
    def name(self) -> str:
        return self.architectures[0]

    # -- reading -----------------------------------------------------------------------

    def read(self, r: ModelReader) -> GraphModel:
        blocks = tuple(self.block_shape(r, index) for index in range(r.layer_count))
        self.check(r, blocks)
        return GraphModel(r.n_embd, r.vocabulary(), blocks, self.name,
                          "position_embd.weight" in r.names, self.fields(r, blocks))

    def block_shape(self, r: ModelReader, index: int) -> BlockShape:
        mixer = self.recurrent(r, index)
        attention_shape = self.attention(r, index)
        if mixer is not None and not self.attention_beside_mixer:
            attention_shape = None
        return BlockShape(attention_shape, self.feed_forward(r, index), mixer,
                          weighted_norm=self.weighted_input_norm)

    attention_beside_mixer: ClassVar[bool] = False
    """A block with a recurrent mixer keeps its attention beside it (Falcon-H1)."""

    def attention(self, r: ModelReader, index: int) -> AttentionShape | None:
        return latent_attention(r, index, rope=self.latent_rope, indexer=self.dsa_indexer) \
            or plain_attention(r, index, parallel=self.parallel, rope=self.rope(r, index))

    def rope(self, r: ModelReader, index: int) -> bool:
        """Whether the block's attention ropes its query and key."""
        return True

    def feed_forward(self, r: ModelReader, index: int) -> FeedForwardShape | None:
        return feed_forward(r, index, self.activation,
                            dense_beside_experts=self.dense_beside_experts)

    def recurrent(self, r: ModelReader, index: int) -> RecurrentShape | None:
        """The block's recurrent mixer (None: the family has none)."""
        return None

    def fields(self, r: ModelReader, blocks: Sequence[BlockShape]) -> Any:
        """The family's own fields (an instance of :attr:`fields_type`)."""
        return None

    def check(self, r: ModelReader, blocks: Sequence[BlockShape]) -> None:
        """Refuse, by the key at fault, a model whose blocks this family cannot build."""

    # -- building ----------------------------------------------------------------------

    def build(self, b: Builder) -> Graph:
        """The graph of one ubatch: the inputs, the embeddings, the blocks, the output
        head."""
        inputs = self.inputs(b)
        x = embeddings(b, inputs)
        output_head(b, self.blocks(b, x, inputs), inputs)
        return b.graph

    def inputs(self, b: Builder) -> dict[str, Tensor]:
        return graph_inputs(b)

    def blocks(self, b: Builder, x: Tensor, inputs: Mapping[str, Tensor]) -> Tensor:
        """Every block in turn; the last keeps only the output rows (unless the output
        norm keeps them)."""
        last = len(b.model.blocks) - 1
        for index, shape in enumerate(b.model.blocks):
            x = self.block(b, x, shape, index, index == last and not
                           self.rows_after_output_norm, inputs, b.backend_of[index])
        return x

    def block(self, b: Builder, x: Tensor, shape: BlockShape, index: int, last: bool,
              inputs: Mapping[str, Tensor], backend: int) -> Tensor:
        return generic_block(b, x, shape, index, last, inputs, backend)

    def attention_core(self, b: Builder, cur: Tensor, shape: AttentionShape, index: int,
                       inputs: Mapping[str, Tensor], backend: int) -> Tensor:
        """The attention up to its output projection, from the normed input ``cur``."""
        core = attention.latent_attention_core if shape.kv_lora else attention.attention_core
        return core(b, cur, shape, index, inputs, backend)

    def mixer(self, b: Builder, cur: Tensor, shape: RecurrentShape, index: int,
              inputs: Mapping[str, Tensor], backend: int, tail_backend: int) -> Tensor:
        """The recurrent mixer's output, from the normed input ``cur``."""
        build = {"delta_net": recurrent.delta_net, "kda": recurrent.kda}.get(
            shape.mixer, recurrent.mamba2 if shape.version == 2 else recurrent.mamba1)
        return build(b, cur, shape, index, inputs, backend, tail_backend)


_FAMILIES: dict[str, Family] = {}
_BY_ARCHITECTURE: dict[str, Family] = {}


def register(cls: type[Family]) -> type[Family]:
    """Register a family (a class decorator) under each architecture it serves."""
    family = cls()
    if not cls.architectures:
        raise ValueError(f"{cls.__name__} serves no architecture")
    for name in cls.architectures:
        if name in _BY_ARCHITECTURE:
            raise ValueError(f"{name} is served by {_BY_ARCHITECTURE[name].name} and "
                             f"{cls.__name__}")
        _BY_ARCHITECTURE[name] = family
    _FAMILIES[family.name] = family
    return cls


def family_named(name: str) -> Family:
    """The family registered under ``name`` (its first architecture)."""
    family = _FAMILIES.get(name)
    if family is None:
        raise ValueError(f"no llama.cpp model family is named {name!r}")
    return family


def family_of(architecture: str) -> Family | None:
    """The family that builds ``architecture``'s graph, or None."""
    return _BY_ARCHITECTURE.get(architecture)


def architectures() -> frozenset[str]:
    """Every architecture a registered family serves."""
    return frozenset(_BY_ARCHITECTURE)


def graph_model(meta: GgufMetadata, tensors: Sequence[Any], memory: ModelMemory) -> GraphModel:
    """The graph-relevant shape of a GGUF model, read by its architecture's family from
    its metadata (``meta``, checked), its tensors' widths and each layer's cache
    (``memory``, llama.cpp's rules of :mod:`planner.models.layer_memory`)."""
    family = family_of(meta.architecture)
    if family is None:
        from planner.models.spec import ModelError

        raise ModelError("UnsupportedArchitecture", f"{meta.where}: no llama.cpp model "
                         f"family builds the architecture {meta.architecture!r}",
                         file=meta.where, architecture=meta.architecture)
    return family.read(ModelReader(meta, tensors, memory))
