"""No production module unpickles (issue 19): data another process can write is read by typed codecs
(the CloudEvents binding, the stage codec), never by ``pickle``, ``marshal`` or ``shelve``.

The one exception is ``services.audit.verify``: a forked parent and its own children exchange reports
through a private pipe, which no other process can write."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("events", "projections", "services", "connectors")
UNSAFE = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
PRIVATE_PIPE = {"services/audit/verify.py": {"pickle"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value.split(".")[0])
    return found


@pytest.mark.timeout(60)
def test_no_production_module_imports_a_pickle_like_module() -> None:
    offenders = {}
    modules = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    assert len(modules) > 100  # the walk found the code
    for path in modules:
        name = path.relative_to(ROOT).as_posix()
        unsafe = (_imports(path) & UNSAFE) - PRIVATE_PIPE.get(name, set())
        if unsafe:
            offenders[name] = sorted(unsafe)
    assert offenders == {}


@pytest.mark.timeout(60)
def test_the_detector_sees_every_way_of_importing(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import os, pickle as p\nfrom marshal import loads\nshelf = __import__('shelve')\n")
    assert _imports(sample) == {"os", "pickle", "marshal", "shelve"}
