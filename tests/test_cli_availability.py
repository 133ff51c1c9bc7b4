"""``planner availability``, run as a real process."""

from __future__ import annotations

import json
import re

import pytest
from test_cli import FIVE, FOUR_BY_70, ROOT, assert_user_error, run

from planner.availability import NodeReliability, fleet_availability
from planner.fleet import load_fleet


def test_json_has_exactly_the_documented_keys_and_matches_the_library() -> None:
    done = run("availability", FIVE, "--afr", "2", "--repair-hours", "300", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"availability", "availability_lower", "availability_upper",
                         "states_evaluated", "context_distribution"}
    request = load_fleet(FIVE).to_request()
    expected = fleet_availability(request, NodeReliability(2, 300), min_context=65536)
    assert data["availability"] == expected.availability
    # Exact: the bounds are the value rounded down and up.
    assert data["availability_lower"] <= data["availability"] <= data["availability_upper"]
    assert data["availability_upper"] - data["availability_lower"] <= 2e-16
    assert data["context_distribution"] == {str(k): v for k, v
                                            in expected.context_distribution.items()}
    assert abs(sum(data["context_distribution"].values()) - 1) < 1e-12
    # A higher context target is met by fewer failure states.
    higher = json.loads(run("availability", FIVE, "--afr", "2", "--repair-hours", "300",
                            "--min-context", "262144", "--json").stdout)
    assert higher["availability"] == data["context_distribution"]["262144"]
    assert higher["availability"] < data["availability"]


def test_text_output_uses_the_catalog_figures(tmp_path) -> None:
    # A catalog whose 80 GiB kind fails far more often than the shipped one.
    catalog = (ROOT / "data" / "gpus.toml").read_text()
    catalog = catalog.replace("annual_failure_rate = 0.119\nrepair_hours = 72",
                              "annual_failure_rate = 5.0\nrepair_hours = 500")
    path = tmp_path / "gpus.toml"
    path.write_text(catalog)
    done = run("availability", FIVE, "--catalog", path)
    assert done.returncode == 0, done.stderr
    request = load_fleet(FIVE).to_request()
    flaky = fleet_availability(request, NodeReliability(5.0, 500), min_context=65536)
    shipped = fleet_availability(request, NodeReliability(0.119, 72), min_context=65536)
    assert flaky.availability < shipped.availability
    assert f"availability {flaky.availability:.6%} (exact" in done.stdout
    assert f"262,144   {flaky.context_distribution[262144]:.6%}" in done.stdout


@pytest.mark.parametrize(("option", "value", "field"), [
    ("--afr", "-1", "annual_failure_rate"), ("--afr", "nan", "annual_failure_rate"),
    ("--repair-hours", "-3", "repair_hours"), ("--tolerance", "nan", "tolerance"),
    ("--tolerance", "2", "tolerance")])
def test_a_bad_option_is_named_as_the_option_not_as_the_fleet_file(option: str, value: str,
                                                                   field: str) -> None:
    """A figure typed on the command line is refused by the option's name: the fleet file
    and its first node, which the message used to blame, hold nothing wrong."""
    done = run("availability", FIVE, option, value)
    assert_user_error(done, 2, f"planner: {option}: ", field, value)
    assert "node" not in done.stderr and str(FIVE.name) not in done.stderr


def test_bad_input_and_no_topology() -> None:
    assert_user_error(run("availability", FIVE, "--afr", "-1"), 2, "annual_failure_rate", "-1")
    assert_user_error(run("availability", FIVE, "--catalog", "missing.toml"), 2,
                      "missing.toml")
    assert_user_error(run("availability", FOUR_BY_70), 1, "no valid topology")


MIXED = """name = "Qwen 480B, two kinds of reliability"
[model]
preset = "qwen3-coder-480b-a35b"
kv_cache_type = "q8_0"
[[nodes]]
id = "flaky"
count = 3
vram = "80 GiB"
annual_failure_rate = 2.0
repair_hours = 300
[[nodes]]
id = "steady"
count = 2
vram = "80 GiB"
repair_hours = 24
"""


def test_fleet_file_nodes_override_the_fleet_wide_figures(tmp_path) -> None:
    fleet = tmp_path / "mixed.toml"
    fleet.write_text(MIXED)
    done = run("availability", fleet, "--afr", "0.5", "--repair-hours", "100", "--json")
    assert done.returncode == 0, done.stderr
    request = load_fleet(fleet).to_request()
    # A node's own figure wins, field by field; the rest come from --afr/--repair-hours.
    own = {**{f"flaky-0{i}": NodeReliability(2.0, 300) for i in range(3)},
           **{f"steady-0{i}": NodeReliability(0.5, 24) for i in range(2)}}
    expected = fleet_availability(request, own, min_context=65536)
    assert json.loads(done.stdout)["availability"] == expected.availability
    fleet_wide = fleet_availability(request, NodeReliability(0.5, 100), min_context=65536)
    assert expected.availability != fleet_wide.availability


def test_a_bad_node_figure_names_the_field_and_node(tmp_path) -> None:
    fleet = tmp_path / "bad.toml"
    fleet.write_text(MIXED.replace("repair_hours = 300", "repair_hours = -3"))
    assert_user_error(run("availability", fleet), 2, "nodes[0].repair_hours", "flaky", "-3")


