"""Every metric a fedsched process exports has a HELP text that says what it counts and the right TYPE:
a counter for the running totals (``_total``), a gauge for the rest. ``fedsched_intake_requests_total``
was exported as a gauge whose help was its own name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from events.plumbing.metrics import Metrics

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[3]


def exported_names() -> set[str]:
    """The names of the samples the code builds: ``(name, labels, value)`` tuples named ``fedsched_...``."""
    names = set()
    for folder in ("events", "projections", "services", "connectors"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Tuple) and len(node.elts) == 3:
                    first = node.elts[0]
                    if isinstance(first, ast.Constant) and str(first.value).startswith("fedsched_"):
                        names.add(str(first.value))
    return names


def exposition(names: set[str]) -> dict[str, tuple[str, str]]:
    """name: (TYPE, HELP) as /metrics writes them."""
    metrics = Metrics()
    metrics.add_source(lambda: [(name, {}, 1.0) for name in names])
    help_, type_ = {}, {}
    for line in metrics.render().splitlines():
        if line.startswith("# HELP "):
            name, _, text = line[len("# HELP ") :].partition(" ")
            help_[name] = text
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            type_[name] = kind
    return {name: (type_[name], help_[name]) for name in names}


def test_the_code_exports_the_metrics_this_test_is_about() -> None:
    found = exported_names()
    assert {"fedsched_intake_requests_total", "fedsched_scheduler_cycle_phase_seconds", "fedsched_queue_depth"} <= found


@pytest.mark.parametrize("name", sorted(exported_names()))
def test_every_exported_metric_has_a_help_text_and_the_type_its_name_promises(name: str) -> None:
    kind, text = exposition({name})[name]
    assert text and text != name and not text.startswith("fedsched_"), text
    assert kind == ("counter" if name.endswith("_total") else "gauge")
