"""What changed between two fleet documents, in words, for a panel that says why it is
out of date: :func:`document_changes`."""

from __future__ import annotations

from planner.fleet import FleetDocument

_OPTIONS = ("minimum_nodes", "context_length_override", "parallel_lanes_override",
            "target_decode_tpot_ms")


def _names(ids: list[str], shown: int = 4) -> str:
    text = ", ".join(ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _nodes(ids: list[str], what: str) -> str:
    return f"{'node' if len(ids) == 1 else 'nodes'} {_names(ids)} {what}"


def document_changes(before: FleetDocument, after: FleetDocument) -> str:
    """How ``after`` differs from ``before`` (``""`` when it does not): the model, nodes
    added, removed or changed, their kinds and failure figures, the planning options."""
    changes = []
    if before.model != after.model:
        changes.append(f"the model changed ({before.model.label} → {after.model.label})")
    old = {node.node_id: node for node in before.nodes}
    new = {node.node_id: node for node in after.nodes}
    removed = [node_id for node_id in old if node_id not in new]
    added = [node_id for node_id in new if node_id not in old]
    changed = [node_id for node_id in new if node_id in old and new[node_id] != old[node_id]]
    for ids, what in ((removed, "removed"), (added, "added"), (changed, "changed")):
        if ids:
            changes.append(_nodes(ids, what))
    figures = [node_id for node_id in new if node_id in old
               and before.reliability.get(node_id) != after.reliability.get(node_id)]
    if figures:
        changes.append(_nodes(figures, "now have other failure figures or kind")
                       if len(figures) > 1 else
                       _nodes(figures, "now has other failure figures or kind"))
    options = [key.replace("_", " ") for key in _OPTIONS
               if getattr(before, key) != getattr(after, key)]
    if options:
        changes.append(f"the planning options changed ({', '.join(options)})")
    return "; ".join(changes)
