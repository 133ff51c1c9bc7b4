"""Plotly figures on top of the planner core: plain functions from data to a Figure."""

from planner.figures.plan import (
    CANDIDATE_TRACES,
    MEMORY_PARTS,
    MEMORY_SEGMENTS,
    candidate_shapes,
    candidates_figure,
    layer_ranges_figure,
    memory_by_node,
    memory_figure,
)

__all__ = [
    "CANDIDATE_TRACES",
    "MEMORY_PARTS",
    "MEMORY_SEGMENTS",
    "candidate_shapes",
    "candidates_figure",
    "layer_ranges_figure",
    "memory_by_node",
    "memory_figure",
]
