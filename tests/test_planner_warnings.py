from __future__ import annotations

from planner import NodeBudget, PlanningInput
from planner.planning.warnings import fleet_warnings

GIB = 2**30


def request(*nodes: NodeBudget, target: int | None = None) -> PlanningInput:
    return PlanningInput(262144, 62, 315_680_000_000, 131072, nodes,
                         target_decode_tpot_ms=target)


def test_a_plain_fleet_has_no_warnings() -> None:
    assert fleet_warnings(request(NodeBudget("a", 80 * GIB), NodeBudget("b", 80 * GIB))) == ()


def test_each_warning_names_its_nodes() -> None:
    found = fleet_warnings(request(
        NodeBudget("timed", 80 * GIB, stage_transfer_latency_ms=5),
        NodeBudget("untimed", 80 * GIB),
        NodeBudget("full", 16 * GIB, runtime_headroom_bytes=16 * GIB),
        NodeBudget("loose-cap", 48 * GIB, max_vram_bytes=96 * GIB),
    ))
    by_code = {w.code: w for w in found}
    assert list(by_code) == ["PartialLatency", "NoUsableMemory", "IneffectiveCap"]
    assert by_code["PartialLatency"].node_ids == ("untimed", "full", "loose-cap")
    assert "1 of 4 nodes" in by_code["PartialLatency"].message
    assert by_code["NoUsableMemory"].node_ids == ("full",)
    assert "0 usable bytes" in by_code["NoUsableMemory"].message
    assert by_code["IneffectiveCap"].node_ids == ("loose-cap",)
    assert by_code["IneffectiveCap"].to_dict()["node_ids"] == ["loose-cap"]


def test_target_without_any_latency() -> None:
    (warning,) = fleet_warnings(request(NodeBudget("a", 80 * GIB), target=30))
    assert warning.code == "TargetWithoutLatency" and warning.node_ids == ()
