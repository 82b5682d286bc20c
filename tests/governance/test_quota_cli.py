"""``fedsched gov quota`` as an operator uses it: JSON of what was published, the people commands' exit
codes (2 bad input, 3 not found, 5 conflict), field names in errors, a list with headers and GPU model."""

from __future__ import annotations

import json

import pytest

from events.catalog.topics import TOPICS
from events.log import open_log
from events.wire.envelope import format_time
from services.cli.main import build_parser, main
from tests.cli import fedsched

pytestmark = pytest.mark.timeout(120)


def ask(request_id: str, *more: str) -> list[str]:
    return [
        "gov", "quota", "request", "--id", request_id, "--tenant", "team-a", "--amount", "8000",
        "--justification", "paper deadline", "--by", "alice@example.com", *more,
    ]  # fmt: skip


@pytest.mark.parametrize("group", [["gov", "quota"], ["gov"], ["audit"]])
def test_a_group_without_its_action_prints_its_own_help(group: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(group) == 2
    assert capsys.readouterr().out.startswith(f"usage: fedsched {' '.join(group)} ")


def test_the_top_level_help_names_every_audit_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the audit trail: archive, chain, verify, timeline, export, at (a past moment), whatif" in text


def test_report_takes_json_as_short_for_format_json() -> None:
    assert build_parser().parse_args(["gov", "report", "--json"]).format == "json"


@pytest.mark.parametrize("hours", ["-3", "0", "nan"])
def test_a_period_of_no_hours_is_refused_naming_the_option(hours: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(ask("q1", "--hours", hours))
    assert exited.value.code == 2
    assert "argument --hours: must be more than 0" in capsys.readouterr().err


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
async def test_an_operator_requests_decides_and_lists_with_json_and_exit_codes(fresh_database: str) -> None:
    log = open_log(fresh_database)  # the embedded log's tables, as fedsched up leaves them
    await log.start()
    await log.create_topics(TOPICS)
    await log.close()

    code, out = await fedsched(*ask("qr-1", "--gpu-model", "V100M32", "--json"), dsn=fresh_database)
    assert code == 0, out
    asked = json.loads(out)
    assert (asked["event_type"], asked["request_id"], asked["amount"]) == (
        "io.fedsched.QuotaRequestSubmitted",
        "qr-1",
        8000,
    )
    code, out = await fedsched(*ask("qr-2"), dsn=fresh_database)
    assert code == 0, out

    code, out = await fedsched(*ask("qr-3", "--tenant", "Not A Tenant"), dsn=fresh_database)
    assert code == 2 and "invalid request: tenant: " in out and "('" not in out, out
    code, out = await fedsched("gov", "quota", "approve", "nope", dsn=fresh_database)
    assert (code, out.strip()) == (3, "fedsched: no quota request nope")
    code, out = await fedsched("gov", "quota", "approve", "qr-1", "--amount", "9000", dsn=fresh_database)
    assert code == 2 and "more than the 8000 asked" in out

    code, out = await fedsched("gov", "quota", "approve", "qr-1", "--amount", "5000", "--json", dsn=fresh_database)
    assert code == 0, out
    approved = json.loads(out)
    assert (approved["event_type"], approved["approved_amount"]) == ("io.fedsched.QuotaRequestApproved", 5000)
    code, out = await fedsched("gov", "quota", "reject", "qr-1", dsn=fresh_database)
    assert (code, out.strip()) == (5, "fedsched: quota request qr-1 is already decided")

    code, out = await fedsched("gov", "quota", "list", dsn=fresh_database)
    assert code == 0, out
    until = format_time(asked["period_end_ms"])  # the grant lasts for the period asked
    assert [line.split() for line in out.splitlines()] == [
        ["REQUEST", "TENANT", "RESOURCE", "GPU", "MODEL", "ASKED", "GRANTED", "UNIT", "UNTIL", "STATUS", "BY"],
        ["qr-1", "team-a", "gpu", "V100M32", "8000", "5000", "milli-GPU", until, "approved", "operator"],
        ["qr-2", "team-a", "gpu", "-", "8000", "-", "milli-GPU", "-", "pending", "-"],
    ]
    code, out = await fedsched("gov", "quota", "list", "--json", dsn=fresh_database)
    assert code == 0, out
    first, second = json.loads(out)
    assert (first["amount"], first["granted"], first["unit"]) == (8000, 5000, "milli-GPU")
    assert (first["granted_from_ms"], first["granted_until_ms"]) == (asked["period_start_ms"], asked["period_end_ms"])
    assert (second["amount"], second["granted"], second["granted_until_ms"], second["status"]) == (
        8000,
        None,
        None,
        "pending",
    )


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
async def test_a_request_id_names_one_request_a_retry_is_answered_another_refused(fresh_database: str) -> None:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(TOPICS)
    await log.close()
    period = ("--from", "2099-01-01T00:00:00Z", "--hours", "10")

    code, out = await fedsched(*ask("req-1", *period), dsn=fresh_database)
    assert (code, out.strip()) == (0, "requested req-1: 8000 gpu for 10.0 h"), out
    code, out = await fedsched(*ask("req-1", *period, "--by", "bob@example.com"), dsn=fresh_database)
    assert (code, out.strip()) == (0, "requested req-1: 8000 gpu for 10.0 h (already recorded)"), out
    # Without --from the start is now, on a retry as well: the same length of period is the same request.
    code, out = await fedsched(*ask("req-2"), dsn=fresh_database)
    assert code == 0, out
    code, out = await fedsched(*ask("req-2", "--json"), dsn=fresh_database)
    assert code == 0, out
    assert json.loads(out)["request_id"] == "req-2"

    code, out = await fedsched(
        *ask("req-1", *period, "--tenant", "team-c", "--amount", "500", "--justification", "dup"), dsn=fresh_database
    )
    assert code == 5, out
    assert "quota request id req-1 is already used by another request (team-a, 8000 gpu" in out
    assert "use a new --id" in out
    code, out = await fedsched(*ask("req-1", "--from", "2099-01-01T00:00:00Z", "--hours", "11"), dsn=fresh_database)
    assert code == 5, out
    code, out = await fedsched(*ask("req-2", "--hours", "48"), dsn=fresh_database)
    assert code == 5, out

    code, out = await fedsched("gov", "quota", "list", "--json", dsn=fresh_database)
    assert code == 0, out
    assert [(r["request_id"], r["tenant"], r["amount"]) for r in json.loads(out)] == [
        ("req-1", "team-a", 8000),
        ("req-2", "team-a", 8000),
    ]
