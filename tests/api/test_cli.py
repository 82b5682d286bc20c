"""The people CLI against ``fedsched api`` running as its own process: submit, jobs, job, explain,
watch, cancel, resources and quota, as tables and as JSON, with clear errors and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from events.catalog.jobs import JobCancelled
from events.log import open_log
from projections.inprocess.runner import ProjectionRunner
from tests.api.conftest import RunningApi, start_api, stop_api
from tests.api.support import append
from tests.api.test_jobs import queued

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]

JOB = """
name: llama-finetune
tenant: team-a
resources: {gpus: 2, cpu_milli: 8000, memory_mib: 65536, gpu_models: [A100-80G]}
kind: fine_tune
expected_runtime: 2h
labels: {team: nlp}
template: {image: "registry.example/llm:1", command: [python, train.py]}
"""


async def fedsched(
    *args: str, api: RunningApi, token: str | None, cwd: Path, server: str | None = None
) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSCHED_TOKEN")}
    env["FEDSCHED_SERVER"] = server or api.address
    if token is not None:
        env["FEDSCHED_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_a_person_submits_lists_inspects_explains_watches_and_cancels(
    api_process: RunningApi, runner: ProjectionRunner, tmp_path: Path
) -> None:
    token = api_process.keys.hs()
    job_file = tmp_path / "job.yaml"
    job_file.write_text(JOB)

    def run(*args: str) -> asyncio.Future[tuple[int, str, str]]:
        return asyncio.ensure_future(fedsched(*args, api=api_process, token=token, cwd=tmp_path))

    code, out, err = await run("submit", str(job_file), "--json", "--request-id", "cli-1")
    assert code == 0, err
    job_id = json.loads(out)["job_id"]
    assert json.loads(out)["warnings"] == []  # no fleet known yet: nothing to warn about
    code, out, _ = await run("submit", str(job_file), "--request-id", "cli-1")
    assert code == 0 and f"{job_id} was already submitted" in out
    job_file.write_text(JOB.replace("gpus: 2", "gpus: 4"))
    code, _, err = await run("submit", str(job_file), "--request-id", "cli-1")
    assert code == 5 and "client_request_id" in err and "already exists" in err, err
    code, out, _ = await run("submit", str(job_file))
    assert code == 0 and out.startswith("submitted j-")

    log = open_log(api_process.dsn)
    await log.start()
    try:
        await append(log, [queued(job_id)])  # type: ignore[arg-type]
        await runner.catch_up()

        names = ("jobs", "jobs json", "queued", "by reason", "job", "job json", "explain", "explain json")
        results = dict(
            zip(
                names,
                await asyncio.gather(
                    run("jobs"),
                    run("jobs", "--json", "--status", "queued"),
                    run("jobs", "--status", "queued"),
                    run("jobs", "--pending-reason", "quota", "--pending-reason", "capacity", "--json"),
                    run("job", job_id),
                    run("job", job_id, "--json"),
                    run("explain", job_id),
                    run("explain", job_id, "--json"),
                ),
                strict=True,
            )
        )
        code, out, _ = results["jobs"]
        assert code == 0 and out.splitlines()[0].split()[:4] == ["JOB", "NAME", "TENANT", "STATUS"]
        assert job_id in out and "queued" in out
        code, out, _ = results["jobs json"]
        assert [j["job_id"] for j in json.loads(out)["jobs"]] == [job_id]
        code, out, _ = results["queued"]  # where each waiting job stands, as columns
        header, row = (line.split() for line in out.splitlines()[:2])
        assert code == 0 and header == [
            "JOB", "NAME", "QUEUE", "PRIORITY", "GPUS", "NPUS", "PENDING", "IN-QUEUE", "IN-FED", "ETA", "WAITED",
            "REASON",
        ]  # fmt: skip
        assert row[0] == job_id and row[2] == "team-a/default" and row[5:9] == ["-", "capacity", "3", "12"]
        assert row[9] == "in" and row[10][0].isdigit()  # "in 11h20m": the estimated start, from now
        code, out, _ = results["by reason"]
        [listed] = json.loads(out)["jobs"]
        assert (listed["pending_reason"], listed["tenant_queue_position"], listed["federation_position"]) == (
            "capacity",
            3,
            12,
        )
        assert listed["estimated_start_ms"] == 1_900_000_000_000  # a number (not a string)
        code, out, _ = results["job"]
        assert code == 0 and "llama-finetune" in out and "JobQueued" in out
        code, out, _ = results["job json"]
        assert json.loads(out)["status"] == "queued"
        code, out, _ = results["explain"]
        assert code == 0 and "Waiting: InsufficientGpu" in out and "resources.gpus from 8 to 2" in out
        assert "Pending reason: capacity" in out and "Position 3 in team-a/default, 12 in the federation's" in out
        code, out, _ = results["explain json"]
        assert json.loads(out)["wait"]["binding"]["requested"] == 8000  # a number (not a string)

        code, out, _ = await run("cancel", job_id, "--reason", "wrong data")
        assert code == 0 and "cancellation of" in out
        await append(log, [JobCancelled(job_id=job_id, requester="alice@example.com")])  # type: ignore[arg-type]
        await runner.catch_up()
        code, out, _ = await run("watch", job_id, "--json")
        assert code == 0
        events = [json.loads(line)["event"] for line in out.splitlines()]
        assert events[0] == "JobSubmitted" and events[-1] == "JobCancelled"
        code, _, err = await run("cancel", job_id)
        assert code == 5 and "already ended" in err
    finally:
        await log.close()


async def test_resources_quota_and_errors_have_tables_json_and_exit_codes(
    api_process: RunningApi, tmp_path: Path
) -> None:
    token = api_process.keys.hs(roles=["viewer"])

    async def run(*args: str, token: str | None = token, server: str | None = None) -> tuple[int, str, str]:
        return await fedsched(*args, api=api_process, token=token, cwd=tmp_path, server=server)

    bad_field = tmp_path / "bad-field.yaml"
    bad_field.write_text(JOB.replace("kind: fine_tune", "gpu: 3"))
    bad_gpus = tmp_path / "bad-gpus.yaml"
    bad_gpus.write_text(JOB.replace("gpus: 2", "gpus: 99"))
    bad_time = tmp_path / "bad-time.yaml"
    bad_time.write_text(JOB.replace("expected_runtime: 2h", "expected_runtime: soon"))
    submitter = api_process.keys.hs()
    calls = {  # independent invocations, run side by side
        "resources": run("resources"),
        "resources json": run("resources", "--json"),
        "clusters": run("resources", "--clusters", "--json"),
        "quota": run("quota", "--json"),
        "not found": run("explain", "j-no-such-job"),
        "no token": run("jobs", token=None),
        "bad token": run("jobs", "--json", token="not-a-token"),
        "other tenant": run("jobs", "--tenant", "team-b"),
        "bad tenant": run("jobs", "--tenant", "Not A Tenant", "--json"),
        "no server": run("jobs", "--timeout", "3", server="127.0.0.1:1"),
        "unknown field": run("submit", str(bad_field)),
        "too many gpus": run("submit", str(bad_gpus), token=submitter),
        "bad duration": run("submit", str(bad_time), "--json"),
    }
    results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))

    code, out, _ = results["resources"]
    assert code == 0 and out.split()[:3] == ["CLUSTER", "GPU", "MODEL"]
    code, out, _ = results["resources json"]
    assert code == 0 and set(json.loads(out)) == {"clusters", "models", "npus"}
    code, out, _ = results["clusters"]
    assert code == 0 and "clusters" in json.loads(out)
    code, out, _ = results["quota"]
    assert code == 0 and json.loads(out) == {"queues": []}
    code, _, err = results["not found"]
    assert code == 3 and "not found" in err
    code, _, err = results["no token"]
    assert code == 4 and "unauthenticated" in err and ".fedsched/dev-token" in err
    code, _, err = results["bad token"]
    assert code == 4 and json.loads(err)["error"]["code"] == "UNAUTHENTICATED"
    code, _, err = results["other tenant"]
    assert code == 4 and "permission denied" in err
    code, _, err = results["bad tenant"]
    assert code == 2 and json.loads(err)["error"]["field"] == "tenant"
    code, _, err = results["no server"]
    assert code == 6 and "is the API running" in err
    code, _, err = results["unknown field"]
    assert code == 2 and "gpu: unknown field" in err
    code, _, err = results["too many gpus"]
    assert code == 2 and "resources.gpus" in err
    code, _, err = results["bad duration"]
    assert code == 2 and json.loads(err)["error"]["field"] == "expected_runtime"


async def test_development_mode_prints_a_token_the_cli_finds_by_itself(api_process: RunningApi, tmp_path: Path) -> None:
    state = tmp_path / ".fedsched"
    args = ["--listen", "127.0.0.1:0", "--log", api_process.dsn, "--dsn", api_process.dsn, "--dev", str(state)]
    process, lines = await asyncio.to_thread(start_api, [*args, "--no-intake"], {}, tmp_path / "dev.log")
    try:
        address = lines[0].rsplit(" ", 1)[-1]
        assert "development token" in lines[1] and lines[2].count(".") == 2
        assert (state / "dev-token").read_text().strip() == lines[2]
        assert oct((state / "dev-jwt-secret").stat().st_mode & 0o777) == "0o600"
        code, out, err = await fedsched("jobs", "--json", api=api_process, token=None, cwd=tmp_path, server=address)
        assert code == 0, err
        assert "jobs" in json.loads(out)
    finally:
        assert await asyncio.to_thread(stop_api, process) == 0
