"""A plain exhaustive planner: the rules of docs/rules.md written as directly as possible.

It tries every subset of every size and keeps the best by their ordering (§5, §6). It is
exponential and lives only in the tests, as the oracle the real planner is compared to.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from math import ceil
from typing import Any


@dataclass(frozen=True)
class Fitted:
    context_length: int
    lanes: int
    node_ids: tuple[str, ...]
    stage_layer_counts: tuple[int, ...]
    """The layers each node takes, in stage order (the candidates table's column)."""
    remaining: tuple[int, ...]
    estimate: int | None


class ReferenceError_(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def usable(node: dict[str, Any]) -> int:
    cap = node["detected_vram_bytes"]
    if node.get("max_vram_bytes") is not None:
        cap = min(cap, node["max_vram_bytes"])
    return max(0, cap - node.get("runtime_headroom_bytes", 0))


def contexts(req: dict[str, Any]) -> list[int]:
    if req.get("context_length_override") is not None:
        return [req["context_length_override"]]
    native = req["native_context_length"]
    floor = min(native, 65536)
    steps = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    return sorted({s for s in steps if floor <= s <= native} | {native}, reverse=True)


def lanes(req: dict[str, Any]) -> list[int]:
    if req.get("parallel_lanes_override") is not None:
        return [req["parallel_lanes_override"]]
    return [4, 3, 2, 1]


def counts(req: dict[str, Any]) -> list[int]:
    low = max(req.get("minimum_nodes", 1) or 0, 1)
    return list(range(low, min(len(req["nodes"]), req["layer_count"]) + 1))


def weights(req: dict[str, Any]) -> list[int]:
    layer_count = req["layer_count"]
    given = req.get("layer_weight_bytes")
    if given is not None:
        return list(given)
    return [ceil(req["model_weight_bytes"] / layer_count)] * layer_count


def need(req: dict[str, Any], context: int, lane: int) -> list[int]:
    """docs/rules.md §3: layer j needs w_j + kv_j * c + state_j * B."""
    layer_count = req["layer_count"]
    kv = req.get("layer_kv_bytes_per_token")
    if kv is None:
        kv = [ceil(req["kv_bytes_per_token"] / layer_count)] * layer_count
    state = req.get("layer_state_bytes_per_sequence") or [0] * layer_count
    return [w + k * context + s * lane
            for w, k, s in zip(weights(req), kv, state, strict=True)]


def fit(req: dict[str, Any], nodes: list[dict[str, Any]], context: int,
        lane: int) -> Fitted | None:
    layer_count = req["layer_count"]
    need_ = need(req, context, lane)
    ordered = sorted(nodes, key=lambda n: (-usable(n), n["node_id"]))
    k = len(ordered)
    nxt = 0
    spans, remaining = [], []
    for i, node in enumerate(ordered):
        assignable = (layer_count - nxt) - (k - 1 - i)
        span, used = 0, 0
        while span < assignable and used + need_[nxt + span] <= usable(node):
            used += need_[nxt + span]
            span += 1
        if span == 0:
            return None
        spans.append(span)
        remaining.append(usable(node) - used)
        nxt += span
    if nxt != layer_count:
        return None
    known = [n["stage_transfer_latency_ms"] for n in ordered
             if n.get("stage_transfer_latency_ms") is not None]
    estimate = k * max(known) if known else None
    return Fitted(context, lane, tuple(n["node_id"] for n in ordered), tuple(spans),
                  tuple(remaining), estimate)


def set_key(f: Fitted) -> tuple[Any, ...]:
    return (f.estimate or 0, -min(f.remaining), -sum(f.remaining), f.node_ids)


def best_set(req: dict[str, Any], context: int, k: int, lane: int) -> Fitted | None:
    fitting = [f for subset in combinations(req["nodes"], k)
               if (f := fit(req, list(subset), context, lane)) is not None]
    return min(fitting, key=set_key) if fitting else None


def check(req: dict[str, Any]) -> None:
    # docs/rules.md §2: a per-layer list of the wrong length is malformed input, refused
    # before the numbered checks (with no layers there is no length to compare against).
    for name in ("layer_weight_bytes", "layer_kv_bytes_per_token",
                 "layer_state_bytes_per_sequence"):
        given = req.get(name)
        if given is not None and req["layer_count"] > 0 and len(given) != req["layer_count"]:
            raise ReferenceError_("InvalidInput")
    kv = req.get("layer_kv_bytes_per_token")
    if kv is not None and req["layer_count"] > 0 and sum(kv) != req["kv_bytes_per_token"]:
        raise ReferenceError_("InvalidInput")
    if req["native_context_length"] == 0:
        raise ReferenceError_("MissingNativeContext")
    if req["layer_count"] == 0:
        raise ReferenceError_("MissingLayers")
    if req["model_weight_bytes"] == 0:
        raise ReferenceError_("MissingModelWeights")
    if req["kv_bytes_per_token"] == 0 and kv is None:
        raise ReferenceError_("MissingKvBytesPerToken")
    if not req["nodes"]:
        raise ReferenceError_("MissingNodes")
    override = req.get("context_length_override")
    if override is not None and override > req["native_context_length"]:
        raise ReferenceError_("ContextExceedsNative")
    if override is not None and override < min(req["native_context_length"], 65536):
        raise ReferenceError_("ContextBelowMinimum")
    if req.get("parallel_lanes_override") == 0:
        raise ReferenceError_("ZeroParallelLanes")


def target_met(req: dict[str, Any], f: Fitted) -> bool | None:
    """docs/rules.md §6: the estimate within the target when both are known, else None."""
    target = req.get("target_decode_tpot_ms")
    return None if f.estimate is None or target is None else f.estimate <= target


def table(req: dict[str, Any]) -> dict[tuple[int, int, int], Fitted | None]:
    """Best set for every shape (context, count, lanes), in the planner's order.

    Lane counts whose layers cost the same (no layer holds a state per sequence) have
    the same best set; it is found once and given each lane count."""
    found: dict[tuple[Any, ...], Fitted | None] = {}
    result = {}
    for c, k, b in table_order(req):
        key = (c, k, tuple(need(req, c, b)))
        if key not in found:
            found[key] = best_set(req, c, k, b)
        best = found[key]
        result[(c, k, b)] = None if best is None else replace(best, lanes=b)
    return result


def table_order(req: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Shapes in the order docs/rules.md §6 tries them without latencies: context
    highest first, then count fewest first, then lanes most first."""
    return [(c, k, b) for c in contexts(req) for k in counts(req) for b in lanes(req)]


def plan(req: dict[str, Any]) -> dict[str, Any]:
    """docs/rules.md §7 plan, or raises ReferenceError_ with the code of §2."""
    check(req)
    latency_on = any(n.get("stage_transfer_latency_ms") is not None for n in req["nodes"])
    target = req.get("target_decode_tpot_ms")
    chosen: Fitted | None = None
    if not latency_on:
        for c, k, b in table_order(req):
            chosen = best_set(req, c, k, b)
            if chosen is not None:
                break
    else:
        shapes = [f for f in table(req).values() if f is not None]

        def shape_key(f: Fitted) -> tuple[Any, ...]:
            met = f.estimate is None or target is None or f.estimate <= target
            return (not met, f.estimate or 0, -f.context_length, -f.lanes, *set_key(f)[1:])

        chosen = min(shapes, key=shape_key) if shapes else None
    if chosen is None:
        raise ReferenceError_("NoValidTopology")
    w = weights(req)
    stages, start = [], 0
    for i, (node_id, span) in enumerate(zip(chosen.node_ids, chosen.stage_layer_counts,
                                            strict=True)):
        stages.append({"stage_id": f"stage-{i}", "stage_index": i, "node_id": node_id,
                       "layer_start": start, "layer_end": start + span,
                       "parameter_bytes": sum(w[start:start + span])})
        start += span
    met = target_met(req, chosen)
    return {"context_length": chosen.context_length, "parallel_lanes": chosen.lanes,
            "stages": stages,
            "estimated_decode_network_ms_per_token": chosen.estimate,
            "decode_tpot_target_met": met}


def assert_candidates_match(req: dict[str, Any], frame: Any) -> None:
    """``frame`` (``planner.candidates(req)``) holds the reference's best set, the layers
    each of its nodes takes, and its total remaining bytes, for every shape."""
    for (context, count, lane), best in table(req).items():
        row = frame[(frame["context_length"] == context) & (frame["stage_count"] == count)
                    & (frame["parallel_lanes"] == lane)]
        assert set(row["node_ids"]) == {best.node_ids if best else ()}
        assert set(row["stage_layer_counts"]) == {best.stage_layer_counts if best else ()}
        if best is not None:
            assert {int(v) for v in row["total_remaining_bytes"]} == {sum(best.remaining)}
