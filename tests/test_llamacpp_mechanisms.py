"""What the grid of settings showed the estimate lacked, each taken from llama.cpp's source:
ggml's order of a graph, the outputs llama-server computes, the settings llama.cpp refuses
for a model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from planner.llamacpp import LlamaCppSettings, estimate
from planner.llamacpp.allocator import Graph, buffer_sizes, in_ggml_order
from planner.llamacpp.check import model_from_header
from planner.llamacpp.settings import PROGRAMS, MemoryModelError

ROOT = Path(__file__).resolve().parents[1]


def _recorded(name: str) -> Any:
    entry = json.loads((ROOT / "validation" / "results" / "archs" / f"{name}.json")
                       .read_text())
    header = entry["header"]
    tensors = [SimpleNamespace(name=n, type_name=t, n_bytes=b) for n, t, b in header["tensors"]]
    return model_from_header(entry["file"], header["metadata"], tensors, entry["file"])


def test_ggml_runs_a_graph_in_the_order_its_expansions_reach_it() -> None:
    """ggml_build_forward_expand walks each expanded tensor depth first, its sources in
    order: a tensor expanded early runs early, whatever order the builder made it in,
    and an input is placed where the walk first reaches it."""
    g = Graph()
    a_in, b_in, unused = (g.input(name, 64) for name in ("a_in", "b_in", "unused"))
    late = g.op("ADD", 64, (b_in,), "late")      # made first, expanded last
    early = g.op("ADD", 64, (a_in,), "early")
    g.expand(early)
    out = g.op("MUL", 64, (late, early), "out")  # nothing consumes it: expanded when made
    ordered = in_ggml_order(g)
    assert [t.name for t in ordered.nodes] == ["early", "late", "out"]
    assert [t.name for t in ordered.inputs] == ["a_in", "b_in"]  # "unused" is no leaf
    assert unused not in ordered.inputs and out in ordered.nodes


def test_the_order_decides_what_is_alive_at_once() -> None:
    """Two 1 KiB branches, each reduced to 32 bytes, made side by side: in the order they
    were made both are alive at once; ggml finishes one branch before the next, so the
    second reuses the first's memory."""
    g = Graph()
    x = g.input("x", 32)
    wide = [g.op("REPEAT", 1024, (x,), f"{name}_wide") for name in "ab"]
    sums = [g.op("SUM_ROWS", 32, (w,), f"{w.name}_sum") for w in wide]
    g.op("ADD", 32, tuple(sums), "out")
    ordered = in_ggml_order(g)
    assert [t.name for t in ordered.nodes] == ["a_wide", "a_wide_sum", "b_wide",
                                               "b_wide_sum", "out"]
    assert buffer_sizes([ordered])[0] < 2 * 1024 <= buffer_sizes([g])[0]


@pytest.mark.parametrize(("program", "parallel", "expected"),
                         [("llama-server", 1, 1), ("llama-server", 4, 4),
                          ("llama-completion", 4, 2048)])
def test_llama_server_computes_one_output_per_lane(program: str, parallel: int,
                                                   expected: int) -> None:
    settings = LlamaCppSettings(context_length=4096, parallel=parallel, program=program)
    assert settings.n_outputs_max == expected


def test_the_program_is_checked() -> None:
    assert PROGRAMS == ("llama-server", "llama-completion")
    with pytest.raises(MemoryModelError) as caught:
        LlamaCppSettings(context_length=4096, program="llama-cli")
    assert caught.value.code == "InvalidMemorySettings"


def test_llama_server_reserves_less_than_llama_completion() -> None:
    """Its prompt graph holds the logits of one token, llama-completion's a ubatch's."""
    model = _recorded("llama-dense")
    server, completion = (estimate(model, LlamaCppSettings(context_length=512, program=p),
                                   devices=0).host.compute_bytes for p in PROGRAMS)
    assert server < completion


@pytest.mark.parametrize(("name", "settings", "code"), [
    ("deepseek2-moe", dict(cache_type_k="q8_0", cache_type_v="f16"), "CacheTypesMustMatch"),
    ("laguna-moe", dict(cache_type_k="q4_0", cache_type_v="f16"), "CacheTypeDoesNotFitHead"),
    ("grok-moe", dict(cache_type_v="q8_0"), "QuantizedVCacheNeedsFlashAttention"),
])
def test_the_estimate_refuses_what_llama_cpp_refuses_for_the_model(
        name: str, settings: dict[str, Any], code: str) -> None:
    model = _recorded(name)
    with pytest.raises(MemoryModelError) as caught:
        estimate(model, LlamaCppSettings(context_length=512, **settings), devices=0)
    assert caught.value.code == code
