"""The EventLog contract suite runs every test on each implementation: Kafka and the embedded log
(the ``event_log`` fixture in ``tests/conftest.py`` is parametrised over both)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/contract" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.contract)
