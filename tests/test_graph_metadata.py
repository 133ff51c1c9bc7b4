"""GGUF metadata of the wrong type or out of its range, in any field the llama.cpp estimate
reads: refused by name (a ModelError naming the file and the key: ``InvalidGguf`` or
``MissingGgufKey``), never a Python error, a hang or an estimate built on it. The models
are llama.cpp's own small model of each architecture (validation/results/archs/), with
one key changed; the same files go through ``planner memory``, ``planner plan
--memory-model llamacpp`` and ``planner launch``, which exit 2 with the same name."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gguf_files
import pytest

from planner.llamacpp import LlamaCppModel, LlamaCppSettings, estimate, model_from_header
from planner.llamacpp.check import load_record
from planner.models import ModelError
from planner.models.gguf_metadata import GgufMetadata

ROOT = Path(__file__).resolve().parents[1]
RECORD = load_record(ROOT / "validation" / "results" / "archs")
ENTRIES = {entry["file"]: entry for entry in RECORD["models"]}
SETTINGS = LlamaCppSettings(context_length=256, ubatch=32)
ABSENT = object()
"""A hostile value that removes the key."""


def _changed(entry: Mapping[str, Any], changes: Mapping[str, object]) -> dict[str, Any]:
    arch = entry["architecture"]
    metadata = dict(entry["header"]["metadata"])
    for name, item in changes.items():
        if item is ABSENT:
            metadata.pop(f"{arch}.{name}", None)
        else:
            metadata[f"{arch}.{name}"] = item
    return metadata


def _estimate(entry: Mapping[str, Any], changes: Mapping[str, object]) -> LlamaCppModel:
    tensors = [SimpleNamespace(name=n, type_name=t, n_bytes=b)
               for n, t, b in entry["header"]["tensors"]]
    model = model_from_header(entry["file"], _changed(entry, changes), tensors,
                              entry["file"])
    estimate(model, SETTINGS, devices=0)
    if model.layer_count >= 2:
        estimate(model, SETTINGS, devices=2)
    return model


# -- the hostile pass's reproducers ----------------------------------------------------

REPRODUCERS = [
    ("qwen3moe-moe.gguf", "expert_count", "x"),
    ("afmoe-moe.gguf", "swiglu_clamp_exp", "x"),
    ("qwen3moe-moe.gguf", "expert_used_count", 2**32 - 1),
    ("afmoe-moe.gguf", "expert_used_count", 2**32 - 1),
    ("deepseek2-moe.gguf", "expert_used_count", 2**32 - 1),
    ("deepseek4-moe.gguf", "hyper_connection.count", 2**32 - 1),
    ("glm5-next-moe.gguf", "hyper_connection.count", 2**32 - 1),
    ("deepseek4-moe.gguf", "expert_count", 0),
    ("deepseek4-moe.gguf", "expert_count", ABSENT),
    ("deepseek4-moe.gguf", "attention.head_count", 0),
    ("deepseek4-moe.gguf", "hyper_connection.count", 0),
    ("deepseek4-moe.gguf", "hyper_connection.count", -1),
    ("glm5-next-moe.gguf", "attention.head_count", 0),
    ("minicpm3-dense.gguf", "attention.kv_lora_rank", 0),
    ("minimax-01-moe.gguf", "attention.key_length", 0),
    ("hrm_text-dense.gguf", "hrm.l_cycles", -1),
    ("glm5-next-moe.gguf", "attention.indexer.kpool", 0),
    ("glm5-next-moe.gguf", "hyper_connection.count", 0),
    ("qwen4exp-moe.gguf", "ple.layers", 1.5),
    ("hrm_text-dense.gguf", "hrm.h_cycles", 2**32 - 1),
]


@pytest.mark.parametrize(("file", "name", "item"), REPRODUCERS,
                         ids=[f"{f.removesuffix('.gguf')}-{n}={'absent' if v is ABSENT else v}"
                              for f, n, v in REPRODUCERS])
def test_a_hostile_value_is_refused_by_the_key_that_holds_it(file: str, name: str,
                                                             item: object) -> None:
    entry = ENTRIES[file]
    with pytest.raises(ModelError) as caught:
        _estimate(entry, {name: item})
    error = caught.value
    assert error.code in ("InvalidGguf", "MissingGgufKey")
    assert error.message.startswith(f"{file}: GGUF key '{entry['architecture']}.")
    assert error.details["file"] == file
    # The key named is the one changed, or the one a bound ties it to (an expert count
    # of 0 leaves more experts used per token than there are).
    assert error.details["key"].removeprefix(f"{entry['architecture']}.") in (
        name, "expert_used_count")


# -- every field each architecture reads --------------------------------------------------

HOSTILE = ("x", 1.5, -1, 0, 2**32 - 1, 2**32, True, [], ABSENT)


@contextmanager
def _keys_read() -> Iterator[set[str]]:
    """The keys any reader is asked for inside the block."""
    seen: set[str] = set()
    raw, has = GgufMetadata.raw, GgufMetadata.has

    def spy_raw(self: GgufMetadata, name: str) -> Any:
        seen.add(name)
        return raw(self, name)

    def spy_has(self: GgufMetadata, name: str) -> bool:
        seen.add(name)
        return has(self, name)

    GgufMetadata.raw, GgufMetadata.has = spy_raw, spy_has  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        GgufMetadata.raw, GgufMetadata.has = raw, has  # type: ignore[method-assign]


def _fields() -> dict[str, list[str]]:
    fields = {}
    for file, entry in sorted(ENTRIES.items()):
        with _keys_read() as seen:
            _estimate(entry, {})
        fields[file] = sorted(seen)
    return fields


FIELDS = _fields()


def test_the_fields_read_are_many_and_include_the_graph_s() -> None:
    """The sweeps below cover what the readers ask for: the KV cache's keys and the
    graph's (experts, hyper-connections, indexers, cycles)."""
    names = {name for fields in FIELDS.values() for name in fields}
    assert sum(map(len, FIELDS.values())) > 1500
    assert {"expert_used_count", "hyper_connection.count", "attention.indexer.top_k",
            "hrm.h_cycles", "ssm.conv_kernel", "ple.conv_kernel"} <= names


