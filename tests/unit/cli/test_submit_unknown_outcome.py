"""A submission that got no answer may still have been made: the CLI says which request id returns it on a
retry (a new one, the default, would submit a second job)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from services.api.client import CallError
from services.cli.people_cmd import submit_job

pytestmark = [pytest.mark.timeout(10), pytest.mark.asyncio]

JOB = "name: retry-me\ntenant: team-a\nresources: {gpus: 1}\n"


class NoAnswer:
    def __init__(self, code: str) -> None:
        self.code = code
        self.jobs = SimpleNamespace(SubmitJob="SubmitJob")
        self.request_ids: list[str] = []

    async def call(self, method: object, request: object) -> object:
        self.request_ids.append(request.client_request_id)  # type: ignore[attr-defined]
        raise CallError(self.code, "Deadline Exceeded" if self.code == "DEADLINE_EXCEEDED" else "refused")


@pytest.mark.parametrize(("code", "hinted"), [("DEADLINE_EXCEEDED", True), ("UNAVAILABLE", True), ("NOT_FOUND", False)])
async def test_no_answer_names_the_request_id_to_retry_with(tmp_path: Path, code: str, hinted: bool) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(JOB)
    client = NoAnswer(code)
    args = argparse.Namespace(file=job_file, request_id=None, json=False, server="127.0.0.1:1")
    with pytest.raises(CallError) as raised:
        await submit_job(args, client)  # type: ignore[arg-type]
    [request_id] = client.request_ids
    said = f"retry with --request-id {request_id}"
    assert (said in raised.value.message) is hinted and raised.value.code == code
