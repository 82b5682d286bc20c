"""``fedsched connector sim`` without ``--nodes`` runs on the node list ``fedsched up`` would use: the
openb trace if it is on this machine, else the 300-node sample shipped with fedsched (it failed with
"no such node list" where the traces are not)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from connectors.sim import ClusterSpec
from services.cli import connector_cmd

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio]


class Reached(Exception):
    """Raised where the connector would open the log: everything before it worked."""


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    connector_cmd.register(parser.add_subparsers())
    return parser.parse_args(["connector", "sim", *argv])


async def test_without_nodes_and_without_the_traces_the_shipped_sample_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDSCHED_TRACES", str(tmp_path))  # no traces here
    built: list[ClusterSpec] = []
    build = ClusterSpec.build

    def spying(*args: object, **kwargs: object) -> ClusterSpec:
        spec = build(*args, **kwargs)  # type: ignore[arg-type]
        built.append(spec)
        return spec

    def no_log(url: str) -> object:
        raise Reached(url)

    monkeypatch.setattr(ClusterSpec, "build", staticmethod(spying))
    monkeypatch.setattr("events.log.open_log", no_log)
    monkeypatch.setattr(connector_cmd, "tune_for_service", lambda: None)  # leave the test process's gc alone
    args = parsed("--cluster", "sim-1", "--log", "kafka://127.0.0.1:9")
    with pytest.raises(Reached):
        await args.handler(args)
    [spec] = built
    assert (spec.cluster, len(spec.nodes)) == ("sim-1", 300)
