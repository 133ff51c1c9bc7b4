"""The benchmark fleets: the sizes the planner is held to."""

from __future__ import annotations

import random
from typing import Any

GIB = 2**30
QWEN_480B: dict[str, Any] = {
    "native_context_length": 262_144,
    "layer_count": 62,
    "model_weight_bytes": 315_680_000_000,
    "kv_bytes_per_token": 131_072,
    "minimum_nodes": 2,
}
# (usable GiB, latency ms): twelve kinds of node.
TWELVE_KINDS = [(16, 2), (20, 1), (24, 3), (32, 4), (40, 5), (48, 6), (64, 7), (80, 8),
                (96, 2), (128, 3), (141, 4), (192, 9)]


def _nodes(kinds: list[tuple[int, int | None]], count: int, latency: bool) -> list[dict[str, Any]]:
    return [
        {"node_id": f"gpu-{i:04d}", "detected_vram_bytes": kinds[i % len(kinds)][0] * GIB,
         "stage_transfer_latency_ms": kinds[i % len(kinds)][1] if latency else None}
        for i in range(count)
    ]


def _mixed(count: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {"node_id": f"node-{i:02d}", "detected_vram_bytes": rnd.choice((24, 32, 48)) * GIB,
         "stage_transfer_latency_ms": rnd.randint(2, 8)}
        for i in range(count)
    ]


def _distinct(count: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    return [
        {"node_id": f"n{i:03d}", "detected_vram_bytes": rnd.randint(8 * GIB, 160 * GIB),
         "stage_transfer_latency_ms": rnd.randint(1, 40)}
        for i in range(count)
    ]


def fleets() -> dict[str, dict[str, Any]]:
    """Name -> planning request (dicts with the field names of docs/rules.md §1)."""
    return {
        "16 x 24 GiB": dict(QWEN_480B, nodes=_nodes([(24, None)], 16, False)),
        "14 mixed": dict(QWEN_480B, nodes=_mixed(14, 1)),
        "22 x 24 GiB": dict(QWEN_480B, nodes=_nodes([(24, None)], 22, False)),
        "20 x 24 GiB, 5 ms, TPOT 60": dict(QWEN_480B, nodes=_nodes([(24, 5)], 20, True),
                                           target_decode_tpot_ms=60),
        "21 mixed": dict(QWEN_480B, nodes=_mixed(21, 2)),
        "1000 x 12 kinds": dict(QWEN_480B, nodes=_nodes(TWELVE_KINDS, 1000, False)),
        "1000 x 12 kinds, latency": dict(QWEN_480B, nodes=_nodes(TWELVE_KINDS, 1000, True)),
        "200 all different": dict(QWEN_480B, nodes=_distinct(200, 3)),
    }


def kinds(request: dict[str, Any]) -> int:
    return len({(n["detected_vram_bytes"], n.get("stage_transfer_latency_ms"))
                for n in request["nodes"]})
