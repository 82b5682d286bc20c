"""A job whose pod template asks accelerators beyond its request, or a restart policy its kind cannot
have, is refused at submission (``services.api.templates``), naming the container and the resource, before
it waits for a placement the connector would then fail."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog.jobs import JobKind, JobSubmitted
from events.catalog.types import Resources
from services.api.errors import InvalidArgument
from services.api.templates import fits_its_template


def job(template: dict[str, Any], kind: JobKind = JobKind.TRAINING, **resources: int) -> JobSubmitted:
    return JobSubmitted(
        job_id="j1",
        name="j1",
        tenant="team-a",
        kind=kind,
        resources=Resources(cpu_milli=1000, **resources),
        template=template,
    )


def containers(*items: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(items), **spec}}


def limits(name: str, **resources: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "i",
        "resources": {"limits": {k.replace("_", "/", 1): v for k, v in resources.items()}},
    }


def test_a_sidecar_asking_a_gpu_is_refused_naming_it() -> None:
    with pytest.raises(InvalidArgument) as refused:
        fits_its_template(job(containers(limits("main"), limits("sidecar", **{"nvidia.com_gpu": "1"})), gpus=2))
    assert refused.value.field == "template_json"
    assert "template.spec.containers[1] (sidecar) limits nvidia.com/gpu: 1, beyond the job's request" in str(
        refused.value
    )


def test_the_first_container_may_restate_the_jobs_request_but_not_exceed_it() -> None:
    assert fits_its_template(job(containers(limits("main", **{"nvidia.com_gpu": 2})), gpus=2))
    assert fits_its_template(job(containers(limits("main", **{"huawei.com_Ascend910": "4"})), npus=4))
    for asked in ({"nvidia.com_gpu": 4}, {"amd.com_gpu": "1"}):
        with pytest.raises(InvalidArgument, match="containers\\[0\\] \\(main\\) limits"):
            fits_its_template(
                job(containers(limits("main", **asked)), **({"gpus": 2} if "nvidia.com_gpu" in asked else {}))
            )


def test_a_restart_policy_retrying_what_fedsched_retries_is_refused_but_a_services_is_kept() -> None:
    with pytest.raises(InvalidArgument, match="restartPolicy 'OnFailure'"):
        fits_its_template(job(containers(limits("main"), restartPolicy="OnFailure"), gpus=1))
    assert fits_its_template(job(containers(limits("main"), restartPolicy="OnFailure"), JobKind.INFERENCE, gpus=1))


def test_a_shorthand_template_names_nothing_to_refuse() -> None:
    assert fits_its_template(job({"image": "i", "port": 80}, gpus=1))
