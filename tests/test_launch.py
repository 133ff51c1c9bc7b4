"""planner launch's placement: -ts weights that reproduce a plan's layer ranges exactly,
computed the way llama.cpp assigns layers (float32 split points, output layer last)."""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass

import pytest

from planner.fleet import FleetFileError, fleet_to_toml, parse_fleet_toml
from planner.launch import build_launch, layer_devices, tensor_split
from planner.memory import LlamaCppSettings


@dataclass
class Stage:
    node_id: str
    layer_start: int
    layer_end: int


def _ranges(counts: list[int]) -> list[tuple[int, int]]:
    out, start = [], 0
    for count in counts:
        out.append((start, start + count))
        start += count
    return out


def test_tensor_split_puts_every_layer_where_the_plan_says() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        stages = rng.randint(1, 12)
        counts = [rng.randint(1, 40) for _ in range(stages)]
        ranges = _ranges(counts)
        layers = sum(counts)
        expected = [i for i, count in enumerate(counts) for _ in range(count)] + [stages - 1]
        assert layer_devices(ranges, layers) == expected, counts


def test_tensor_split_counts_the_output_layer_on_the_last_stage() -> None:
    assert tensor_split([(0, 9), (9, 18)]) == [9, 10]


def test_commands_and_json_keys() -> None:
    settings = LlamaCppSettings(context_length=32768, parallel=4, kv_unified=True,
                                cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True)
    stages = [Stage("a", 0, 10), Stage("b b", 10, 18)]
    launch = build_launch(stages, "models/my model.gguf", settings, 18,
                          {"a": "10.0.0.1:50052", "b b": "host-b:50052"})
    data = launch.to_dict()
    assert set(data) == {"stages", "rpc_servers", "llama_server"}
    assert data["stages"][0] == {"node_id": "a", "address": "10.0.0.1:50052",
                                 "layer_start": 0, "layer_end": 10}
    assert data["rpc_servers"][1]["address"] == "host-b:50052"
    assert set(data["rpc_servers"][0]) == {"node_id", "address", "argv"}
    argv = data["llama_server"]["argv"]
    assert argv[argv.index("--tensor-split") + 1] == "10,9"
    assert argv[argv.index("--rpc") + 1] == "10.0.0.1:50052,host-b:50052"
    assert argv[argv.index("--n-gpu-layers") + 1] == "19"
    assert "--kv-unified" in argv and argv[argv.index("--flash-attn") + 1] == "on"
    shell = launch.shell()
    assert shlex.quote("models/my model.gguf") in shell
    assert shlex.split(shell.splitlines()[-1]) == argv


FLEET = """
[model]
native_context_length = 8192
layer_count = 4
model_weight_bytes = "4 GiB"
kv_bytes_per_token = 1024

[[nodes]]
id = "a"
vram = "8 GiB"
address = "192.168.1.20:50052"

[[nodes]]
id = "b"
vram = "8 GiB"
"""


def test_fleet_files_carry_rpc_addresses() -> None:
    document = parse_fleet_toml(FLEET)
    assert dict(document.addresses) == {"a": "192.168.1.20:50052"}
    again = parse_fleet_toml(fleet_to_toml(document))
    assert again == document


@pytest.mark.parametrize("text", ['address = "nohost"', 'address = "h:0"',
                                  'address = "h:70000"', 'address = 5',
                                  'count = 2\naddress = "h:1"'])
def test_bad_addresses_are_refused_by_field(text: str) -> None:
    bad = FLEET.replace('address = "192.168.1.20:50052"', text)
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(bad)
    assert caught.value.field == "nodes[0].address"


def test_a_node_without_an_address_is_reached_by_its_id_when_that_is_a_host_name() -> None:
    from planner.launch import LaunchError

    settings = LlamaCppSettings(context_length=4096)
    launch = build_launch([Stage("gpu-01.lan", 0, 4)], "m.gguf", settings, 4)
    assert launch.stages[0].address == "gpu-01.lan:50052"
    with pytest.raises(LaunchError) as caught:
        build_launch([Stage("gpu 01", 0, 4)], "m.gguf", settings, 4)
    assert caught.value.code == "NoAddress" and caught.value.details["node_id"] == "gpu 01"
