"""One rule for which catalog kind a node is (planner.models.gpus.node_gpu_kind), and every
part of the package that needs a node's kind follows it: the speed estimate, llama.cpp's
overhead per device, the failure figures and sizing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.availability import NodeReliability, ReliabilityOverride, fleet_reliability
from planner.llamacpp import node_overheads
from planner.models import GpuModel, ModelError, load_backend_overheads, load_gpu_catalog
from planner.models.gpus import node_gpu_kind, node_gpu_kinds
from planner.performance import node_speeds
from planner.planning import NodeBudget
from planner.sizing import fleet_node_kinds, fleet_nodes

GIB = 1024**3


def _kind(name: str, memory: int, kind: str) -> GpuModel:
    return GpuModel(name, memory, "V", "n", id=kind)


CATALOG = [_kind("Big", 80 * GIB, "big"), _kind("Twin A", 24 * GIB, "twin-a"),
           _kind("Twin B", 24 * GIB, "twin-b"), _kind("Small", 8 * GIB, "small")]


def test_a_named_kind_wins_then_the_id_then_memory_that_only_one_kind_has() -> None:
    # Named: whatever the memory says.
    assert node_gpu_kind(NodeBudget("x", 8 * GIB), CATALOG, "Twin B").kind == "twin-b"
    assert node_gpu_kind(NodeBudget("x", 8 * GIB), CATALOG, " BIG ").kind == "big"
    # The id names a kind: <kind>-<digits>.
    assert node_gpu_kind(NodeBudget("twin-a-03", 24 * GIB), CATALOG).kind == "twin-a"
    assert node_gpu_kind(NodeBudget("small-00", 8 * GIB), CATALOG).kind == "small"
    # Memory only one kind has.
    assert node_gpu_kind(NodeBudget("gpu-00", 80 * GIB), CATALOG).kind == "big"
    # Memory two kinds have: no guess.
    assert node_gpu_kind(NodeBudget("gpu-00", 24 * GIB), CATALOG) is None
    assert node_gpu_kind(NodeBudget("twin-03x", 24 * GIB), CATALOG) is None
    # Memory no kind has, or digits that are not ASCII.
    assert node_gpu_kind(NodeBudget("gpu-00", 7 * GIB), CATALOG) is None
    assert node_gpu_kind(NodeBudget("twin-a-\u0663", 24 * GIB), CATALOG) is None


def test_a_named_kind_the_catalog_lacks_is_refused_with_the_node() -> None:
    with pytest.raises(ModelError, match="node 'n1': gpu 'TPU v9' is not in the catalog; "
                       "known kinds: big, twin-a") as error:
        node_gpu_kinds([NodeBudget("n1", 8 * GIB)], CATALOG, {"n1": "TPU v9"})
    assert error.value.code == "UnknownGpuKind"
    assert error.value.details["node_id"] == "n1"


def test_the_h100_cards_report_the_same_memory_so_memory_alone_names_neither() -> None:
    catalog = load_gpu_catalog()
    h100 = [gpu for gpu in catalog if "H100" in gpu.name]
    assert len(h100) == 2 and len({gpu.memory_bytes for gpu in h100}) == 1
    assert node_gpu_kind(NodeBudget("gpu-00", h100[0].memory_bytes), catalog) is None
    for gpu in h100:
        assert node_gpu_kind(NodeBudget("gpu-00", gpu.memory_bytes), catalog, gpu.name) == gpu


def test_speed_overhead_and_failure_figures_follow_the_one_rule() -> None:
    """A 32 GiB node ``gpu-00`` is an RTX 5090 (the only 32 GiB kind) for the speed
    estimate, the llama.cpp overhead and the failure figures alike; a 24 GiB node is
    unknown (RTX 3090 or 4090) for all three."""
    catalog = load_gpu_catalog()
    rtx = next(gpu for gpu in catalog if gpu.name == "NVIDIA GeForce RTX 5090")
    nodes = [NodeBudget("gpu-00", rtx.memory_bytes), NodeBudget("box-00", 24 * GIB),
             NodeBudget("named", 24 * GIB)]
    named = {"named": "NVIDIA GeForce RTX 4090"}
    speeds = node_speeds(nodes, catalog, named)
    assert speeds["gpu-00"].kind == rtx.kind
    assert speeds["gpu-00"].memory_bandwidth_bytes_per_s == rtx.memory_bandwidth_bytes_per_s
    assert speeds["named"].kind == "rtx-4090"
    assert "box-00" not in speeds
    overheads = node_overheads(nodes, named, catalog)
    assert overheads["gpu-00"] == load_backend_overheads()["cuda"] > 0
    assert overheads["named"] == overheads["gpu-00"]
    assert "box-00" not in overheads
    reliability = fleet_reliability(nodes, catalog=catalog, overrides={
        "named": ReliabilityOverride(gpu=named["named"])})
    assert reliability["gpu-00"] == NodeReliability(rtx.annual_failure_rate, rtx.repair_hours)
    assert rtx.repair_hours != NodeReliability().repair_hours
    assert reliability["box-00"] == NodeReliability()
    assert reliability["named"].repair_hours == 168


def test_sizing_names_each_nodes_kind() -> None:
    kinds = [CATALOG[1], CATALOG[2]]
    nodes = fleet_nodes(kinds, [2, 1])
    named = fleet_node_kinds(kinds, [2, 1])
    assert named == {"twin-a-00": "twin-a", "twin-a-01": "twin-a", "twin-b-00": "twin-b"}
    assert {node_id: gpu.kind for node_id, gpu in node_gpu_kinds(nodes, CATALOG, named).items()
            if gpu} == named


@settings(max_examples=200, deadline=None)
@given(memories=st.lists(st.integers(1, 4), min_size=1, max_size=6),
       node_memory=st.integers(1, 5), node_id=st.sampled_from(["gpu-00", "k0-01", "k1-x"]))
def test_a_kind_is_never_guessed_from_memory_two_kinds_share(
        memories: list[int], node_memory: int, node_id: str) -> None:
    catalog = [_kind(f"K{i}", memory, f"k{i}") for i, memory in enumerate(memories)]
    found = node_gpu_kind(NodeBudget(node_id, node_memory), catalog)
    if node_id == "k0-01":
        assert found == catalog[0]
    elif memories.count(node_memory) == 1:
        assert found == catalog[memories.index(node_memory)]
    else:
        assert found is None
