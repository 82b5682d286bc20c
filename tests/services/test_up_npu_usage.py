"""Measured NPU usage end to end on the embedded default (issue 21): ``fedsched up``'s components in one
process on real PostgreSQL, a simulated cluster with a GPU node and an NPU node.

- An NPU job runs; the simulated cluster measures its NPUs; the node listing shows the NPUs' utilisation;
  and ``fedsched gov report --json`` shows the NPU-hours held and used per cluster x NPU model beside the
  GPU figures, with a used share measured from the reports (not "no usage data").
- A notebook holding NPUs goes idle: governance warns in NPU words, then reclaims it, the simulated
  cluster stops it and it is not placed again.

``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from events.catalog.decisions import JobReclaimRequested
from events.catalog.governance import JobIdleWarning
from events.catalog.jobs import JobReclaimed
from services.api.pb import jobs_pb2, resources_pb2
from services.cli.gov_report_cmd import show_report
from tests.services.embedded import one_cluster, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODES = """\
cluster:
  display_name: NPU usage test
nodes:
  - {name: gpu-1, cpu_milli: 64000, memory_mib: 262144, gpus: 8, model: A100-SXM4-80GB}
  - {name: npu-1, cpu_milli: 64000, memory_mib: 262144, npus: 8, npu_model: Ascend910B, npu_memory_mib: 65536}
"""


async def test_measured_npu_utilisation_reaches_the_node_listing_and_the_governance_report(
    fresh_database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A usage report every half second of wall time.
    config = one_cluster(fresh_database, tmp_path, NODES, 600.0)
    async with stack(config) as (_running, client):
        spec = jobs_pb2.JobSpec(
            name="npu-train",
            tenant="team-a",
            expected_runtime_s=30 * 24 * 3600,  # running throughout the test
            resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=8192, npus=4, npu_models=["Ascend910B"]),
            labels={"sim.fedsched.io/utilisation-pct": "40"},
        )
        await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="npu"))

        async def node_measured() -> bool:
            answer = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest())
            shown = {n.node: n for n in answer.nodes}
            npu = shown.get("npu-1")
            # 4 of its 8 NPUs at 40%: 20% the node's mean, once a whole window has been measured.
            return npu is not None and npu.HasField("npu_utilisation_pct") and npu.npu_utilisation_pct == 20

        await wait_for(node_measured, 120)

        async def report() -> dict[str, Any]:
            args = argparse.Namespace(period="7d", until=None, tenant="", format="json", out=None)
            assert await show_report(args, client) == 0
            return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]

        async def npu_used() -> bool:
            rows = (await report())["npu_usage"]
            return any(isinstance(r["used_pct"], float) and r["used_pct"] > 0 for r in rows)

        await wait_for(npu_used, 120)
        shown = await report()
        [row] = shown["npu_usage"]
        assert (row["cluster"], row["npu_model"]) == ("sim-1", "Ascend910B")
        # Used is measured at 40% of what the run held (less while its first window was partly run).
        assert 0 < row["used_npu_h"] <= row["allocated_npu_h"] and 0 < row["used_pct"] <= 40.0
        assert [r["tenant"] for r in shown["npu_idle"]] == ["team-a"]
        assert shown["utilisation"] == [], "NPU time is not GPU time"

    verified, _ = await verified_history(fresh_database)
    assert verified.identical_pct == 100.0, verified.differences


async def test_a_notebook_holding_idle_npus_is_warned_in_npu_words_then_reclaimed(
    fresh_database: str, tmp_path: Path
) -> None:
    # The default idle rule's 45 minutes pass in under five seconds.
    config = one_cluster(fresh_database, tmp_path, NODES, 600.0)
    async with stack(config) as (_running, client):
        spec = jobs_pb2.JobSpec(
            name="npu-notebook",
            tenant="team-n",
            kind="notebook",
            resources=jobs_pb2.Resources(cpu_milli=2000, memory_mib=4096, npus=2),
        )
        answer = await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="nb"))
        job_id = str(answer.job_id)

        async def job() -> jobs_pb2.Job:
            return await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))

        async def reclaimed_and_ended() -> bool:
            return (await job()).status == "cancelled"

        await wait_for(reclaimed_and_ended, 180)

    verified, events = await verified_history(fresh_database)
    assert verified.identical_pct == 100.0, verified.differences
    [warning] = [e.data for e in events if isinstance(e.data, JobIdleWarning) and e.data.job_id == job_id]
    assert warning.message.startswith("NPUs under 5% for ")
    [reclaim] = [e.data for e in events if isinstance(e.data, JobReclaimRequested) and e.data.job_id == job_id]
    assert reclaim.rule == "idle-notebook" and reclaim.message.startswith("2 NPUs idle for ")
    assert [e.data.run for e in events if isinstance(e.data, JobReclaimed) and e.data.job_id == job_id] == [1]
