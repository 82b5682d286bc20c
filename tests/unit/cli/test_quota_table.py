"""``fedsched quota`` as a table: amounts in whole units, and what belongs to a queue (its running jobs,
its GPU-hours) said once per queue, not repeated on each of its quota lines as if it were theirs."""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from services.api.pb import quota_pb2
from services.cli.people_cmd import show_quota


class OneAnswer:
    def __init__(self, answer: quota_pb2.GetQuotaResponse) -> None:
        self.quota = SimpleNamespace(GetQuota=object())
        self._answer = answer

    async def call(self, method: Any, request: Any) -> quota_pb2.GetQuotaResponse:
        return self._answer


def test_a_queue_s_running_jobs_and_gpu_hours_are_shown_once(capsys: pytest.CaptureFixture[str]) -> None:
    queue = quota_pb2.QueueQuota(
        tenant="team-t",
        queue="default",
        running_jobs=2,
        gpu_hours_milli=1500,
        npu_hours_milli=2250,
        lines=[
            quota_pb2.QuotaUsageLine(resource="gpu", used=2000, guaranteed=4000, limit=8000),
            quota_pb2.QuotaUsageLine(resource="gpu", gpu_model="A10", used=1000, guaranteed=2000),
        ],
    )
    args = argparse.Namespace(tenant="team-t", queue="", json=False)
    assert asyncio.run(show_quota(args, OneAnswer(quota_pb2.GetQuotaResponse(queues=[queue])))) == 0  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    gpu, a10 = (line.split() for line in lines[1:3])
    assert gpu == ["team-t", "default", "gpu", "2", "4", "8", "0", "2", "1.5", "2.25"]
    assert a10 == ["team-t", "default", "gpu:A10", "1", "2", "-", "0"]
    assert lines[-1].endswith("RUNNING, GPU-HOURS and NPU-HOURS per queue)")