def _problems(file: str, items: Callable[[str], Iterable[object]]) -> list[str]:
    """What goes wrong when each field of ``file`` takes each of ``items(field)``: any
    error but a ModelError naming the file."""
    problems = []
    for name in FIELDS[file]:
        for item in items(name):
            try:
                _estimate(ENTRIES[file], {name: item})
            except ModelError as error:
                if error.code not in ("InvalidGguf", "MissingGgufKey",
                                      "IncompatibleKvCacheType") \
                        or not error.message.startswith(f"{file}: "):
                    problems.append(f"{name}={item!r}: {error}")
            except Exception as error:  # anything else is the defect looked for
                problems.append(f"{name}={item!r}: {type(error).__name__}: {error}")
    return problems


@pytest.mark.parametrize("file", sorted(FIELDS))
def test_each_field_read_takes_a_hostile_value_or_refuses_it_by_name(file: str) -> None:
    """One hostile value per field (in turn over the kinds of hostility); the slow test
    below tries every kind in every field."""
    def one(name: str) -> list[object]:
        return [HOSTILE[zlib.crc32(f"{file}/{name}".encode()) % len(HOSTILE)]]

    assert _problems(file, one) == []


@pytest.mark.slow
@pytest.mark.parametrize("file", sorted(FIELDS))
def test_every_field_read_takes_every_hostile_value_or_refuses_it_by_name(file: str) -> None:
    assert _problems(file, lambda name: HOSTILE) == []


# -- the same files through the command --------------------------------------------------


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planner.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


COMMAND_CASES = [
    ("qwen3moe-moe.gguf", "expert_used_count", 2**32 - 1),
    ("deepseek4-moe.gguf", "hyper_connection.count", 2**32 - 1),
    ("glm5-next-moe.gguf", "attention.indexer.kpool", 0),
    ("hrm_text-dense.gguf", "hrm.h_cycles", 2**32 - 1),
    ("qwen4exp-moe.gguf", "ple.layers", 1.5),
]


@pytest.mark.slow
@pytest.mark.parametrize(("file", "name", "item"), COMMAND_CASES)
def test_memory_plan_and_launch_refuse_the_file_by_name(tmp_path: Path, file: str, name: str,
                                                        item: object) -> None:
    entry = ENTRIES[file]
    header = {**entry["header"], "metadata": _changed(entry, {name: item})}
    model = tmp_path / file
    model.write_bytes(gguf_files.recorded_model(header))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f"""
[model]
gguf = {json.dumps(str(model))}

[[nodes]]
id = "a"
vram = "8 GiB"
address = "10.0.0.1:6000"

[[nodes]]
id = "b"
vram = "8 GiB"
address = "10.0.0.2:6000"
""")
    key = f"{entry['architecture']}.{name}"
    for args in (("memory", model, "--context", "1024"),
                 ("plan", fleet, "--memory-model", "llamacpp"),
                 ("launch", fleet, "--memory-model", "llamacpp")):
        result = _run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "InvalidGguf" in result.stderr and key in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "unexpected" not in result.stderr


def test_the_recorded_models_are_written_back_as_files_the_estimate_reads(
        tmp_path: Path) -> None:
    """The files the command tests use are the recorded models: read back, they give
    the estimate of the record."""
    from planner.llamacpp import model_from_gguf

    entry = ENTRIES["qwen3moe-moe.gguf"]
    path = tmp_path / entry["file"]
    path.write_bytes(gguf_files.recorded_model(entry["header"]))
    from_file = model_from_gguf(path)
    recorded = _estimate(entry, {})
    assert estimate(from_file, SETTINGS, devices=2).to_dict() == \
        estimate(recorded, SETTINGS, devices=2).to_dict()
