"""Things about a fleet worth a second look, even when it plans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.planning.inputs import PlanningInput
from planner.units import format_bytes


@dataclass(frozen=True, slots=True)
class FleetWarning:
    """``code`` is stable (``LayerWeightsMismatch``, ``PartialLatency``,
    ``TargetWithoutLatency``, ``NoUsableMemory``, ``IneffectiveCap``); ``node_ids`` are
    the nodes it is about."""

    code: str
    message: str
    node_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "node_ids": list(self.node_ids)}


def fleet_warnings(request: PlanningInput) -> tuple[FleetWarning, ...]:
    """Warnings for the workbench and the reports, in a fixed order."""
    found: list[FleetWarning] = []
    weights = request.layer_weight_bytes
    if weights is not None and sum(weights) != request.model_weight_bytes:
        total, stated = format_bytes(sum(weights)), format_bytes(request.model_weight_bytes)
        if total == stated:  # a difference the rounding hides
            total, stated = f"{sum(weights):,} B", f"{request.model_weight_bytes:,} B"
        # docs/rules.md §2: planned with the per-layer figures, so say which figure won.
        found.append(FleetWarning(
            "LayerWeightsMismatch",
            f"the per-layer weights add up to {total} but the model weight is {stated}; "
            "the plan uses the per-layer weights"))
    with_latency = [n.node_id for n in request.nodes if n.stage_transfer_latency_ms is not None]
    without = [n.node_id for n in request.nodes if n.stage_transfer_latency_ms is None]
    if with_latency and without:
        shown = ", ".join(without[:6]) + (" ..." if len(without) > 6 else "")
        # docs/rules.md §6 computes the estimate this way on purpose; the warning is the remedy.
        found.append(FleetWarning(
            "PartialLatency",
            f"latency is set on {len(with_latency)} of {len(request.nodes)} nodes; nodes "
            f"without one ({shown}) add nothing to the TPOT estimate, which may understate it",
            tuple(without)))
    if request.target_decode_tpot_ms is not None and not with_latency:
        found.append(FleetWarning(
            "TargetWithoutLatency",
            "a TPOT target is set but no node has a latency, so whether it is met is unknown"))
    for node in request.nodes:
        if node.usable_bytes == 0:
            found.append(FleetWarning(
                "NoUsableMemory",
                f"node {node.node_id} has 0 usable bytes: its headroom "
                f"{format_bytes(node.runtime_headroom_bytes)} is at least its "
                f"{'capped ' if node.max_vram_bytes is not None else ''}VRAM "
                f"{format_bytes(node.capped_vram_bytes)}; it can hold no layer",
                (node.node_id,)))
        elif node.max_vram_bytes is not None and node.max_vram_bytes > node.detected_vram_bytes:
            found.append(FleetWarning(
                "IneffectiveCap",
                f"node {node.node_id}: max VRAM {format_bytes(node.max_vram_bytes)} is above "
                f"its detected VRAM {format_bytes(node.detected_vram_bytes)}, so the cap has "
                "no effect",
                (node.node_id,)))
    return tuple(found)
