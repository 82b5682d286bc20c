"""``fedsched audit at TIME`` as people read it: quotas in the units ``fedsched quota`` shows (GPUs and CPUs,
not milli-units), and an unbounded limit as ``-``."""

from __future__ import annotations

import pytest

from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.types import QueueId, ResourceKind, TenantId
from events.wire.envelope import Envelope
from services.audit import queries
from services.cli.main import main
from services.scheduler.core.state import SchedulerState
from tests.unit.audit.test_whatif import T0
from tests.unit.audit.test_whatif_output import NoLog

pytestmark = pytest.mark.timeout(60)


def test_quotas_are_printed_in_gpus_cpus_and_mib_as_fedsched_quota_shows_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (
        QuotaLine(resource=ResourceKind.GPU, guaranteed=4000, limit=8000),
        QuotaLine(resource=ResourceKind.GPU, gpu_model="A100", guaranteed=1500),
        QuotaLine(resource=ResourceKind.CPU, guaranteed=16_000, limit=32_000),
        QuotaLine(resource=ResourceKind.MEMORY, guaranteed=65_536, limit=131_072),
    )
    state = SchedulerState()
    quota = QuotaSet(tenant=TenantId("team-q"), queue=QueueId("default"), lines=lines, set_by="admin")
    state.fold(Envelope(id="q1", time_ms=T0, data=quota))

    async def recorded(*args: object, **kwargs: object) -> SchedulerState:
        return state

    monkeypatch.setattr(queries, "state_at", recorded)
    monkeypatch.setattr("events.log.open_log", lambda url: NoLog())
    assert main(["audit", "at", "2026-01-01T00:00:00Z", "--log", "postgresql://unused"]) == 0

    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("quota ")]
    assert sorted(printed) == [
        "quota team-q/default cpu: guaranteed 16 limit 32 (CPUs)",
        "quota team-q/default gpu: guaranteed 4 limit 8 (GPUs)",
        "quota team-q/default gpu:A100: guaranteed 1.5 limit - (GPUs)",
        "quota team-q/default memory: guaranteed 65536 limit 131072 (MiB)",
    ]
