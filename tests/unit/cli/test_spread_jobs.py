"""``fedsched jobs`` and ``fedsched job`` for an inference service spread over clusters: the list names
every cluster its run holds replicas in (``sim-1+sim-2``), the job its parts (replicas per cluster, and
which ended how) and each replica's cluster; a job in one cluster reads as before."""

from __future__ import annotations

import pytest

from services.api.pb import jobs_pb2
from services.cli.people_cmd import _jobs_table, render_job

pytestmark = pytest.mark.timeout(30)


def a_service(clusters: list[str], parts: list[jobs_pb2.RunPart]) -> jobs_pb2.Job:
    held = [c for c in clusters for _ in range(2)]
    return jobs_pb2.Job(
        job_id="svc-1",
        name="chat",
        tenant="team-a",
        kind="inference",
        status="running",
        priority_class="standard",
        cluster="sim-1",
        clusters=clusters,
        replicas=4,
        gpu_milli=1000,
        placement=[
            jobs_pb2.ReplicaSlot(replica=r + (2 if c == "sim-2" else 0), node="n-3", cluster=c, gpu_indices=[r])
            for r, c in enumerate(held)
        ],
        parts=parts,
    )


def column(job: jobs_pb2.Job) -> str:
    header, row = _jobs_table([job]).splitlines()[:2]
    return row[header.index("CLUSTER") : header.index("WAITED")].strip()


OPEN = [
    jobs_pb2.RunPart(cluster="sim-1", replicas=2, opened_ms=1_767_225_600_000),
    jobs_pb2.RunPart(cluster="sim-2", replicas=2, opened_ms=1_767_225_660_000),
]


def test_the_list_names_every_cluster_the_run_holds_replicas_in() -> None:
    assert column(a_service(["sim-1", "sim-2"], OPEN)) == "sim-1+sim-2"
    assert column(a_service(["sim-2"], OPEN)) == "sim-2"  # sim-1's part ended: it runs on in sim-2
    one = jobs_pb2.Job(job_id="j-1", status="running", cluster="sim-1", clusters=["sim-1"])
    assert column(one) == "sim-1"
    assert column(jobs_pb2.Job(job_id="j-2", status="succeeded", cluster="sim-1")) == "sim-1"
    assert column(jobs_pb2.Job(job_id="j-3", status="queued")) == "-"


def test_the_job_shows_its_parts_and_which_ended_how() -> None:
    failed = jobs_pb2.RunPart(
        cluster="sim-2", replicas=2, opened_ms=1_767_225_660_000, ended="failed", reason="NodeFailure"
    )
    failed.ended_ms = 1_767_225_720_000
    text = render_job(a_service(["sim-1"], [OPEN[0], failed]))
    lines = text.splitlines()
    assert any(line.startswith("status") and line.endswith("running on sim-1") for line in lines)
    part_lines = [line for line in lines if line.startswith("part in")]
    assert part_lines[0].split("  ", 1)[1] == "2 replica(s) from 2026-01-01T00:00:00.000Z, running"
    assert part_lines[1].split("  ", 1)[1] == (
        "2 replica(s) from 2026-01-01T00:01:00.000Z, failed (NodeFailure) at 2026-01-01T00:02:00.000Z"
    )
    assert [line.split("  ", 1)[1].split()[0] for line in lines if line.startswith("replica ")] == [
        "sim-1/n-3",
        "sim-1/n-3",
    ]


def test_a_job_in_one_cluster_shows_its_replicas_nodes_as_before() -> None:
    job = jobs_pb2.Job(
        job_id="j-1",
        status="running",
        cluster="sim-1",
        clusters=["sim-1"],
        replicas=1,
        placement=[jobs_pb2.ReplicaSlot(replica=0, node="n-1", cluster="sim-1")],
    )
    lines = render_job(job).splitlines()
    assert not any(line.startswith("part in") for line in lines)
    assert [line.split("  ", 1)[1] for line in lines if line.startswith("replica 0")] == ["n-1 no GPU or NPU"]
