"""``planner availability``, run as a real process."""

from __future__ import annotations

import json

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
    assert data["availability_lower"] == data["availability_upper"] == data["availability"]
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


def test_bad_input_and_no_topology() -> None:
    assert_user_error(run("availability", FIVE, "--afr", "-1"), 2, "annual_failure_rate", "-1")
    assert_user_error(run("availability", FIVE, "--catalog", "missing.toml"), 2,
                      "missing.toml")
    assert_user_error(run("availability", FOUR_BY_70), 1, "no valid topology")
