"""Fresh node ids for the nodes a person adds: ``<base>-NN``, numbered on from the
highest in use, and a base from a GPU's name."""

from __future__ import annotations

import re


def numbered(node_id: str) -> tuple[str, int] | None:
    match = re.match(r"^(.*\S)-(\d+)$", node_id)
    return (match.group(1), int(match.group(2))) if match else None


def free_ids(base: str, taken: set[str], count: int) -> list[str]:
    """``count`` ids ``base-NN`` not in ``taken``, numbering on from the highest in use."""
    used = [n for nid in taken if (p := numbered(nid)) and p[0] == base for n in [p[1]]]
    start = max(used) + 1 if used else 0
    width = max(2, len(str(start + count - 1)))
    ids: list[str] = []
    number = start
    while len(ids) < count:
        candidate = f"{base}-{number:0{width}d}"
        if candidate not in taken:
            ids.append(candidate)
        number += 1
    return ids


def gpu_id_base(name: str) -> str:
    """A node id prefix from a GPU's name: ``"NVIDIA H100 80GB"`` -> ``"h100-80gb"``."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    vendors = {"nvidia", "amd", "apple", "intel", "geforce", "radeon"}
    kept = [w for w in words if w and w not in vendors] or words
    return "-".join(kept)[:24].strip("-") or "gpu"

