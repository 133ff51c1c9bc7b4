"""llama.cpp's compute buffer, derived from the graph: the tensors of one ubatch's graph,
allocated the way ggml's graph allocator does it.

ggml-alloc (``ggml_gallocr``) walks the graph in order. It first places the graph's inputs,
then for each node allocates the node (reusing its parent's memory in place when the
operation allows it, the parent has no other consumer and the layouts match) and frees
every parent whose last consumer it was. Memory comes from a best-fit free list
(``ggml_dyn_tallocr``): the smallest free block that fits, else the end of the buffer,
which grows. The compute buffer of a backend is the furthest end any tensor reached: the
peak of the live tensors, plus the holes best fit could not fill. Weights and the KV cache
live in their own buffers and only pass through.

:class:`Allocator` is that allocator, :class:`Graph` the graph it walks; the graphs of
llama.cpp's models are built by :mod:`planner.llamacpp.graph`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# ggml-alloc.c: ggml_op_can_inplace.
INPLACE_OPS = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB",
    "MUL", "DIV", "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM",
    "RMS_NORM_BACK", "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
})
# Buffers align each tensor to 32 bytes on the CPU and RPC backends (TENSOR_ALIGNMENT).
ALIGNMENT = 32


def _aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


@dataclass(eq=False)
class Tensor:
    """One tensor of a graph. ``layout`` stands for ggml's type, shape and strides: two
    tensors share memory in place only when their layouts are equal."""

    name: str
    nbytes: int
    op: str = "NONE"
    srcs: tuple[Tensor, ...] = ()
    view_src: Tensor | None = None
    layout: object = field(default_factory=object)
    external: bool = False
    """Its data lives outside the compute buffer (weights, KV cache)."""
    is_input: bool = False
    is_output: bool = False
    backend: int = 0


class _FreeList:
    """``ggml_dyn_tallocr`` for one chunk: free blocks sorted by offset, the last one the
    unbounded end of the buffer."""

    def __init__(self) -> None:
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.max_size = 0

    def alloc(self, size: int) -> int:
        size = _aligned(size)
        best = -1
        best_size = None
        for index, (_, block_size) in enumerate(self.blocks[:-1]):
            if block_size >= size and (best_size is None or block_size <= best_size):
                best, best_size = index, block_size
        if best == -1:
            best = len(self.blocks) - 1
        block = self.blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.blocks[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def free(self, offset: int, size: int) -> None:
        size = _aligned(size)
        blocks = self.blocks
        for index, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if index < len(blocks) - 1 and block[0] + block[1] == blocks[index + 1][0]:
                    block[1] += blocks[index + 1][1]
                    del blocks[index + 1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if index > 0 and blocks[index - 1][0] + blocks[index - 1][1] == block[0]:
                    blocks[index - 1][1] += block[1]
                    del blocks[index]
                return
        position = 0
        while position < len(blocks) and blocks[position][0] < offset:
            position += 1
        blocks.insert(position, [offset, size])


@dataclass
class _State:
    children: int = 0
    views: int = 0
    allocated: bool = False
    offset: int = 0
    backend: int = 0


@dataclass
class Graph:
    """The nodes of a graph in execution order, and the graph's inputs in the order ggml
    places them (its leafs)."""

    nodes: list[Tensor] = field(default_factory=list)
    inputs: list[Tensor] = field(default_factory=list)

    def input(self, name: str, nbytes: int, backend: int = 0) -> Tensor:
        tensor = Tensor(name, nbytes, is_input=True, backend=backend)
        self.inputs.append(tensor)
        return tensor

    def op(self, op: str, nbytes: int, srcs: Sequence[Tensor], name: str = "",
           layout: object | None = None, backend: int = 0) -> Tensor:
        tensor = Tensor(name or op.lower(), nbytes, op, tuple(srcs),
                        layout=object() if layout is None else layout, backend=backend)
        self.nodes.append(tensor)
        return tensor

    def like(self, op: str, src: Tensor, others: Sequence[Tensor] = (), name: str = "",
             backend: int = 0) -> Tensor:
        """An element-wise operation whose result has ``src``'s layout (it may run in
        place)."""
        return self.op(op, src.nbytes, (src, *others), name, src.layout, backend)

    def view(self, src: Tensor, name: str = "", nbytes: int | None = None,
             backend: int = 0) -> Tensor:
        root = src.view_src or src
        tensor = Tensor(name or f"{src.name} (view)", src.nbytes if nbytes is None else nbytes,
                        "VIEW", (src,), view_src=root, external=root.external,
                        backend=backend)
        self.nodes.append(tensor)
        return tensor


def external(name: str, nbytes: int = 0) -> Tensor:
    """A weight or a KV cache: in its own buffer."""
    return Tensor(name, nbytes, external=True)


class Allocator:
    """``ggml_gallocr``: one free list per backend, and the graph walk that fills them."""

    def __init__(self, backends: int = 1) -> None:
        self.lists = [_FreeList() for _ in range(backends)]
        self.state: dict[int, _State] = {}

    def _get(self, tensor: Tensor) -> _State:
        key = id(tensor)
        state = self.state.get(key)
        if state is None:
            state = self.state[key] = _State()
        return state

    def _is_allocated(self, tensor: Tensor) -> bool:
        return tensor.external or self._get(tensor).allocated

    def _allocate(self, tensor: Tensor, backend: int) -> None:
        state = self._get(tensor)
        if self._is_allocated(tensor) or tensor.view_src is not None:
            return
        state.allocated = True
        if tensor.op in INPLACE_OPS:
            for parent in tensor.srcs:
                # Only a tensor this allocator placed (not a weight, a cache or a view).
                if parent.external or not self._get(parent).allocated:
                    continue
                if parent.is_output or (parent.view_src is not None
                                        and parent.view_src.is_output):
                    continue
                if parent.layout is not tensor.layout:
                    continue
                parent_state = self._get(parent)
                if parent_state.children != 1 or parent_state.views != 0:
                    continue
                if parent.view_src is not None:
                    root = parent.view_src
                    root_state = self._get(root)
                    if root_state.views == 1 and root_state.children == 0:
                        state.backend, state.offset = root_state.backend, root_state.offset
                        parent_state.allocated = False
                        root_state.allocated = False
                        self._free_extra(tensor, root, state)
                        return
                    continue
                state.backend, state.offset = parent_state.backend, parent_state.offset
                parent_state.allocated = False
                self._free_extra(tensor, parent, state)
                return
        state.backend = backend
        state.offset = self.lists[backend].alloc(tensor.nbytes)

    def _free_extra(self, node: Tensor, parent: Tensor, state: _State) -> None:
        parent_size, node_size = _aligned(parent.nbytes), _aligned(node.nbytes)
        if parent_size > node_size:
            self.lists[state.backend].free(state.offset + node_size, parent_size - node_size)

    def _free(self, tensor: Tensor) -> None:
        if tensor.is_output:
            return
        state = self._get(tensor)
        self.lists[state.backend].free(state.offset, tensor.nbytes)
        state.allocated = False

    def run(self, graph: Graph) -> list[int]:
        """Allocate the graph; each backend's buffer size."""
        for tensor in graph.inputs:
            self._allocate(tensor, tensor.backend)
        for node in graph.nodes:
            # A dependency the scheduler adds (op NONE) is a view that does not pin its
            # source.
            if node.view_src is not None and node.op != "NONE":
                self._get(node.view_src).views += 1
            for src in node.srcs:
                self._get(src).children += 1
        for node in graph.nodes:
            for parent in node.srcs:
                self._allocate(parent, node.backend)
            self._allocate(node, node.backend)
            for parent in node.srcs:
                parent_state = self._get(parent)
                parent_state.children -= 1
                if parent_state.children or parent_state.views:
                    continue
                if parent.view_src is not None and parent.op != "NONE":
                    root = parent.view_src
                    root_state = self._get(root)
                    root_state.views -= 1
                    if not root_state.views and not root_state.children and \
                            root_state.allocated and not root.external:
                        self._free(root)
                elif parent_state.allocated and not parent.external:
                    self._free(parent)
        return [free_list.max_size for free_list in self.lists]


def buffer_sizes(graphs: Iterable[Graph], backends: int = 1) -> list[int]:
    """Each backend's compute buffer over several graphs reserved in turn: ggml keeps the
    largest each needed (``ggml_gallocr_reserve_n``)."""
    sizes = [0] * backends
    for graph in graphs:
        for index, size in enumerate(Allocator(backends).run(graph)):
            sizes[index] = max(sizes[index], size)
    return sizes
