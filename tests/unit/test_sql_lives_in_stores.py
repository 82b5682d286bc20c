"""SQL lives in the stores: no other production module holds a SQL statement or names a read-model table
or its schema in a string.

The stores: the embedded log adapter, the audit archive, the API's own tables, the embedded server's
bootstrap, and the read-model package (the tables, the writer and the one typed reader every other
module asks). Documentation (a docstring, a bare string after an assignment) may name what it likes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from projections.readmodel.rows import tables

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("events", "projections", "services", "connectors")
STORES = (
    "events/log/postgres.py",  # the embedded log
    "events/audit/",  # the audit archive
    "services/api/store.py",  # the API's own tables (idempotency keys)
    "services/runtime/embedded_pg.py",  # the embedded server's bootstrap
    "projections/readmodel/",  # the read models: tables, writer, reader
)

SQL = re.compile(
    r"\bSELECT\s|\bINSERT\s+INTO\b|\bUPDATE\s+[\w.{}\"]+\s+SET\b|\bDELETE\s+FROM\b|\bTRUNCATE\s"
    r"|\b(?:CREATE|ALTER|DROP)\s+(?:TABLE|INDEX|SCHEMA|TRIGGER|VIEW)\b"
)
NAMES = re.compile(
    r"\b(?:"
    + "|".join(re.escape(name) for name in sorted({t.name for t in tables.ALL} | {tables.POSITIONS, tables.STATE}))
    + rf"|{re.escape(tables.SCHEMA)}\w*)\b"
)


def findings(source: str) -> list[str]:
    """Each string of code (docstrings and other bare strings aside) that holds SQL or names a read-model
    table or schema, as ``line N: what``. An f-string is read whole, ``{}`` for each value put in."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    texts: list[tuple[int, str]] = []
    for node in ast.walk(tree):  # parents come before their parts
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.JoinedStr):
            skipped.update(id(part) for part in ast.walk(node.value))
        elif isinstance(node, ast.JoinedStr) and id(node) not in skipped:
            skipped.update(id(part) for part in ast.walk(node))
            pieces = [str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values]
            texts.append((node.lineno, "".join(pieces)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            texts.append((node.lineno, node.value))
    return [
        f"line {line}: {match.group(0).strip()!r}"
        for line, text in sorted(texts)
        for pattern in (SQL, NAMES)
        if (match := pattern.search(text))
    ]


def _modules() -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _is_store(module: str) -> bool:
    return any(module == store or (store.endswith("/") and module.startswith(store)) for store in STORES)


def test_sql_and_read_model_names_appear_only_in_the_stores() -> None:
    offenders = {
        module: found
        for module in _modules()
        if not _is_store(module)
        if (found := findings((ROOT / module).read_text(encoding="utf-8")))
    }
    listed = "\n".join(f"  {module}: {', '.join(found)}" for module, found in sorted(offenders.items()))
    assert not offenders, f"SQL or read-model names outside the stores (ask projections.readmodel.reader):\n{listed}"


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ('rows = await pool.fetch(f"SELECT status FROM {schema}.read_jobs")', ["'SELECT'", "'read_jobs'"]),
        ('await pool.execute("DELETE FROM fedsched_api.submissions")', ["'DELETE FROM'"]),
        ('sql = f"UPDATE {self.schema}.submissions SET job_id = $1"', ["'UPDATE {}.submissions SET'"]),
        ('ddl = "CREATE TABLE IF NOT EXISTS t (a int)"', ["'CREATE TABLE'"]),
        ('SCHEMA = "fedsched_rm"', ["'fedsched_rm'"]),
        ('parser.add_argument("--into", default="fedsched_rm_rebuild")', ["'fedsched_rm_rebuild'"]),
        ('table = f"{schema}.projection_positions"', ["'projection_positions'"]),
        ('columns = ("entity_key", "read_nodes")', ["'read_nodes'"]),
    ],
)
def test_the_scan_finds_sql_and_table_names_in_code(code: str, found: list[str]) -> None:
    assert [f.split(": ", 1)[1] for f in findings(code)] == found


@pytest.mark.parametrize(
    "code",
    [
        '"""Reads ``read_jobs`` (SELECT ... FROM fedsched_rm.read_jobs), documented."""',
        'class C:\n    f"""A formatted docstring naming {0} read_nodes."""',
        'def f() -> None:\n    """UPDATE ... SET next_offset, as the log does."""',
        'x: int = 1\n"""What ``read_usage`` holds."""',
        'help = "select the jobs to show; a trigger refuses UPDATE and DELETE"',
        'field = "inference.spread_clusters"',
    ],
)
def test_the_scan_leaves_documentation_and_plain_words_alone(code: str) -> None:
    assert findings(code) == []
