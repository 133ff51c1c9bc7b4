"""The model families of planner/llamacpp/families/: one per group of llama.cpp
architectures, each architecture served by exactly one, together llama.cpp's names; a new
llama-like architecture is one small file (the example of docs/llamacpp.md), which then
builds llama's graph."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import planner.llamacpp
import planner.models
from planner.llamacpp import LlamaCppSettings, estimate, model_from_header
from planner.llamacpp.graph import Family, family_of, register
from planner.llamacpp.graph import family as registry
from planner.models import ModelError
from planner.models.layer_memory import LLAMA_CPP_ARCHITECTURES

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ROOT / "planner" / "llamacpp" / "families"


def test_the_families_serve_exactly_llama_cpp_s_architectures() -> None:
    assert planner.llamacpp.SUPPORTED_ARCHITECTURES == planner.models.SUPPORTED_ARCHITECTURES
    assert planner.models.SUPPORTED_ARCHITECTURES == LLAMA_CPP_ARCHITECTURES
    assert len(LLAMA_CPP_ARCHITECTURES) == 153


def test_each_family_is_a_module_of_its_own_named_after_llama_cpp_s_file() -> None:
    """One family per module (two where a module serves a parent and a variant), each
    module named after one of the llama.cpp builders it mirrors."""
    served: dict[str, list[str]] = {}
    for name in sorted(planner.llamacpp.SUPPORTED_ARCHITECTURES):
        family = family_of(name)
        assert family is not None
        served.setdefault(type(family).__module__, []).append(name)
    modules = {path.stem for path in FAMILIES.glob("*.py") if path.stem != "__init__"}
    assert {module.rsplit(".", 1)[1] for module in served} == modules
    for module, names in served.items():
        stem = module.rsplit(".", 1)[1]
        assert any(stem.replace("_", "") == re.sub(r"[-_]", "", name) for name in names), (
            module, names)


def test_an_architecture_is_served_once() -> None:
    class Twice(Family):
        architectures = ("llama",)

    with pytest.raises(ValueError, match="llama is served by llama and Twice"):
        register(Twice)


def test_a_name_llama_cpp_does_not_know_is_refused() -> None:
    entry = _entry("llama-dense.json")
    with pytest.raises(ModelError) as caught:
        _model(entry, "notllama")
    assert caught.value.code == "UnsupportedArchitecture"


# -- the docs' example: a new llama-like architecture in one small file -------------------


def _entry(name: str) -> dict[str, object]:
    return json.loads((ROOT / "validation" / "results" / "archs" / name).read_text())


def _model(entry: dict[str, object], architecture: str) -> planner.llamacpp.LlamaCppModel:
    header = entry["header"]
    assert isinstance(header, dict)
    metadata = {re.sub(r"^llama\.", f"{architecture}.", key): value
                for key, value in header["metadata"].items()}
    metadata["general.architecture"] = architecture
    tensors = [SimpleNamespace(name=n, type_name=t, n_bytes=b) for n, t, b in header["tensors"]]
    return model_from_header("m", metadata, tensors, "m")


@pytest.fixture
def registry_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it was, after a test that registers a family; llama.cpp's names
    with one more."""
    families, by_architecture = dict(registry._FAMILIES), dict(registry._BY_ARCHITECTURE)
    monkeypatch.setattr("planner.models.layer_memory.LLAMA_CPP_ARCHITECTURES",
                        LLAMA_CPP_ARCHITECTURES | {"myarch"})
    yield
    registry._FAMILIES.clear()
    registry._FAMILIES.update(families)
    registry._BY_ARCHITECTURE.clear()
    registry._BY_ARCHITECTURE.update(by_architecture)


def test_the_docs_example_file_adds_an_architecture_that_builds_llama_s_graph(
        tmp_path: Path, registry_kept: None) -> None:
    docs = (ROOT / "docs" / "llamacpp.md").read_text()
    source = re.search(r'```python\n("""``myarch\.cpp``.*?)```', docs, re.S)
    assert source is not None
    path = tmp_path / "myarch.py"
    path.write_text(source[1])
    assert len(source[1].splitlines()) <= 12
    spec = importlib.util.spec_from_file_location("myarch", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    family = family_of("myarch")
    assert family is not None and family.name == "myarch"
    entry = _entry("llama-dense.json")
    settings = LlamaCppSettings(context_length=1024)
    mine, llama = _model(entry, "myarch"), _model(entry, "llama")
    assert mine.graph is not None and mine.graph.family == "myarch"
    for ranges in (None, [(0, 1), (1, 2)]):
        ours = estimate(mine, settings, ranges, devices=0 if ranges is None else None)
        theirs = estimate(llama, settings, ranges, devices=0 if ranges is None else None)
        assert ours.to_dict() == theirs.to_dict()
