"""Configuration documents through the API (issue 20): the example configuration applied with an admin
token, as ``fedsched apply`` does; refused for viewer and submitter tokens and outside a token's
tenants; a second apply changes nothing; ``get -o yaml`` applies again as a no-op; ``diff`` shows a
change before it is made; every change is one event naming its author and what changed; on both logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from events.catalog.configuration import document_of
from events.catalog.topics import GOVERNANCE, JOBS
from services.api.client import CallError
from services.api.pb import config_pb2, jobs_pb2
from tests.api.conftest import Stack
from tests.api.support import LogTail, envelope_of, new_request_id, spec

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples" / "config"


@contextlib.asynccontextmanager
async def folding(stack: Stack) -> AsyncIterator[None]:
    """The projections folding while the block runs, as a deployment's do (this stack folds on demand)."""

    async def fold() -> None:
        while True:
            await stack.fold()
            await asyncio.sleep(0.02)

    task = asyncio.create_task(fold())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await stack.fold()


async def fedsched(stack: Stack, token: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSCHED_")}
    env.update(FEDSCHED_SERVER=stack.api.address, FEDSCHED_TOKEN=token)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env=env,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def example_documents() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def request(documents: list[dict[str, Any]], *, dry_run: bool = False) -> config_pb2.ApplyDocumentsRequest:
    return config_pb2.ApplyDocumentsRequest(documents=[json.dumps(d) for d in documents], dry_run=dry_run)


async def get(client: Any, kind: str = "", name: str = "") -> Any:
    return await client.call(client.documents.GetDocuments, config_pb2.GetDocumentsRequest(kind=kind, name=name))


async def delete(client: Any, kind: str, name: str, *, dry_run: bool = False) -> Any:
    request = config_pb2.DeleteDocumentRequest(kind=kind, name=name, dry_run=dry_run)
    return await client.call(client.documents.DeleteDocument, request)


async def governance_changes(tail: LogTail) -> list[Any]:
    """The document changes appended to the governance topic since the tail was made."""
    found = []
    for record in await tail.read_all():
        envelope = envelope_of(record)
        carried = None if envelope is None else document_of(envelope.data)
        if carried is not None:
            found.append(carried[1])
    return found


async def test_the_example_configuration_applies_once_and_then_changes_nothing(stack: Stack) -> None:
    admin = stack.keys.admin()
    tail = await LogTail.of(stack.log, GOVERNANCE.name)
    async with folding(stack):
        code, out, err = await fedsched(stack, admin, "apply", "-f", str(EXAMPLES))
        assert code == 0, err
        documents = example_documents()
        assert len(out.splitlines()) == len(documents) == 12
        assert "tenant/team-a created" in out and "budget/team-a-monthly created" in out, out
        changes = await governance_changes(tail)
        assert len(changes) == 12
        assert {c.author for c in changes} == {"root@example.com"} and {c.generation for c in changes} == {1}

        code, out, err = await fedsched(stack, admin, "apply", "-f", str(EXAMPLES))
        assert code == 0, err
        assert set(line.rsplit(" ", 1)[1] for line in out.splitlines()) == {"unchanged"}, out
        assert len(await governance_changes(tail)) == 12  # nothing more was published

        # What get prints in YAML applies again as it is, changing nothing.
        code, printed, err = await fedsched(stack, admin, "get", "tenants", "-o", "yaml")
        assert code == 0, err
        tenants = [d for d in yaml.safe_load_all(printed) if d]
        assert {"serving", "team-a", "team-b"} <= {t["metadata"]["name"] for t in tenants}  # and other tests'
        team_b = next(t for t in tenants if t["metadata"]["name"] == "team-b")
        assert team_b["spec"]["hot_model_cap_milli"] == 8000 and team_b["metadata"]["labels"] == {
            "cost-center": "cc-4420"
        }
        code, out, err = await fedsched(stack, admin, "apply", "-f", "-", stdin=printed)
        assert code == 0 and out.count("unchanged") == len(out.splitlines()) == len(tenants), (out, err)

        # diff shows the change before it is made; apply makes it, once, recording what changed.
        changed = [d for d in documents if d["metadata"]["name"] == "team-a" and d["kind"] == "Tenant"]
        changed[0]["spec"]["weight"] = 5
        text = yaml.safe_dump(changed[0])
        code, out, err = await fedsched(stack, admin, "diff", "-f", "-", stdin=text)
        assert code == 1 and "tenant/team-a: configured (generation 1 -> 2)" in out and "spec.weight: 2 -> 5" in out
        client = stack.client(stack.keys.hs(roles=["viewer"], tenants=["team-a"]))
        got = await client.call(
            client.documents.GetDocuments, config_pb2.GetDocumentsRequest(kind="Tenant", name="team-a")
        )
        assert json.loads(got.documents[0].document)["spec"]["weight"] == 2  # the diff changed nothing
        code, out, err = await fedsched(stack, admin, "apply", "-f", "-", stdin=text)
        assert code == 0 and out.strip() == "tenant/team-a configured", (out, err)
        last = (await governance_changes(tail))[-1]
        assert (last.name, last.generation, [(c.path, c.before, c.after) for c in last.changes]) == (
            "team-a",
            2,
            [("spec.weight", "2", "5")],
        )
        got = await client.call(
            client.documents.GetDocuments, config_pb2.GetDocumentsRequest(kind="Tenant", name="team-a")
        )
        assert got.documents[0].generation == 2 and got.documents[0].author == "root@example.com"


async def test_viewers_submitters_and_tokens_of_other_tenants_change_nothing(stack: Stack) -> None:
    documents = [d for d in example_documents() if d["kind"] in ("Cohort", "Tenant")]
    tail = await LogTail.of(stack.log, GOVERNANCE.name)
    for roles in (["viewer"], ["submitter"], ["operator"], ["auditor"]):
        client = stack.client(stack.keys.hs(roles=roles, tenants=["*"]))
        with pytest.raises(CallError) as refused:
            await client.call(client.documents.ApplyDocuments, request(documents))
        assert refused.value.code == "PERMISSION_DENIED"
        with pytest.raises(CallError) as refused:
            await client.call(
                client.documents.DeleteDocument, config_pb2.DeleteDocumentRequest(kind="Tenant", name="team-a")
            )
        assert refused.value.code == "PERMISSION_DENIED"
    # An administrator of team-b: team-b's own documents, never another tenant's nor the fleet's.
    scoped = stack.client(stack.keys.hs(roles=["admin"], tenants=["team-b"], sub="bob@example.com"))
    team_a = next(d for d in documents if d["metadata"]["name"] == "team-a")
    cohort = next(d for d in documents if d["kind"] == "Cohort")
    for document, field in ((team_a, "documents[0]"), (cohort, "documents[0]")):
        with pytest.raises(CallError) as refused:
            await scoped.call(scoped.documents.ApplyDocuments, request([document]))
        assert refused.value.code == "PERMISSION_DENIED" and refused.value.field == field
    assert await governance_changes(tail) == []
    # What a scoped viewer sees: its tenant's documents and the fleet's, not team-a's.
    viewer = stack.client(stack.keys.hs(roles=["viewer"], tenants=["team-b"]))
    got = await get(viewer)
    names = {(d.kind, d.name) for d in got.documents}
    assert ("Tenant", "team-b") in names and ("Cohort", "research") in names and ("Policy", "default") in names
    assert not any(name.startswith("team-a") for _, name in names), names


async def test_a_refused_request_names_the_document_and_field_and_publishes_nothing(stack: Stack) -> None:
    admin = stack.client(stack.keys.admin())
    tail = await LogTail.of(stack.log, GOVERNANCE.name)
    fine = {"api_version": "fedsched.io/v1", "kind": "Cohort", "metadata": {"name": "fine"}, "spec": {}}
    cases = [
        ({"api_version": "fedsched.io/v1", "kind": "Tenant", "metadata": {"name": "x"}, "spec": {"cohort": "nowhere"}},
         "documents[1].spec.cohort", "no Cohort named 'nowhere'"),
        ({"api_version": "fedsched.io/v1", "kind": "Budget", "metadata": {"name": "b"},
          "spec": {"tenant": "x", "window": "month", "timezone": "Mars/Olympus", "gpu_hours": 5}},
         "documents[1].spec.timezone", "no time zone named 'Mars/Olympus'"),
        ({"api_version": "fedsched.io/v1", "kind": "Policy", "metadata": {"name": "other"}, "spec": {}},
         "documents[1].metadata.name", "the Policy 'default' is in force"),
        ({"api_version": "fedsched.io/v1", "kind": "Quota", "metadata": {"name": "team-a-again"},
          "spec": {"tenant": "team-a", "lines": []}},
         "documents[1].spec.queue", "the Quota 'team-a-default' sets queue team-a/default already"),
        ({"api_version": "fedsched.io/v1", "kind": "Tenant", "metadata": {"name": "x"}, "spec": {"weight": "2"}},
         "documents[1].spec.weight", "valid integer"),
    ]  # fmt: skip
    async with folding(stack):
        await admin.call(admin.documents.ApplyDocuments, request(example_documents()))
        tail = await LogTail.of(stack.log, GOVERNANCE.name)
        for document, field, reason in cases:
            with pytest.raises(CallError) as refused:
                await admin.call(admin.documents.ApplyDocuments, request([fine, document]))
            assert refused.value.code == "INVALID_ARGUMENT", document
            assert refused.value.field == field and reason in refused.value.message, refused.value.message
        assert await governance_changes(tail) == []  # not even the valid cohort of those requests


async def test_a_deleted_document_takes_its_settings_out_and_a_used_cohort_stays(stack: Stack) -> None:
    admin = stack.client(stack.keys.admin())
    async with folding(stack):
        await admin.call(admin.documents.ApplyDocuments, request(example_documents()))
        with pytest.raises(CallError) as refused:
            await admin.call(
                admin.documents.DeleteDocument, config_pb2.DeleteDocumentRequest(kind="Cohort", name="research")
            )
        assert refused.value.code == "FAILED_PRECONDITION" and "team-a" in refused.value.message
        tail = await LogTail.of(stack.log, GOVERNANCE.name)
        dry = await admin.call(
            admin.documents.DeleteDocument,
            config_pb2.DeleteDocumentRequest(kind="Budget", name="team-b-weekly", dry_run=True),
        )
        assert dry.result.action == "deleted" and await governance_changes(tail) == []
        gone = await admin.call(
            admin.documents.DeleteDocument, config_pb2.DeleteDocumentRequest(kind="Budget", name="team-b-weekly")
        )
        (change,) = await governance_changes(tail)
        assert change.deleted and change.generation == gone.result.generation
        left = await get(admin, "Budget")
        assert "team-b-weekly" not in {d.name for d in left.documents}
        with pytest.raises(CallError) as missing:
            await admin.call(
                admin.documents.DeleteDocument, config_pb2.DeleteDocumentRequest(kind="Budget", name="team-b-weekly")
            )
        assert missing.value.code == "NOT_FOUND"
        # Applied again, it goes on from the generation it was deleted at.
        again = await admin.call(admin.documents.ApplyDocuments, request(example_documents()))
        budget = next(r for r in again.results if r.name == "team-b-weekly")
        assert (budget.action, budget.generation) == ("created", gone.result.generation + 1)


async def test_a_job_that_names_no_priority_class_gets_its_tenants_default(stack: Stack) -> None:
    admin = stack.client(stack.keys.admin())
    async with folding(stack):
        await admin.call(admin.documents.ApplyDocuments, request(example_documents()))  # team-b: best_effort
    submitter = stack.client(stack.keys.hs(tenants=["team-b"], roles=["submitter"]))
    tail = await LogTail.of(stack.log, JOBS.name)
    named = spec(tenant="team-b", name="named", priority_class="critical_training")
    for job_spec in (spec(tenant="team-b", name="unnamed"), named):
        request_ = jobs_pb2.SubmitJobRequest(spec=job_spec, client_request_id=new_request_id())
        await submitter.call(submitter.jobs.SubmitJob, request_)
    records = await tail.wait_for(lambda r: True, count=2)
    events = [envelope_of(r).data for r in records]
    classes = {e.name: e.priority_class.value for e in events}  # type: ignore[union-attr]
    assert classes == {"unnamed": "best_effort", "named": "critical_training"}  # the default, and its own


async def test_fedsched_budget_shows_each_budget_in_its_window(stack: Stack) -> None:
    admin = stack.keys.admin()
    async with folding(stack):
        client = stack.client(admin)
        await client.call(client.documents.ApplyDocuments, request(example_documents()))
    code, out, err = await fedsched(stack, admin, "budget", "--json")
    assert code == 0, err
    budgets = {b["name"]: b for b in json.loads(out)["budgets"]}
    monthly = budgets["team-a-monthly"]
    assert (monthly["mode"], monthly["gpu_hours"], monthly["window"], monthly["tenants"]) == (
        "hard",
        500,
        "month",
        ["team-a"],
    )
    assert int(monthly["window_start_ms"]) <= int(json.loads(out)["now_ms"]) < int(monthly["window_end_ms"])
    research = budgets["research-monthly"]
    assert research["cohort"] == "research" and set(research["tenants"]) >= {"team-a", "team-b"}
    code, table_out, err = await fedsched(stack, admin, "budget")
    assert code == 0 and "team-a-monthly" in table_out and "cohort research" in table_out, (table_out, err)
