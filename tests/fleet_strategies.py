"""Hypothesis strategies for fleet documents: every field a fleet file can hold.

:func:`documents` draws :class:`~planner.fleet.FleetDocument` values as a person could
write them: a preset, GGUF or numbers model (names need not resolve), nodes given one by
one or as ``count`` runs, planning options, and each node's own ``gpu`` kind, failure
figures and rpc-server ``address`` (and device there, ``rpc_device``). The fleet-file
tests and the workbench's round-trip test draw from here.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from planner._validate import looks
from planner.fleet import FleetDocument, ModelChoice, ReliabilityOverride, expanded_node_ids
from planner.limits import MAX_NODE_BYTES
from planner.planning import NodeBudget

GIB = 1024**3

# Any text a node id may be: not blank, and no blank at either end.
ids = st.text(min_size=1, max_size=10).filter(lambda text: bool(text) and text == text.strip())
sizes = st.integers(min_value=0, max_value=2**53)
# A node's VRAM and cap go up to 1 PiB (MAX_NODE_BYTES); headroom and model sizes to 8 PiB.
node_sizes = st.integers(min_value=0, max_value=MAX_NODE_BYTES)
optional_whole = st.none() | st.integers(min_value=0, max_value=10**6)
# Latencies are milliseconds to the microsecond: whole, or with up to three decimals.
latencies = (st.none() | st.integers(min_value=0, max_value=10**6)
             | st.integers(min_value=1, max_value=10**9).map(lambda us: us / 1000)
             .filter(lambda ms: ms != int(ms)))
# Catalog kinds by id and by name, and kinds the catalog does not have.
gpu_kinds = st.sampled_from(["h100-sxm-80gb", "rtx-4090", "a100-80gb", "NVIDIA L40S"]) | ids
rates = st.floats(min_value=0, max_value=1000, allow_nan=False, allow_infinity=False)
addresses = st.builds(lambda host, port: f"{host}:{port}",
                      st.sampled_from(["10.0.0.5", "192.168.1.20", "node-a.lan", "box"]),
                      st.integers(min_value=1, max_value=65535))


@st.composite
def node_entries(draw: st.DrawFn) -> list[NodeBudget]:
    """One fleet-file entry: a node, or ``count`` identical numbered nodes."""
    budget = {
        "detected_vram_bytes": draw(node_sizes),
        "max_vram_bytes": draw(st.none() | node_sizes),
        "runtime_headroom_bytes": draw(st.sampled_from([0, GIB]) | sizes),
        "stage_transfer_latency_ms": draw(latencies),
    }
    base = draw(ids)
    if draw(st.booleans()):
        node_ids = expanded_node_ids(base, draw(st.integers(min_value=1, max_value=4)))
    else:
        node_ids = [base]
    return [NodeBudget(node_id=node_id, **budget) for node_id in node_ids]


@st.composite
def models(draw: st.DrawFn, numbers_only: bool = False) -> ModelChoice:
    name = draw(st.none() | ids)
    kind = "numbers" if numbers_only else draw(st.sampled_from(["preset", "gguf", "numbers"]))
    if kind == "numbers":
        layers = draw(st.integers(min_value=0, max_value=4096))
        numbers: dict[str, Any] = {
            "native_context_length": draw(st.integers(min_value=0, max_value=2**31)),
            "layer_count": layers,
            "model_weight_bytes": draw(sizes),
            "kv_bytes_per_token": draw(sizes),
        }
        if 0 < layers <= 6 and draw(st.booleans()):
            numbers["layer_weight_bytes"] = tuple(draw(sizes) for _ in range(layers))
        # What the speed estimate reads, each optional (planner.fleet SPEED_NUMBER_FIELDS).
        if draw(st.booleans()):
            numbers["hidden_size"] = draw(st.integers(min_value=1, max_value=2**20))
        if draw(st.booleans()):
            numbers["parameter_count"] = draw(st.integers(min_value=1, max_value=2**40))
        if draw(st.booleans()):
            heads = draw(st.integers(min_value=1, max_value=256))
            numbers["attention_heads"] = heads
            numbers["head_size"] = draw(st.integers(min_value=1, max_value=512))
            if draw(st.booleans()):
                numbers["kv_heads"] = draw(st.integers(min_value=1, max_value=heads))
            if draw(st.booleans()):
                numbers["kv_lora_rank"] = draw(st.integers(min_value=1, max_value=1024))
                numbers["rope_head_size"] = draw(st.integers(min_value=1, max_value=128))
        if layers >= 1 and draw(st.booleans()):
            numbers["sliding_window"] = draw(st.integers(min_value=1, max_value=2**20))
            numbers["sliding_window_layers"] = draw(st.integers(min_value=1,
                                                                max_value=layers))
        if numbers["model_weight_bytes"] > 0 and draw(st.booleans()):
            numbers["active_weight_bytes"] = draw(
                st.integers(min_value=1, max_value=numbers["model_weight_bytes"]))
        if draw(st.booleans()):
            experts = draw(st.integers(min_value=1, max_value=512))
            numbers["expert_count"] = experts
            numbers["experts_used"] = draw(st.integers(min_value=1, max_value=experts))
        return ModelChoice(numbers=numbers, name=name)
    kv = draw(st.none() | st.sampled_from(["f16", "q8_0", "q4_0"]))
    if kind == "preset":
        preset = draw(st.sampled_from(["llama-3.1-70b", "qwen3-coder-480b-a35b"]) | ids)
        # The size of the file the preset is run from, where given.
        stored = draw(st.none() | sizes.filter(lambda size: size >= 1))
        return ModelChoice(preset=preset, kv_cache_type=kv, name=name, file_bytes=stored)
    return ModelChoice(gguf=draw(ids), kv_cache_type=kv, name=name)


@st.composite
def reliability(draw: st.DrawFn) -> ReliabilityOverride:
    """A node's own failure figures: any of ``gpu``, ``annual_failure_rate`` and
    ``repair_hours``, at least one."""
    own = ReliabilityOverride(gpu=draw(st.none() | gpu_kinds),
                              annual_failure_rate=draw(st.none() | rates),
                              repair_hours=draw(st.none() | rates))
    assume(own.to_dict())
    return own


@st.composite
def documents(draw: st.DrawFn, numbers_only: bool = False,
              with_addresses: bool = True) -> FleetDocument:
    """A fleet document. ``numbers_only`` gives only models by their numbers (what the
    JSON form holds); ``with_addresses`` False leaves out rpc-server addresses (which the
    JSON form does not hold)."""
    nodes = [node for entry in draw(st.lists(node_entries(), max_size=5)) for node in entry]
    node_ids = [node.node_id for node in nodes]
    assume(len(node_ids) == len({looks(node_id) for node_id in node_ids}))  # none alike
    own = {node_id: draw(reliability()) for node_id in node_ids if draw(st.booleans())}
    where = ({node_id: draw(addresses) for node_id in node_ids if draw(st.booleans())}
             if with_addresses else {})
    devices = {node_id: draw(st.integers(0, 15)) for node_id in where if draw(st.booleans())}
    return FleetDocument(
        model=draw(models(numbers_only)),
        nodes=tuple(nodes),
        minimum_nodes=draw(st.integers(min_value=0, max_value=100)),
        context_length_override=draw(st.none() | st.integers(min_value=0, max_value=2**31)),
        parallel_lanes_override=draw(st.none() | st.integers(min_value=0, max_value=4096)),
        target_decode_tpot_ms=draw(optional_whole),
        name=draw(st.none() | ids),
        reliability=own,
        addresses=tuple(where.items()),
        rpc_devices=tuple(devices.items()),
    )
