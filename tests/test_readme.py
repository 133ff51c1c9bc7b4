"""The README opens with the two commands and its worked example is true; the fleet-file
page's example plans and its tables document every key."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import planner

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands[:2] == ["make lab", "make test"]


def test_worked_example_prints_what_the_readme_says() -> None:
    text = README.read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block is not None
    code = block.group(1)
    body, _, comment = code.partition("\n# (")
    expected = ast.literal_eval("(" + comment.replace("\n#", "\n"))
    tree = ast.parse(body)
    last = tree.body.pop()
    assert isinstance(last, ast.Expr)
    namespace: dict[str, object] = {}
    exec(compile(tree, "README.md", "exec"), namespace)
    assert eval(compile(ast.Expression(last.value), "README.md", "eval"), namespace) == expected


def _fleet_section() -> str:
    return (README.parent / "docs" / "fleet-files.md").read_text()


def test_the_fleet_file_example_loads_and_plans() -> None:
    from planner.fleet import parse_fleet_toml

    block = re.search(r"```toml\n(.*?)```", _fleet_section(), re.S)
    assert block is not None
    document = parse_fleet_toml(block.group(1), "README.md")
    assert [node.node_id for node in document.nodes] == [
        "rack-00", "rack-01", "rack-02", "rack-03", "loaner"]
    assert document.addresses == (("loaner", "10.0.0.7:50052"),)
    assert document.nodes[-1].stage_transfer_latency_ms == 0.5
    assert document.context_length_override == 131072
    plan = planner.plan_topology(document.to_request())
    assert plan.context_length == 131072


def test_every_fleet_file_key_is_documented() -> None:
    from planner.fleet import _fields

    # The key cell (the first) of every row of the section's tables.
    documented = {key for line in _fleet_section().splitlines() if line.startswith("| `")
                  for key in re.findall(r"`([^`]+)`", line.split("|")[1])}
    accepted = {*_fields.TOP_KEYS, *_fields.MODEL_KEYS, *_fields.PLANNING_KEYS,
                *_fields.NODE_KEYS, *_fields.JSON_EXTRA_KEYS, *_fields.RELIABILITY_KEYS}
    assert accepted - documented == set(), "docs/fleet-files.md's tables miss these keys"
    assert documented - accepted == set(), "docs/fleet-files.md documents keys no fleet file takes"
