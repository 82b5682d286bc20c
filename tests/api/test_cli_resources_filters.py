"""Resource filters that cannot mean what was typed are refused: a cluster nobody knows is not found
(not an empty fleet), and a node limit below 1 is bad input (not an empty page)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from events.catalog.inventory import ClusterKind, ClusterRegistered
from services.api.client import CallError
from services.api.pb import resources_pb2
from services.cli.main import main
from tests.api.conftest import RunningApi, Stack
from tests.api.support import append
from tests.api.test_cli import fedsched
from tests.api.test_resources_quota import node

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    "argv", [["resources", "--nodes", "--limit", "0"], ["resources", "--limit=-5"], ["jobs", "--limit", "0"]]
)
def test_a_limit_below_one_is_refused_before_any_call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--server", "127.0.0.1:1"])
    assert exited.value.code == 2
    assert "argument --limit: must be at least 1" in capsys.readouterr().err


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
async def test_capacity_and_nodes_of_an_unknown_cluster_are_not_found(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    registered, observed = f"reg-{tag}", f"obs-{tag}"
    await append(
        stack.log,
        [
            ClusterRegistered(cluster=registered, kind=ClusterKind.KUBERNETES, site="dc1", region="eu", currency="EUR"),
            node(observed, "n1", f"A100-{tag}", 2),
        ],
    )
    await stack.fold()
    client = stack.client(stack.keys.hs(roles=["viewer"]))
    for known in (registered, observed):  # known from its registration, or only from its nodes
        await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=known))
        await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=known))
    for ask in (
        lambda: client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=f"nope-{tag}")),
        lambda: client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=f"nope-{tag}")),
    ):
        with pytest.raises(CallError) as caught:
            await ask()
        assert (caught.value.code, caught.value.field) == ("NOT_FOUND", "cluster")


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
async def test_the_command_exits_3_for_an_unknown_cluster(api_process: RunningApi, tmp_path: Path) -> None:
    token = api_process.keys.hs(roles=["viewer"])
    code, out, err = await fedsched("resources", "--cluster", "nope", api=api_process, token=token, cwd=tmp_path)
    assert (code, out) == (3, "")
    assert "not found: cluster: no cluster nope" in err
