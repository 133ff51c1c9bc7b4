"""Hypothesis strategies for planning requests, weighted toward the hard cases:
ties in usable bytes, identical nodes, latency on some nodes only, caps and headroom,
exact per-layer weights and stage counts near the layer count."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NATIVE_CHOICES = (512, 3000, 16384, 65536, 100_000, 131072, 262144)


@st.composite
def requests(draw: st.DrawFn, max_nodes: int = 9, max_layers: int = 12) -> dict[str, Any]:
    layer_count = draw(st.integers(1, max_layers))
    native = draw(st.sampled_from(NATIVE_CHOICES))
    kv = draw(st.integers(1, 4 * layer_count))
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
    model_at_floor = total_weights + kv_layer * floor * layer_count
    # Bigger fleets often enough that most requests have a plan to compare.
    model_at_floor = int(model_at_floor * draw(st.sampled_from((2.0, 1.0, 1.5))))
    # Node sizes as fractions of the whole model at the floor context: a small pool so
    # that equal usable bytes (ties) are common.
    fractions = draw(st.lists(st.sampled_from(
        (0.1, 0.3, 1 / 3, 0.4, 0.5, 0.6, 0.6, 0.75, 1.0, 1.05, 1.3, 2.5)),
        min_size=1, max_size=3, unique=True))
    node_count = draw(st.integers(1, max_nodes))
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
    }
