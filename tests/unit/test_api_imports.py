"""The API depends on ports, not on the services behind them: no module of ``services.api`` imports
governance (its quota rules come in through ``services.api.quota_rules``) or the embedded runtime (which
starts the API, not the other way round). Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("services.governance", "services.runtime")


def imported(source: str) -> set[str]:
    """The modules a source imports, wherever the import statement is."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


def test_no_api_module_imports_governance_or_the_runtime() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "services" / "api").rglob("*.py"))
        if (found := _forbidden(imported(path.read_text(encoding="utf-8"))))
    }
    assert not offenders, f"services.api imports what it should get through a port: {offenders}"


@pytest.mark.parametrize(
    "code",
    [
        "from services.governance import commands as governance",
        "from services.governance.core.quota import decide",
        "def f() -> None:\n    import services.runtime.up",
        "from services import governance",
    ],
)
def test_the_check_sees_an_import_of_governance_or_the_runtime(code: str) -> None:
    assert _forbidden(imported(code))


def test_the_check_leaves_the_apis_own_modules_alone() -> None:
    assert _forbidden(imported("from services.api.quota_rules import QuotaRules\nimport services.api.auth")) == []
