"""The real single-host Slurm that ``make test`` starts (``deploy/local/slurm.sh``), seen through
slurmrestd's REST API v0.0.38 as the Slurm connector will see it: node inventory, a batch job pinned to
one node with a GPU, a failing script, a refused submission. Run by pytest with ``slurm_rest``
(``tests/conftest.py``); talks HTTP with aiohttp, nothing of fedsched yet.

What Slurm 22.05.8's v0.0.38 taught us (the connector must do what these say):
- Authentication: ``X-SLURM-USER-NAME`` and ``X-SLURM-USER-TOKEN`` both; a token without the name is
  401, a bad token is 500 (not 401). slurmrestd must run with ``SLURM_JWT=daemon`` or it rejects every
  token ("Rejecting thread config token"). Jobs run as the token's user (``fedsched`` here, not root).
- Pinning: job properties have no ``required_nodes``/``excluded_nodes`` (only the job *response* has
  them); a per-node feature in ``constraints`` pins a job. GPUs are asked with ``gres``
  (``gpu:<model>:<n>`` or ``gpu:<n>``); ``tres_per_node`` is only in the response, as
  ``gres:gpu:<model>:<n>``.
- ``environment`` is required on submit (400, error 2127 "Failure during parsing" without it).
- Without ``memory_per_node`` a job gets all the node's memory (no DefMemPerCPU is configured), so a
  placement must always say its memory.
- A submission Slurm cannot satisfy is HTTP 500 with ``errors: [{error_code: 2014, error: "Requested
  node configuration is not available"}]``, and a job record is still left behind in ``FAILED`` with
  ``state_reason`` ``BadConstraints``: a retry must look for it (by ``comment``) before submitting again.
- ``exit_code`` is the raw wait status (``exit 3`` reads 768): decode it with
  ``os.waitstatus_to_exitcode``. A non-zero exit is ``FAILED`` with ``state_reason`` ``NonZeroExitCode``.
- ``gres_detail`` (``gpu:a100:2(IDX:0-1)``) is filled only while the job runs; after it ends it is
  empty. ``tres_alloc_str`` has no ``gres/gpu`` without slurmdbd (``AccountingStorageTRES=gres/gpu``
  needs slurmdbd in 22.05: slurmctld refuses to start with it). Node ``tres`` lacks GPUs too: the GPU
  count and model come from the node's ``gres`` string.
- Node ``state`` is a lower-case base state (``idle``, ``mixed``, ``allocated``, ``down``...) with
  ``state_flags`` beside it (``DRAIN``, ``NOT_RESPONDING``...); ``features`` and ``active_features`` are
  comma-separated strings; ``real_memory`` is in MB.
- Node ``state`` while draining stays ``mixed``/``allocated`` with ``DRAIN`` in ``state_flags`` and the
  text in ``reason`` (``reason_set_by_user``, ``reason_changed_at`` beside it). A killed slurmd shows
  ``NOT_RESPONDING`` after about half of ``SlurmdTimeout`` (30 s here) and ``down`` with reason "Not
  responding" after it. v0.0.38 cannot change a node: drain and resume go through ``scontrol`` with
  ``SLURM_CONF`` set to ``etc/slurm.conf`` beside the token file.
- ``nodes`` of a job and of a partition are hostlists (``n[2-3]``): expand them. A job pinned to several
  nodes: ``"nodes": 2, "constraints": "n2|n3"``; ``gres`` then counts per node.
- ``DELETE /job/{id}`` cancels (SIGTERM, SIGKILL after ``KillWait``, 5 s here) and the job ends
  ``CANCELLED`` whatever the script exits with; ``DELETE /job/{id}?signal=SIGTERM`` only signals, and the
  job ends by what the script does (e.g. ``FAILED``): a grace period of our own is that, then a DELETE.
  An unknown job id is HTTP 500, error 2017 "Invalid job id specified".
- ``time_limit`` is in minutes (``null`` when unlimited; a partition's ``max_time_limit`` is -1 then).
  slurmctld checks limits about every 30 s: a 1-minute job ends ``TIMEOUT`` (``state_reason``
  ``TimeLimit``, ``exit_code`` 15: killed by SIGTERM) 60 to 110 s after it started.
- Partitions carry one key with spaces in it: ``"min nodes per job"``.
- Finished jobs stay in ``GET /jobs`` for ``MinJobAge`` (600 s here), then only slurmdbd knows them.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from tests.conftest import SlurmRest

pytestmark = [pytest.mark.slurm, pytest.mark.asyncio(loop_scope="session")]

API = "/slurm/v0.0.38"
GRES_GPU = re.compile(r"^gpu:(?P<model>[^:(]+):(?P<count>\d+)")


@pytest_asyncio.fixture(loop_scope="session")
async def http(slurm_rest: SlurmRest) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        base_url=slurm_rest.url, headers=slurm_rest.headers, timeout=aiohttp.ClientTimeout(total=10)
    ) as session:
        yield session


async def get(http: aiohttp.ClientSession, path: str) -> dict[str, Any]:
    async with http.get(API + path) as response:
        body: dict[str, Any] = await response.json()
        assert response.status == 200, (path, response.status, body.get("errors"))
        assert body["errors"] == [], body["errors"]
        return body


async def submit(http: aiohttp.ClientSession, script: str, **job: Any) -> tuple[int, dict[str, Any]]:
    """POST a batch job; returns the HTTP status and the body (job_id on success, errors otherwise)."""
    job.setdefault("environment", {"PATH": "/usr/bin:/bin"})
    async with http.post(API + "/job/submit", json={"script": script, "job": job}) as response:
        return response.status, await response.json()


async def job_of(http: aiohttp.ClientSession, job_id: int) -> dict[str, Any]:
    jobs = (await get(http, f"/job/{job_id}"))["jobs"]
    assert len(jobs) == 1, jobs
    job: dict[str, Any] = jobs[0]
    return job


async def wait_for_job(
    http: aiohttp.ClientSession, job_id: int, done: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll the job until ``done`` holds; fails naming its last state after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = await job_of(http, job_id)
        if done(job):
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} still {job['job_state']} ({job['state_reason']}) after {timeout_s} s")
        await asyncio.sleep(0.1)


async def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.1)


def ended(job: dict[str, Any]) -> bool:
    """The job reached a final state (COMPLETING still has processes or an epilog to clean up)."""
    return job["job_state"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")


def gpus(node: dict[str, Any]) -> tuple[str, int] | None:
    """(model, count) of the node's GPU GRES, or None."""
    for part in node["gres"].split(","):
        match = GRES_GPU.match(part)
        if match:
            return match["model"], int(match["count"])
    return None


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the job (running as the token's user) and this test both read and write."""
    path = Path(tempfile.mkdtemp(prefix="fedsched-slurm-job."))
    path.chmod(0o777)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


async def test_inventory_lists_nodes_with_cpus_memory_gpus_and_features(http: aiohttp.ClientSession) -> None:
    nodes = {node["name"]: node for node in (await get(http, "/nodes"))["nodes"]}
    assert len(nodes) >= 3, sorted(nodes)
    for name, node in nodes.items():
        assert node["state"] == "idle" and node["state_flags"] == [], (name, node["state"], node["state_flags"])
        # Each node carries a feature equal to its name: the only way to pin a job to it in v0.0.38.
        assert name in node["features"].split(","), (name, node["features"])
        assert node["partitions"], name
    # config_overrides: the configured CPUs and memory, not the machine's.
    assert max(node["cpus"] for node in nodes.values()) > (os.cpu_count() or 1)
    # The default layout of deploy/local/slurm.sh (SLURM_NODES).
    assert (nodes["n1"]["cpus"], nodes["n1"]["real_memory"], gpus(nodes["n1"])) == (32, 262144, ("a100", 4))
    assert (nodes["n3"]["cpus"], nodes["n3"]["real_memory"], gpus(nodes["n3"])) == (16, 131072, ("h100", 2))
    assert "nvlink" in nodes["n1"]["features"].split(",") and "nvlink" not in nodes["n3"]["features"].split(",")


async def test_a_job_pinned_by_feature_runs_on_that_node_with_its_gpu(
    http: aiohttp.ClientSession, shared_dir: Path
) -> None:
    nodes = {node["name"]: node for node in (await get(http, "/nodes"))["nodes"]}
    # n1 has the same GPUs as n2 and comes first: only the constraint sends the job to n2.
    name = "n2"
    model, _ = gpus(nodes[name]) or ("", 0)
    assert gpus(nodes["n1"]) == gpus(nodes[name])
    ours = f"fedsched:{uuid.uuid4()}"
    # The job reports where it runs and which GPU it got, then holds until the test releases it, so
    # the test sees it RUNNING without timing anything.
    script = "\n".join(
        [
            "#!/bin/sh",
            'echo "$SLURMD_NODENAME $SLURM_JOB_GPUS" > where',
            "while [ ! -e release ]; do sleep 0.05; done",
            "",
        ]
    )
    status, body = await submit(
        http,
        script,
        name="smoke-pinned",
        comment=ours,
        constraints=name,
        gres=f"gpu:{model}:1",
        minimum_cpus_per_node=2,
        memory_per_node=1024,
        time_limit=2,
        current_working_directory=str(shared_dir),
        standard_output=str(shared_dir / "slurm.out"),
    )
    assert status == 200 and body["errors"] == [], (status, body["errors"])
    job_id = body["job_id"]

    running = await wait_for_job(http, job_id, lambda job: job["job_state"] == "RUNNING" or ended(job))
    assert running["job_state"] == "RUNNING", (running["job_state"], running["state_reason"])
    assert running["nodes"] == name and running["comment"] == ours
    assert running["gres_detail"] == [f"gpu:{model}:1(IDX:0)"]
    assert running["tres_per_node"] == f"gres:gpu:{model}:1"
    assert running["job_resources"]["allocated_nodes"][0]["memory_allocated"] == 1024
    await wait_for((shared_dir / "where").exists, "the job to write where it runs")
    assert (shared_dir / "where").read_text().split() == [name, "0"]

    (shared_dir / "release").touch()
    done = await wait_for_job(http, job_id, ended)
    assert (done["job_state"], done["nodes"], done["exit_code"]) == ("COMPLETED", name, 0)
    listed = [job for job in (await get(http, "/jobs"))["jobs"] if job["comment"] == ours]
    assert [job["job_id"] for job in listed] == [job_id]


async def test_a_failing_script_ends_failed_with_its_exit_code(http: aiohttp.ClientSession) -> None:
    status, body = await submit(
        http,
        "#!/bin/sh\nexit 3\n",
        name="smoke-false",
        comment=f"fedsched:{uuid.uuid4()}",
        constraints="n2",
        minimum_cpus_per_node=1,
        memory_per_node=256,
        time_limit=1,
        current_working_directory="/",
        standard_output="/dev/null",
    )
    assert status == 200, body["errors"]
    done = await wait_for_job(http, body["job_id"], ended)
    assert (done["job_state"], done["state_reason"], done["nodes"]) == ("FAILED", "NonZeroExitCode", "n2")
    assert os.waitstatus_to_exitcode(done["exit_code"]) == 3


async def test_a_submission_slurm_cannot_satisfy_is_refused_with_its_reason(http: aiohttp.ClientSession) -> None:
    ours = f"fedsched:{uuid.uuid4()}"
    # n3 has h100s only.
    status, body = await submit(
        http,
        "#!/bin/sh\ntrue\n",
        name="smoke-refused",
        comment=ours,
        constraints="n3",
        gres="gpu:a100:1",
        memory_per_node=256,
        current_working_directory="/",
        standard_output="/dev/null",
    )
    assert status == 500
    assert [(e["error_code"], e["error"]) for e in body["errors"]] == [
        (2014, "Requested node configuration is not available")
    ]
    # The refused job is still recorded, failed: a connector retrying must find it by its comment.
    left = [job for job in (await get(http, "/jobs"))["jobs"] if job["comment"] == ours]
    assert [(job["job_state"], job["state_reason"]) for job in left] == [("FAILED", "BadConstraints")]


async def test_a_cancelled_job_ends_cancelled(http: aiohttp.ClientSession, shared_dir: Path) -> None:
    # The script says when it runs, and would exit 7 on SIGTERM: the cancel still reads CANCELLED.
    script = "\n".join(["#!/bin/sh", 'trap "exit 7" TERM', "touch started", "sleep 300 &", "wait", ""])
    status, body = await submit(
        http,
        script,
        name="smoke-cancel",
        comment=f"fedsched:{uuid.uuid4()}",
        constraints="n1",
        memory_per_node=256,
        time_limit=5,
        current_working_directory=str(shared_dir),
        standard_output="/dev/null",
    )
    assert status == 200, body["errors"]
    job_id = body["job_id"]
    await wait_for((shared_dir / "started").exists, "the job to start")
    async with http.delete(f"{API}/job/{job_id}") as response:
        assert response.status == 200, await response.text()
    done = await wait_for_job(http, job_id, ended)
    assert (done["job_state"], done["nodes"]) == ("CANCELLED", "n1")
