"""planner launch's placement: -ts weights that reproduce a plan's layer ranges exactly,
computed the way llama.cpp assigns layers (float32 split points, output layer last)."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.fleet import FleetFileError, fleet_to_toml, parse_fleet_toml
from planner.llamacpp import LlamaCppSettings, MemoryModelError
from planner.llamacpp.launch import (
    BASH_NOTE,
    LaunchError,
    build_launch,
    launch_for_plan,
    layer_devices,
    shell_join,
    tensor_split,
)
from planner.planning import plan_topology


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
    settings = LlamaCppSettings(context_length=4096)
    launch = build_launch([Stage("gpu-01.lan", 0, 4)], "m.gguf", settings, 4)
    assert launch.stages[0].address == "gpu-01.lan:50052"
    with pytest.raises(LaunchError) as caught:
        build_launch([Stage("gpu 01", 0, 4)], "m.gguf", settings, 4)
    assert caught.value.code == "NoAddress" and caught.value.details["node_id"] == "gpu 01"


# -- hostile addresses, settings and arguments -------------------------------------------

HOSTILE = json.loads((Path(__file__).parent / "data" / "hostile" / "addresses.json")
                     .read_text(encoding="utf-8"))


@pytest.mark.parametrize("address", HOSTILE["refused"])
def test_an_address_is_a_host_name_or_ipv4_and_an_ascii_port(address: str) -> None:
    bad = FLEET.replace('address = "192.168.1.20:50052"', f"address = {json.dumps(address)}")
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(bad)
    assert caught.value.field == "nodes[0].address"
    settings = LlamaCppSettings(context_length=4096)
    with pytest.raises(LaunchError) as given:
        build_launch([Stage("a", 0, 4)], "m.gguf", settings, 4, {"a": address})
    assert given.value.code == "InvalidLaunchSettings"
    assert given.value.details["node_id"] == "a"


@pytest.mark.parametrize("address", HOSTILE["accepted"])
def test_host_names_and_ipv4_addresses_are_accepted(address: str) -> None:
    good = FLEET.replace('address = "192.168.1.20:50052"', f"address = {json.dumps(address)}")
    assert dict(parse_fleet_toml(good).addresses) == {"a": address}


@pytest.mark.parametrize("node_id", HOSTILE["refused_ids"] + [
    address.rpartition(":")[0] for address in HOSTILE["refused"]
    if address.endswith(":50052") and address.rpartition(":")[0]])
def test_a_node_id_that_is_no_host_name_needs_an_address(node_id: str) -> None:
    settings = LlamaCppSettings(context_length=4096)
    with pytest.raises(LaunchError) as caught:
        build_launch([Stage(node_id, 0, 4)], "m.gguf", settings, 4)
    assert caught.value.code == "NoAddress" and caught.value.details["node_id"] == node_id


def test_an_rpc_server_reached_by_host_name_listens_on_every_ipv4_interface() -> None:
    # llama.cpp's rpc-server binds an IPv4 address only ("Invalid host address: gpu-b").
    settings = LlamaCppSettings(context_length=4096)
    launch = build_launch([Stage("a", 0, 2), Stage("gpu-b", 2, 4)], "m.gguf", settings, 4,
                          {"a": "10.0.0.1:6000"})
    assert [s.argv for s in launch.rpc_servers] == [
        ("ggml-rpc-server", "--host", "10.0.0.1", "--port", "6000"),
        ("ggml-rpc-server", "--host", "0.0.0.0", "--port", "50052")]
    assert launch.to_dict()["stages"][1]["address"] == "gpu-b:50052"
    lines = launch.shell().splitlines()
    assert lines[0] == BASH_NOTE
    assert lines[3] == "# on gpu-b (layers 2-3), listening on every IPv4 interface"


@pytest.mark.parametrize(("settings", "field"), [
    ({"context_length": 2**31}, "context_length"),  # llama-server's stoi
    ({"context_length": 4096, "parallel": 257}, "parallel"),  # LLAMA_MAX_SEQ
    ({"context_length": 4096, "parallel": 10**18}, "parallel"),
    ({"context_length": 4096, "ubatch": 10**20}, "ubatch"),
    ({"context_length": 4096, "batch": 2**31}, "batch"),
    ({"context_length": 4096, "flash_attn": "off"}, "flash_attn"),
    ({"context_length": 4096, "flash_attn": 0}, "flash_attn"),
    ({"context_length": 4096, "kv_unified": "no"}, "kv_unified"),
    ({"context_length": 4096.0}, "context_length"),
])
def test_settings_llama_cpp_refuses_are_refused(settings: dict, field: str) -> None:
    with pytest.raises(MemoryModelError) as caught:
        LlamaCppSettings(**settings)
    assert caught.value.code == "InvalidMemorySettings"
    assert caught.value.details["field"] == field


def test_llama_cpp_limits_themselves_are_accepted() -> None:
    top = LlamaCppSettings(context_length=2**31 - 1, parallel=256, ubatch=2**31 - 1,
                           batch=2**31 - 1, kv_unified=True)
    assert top.n_ctx == 2**31  # padded to 256 cells, as llama_context does (uint32)


def test_a_string_switch_is_not_read_as_on() -> None:
    document = parse_fleet_toml(FLEET.replace('address = "192.168.1.20:50052"',
                                              'address = "10.0.0.1:1"'))
    plan = plan_topology(document.to_request())
    for value in ("off", "no", "", 1, None):
        with pytest.raises(MemoryModelError) as caught:
            launch_for_plan(document, plan, model_path="m.gguf", flash_attn=value)
        assert caught.value.details["field"] == "flash_attn"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("locale", ["C", "POSIX", "C.UTF-8"])
def test_shell_words_carry_the_exact_bytes_in_every_locale(locale: str) -> None:
    nasty = ["plain", "caf\u00e9", "nb\u00a0sp", "\u202egnp.exe", "a\nb", "esc\x1b[31m",
             "it's", "back\\slash", "\x85", "emoji \U0001f600\x07",
             os.fsdecode(b"raw \xff\xfe bytes"), os.fsdecode(b"model-\xe9.gguf"),
             "\\x41 stays", "$(touch x)"]
    script = "printf '%s\\0' " + shell_join(nasty)
    assert script.isascii() or all(ch.isprintable() for ch in script)
    assert "\\u" not in script.replace("\\\\u", "")  # no locale-dependent escapes
    done = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                          env={"LC_ALL": locale, "PATH": "/usr/bin:/bin"})
    assert done.stdout.split(b"\0")[:-1] == [os.fsencode(word) for word in nasty]


# -- rpc-servers with several devices --------------------------------------------------------

MULTI = """
[model]
native_context_length = 8192
layer_count = 6
model_weight_bytes = "6 GiB"
kv_bytes_per_token = 1024

