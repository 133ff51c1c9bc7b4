"""Node sets of the candidates table: kept compactly (a NodeIds reads, compares and hashes
as the tuple of its ids), and written compactly by every text output once a set has more
than MAX_LISTED_NODE_IDS nodes (runs of numbered ids, then how many are left out), so a
fleet at the caps gives a table, a CSV and a report of bounded size. Their time and
memory at the caps are measured by ``make bench`` (benchmarks/big_fleet_bench.py)."""

from __future__ import annotations

import csv
import io
import json
import pickle
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_cli import run

import planner
from planner.limits import MAX_LISTED_NODE_IDS
from planner.planning.nodesets import (
    IdPool,
    NodeIds,
    layer_count_entries,
    node_set_entries,
    node_set_text,
)

IDS = tuple(f"gpu-{i:04d}" for i in range(100))


def _set(*positions: int) -> NodeIds:
    return NodeIds(IdPool(IDS), np.array(positions, dtype=np.int32))


def test_a_node_set_reads_compares_and_hashes_as_its_tuple() -> None:
    ids = _set(3, 4, 9)
    plain = ("gpu-0003", "gpu-0004", "gpu-0009")
    assert ids == plain and plain == ids and hash(ids) == hash(plain)
    assert ids != plain[:2] and ids != ("gpu-0003", "gpu-0004", "gpu-0008")
    assert list(ids) == list(plain) and len(ids) == 3
    assert ids[0] == "gpu-0003" and ids[-1] == "gpu-0009" and ids[1:] == plain[1:]
    assert repr(ids) == repr(plain) and set(ids) == set(plain)
    assert ids < ("gpu-0003", "gpu-0005") and not ids < plain
    assert pickle.loads(pickle.dumps(ids)) == plain
    assert pd.Series([ids]).tolist() == [plain]
    assert ", ".join(ids) == ", ".join(plain)


def test_a_set_of_at_most_the_limit_is_written_in_full() -> None:
    few = IDS[:MAX_LISTED_NODE_IDS]
    assert node_set_entries(few) == list(few)
    assert node_set_text(few, ";") == ";".join(few)
    assert node_set_text(_set(*range(MAX_LISTED_NODE_IDS))) == ", ".join(few)


def test_a_larger_set_is_written_as_runs_and_what_is_left_out_is_counted() -> None:
    assert node_set_entries(IDS) == ["gpu-0000..gpu-0099"]
    scattered = [0, 1, 2, *range(10, 100, 2)]  # a run of three, then 45 apart
    entries = node_set_entries(_set(*scattered))
    assert entries[0] == "gpu-0000..gpu-0002"
    assert entries[1:MAX_LISTED_NODE_IDS] == [f"gpu-{i:04d}" for i in range(10, 72, 2)]
    assert entries[-1] == f"(+{48 - (3 + MAX_LISTED_NODE_IDS - 1):,} more)"
    # A plain tuple of the same ids is written the same way.
    assert node_set_entries(tuple(_set(*scattered))) == entries
    # Ids of another width or prefix break a run.
    mixed = ("a-1", "a-2", "a-03", "b-4", *(f"c{i}" for i in range(40)))
    assert node_set_entries(mixed)[:3] == ["a-1..a-2", "a-03", "b-4"]


@cache
def _big_fleet(folder: Path) -> Path:
    """1,000 identical nodes and 1,000 small layers: every stage count fits at both
    contexts, so the table holds 8,000 rows of sets of up to 1,000 nodes."""
    path = folder / "big.toml"
    path.write_text('[model]\nnative_context_length = 131072\nlayer_count = 1000\n'
                    'model_weight_bytes = "10 GiB"\nkv_bytes_per_token = 1000\n\n'
                    '[[nodes]]\nid = "gpu"\ncount = 1000\nvram = "80 GiB"\n')
    return path


@pytest.fixture(scope="module")
def big_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _big_fleet(tmp_path_factory.mktemp("big"))


def test_the_candidates_keep_every_id_of_every_set(big_fleet: Path) -> None:
    from planner.fleet import load_fleet

    frame = planner.candidates(load_fleet(big_fleet).to_request())
    assert len(frame) == 2 * 1000 * 4
    row = frame[(frame["stage_count"] == 1000)].iloc[0]
    assert row["node_ids"] == tuple(f"gpu-{i:03d}" for i in range(1000))


def test_the_candidates_csv_writes_a_set_of_a_thousand_nodes_compactly(
        big_fleet: Path) -> None:
    done = run("candidates", big_fleet, "--csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 8000
    assert all(len(row["node_ids"].split(";")) <= MAX_LISTED_NODE_IDS + 1 for row in rows)
    widest = [row for row in rows if row["stage_count"] == "1000"]
    assert {row["node_ids"] for row in widest} == {"gpu-000..gpu-999"}
    three = next(row for row in rows if row["stage_count"] == "3")
    assert three["node_ids"] == "gpu-000;gpu-001;gpu-002"
    assert len(done.stdout) < 2_000_000  # every id written out: over 30 MB


def test_the_candidates_table_and_a_report_write_sets_compactly(big_fleet: Path,
                                                                tmp_path: Path) -> None:
    table = run("candidates", big_fleet)
    assert table.returncode == 0, table.stderr
    assert "gpu-000..gpu-999" in table.stdout
    # Every id of the 1,000-node sets written out made lines of over 9,000 characters.
    assert max(len(line) for line in table.stdout.splitlines()) < 1000
    report = tmp_path / "report.json"
    done = run("report", big_fleet, "-o", report)
    assert done.returncode == 0, done.stderr
    candidates = json.loads(report.read_text())["candidates"]
    assert all(len(row["node_ids"]) <= MAX_LISTED_NODE_IDS + 1 for row in candidates)
    assert {tuple(row["node_ids"]) for row in candidates if row["stage_count"] == 1000} == {
        ("gpu-000..gpu-999",)}
    small = next(row for row in candidates if row["stage_count"] == 2)
    assert small["node_ids"] == ["gpu-000", "gpu-001"]


def test_layer_counts_are_written_as_runs() -> None:
    assert layer_count_entries(()) == []
    assert layer_count_entries((62,)) == ["62"]
    assert layer_count_entries((16, 16, 15, 15, 15, 15, 1)) == ["2x16", "4x15", "1"]
    assert layer_count_entries((3, 2, 3)) == ["3", "2", "3"]
    assert layer_count_entries((1,) * 4096) == ["4096x1"]
