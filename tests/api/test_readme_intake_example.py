"""The MLOps intake example in services/api/README.md reads its own answer: it fixes where its consumer
starts reading before it produces the request. aiokafka resolves a "latest" start lazily, so waiting
for the assignment alone let the answer be written first and then skipped (4 waits forever in 28)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(10)

README = Path(__file__).resolve().parents[2] / "services" / "api" / "README.md"


def example_main() -> ast.AsyncFunctionDef:
    [code] = [
        block
        for block in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
        if "fedsched.intake" in block
    ]
    tree = ast.parse(code)
    return next(n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "main")


def awaited_calls(function: ast.AsyncFunctionDef) -> list[tuple[int, str]]:
    """(line, "object.method") of every awaited method call, in source order."""
    calls = []
    for node in ast.walk(function):
        if isinstance(node, ast.Await) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                calls.append((node.lineno, f"{func.value.id}.{func.attr}"))
    return sorted(calls)


def test_the_example_resolves_every_assigned_partitions_position_before_it_produces() -> None:
    calls = awaited_calls(example_main())
    produced = min(line for line, name in calls if name == "producer.send_and_wait")
    positioned = [line for line, name in calls if name == "consumer.position"]
    assert positioned and max(positioned) < produced, calls
