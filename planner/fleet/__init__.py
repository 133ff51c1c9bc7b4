"""Fleet files: a model and a fleet of nodes, as a person writes them.

A fleet file is TOML (or JSON with a planning request's field names, docs/rules.md §1).
The TOML form::

    name = "Qwen3-Coder 480B on five 80 GiB GPUs"   # optional

    [model]                      # exactly one of: preset, gguf, or the numbers
    preset = "qwen3-coder-480b-a35b"
    kv_cache_type = "f16"        # optional, with preset or gguf
    # gguf = "models/model.gguf"  (relative paths start at the fleet file's folder)
    # native_context_length = 262144
    # layer_count = 62
    # model_weight_bytes = "315.68 GB"
    # kv_bytes_per_token = 131072
    # layer_weight_bytes = [...]   (optional, one entry per layer)
    # name = "My model"            (optional display name)

    [planning]                   # every key optional
    minimum_nodes = 2
    context_length_override = 65536
    parallel_lanes_override = 4
    target_decode_tpot_ms = 33
    default_latency_ms = 5       # latency of nodes without their own; "measured": the
                                 # slowest a node has (absent: they count as 0 ms)

    [[nodes]]
    id = "gpu"
    count = 5                    # optional: five identical nodes gpu-00 .. gpu-04
    vram = "80 GiB"              # detected VRAM
    max_vram = "72 GiB"          # optional cap
    headroom = "2 GiB"           # optional runtime headroom, default 0
    latency_ms = 10              # optional stage-transfer latency: 0.5, "5 ms", "500 us"
    annual_failure_rate = 0.2    # optional: failures per node-year (availability)
    repair_hours = 48            # optional: mean hours to repair
    gpu = "h100-sxm-80gb"            # optional: the catalog kind whose failure figures it takes
    # address = "10.0.0.5:50052" (optional, a node without count): where its llama.cpp
    #                            rpc-server listens, for `planner launch`

Sizes are ``planner.units`` strings with a unit (``"80 GiB"``, ``"24 GB"``,
``"115448725504 B"``); a bare number is refused there (``vram = 24`` could be GiB or
bytes), except for keys whose name says bytes (``model_weight_bytes``,
``kv_bytes_per_token``, ``layer_weight_bytes``) and for ``0``. Latencies are milliseconds
to the microsecond; context lengths are tokens or ``"128k"`` (k = 1024 tokens).

Node count expansion: an entry with ``count = N`` stands for N nodes whose ids are
``{id}-{i}`` for ``i`` in ``0 .. N-1``, with ``i`` zero-padded to
``max(2, digits of N-1)`` digits (``gpu-00``; ``gpu-000`` .. ``gpu-149`` for 150).
Without ``count`` the id is used as written. Every resulting id must be unique across
the file; a collision is refused naming both entries. Saving writes a run of identical
nodes numbered this way back as one ``count`` entry. Saving over a TOML file keeps its
comments, layout and the spelling of unchanged values (:mod:`planner.fleet.edit`).

The JSON form is a planning request as in docs/rules.md §1, optionally with
``"model_name"`` and ``"name"`` (the fleet's name). Saving to ``.json`` writes that form,
so a preset or GGUF model is resolved to its numbers there.
"""

from planner.fleet._errors import FleetFileError
from planner.fleet._fields import MEASURED_LATENCY, SPEED_NUMBER_FIELDS, is_address
from planner.fleet._json import fleet_to_json, parse_fleet_json
from planner.fleet._toml import fleet_to_toml, parse_fleet_toml
from planner.fleet.document import (
    FleetDocument,
    ModelChoice,
    ReliabilityOverride,
    expanded_node_ids,
)
from planner.fleet.files import (
    example_fleet,
    load_fleet,
    save_fleet,
    write_file_atomic,
    write_text_atomic,
)

__all__ = [
    "MEASURED_LATENCY",
    "SPEED_NUMBER_FIELDS",
    "FleetDocument",
    "FleetFileError",
    "ModelChoice",
    "ReliabilityOverride",
    "example_fleet",
    "expanded_node_ids",
    "fleet_to_json",
    "fleet_to_toml",
    "is_address",
    "load_fleet",
    "parse_fleet_json",
    "parse_fleet_toml",
    "save_fleet",
    "write_file_atomic",
    "write_text_atomic",
]
