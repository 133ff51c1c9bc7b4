"""ggml's graph allocator as planner.llamacpp.allocator copies it, and the graphs
planner.llamacpp.graph builds, worked by hand; the recorded llama.cpp runs
(tests/test_memory_archs.py) check them against every architecture."""

from __future__ import annotations

from planner.llamacpp.allocator import Allocator, Graph, buffer_sizes, external
from planner.llamacpp.graph import (
    AttentionShape,
    BlockShape,
    FeedForwardShape,
    GraphModel,
    build_graph,
    compute_buffers,
    schedule,
)

KIB = 1024


def test_freed_memory_is_reused_by_best_fit_and_the_buffer_is_the_furthest_end() -> None:
    g = Graph()
    x = g.input("x", 4 * KIB)
    w = external("w")
    a = g.op("MUL_MAT", 8 * KIB, (w, x), "a")
    b = g.op("MUL_MAT", 2 * KIB, (w, a), "b")  # a is freed after b
    c = g.op("MUL_MAT", 6 * KIB, (w, b), "c")  # fits a's 8 KiB hole
    g.op("MUL_MAT", 1 * KIB, (w, c, x), "d")
    # x (4) + a (8) + b (2) is the furthest end; c lands in a's hole, d in what c left.
    assert Allocator().run(g) == [14 * KIB]


def test_an_element_wise_operation_runs_in_place_on_its_only_consumer() -> None:
    g = Graph()
    x = g.input("x", 4 * KIB)
    w = external("w")
    a = g.op("MUL_MAT", 8 * KIB, (w, x), "a")
    b = g.like("MUL", a, (w,), "b")  # in place: a has one consumer
    g.op("MUL_MAT", 8 * KIB, (w, b), "c")
    assert Allocator().run(g) == [4 * KIB + 8 * KIB + 8 * KIB]
    # With a second consumer a cannot be overwritten: b needs its own 8 KiB.
    g2 = Graph()
    x2 = g2.input("x", 4 * KIB)
    a2 = g2.op("MUL_MAT", 8 * KIB, (w, x2), "a")
    b2 = g2.like("MUL", a2, (w,), "b")
    g2.op("ADD", 8 * KIB, (b2, a2), "c")
    assert Allocator().run(g2) == [4 * KIB + 3 * 8 * KIB]


def test_outputs_are_never_freed_and_graphs_keep_the_larger_buffer() -> None:
    def graph(size: int, output: bool = True) -> Graph:
        g = Graph()
        x = g.input("x", size)
        out = g.op("MUL_MAT", size, (external("w"), x), "out")
        out.is_output = output
        after = g.op("MUL_MAT", size, (external("w"), out), "after")  # in x's hole
        g.op("MUL_MAT", 2 * size, (external("w"), after), "last")
        return g

    # Kept, out pins [1, 2) KiB and the last tensor goes past it; freed, it would not.
    assert Allocator().run(graph(KIB)) == [4 * KIB]
    assert Allocator().run(graph(KIB, output=False)) == [3 * KIB]
    assert buffer_sizes([graph(KIB), graph(4 * KIB)]) == [16 * KIB]


def _model(layers: int = 2, n_ff: int = 3 * 256, vocab: int = 100) -> GraphModel:
    attention = AttentionShape(256, 64, 64, 256, 4)
    return GraphModel(256, vocab, (BlockShape(attention, FeedForwardShape(n_ff)),) * layers)


def test_a_dense_model_peaks_in_its_feed_forward_network() -> None:
    """With the inputs in place, the gated network holds its input, gate, up and their
    product at once: residual + 3 x n_ff per token, beside the persistent inputs."""
    tokens, cells = 32, 256
    unit = 256 * tokens * 4
    size = compute_buffers(_model(), n_ubatch=tokens, n_kv=cells)[0]
    inputs = (tokens * 4 + unit + tokens * 4 + tokens * 8 + unit + tokens * 4
              + 2 * tokens * 8 + cells * tokens * 2 + tokens * 4)
    # inp_embd and the mixed branch's copy stay; embd is freed into the FFN's space.
    ffn = unit + 3 * 3 * unit
    assert inputs + ffn <= size <= inputs + ffn + 2 * unit


def test_splitting_copies_inputs_four_times_with_pipeline_parallelism() -> None:
    model = _model(layers=2)
    one, host = compute_buffers(model, n_ubatch=32, n_kv=256, layer_backends=[0, 0],
                                input_backend=1, backends=2, copies=1)
    two = compute_buffers(model, n_ubatch=32, n_kv=256, layer_backends=[0, 1],
                          output_backend=1, input_backend=2, backends=3, copies=4)
    # The host keeps its inputs four times over with two devices, once with one.
    graph = build_graph(model, n_tokens=32, n_outputs=32, n_kv=256, layer_backends=[0, 1],
                        output_backend=1, input_backend=2)
    inputs = sum(tensor.nbytes for tensor in graph.inputs)
    assert two[2] >= 4 * inputs > host >= inputs
    # Each device copies the masks and positions it reads, four times over.
    assert two[1] > 4 * 256 * 32 * 2
    scheduled = schedule(build_graph(model, n_tokens=32, n_outputs=32, n_kv=256,
                                     layer_backends=[0, 1], output_backend=1,
                                     input_backend=2), 4)
    copies = [t for t in scheduled.inputs if t.backend == 1]
    assert copies and all(t.is_output for t in copies) and len(copies) % 4 == 0
    assert one < two[0]


def test_the_output_device_holds_the_logits_of_every_token() -> None:
    small = compute_buffers(_model(vocab=100), n_ubatch=64, n_kv=256)[0]
    large = compute_buffers(_model(vocab=100_000), n_ubatch=64, n_kv=256)[0]
    logits = 100_000 * 64 * 4
    # The logits reuse what the last layer freed, the rest extends the buffer.
    assert logits < large < logits + small


def test_a_dense_network_beside_the_experts_runs_while_their_sum_is_held() -> None:
    """grok: the experts' sum stays while the dense network's gate, up and product are
    alive, so a dense network wider than the experts raises the buffer by its own widths
    beside that sum."""
    tokens, cells, width = 32, 256, 256
    attention = AttentionShape(width, width, width, width, 2)

    def size(dense: int) -> int:
        ffn = FeedForwardShape(64, n_expert=4, n_expert_used=1, n_ff_dense=dense)
        model = GraphModel(width, 128, (BlockShape(attention, ffn),) * 2)
        return compute_buffers(model, n_ubatch=tokens, n_kv=cells)[0]

    unit = tokens * 4
    # Gate and up (2048 per token each) at once beside the experts' sum (width per
    # token); their product may land where the smaller tensors were freed.
    grown = size(2048) - size(0)
    assert 2 * 2048 * unit + width * unit <= grown <= 3 * 2048 * unit + width * unit
