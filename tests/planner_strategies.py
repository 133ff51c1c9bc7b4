"""Hypothesis strategies for planning requests, weighted toward the hard cases:
ties in usable bytes, identical nodes, latency on some nodes only, caps and headroom,
exact per-layer weights and stage counts near the layer count, and the docs/rules.md §2
refusals (zeros, no nodes, overrides out of range, wrong-length per-layer weights),
one or several at once."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NATIVE_CHOICES = (512, 3000, 16384, 65536, 100_000, 131072, 262144)


# Most fleets stay small enough for the exhaustive reference (2^nodes subsets); the
# strategy reaches max_nodes and max_layers only now and then.
SMALL_NODES = 9
SMALL_LAYERS = 12


def _size(draw: st.DrawFn, small: int, most: int) -> int:
    if most > small and draw(st.integers(0, 7)) == 7:
        return draw(st.integers(small + 1, most))
    return draw(st.integers(1, min(small, most)))


@st.composite
def requests(draw: st.DrawFn, max_nodes: int = 11, max_layers: int = 32,
             failures: bool = True) -> dict[str, Any]:
    """A planning request; with ``failures``, about one in three is broken on purpose."""
    request = draw(_valid_requests(max_nodes, max_layers))
    if failures and draw(st.integers(0, 2)) == 2:
        # Mostly one failure, so that each check is reached; sometimes several at once.
        count = draw(st.sampled_from((1, 1, 1, 2, 3)))
        breakers = draw(st.lists(st.sampled_from(sorted(BREAKERS)), min_size=count,
                                 max_size=count, unique=True))
        for name in breakers:
            BREAKERS[name](draw, request)
    return request


def _zero(field: str) -> Any:
    def breaker(draw: st.DrawFn, request: dict[str, Any]) -> None:
        request[field] = 0
    return breaker


def _no_nodes(draw: st.DrawFn, request: dict[str, Any]) -> None:
    request["nodes"] = []


def _context_too_high(draw: st.DrawFn, request: dict[str, Any]) -> None:
    request["context_length_override"] = request["native_context_length"] + draw(
        st.sampled_from((1, 512, 2**20)))


def _context_too_low(draw: st.DrawFn, request: dict[str, Any]) -> None:
    floor = min(request["native_context_length"], 65536)
    request["context_length_override"] = draw(st.sampled_from(
        sorted({0, max(floor - 1, 0), floor // 2, 512 if floor > 512 else 0})))


def _lanes_out_of_range(draw: st.DrawFn, request: dict[str, Any]) -> None:
    # 0 is refused (ZeroParallelLanes); more than 8 lanes is allowed and must plan.
    request["parallel_lanes_override"] = draw(st.sampled_from((0, 0, 0, 9, 4096)))


def _wrong_count(field: str) -> Any:
    def breaker(draw: st.DrawFn, request: dict[str, Any]) -> None:
        count = request["layer_count"]
        wrong = draw(st.sampled_from(sorted(
            {0, 1, max(count - 1, 0), count + 1, 2 * count + 3} - {count})))
        request[field] = [2**10] * wrong
    return breaker


def _kv_not_adding_up(draw: st.DrawFn, request: dict[str, Any]) -> None:
    count = max(request["layer_count"], 1)
    per_layer = request.get("layer_kv_bytes_per_token") or [1] * count
    request["layer_kv_bytes_per_token"] = per_layer
    request["kv_bytes_per_token"] = sum(per_layer) + draw(st.sampled_from((1, 7)))


BREAKERS = {
    "native_context_length": _zero("native_context_length"),
    "layer_count": _zero("layer_count"),
    "model_weight_bytes": _zero("model_weight_bytes"),
    "kv_bytes_per_token": _zero("kv_bytes_per_token"),
    "nodes": _no_nodes,
    "context_too_high": _context_too_high,
    "context_too_low": _context_too_low,
    "lanes": _lanes_out_of_range,
    "layer_weight_bytes": _wrong_count("layer_weight_bytes"),
    "layer_kv_bytes_per_token": _wrong_count("layer_kv_bytes_per_token"),
    "layer_state_bytes_per_sequence": _wrong_count("layer_state_bytes_per_sequence"),
    "kv_not_adding_up": _kv_not_adding_up,
}


@st.composite
def _valid_requests(draw: st.DrawFn, max_nodes: int, max_layers: int) -> dict[str, Any]:
    layer_count = _size(draw, SMALL_LAYERS, max_layers)
    native = draw(st.sampled_from(NATIVE_CHOICES))
    kv = draw(st.integers(1, 4 * layer_count))
    # Now and then a hybrid-like model: KV on some layers only (a recurrent model has
    # none), a fixed state per sequence on others (the lanes then change memory).
    hybrid = draw(st.integers(0, 3)) == 3
    per_layer_kv = per_layer_state = None
    if hybrid:
        per_layer_kv = draw(st.lists(st.sampled_from((0, 0, 1, 2, 5)), min_size=layer_count,
                                     max_size=layer_count))
        kv = sum(per_layer_kv)
    exact = draw(st.booleans())
    if exact:
        weights = draw(st.lists(st.integers(0, 2**20), min_size=layer_count,
                                max_size=layer_count))
        total_weights = max(sum(weights), 1)
    else:
        weights = None
        total_weights = draw(st.integers(1, 2**24))
    floor = min(native, 65536)
    kv_layer = -(-kv // layer_count)
    if hybrid:
        # A sequence's state about as big as a layer's KV at the floor, or a few times it.
        unit = max(total_weights // layer_count, 1) + 2 * floor
        per_layer_state = [0 if kv_j else draw(st.sampled_from((0, unit // 8, unit // 2, unit)))
                           for kv_j in per_layer_kv]
        kv_layer = -(-kv // layer_count) + max(per_layer_state) * 4 // max(floor, 1)
    model_at_floor = total_weights + kv_layer * floor * layer_count
    # Bigger fleets often enough that most requests have a plan to compare.
    model_at_floor = int(model_at_floor * draw(st.sampled_from((2.0, 1.0, 1.5))))
    # Node sizes as fractions of the whole model at the floor context: a small pool so
    # that equal usable bytes (ties) are common.
    fractions = draw(st.lists(st.sampled_from(
        (0.1, 0.3, 1 / 3, 0.4, 0.5, 0.6, 0.6, 0.75, 1.0, 1.05, 1.3, 2.5)),
        min_size=1, max_size=3, unique=True))
    node_count = _size(draw, SMALL_NODES, max_nodes)
    latency_mode = draw(st.sampled_from(("none", "all", "some")))
    latency_pool = draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    # On a lattice of whole layers (uniform weights), remaining bytes come in whole
    # layers, so different node sets often tie on smallest and total remaining and the
    # node-id rule decides.
    lattice = weights is None and draw(st.booleans())
    layer_at_floor = -(-total_weights // layer_count) + kv_layer * floor
    ids = draw(st.lists(st.text("abcxyz0123456789-", min_size=1, max_size=4),
                        min_size=node_count, max_size=node_count, unique=True))
    nodes = []
    for node_id in ids:
        if lattice:
            detected = layer_at_floor * draw(st.integers(1, layer_count + 1))
        else:
            detected = int(model_at_floor * draw(st.sampled_from(fractions)))
        if draw(st.integers(0, 7)) == 7:
            detected = 0
        cap = None
        headroom = 0
        if draw(st.integers(0, 4)) == 4:
            cap = int(detected * draw(st.sampled_from((0.5, 0.9, 1.0, 1.5))))
        if draw(st.integers(0, 4)) == 4:
            headroom = int(detected * draw(st.sampled_from((0.0, 0.1, 0.5, 1.2))))
        latency = None
        if latency_mode == "all" or (latency_mode == "some" and draw(st.booleans())):
            latency = draw(st.sampled_from(latency_pool))
        nodes.append({
            "node_id": node_id,
            "detected_vram_bytes": detected,
            "max_vram_bytes": cap,
            "runtime_headroom_bytes": headroom,
            "stage_transfer_latency_ms": latency,
        })
    context_override = None
    if draw(st.integers(0, 5)) == 5:
        # Mostly valid overrides; now and then one below the floor.
        valid = [c for c in (16384, 65536, 131072, native) if floor <= c <= native]
        context_override = draw(st.sampled_from([*valid, *valid, 512]))
    lanes_override = draw(st.none() | st.integers(1, 8)) if draw(st.booleans()) else None
    target = draw(st.none() | st.integers(0, 80))
    return {
        "native_context_length": native,
        "layer_count": layer_count,
        "model_weight_bytes": total_weights,
        "layer_weight_bytes": weights,
        "kv_bytes_per_token": kv,
        "minimum_nodes": draw(st.integers(0, 3)),
        "nodes": nodes,
        "context_length_override": context_override,
        "parallel_lanes_override": lanes_override,
        "target_decode_tpot_ms": target,
        "layer_kv_bytes_per_token": per_layer_kv,
        "layer_state_bytes_per_sequence": per_layer_state,
    }
