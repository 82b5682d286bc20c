"""The soak's submissions: through gRPC with a request id and client retries, and a few through the intake.

Called by the soak's run while the chaos goes on. Calls the gRPC API as a portal would (``SubmitJob``
with ``client_request_id``, the bearer token in the metadata) and the event log as an MLOps tool would
(a CloudEvent on ``fedsched.intake``).

A call that ends ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` is retried with the same request id (what the
API's idempotency promises to make safe), with a growing backoff, until ``give_up_s``; any other code is
the request's final answer. An intake request is appended again until the log takes it. Each request's
outcome (the job id answered, the attempts, the codes retried, the final error) is what the invariants
hold the log to.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc

from events.catalog.topics import INTAKE
from events.log import OutRecord, open_log
from services.api.client import Client, ClientConfig
from services.api.commands import job_id_for
from services.api.intake import AUTH_HEADER
from services.api.pb import jobs_pb2
from tests.soak.plan import JobDraw, SoakPlan

RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_CALL_TIMEOUT_S = 10.0
_IN_FLIGHT = 32


@dataclass
class Outcome:
    draw: JobDraw
    job_id: str | None = None
    """The job the API answered with; for the intake, the id derived from tenant and request id."""
    attempts: int = 0
    retried: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    answered_ms: int | None = None

    def describe(self) -> str:
        retried = ", ".join(f"{n} {code}" for code, n in sorted(self.retried.items())) or "none"
        answer = f"answered {self.job_id}" if self.job_id else f"failed: {self.error}"
        return f"{self.draw.request_id} ({self.draw.path}, {self.attempts} attempts, retried {retried}): {answer}"


class Load:
    def __init__(self, plan: SoakPlan, api_address: str, token: str, log_url: str) -> None:
        self.plan = plan
        self._client = Client(ClientConfig(server=api_address, token=token, timeout_s=_CALL_TIMEOUT_S))
        self._token = token
        self._log_url = log_url
        self.outcomes: dict[str, Outcome] = {}
        self.give_up_s = plan.settle_s
        self.done = asyncio.Event()

    async def api_answers(self) -> bool:
        """Whether an authenticated call gets an answer now (the API is up and reads its database)."""
        try:
            await self._client.jobs.ListJobs(
                jobs_pb2.ListJobsRequest(page_size=1), metadata=self._client.metadata, timeout=_CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError:
            return False
        return True

    async def run(self) -> dict[str, Outcome]:
        """Send every draw at the plan's pace; returns when each has its final outcome."""
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(_IN_FLIGHT)
        started = loop.time()
        tasks: list[asyncio.Task[None]] = []
        try:
            for draw in self.plan.draws():
                self.outcomes[draw.request_id] = outcome = Outcome(draw)
                await asyncio.sleep(max(0.0, started + draw.index / self.plan.rate_per_s - loop.time()))  # pace
                await slots.acquire()
                send = self._grpc if draw.path == "grpc" else self._intake
                task = asyncio.create_task(send(outcome))
                task.add_done_callback(lambda _: slots.release())
                tasks.append(task)
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._client.close()
            self.done.set()
        return self.outcomes

    async def _grpc(self, outcome: Outcome) -> None:
        request = jobs_pb2.SubmitJobRequest(spec=spec(outcome.draw), client_request_id=outcome.draw.request_id)
        deadline = time.monotonic() + self.give_up_s
        backoff = 0.2
        while True:
            outcome.attempts += 1
            try:
                response = await self._client.jobs.SubmitJob(
                    request, metadata=self._client.metadata, timeout=_CALL_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code not in RETRIED or time.monotonic() > deadline:
                    outcome.error = f"{code.name}: {error.details()}"
                    return
                outcome.retried[code.name] += 1
                await asyncio.sleep(backoff)  # a client's retry backoff
                backoff = min(backoff * 2, 2.0)
                continue
            outcome.job_id = str(response.job_id)
            outcome.answered_ms = time.time_ns() // 1_000_000
            return

    async def _intake(self, outcome: Outcome) -> None:
        draw = outcome.draw
        record = intake_request(draw, self._token)
        deadline = time.monotonic() + self.give_up_s
        backoff = 0.2
        while True:
            outcome.attempts += 1
            try:
                await _append(self._log_url, record)
            except Exception as error:  # the broker may be down: the tool tries again
                if time.monotonic() > deadline:
                    outcome.error = f"append failed: {error!r}"
                    return
                outcome.retried[type(error).__name__] += 1
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            outcome.job_id = job_id_for(draw.tenant, draw.request_id)
            outcome.answered_ms = time.time_ns() // 1_000_000
            return


def spec(draw: JobDraw) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(
        name=draw.name,
        tenant=draw.tenant,
        priority_class=draw.priority_class,
        resources=jobs_pb2.Resources(cpu_milli=1000, memory_mib=2048, gpus=draw.gpus, gpu_milli=draw.gpu_milli),
        expected_runtime_s=draw.runtime_s,
    )


def intake_request(draw: JobDraw, token: str) -> OutRecord:
    resources: dict[str, Any] = {"cpu_milli": 1000, "memory_mib": 2048}
    resources.update({"gpus": draw.gpus} if draw.gpus else {"gpu_milli": draw.gpu_milli})
    body = {
        "name": draw.name,
        "tenant": draw.tenant,
        "priority_class": draw.priority_class,
        "resources": resources,
        "expected_runtime_s": draw.runtime_s,
        "client_request_id": draw.request_id,
    }
    headers = (
        ("ce_specversion", b"1.0"),
        ("ce_id", f"ce-{draw.request_id}".encode()),
        ("ce_source", b"urn:soak:pipelines"),
        ("ce_type", b"io.fedsched.JobSubmitted"),
        ("content-type", b"application/json"),
        (AUTH_HEADER, f"Bearer {token}".encode()),
    )
    return OutRecord(INTAKE.name, json.dumps(body).encode(), draw.request_id.encode(), headers)


async def _append(log_url: str, record: OutRecord) -> None:
    # A fresh client per request: one that saw the broker go away may keep failing after it is back.
    log = open_log(log_url)
    await asyncio.wait_for(log.start(), _CALL_TIMEOUT_S)
    try:
        producer = await asyncio.wait_for(log.producer(), _CALL_TIMEOUT_S)
        try:
            await asyncio.wait_for(producer.append([record]), _CALL_TIMEOUT_S)
        finally:
            await producer.close()
    finally:
        await log.close()
