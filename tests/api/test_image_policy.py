"""A tenant's image policy (issue 22, item 5) through the API: the ``Tenant`` document's ``images`` applies
with ``fedsched apply``, round-trips through ``get -o yaml`` unchanged, is carried by ``TenantRegistered``;
a submission whose template names an image from a registry the tenant does not allow is refused naming
the field and the registry; a template naming no image, or an allowed one, is accepted."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from events.catalog.governance import TenantRegistered
from events.catalog.topics import GOVERNANCE, JOBS
from services.api.client import CallError
from services.api.pb import jobs_pb2
from tests.api.conftest import Stack
from tests.api.support import LogTail, envelope_of, new_request_id, spec
from tests.api.test_config_documents import fedsched, folding, request

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(300)]

TENANT = "team-img"
DOCUMENT: dict[str, Any] = {
    "api_version": "fedsched.io/v1",
    "kind": "Tenant",
    "metadata": {"name": TENANT},
    "spec": {
        "weight": 1,
        "images": {"registries": ["registry.example.com/team-img", "nvcr.io"], "pull_secrets": ["team-img-pull"]},
    },
}


async def submit(stack: Stack, template: dict[str, Any]) -> jobs_pb2.SubmitJobResponse:
    client = stack.client(stack.keys.hs(tenants=[TENANT], roles=["submitter"]))
    request = jobs_pb2.SubmitJobRequest(
        spec=spec(tenant=TENANT, template_json=json.dumps(template)), client_request_id=new_request_id()
    )
    return await client.call(client.jobs.SubmitJob, request)


async def test_the_image_policy_applies_round_trips_and_is_recorded(stack: Stack) -> None:
    admin = stack.keys.admin()
    tail = await LogTail.of(stack.log, GOVERNANCE.name)
    async with folding(stack):
        code, out, err = await fedsched(stack, admin, "apply", "-f", "-", stdin=yaml.safe_dump(DOCUMENT))
        assert code == 0 and out.strip() in (f"tenant/{TENANT} created", f"tenant/{TENANT} unchanged"), (out, err)
        code, printed, err = await fedsched(stack, admin, "get", "tenant", TENANT, "-o", "yaml")
        assert code == 0, err
        shown = yaml.safe_load(printed)
        assert shown["spec"]["images"] == DOCUMENT["spec"]["images"]
        code, out, err = await fedsched(stack, admin, "apply", "-f", "-", stdin=printed)
        assert code == 0 and out.strip() == f"tenant/{TENANT} unchanged", (out, err)
    records = await tail.read_all()
    events = [e.data for e in map(envelope_of, records) if e is not None and isinstance(e.data, TenantRegistered)]
    mine = [e for e in events if e.tenant == TENANT]
    assert mine and mine[-1].images is not None
    assert mine[-1].images.registries == ("registry.example.com/team-img", "nvcr.io")
    assert mine[-1].images.pull_secrets == ("team-img-pull",)


@pytest.mark.parametrize(
    ("template", "field", "words"),
    [
        (
            {"image": "registry.example.com.evil.io/team-img/x:1"},
            "template_json.image",
            "comes from registry.example.com.evil.io/team-img/x, which tenant team-img does not allow",
        ),
        (
            {"image": "registry.example.com:5000/team-img/x"},
            "template_json.image",
            "registry.example.com:5000/team-img/x, which tenant team-img does not allow",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3"},
                        {"name": "s", "image": "ubuntu"},
                    ]
                }
            },
            "template_json.spec.containers[1].image",
            "comes from docker.io/library/ubuntu",
        ),
        (
            {
                "spec": {
                    "initContainers": [{"name": "i", "image": "localhost/x"}],
                    "containers": [{"name": "m", "image": "nvcr.io/x"}],
                }
            },
            "template_json.spec.initContainers[0].image",
            "comes from localhost/x",
        ),
        ({"image": "Not/A/Reference"}, "template_json.image", "invalid repository path component 'A'"),
    ],
)
async def test_an_image_from_a_registry_the_tenant_does_not_allow_is_refused_naming_the_field(
    stack: Stack, template: dict[str, Any], field: str, words: str
) -> None:
    admin = stack.client(stack.keys.admin())
    async with folding(stack):
        await admin.call(admin.documents.ApplyDocuments, request([DOCUMENT]))
    tail = await LogTail.of(stack.log, JOBS.name)
    with pytest.raises(CallError) as caught:
        await submit(stack, template)
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", field), caught.value.message
    assert words in caught.value.message
    assert await tail.read_all() == []  # nothing was published


async def test_an_allowed_image_or_none_is_accepted(stack: Stack) -> None:
    admin = stack.client(stack.keys.admin())
    async with folding(stack):
        await admin.call(admin.documents.ApplyDocuments, request([DOCUMENT]))
    for template in (
        {"image": "registry.example.com/team-img/trainer@sha256:" + "a" * 64},
        {"spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3"}]}},
        {"command": ["python", "train.py"]},  # the connector's default image: the connector checks it
    ):
        response = await submit(stack, template)
        assert response.job_id