def test_a_large_fleet_that_never_fits_exits_1(tmp_path) -> None:
    # 600 equal nodes: 601 failure states, more than are solved exactly.
    fleet = tmp_path / "tiny.toml"
    fleet.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\n'
                     '[[nodes]]\nid = "tiny"\ncount = 600\nvram = "1 GiB"\n')
    assert_user_error(run("availability", fleet, "--json"), 1, "no valid topology")


def test_max_states_bounds_the_work_and_the_interval_still_holds(tmp_path) -> None:
    # Three kinds of ten nodes: 1,331 failure states, more than are solved exactly.
    fleet = tmp_path / "three-kinds.toml"
    fleet.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"\n'
                     + "".join(f'[[nodes]]\nid = "k{i}"\ncount = 10\nvram = "80 GiB"\n'
                               f'headroom = "{i} GiB"\n' for i in range(3)))
    done = run("availability", fleet, "--afr", "20", "--repair-hours", "500",
               "--max-states", "4", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["availability"] is None and data["states_evaluated"] == 4
    assert "stopped after 4 plans of failure states (--max-states 4; raise it" in done.stderr
    request = load_fleet(fleet).to_request()
    wider = fleet_availability(request, NodeReliability(20, 500), min_context=65536,
                               max_states=60, exact_states=0)
    assert data["availability_lower"] <= wider.availability_lower
    assert wider.availability_upper <= data["availability_upper"]


def test_a_wide_interval_gives_the_hours_down_as_a_range_not_a_middle(tmp_path) -> None:
    # 1,331 failure states, and one plan: the interval is wide, and its middle is no
    # estimate of the hours down.
    fleet = tmp_path / "three-kinds.toml"
    fleet.write_text('[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"\n'
                     + "".join(f'[[nodes]]\nid = "k{i}"\ncount = 10\nvram = "80 GiB"\n'
                               f'headroom = "{i} GiB"\n' for i in range(3)))
    done = run("availability", fleet, "--afr", "20", "--repair-hours", "500",
               "--max-states", "1")
    assert done.returncode == 0, done.stderr
    assert "time below the targets: between" in done.stdout
    assert "expected time below the targets" not in done.stdout
    assert "not explored" in done.stdout


def test_a_minimum_context_above_the_native_one_is_refused_as_size_refuses_it() -> None:
    # One rule for both commands: the same refusal, by name, with exit 2 (not 0 %).
    said = []
    for command in ("availability", "size"):
        done = run(command, FIVE, "--min-context", "300000")
        assert done.returncode == 2, done.stdout
        said.append(done.stderr.strip().splitlines()[-1])
    assert said[0] == said[1] == ("planner: InvalidTargets: minimum_context 300,000 exceeds "
                                  "the model's native context 262,144")


@pytest.mark.parametrize("fleet", sorted((ROOT / "data" / "fleets").glob("*.toml")),
                         ids=lambda path: path.stem)
def test_every_shipped_fleet_gets_its_availability_and_speed_estimate(fleet) -> None:
    # The examples are what a person tries first. Each whose model is a preset or a GGUF
    # file names its nodes' GPU kinds, so its plan has a speed estimate and its TPOT
    # target can be judged; a model typed as numbers (the design's Qwen 480B fleets) has
    # no speed estimate, and a TPOT target on it is refused by name.
    typed_as_numbers = load_fleet(fleet).model.numbers is not None
    result = run("availability", fleet, "--json")
    if typed_as_numbers and result.returncode == 2:
        assert_user_error(result, 2, "TpotNotEstimable")
        return
    assert result.returncode in (0, 1), result.stderr
    if result.returncode == 0:
        assert 0 <= json.loads(result.stdout)["availability"] <= 1
    plan = run("plan", fleet)
    if plan.returncode == 1:  # no valid topology (qwen480b-4x70): nothing to estimate
        assert "NoValidTopology" in plan.stderr
        return
    assert plan.returncode == 0, plan.stderr
    assert ("estimate  not available" in plan.stdout) == typed_as_numbers, plan.stdout


def test_a_fleet_that_misses_its_targets_with_every_node_up_says_which() -> None:
    # The home lab's plan is estimated at about 157 ms per token against its 40 ms
    # target: 0 % available, and the output says that no failure is to blame.
    result = run("availability", ROOT / "data" / "fleets" / "llama70b-home-lab.toml")
    assert result.returncode == 0, result.stderr
    assert "availability 0.000000%" in result.stdout
    assert re.search(r"with every node up, the plan misses the targets: estimated TPOT "
                     r"[\d.]+ ms > 40 ms", result.stdout), result.stdout
    # A fleet that meets them says nothing of the kind.
    fine = run("availability", FIVE)
    assert fine.returncode == 0 and "misses the targets" not in fine.stdout


def test_the_minimum_context_is_written_as_every_command_takes_it() -> None:
    """As `planner size`: --min-context reads "262144", "262,144" and "256k" alike (it
    stopped at argparse's "invalid int value: '256k'"), and names itself where it cannot
    read one."""
    base = ("availability", FIVE, "--afr", "2", "--repair-hours", "300", "--json")
    plain = run(*base, "--min-context", "262144")
    assert plain.returncode == 0, plain.stderr
    for spelled in ("256k", "262,144"):
        found = run(*base, "--min-context", spelled)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout) == json.loads(plain.stdout)
    assert_user_error(run(*base, "--min-context", "lots"), 2,
                      "planner: --min-context: cannot read 'lots' as a context length")
    assert_user_error(run(*base, "--min-context", "0"), 2, "--min-context")