[planning]
minimum_nodes = 3

[[nodes]]
id = "one"
vram = "{one}"
address = "10.0.0.1:50052"

[[nodes]]
id = "two-0"
vram = "{two0}"
address = "10.0.0.2:50052"
rpc_device = 0

[[nodes]]
id = "two-1"
vram = "{two1}"
address = "10.0.0.2:50052"
rpc_device = 1
"""


def test_fleet_files_carry_the_device_of_a_multi_device_rpc_server() -> None:
    document = parse_fleet_toml(MULTI.format(one="8 GiB", two0="8 GiB", two1="8 GiB"))
    assert dict(document.rpc_devices) == {"two-0": 0, "two-1": 1}
    assert parse_fleet_toml(fleet_to_toml(document)) == document
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(MULTI.format(one="8 GiB", two0="8 GiB", two1="8 GiB").replace(
            'address = "10.0.0.2:50052"\nrpc_device = 1', "rpc_device = 1"))
    assert caught.value.field == "nodes[2].rpc_device"
    with pytest.raises(FleetFileError) as caught:
        parse_fleet_toml(MULTI.format(one="8 GiB", two0="8 GiB", two1="8 GiB").replace(
            "rpc_device = 1", "rpc_device = 16"))
    assert caught.value.field == "nodes[2].rpc_device"


def test_a_multi_device_server_is_started_once_and_its_devices_numbered_as_llama_cpp_does(
        ) -> None:
    # The largest node first: two-1, then one, then two-0. llama.cpp numbers the devices
    # of --rpc's servers in turn: 10.0.0.2's are RPC0 and RPC1, 10.0.0.1's is RPC2.
    document = parse_fleet_toml(MULTI.format(one="9 GiB", two0="8 GiB", two1="10 GiB"))
    plan = plan_topology(document.to_request())
    assert [stage.node_id for stage in plan.stages] == ["two-1", "one", "two-0"]
    launch = launch_for_plan(document, plan, model_path="m.gguf")
    argv = list(launch.llama_server)
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052,10.0.0.1:50052"
    assert argv[argv.index("--device") + 1] == "RPC1,RPC2,RPC0"
    assert [server.address for server in launch.rpc_servers] == ["10.0.0.2:50052",
                                                                 "10.0.0.1:50052"]
    assert [stage["rpc_device"] for stage in launch.to_dict()["stages"]] == [1, 0, 0]
    assert "# on the host of 10.0.0.2:50052, serving its devices (two-1: device 1, " \
           "layers 0-3; two-0: device 0, layer 5)" in launch.shell()


def test_one_device_servers_keep_their_json_keys() -> None:
    document = parse_fleet_toml(FLEET.replace('id = "b"\nvram = "8 GiB"',
                                              'id = "b"\nvram = "8 GiB"\naddress = "h:1"'))
    launch = launch_for_plan(document, plan_topology(document.to_request()),
                             model_path="m.gguf")
    assert "rpc_device" not in launch.to_dict()["stages"][0]


@pytest.mark.parametrize(("edit", "problem"), [
    # Two nodes at one address without their devices: one rpc-server, counted twice.
    (lambda text: text.replace("rpc_device = 1\n", ""), "are both its device 0"),
    (lambda text: text.replace("rpc_device = 0\n", "rpc_device = 2\n"),
     "has no node for its device 0"),
])
def test_a_server_whose_devices_the_fleet_gets_wrong_is_refused(edit, problem: str) -> None:
    document = parse_fleet_toml(edit(MULTI.format(one="9 GiB", two0="8 GiB", two1="10 GiB")))
    plan = plan_topology(document.to_request())
    with pytest.raises(LaunchError) as caught:
        launch_for_plan(document, plan, model_path="m.gguf")
    assert caught.value.code == "InconsistentRpcDevices"
    assert problem in caught.value.message and "10.0.0.2:50052" in caught.value.message
