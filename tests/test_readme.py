"""The README's worked example is true."""

from __future__ import annotations

import ast
import re
from pathlib import Path

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
