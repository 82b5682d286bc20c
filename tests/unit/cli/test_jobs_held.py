"""``fedsched jobs`` and ``fedsched job`` say what a run holds when it holds fewer replicas than its job
asks (an elastic run that started with what fit), not only what was asked, and what an NPU job asks."""

from __future__ import annotations

from services.api.pb import jobs_pb2
from services.cli.people_cmd import _jobs_table, _per_replica, _replicas


def a_job(status: str, replicas: int, held: int, *, gpu_milli: int = 1000, npus: int = 0) -> jobs_pb2.Job:
    return jobs_pb2.Job(
        job_id="j-1",
        name="array",
        tenant="team-a",
        status=status,
        priority_class="standard",
        cluster="sim-1" if held else "",
        replicas=replicas,
        gpu_milli=gpu_milli,
        npus=npus,
        placement=[
            jobs_pb2.ReplicaSlot(replica=r, node="a-0", gpu_indices=[r], gpu_milli_each=1000) for r in range(held)
        ],
    )


def column(job: jobs_pb2.Job, name: str, after: str) -> str:
    header, row = _jobs_table([job]).splitlines()[:2]
    return row[header.index(name) : header.index(after)].strip()


def gpus_column(job: jobs_pb2.Job) -> str:
    return column(job, "GPUS", "NPUS")


def test_a_run_holding_fewer_replicas_than_asked_shows_what_it_holds_of_what_it_asks() -> None:
    assert gpus_column(a_job("running", 4, 2)) == "2/4"
    assert _replicas(a_job("running", 4, 2)) == "running 2 of 4 replica(s)"


def test_a_whole_run_and_a_waiting_job_show_what_they_ask() -> None:
    assert gpus_column(a_job("running", 4, 4)) == "4"
    assert gpus_column(a_job("queued", 4, 0)) == "4"
    assert _replicas(a_job("queued", 4, 0)) == "4 replica(s)"


def test_an_npu_job_shows_its_npus_not_zero_gpus() -> None:
    serve = a_job("running", 6, 2, gpu_milli=0, npus=4)
    assert (gpus_column(serve), column(serve, "NPUS", "CLUSTER")) == ("-", "8/24")
    assert _per_replica(serve) == "4 NPU"
    assert _per_replica(a_job("queued", 1, 0, npus=2)) == "1 GPU + 2 NPU"
    assert column(a_job("queued", 4, 0), "NPUS", "CLUSTER") == "-"
