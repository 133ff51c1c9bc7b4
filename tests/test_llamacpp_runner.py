"""The adapter that runs llama.cpp (planner/llamacpp/runner.py): where it finds the build
and what it reads from a log. The runs themselves are `make validate`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.llamacpp.runner import LlamaCppRunError, binaries_dir

ROOT = Path(__file__).resolve().parents[1]


def test_the_build_is_looked_for_under_the_checkout_s_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """build_llama_cpp.sh builds into <checkout>/.cache/llama.cpp/build-*/bin."""
    monkeypatch.delenv("LLAMA_CPP_BIN", raising=False)
    cache = ROOT / ".cache" / "llama.cpp"
    try:
        found = binaries_dir()
    except LlamaCppRunError as error:
        assert error.code == "LlamaCppNotBuilt" and error.details["path"] == str(cache)
    else:
        assert found.parent.parent == cache and found.name == "bin"


def test_a_cache_without_a_build_is_named(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLAMA_CPP_BIN", raising=False)
    with pytest.raises(LlamaCppRunError) as caught:
        binaries_dir(tmp_path)
    assert caught.value.code == "LlamaCppNotBuilt" and str(tmp_path) in caught.value.message
