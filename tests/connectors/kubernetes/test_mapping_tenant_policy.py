"""Pure mapping of tenant policy: the quota lines a namespace's ResourceQuota and LimitRange come from, the
images a placement's pods may run, and the pull secrets they name."""

from __future__ import annotations

import pytest

from connectors.kubernetes import names, pods
from connectors.kubernetes.images import ImageRefused, checked, with_pull_secrets
from connectors.kubernetes.namespaces import Caps, ContainerDefaults, caps_of, limit_range, resource_quota
from connectors.kubernetes.tenants import TenantBook, TenantOptions
from events.catalog.governance import QuotaSet, TenantRegistered
from events.catalog.images import ImagePolicy
from events.catalog.types import ClusterId, QueueId, QuotaLine, ResourceKind, TenantId
from events.log import LogRecord

from .builders import a_job, a_placement

pytestmark = pytest.mark.timeout(10)

T = TenantId("team-a")
CPU, MEM, GPU, NPU = ResourceKind.CPU, ResourceKind.MEMORY, ResourceKind.GPU, ResourceKind.NPU


def line(resource: ResourceKind, guaranteed: int, limit: int | None, model: str | None = None) -> QuotaLine:
    return QuotaLine(resource=resource, guaranteed=guaranteed, limit=limit, gpu_model=model)


def test_the_tenant_wide_limits_cap_the_namespace_with_gpus_rounded_up() -> None:
    quotas = {
        QueueId("default"): (line(CPU, 32_000, 64_000), line(MEM, 131_072, 262_144), line(GPU, 4_000, 7_500)),
        QueueId("research"): (line(CPU, 8_000, 16_000),),  # bounds that queue's jobs only
    }
    assert caps_of(quotas) == Caps(cpu_milli=64_000, memory_mib=262_144, gpus=8)


def test_a_line_without_a_limit_or_of_one_model_caps_nothing_and_npus_over_every_model_are_capped() -> None:
    quotas = {
        QueueId("default"): (
            line(CPU, 32_000, None),  # borrows without bound: no cap
            line(GPU, 2_000, 4_000, "NVIDIA-H100-SXM5-80GB"),  # the device plugin's resource has no model
            line(NPU, 4, 8, "Ascend910B3"),
        )
    }
    assert caps_of(quotas) == Caps()
    assert caps_of({QueueId("default"): (line(NPU, 8, 16),)}) == Caps(npus=16)
    assert caps_of({QueueId("research"): (line(CPU, 1, 2),)}) == Caps()  # no tenant-wide quota


def test_the_resource_quota_caps_requests_only_and_is_none_when_nothing_is_capped() -> None:
    quota = resource_quota(T, "fedsched-team-a", Caps(64_000, 262_144, 8), ("nvidia.com/gpu",))
    assert quota is not None
    assert quota["spec"] == {
        "hard": {"requests.cpu": "64000m", "requests.memory": "262144Mi", "requests.nvidia.com/gpu": "8"}
    }
    assert quota["metadata"]["name"] == "fedsched-quota" and quota["metadata"]["namespace"] == "fedsched-team-a"
    assert quota["metadata"]["labels"][names.MANAGED_BY] == "fedsched"
    both = resource_quota(T, "ns", Caps(gpus=2, npus=16), ("nvidia.com/gpu", "amd.com/gpu"), ("huawei.com/Ascend910",))
    assert both is not None and both["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "2",  # each vendor's resource alone, at the tenant's GPU limit
        "requests.amd.com/gpu": "2",
        "requests.huawei.com/Ascend910": "16",
    }
    assert resource_quota(T, "ns", Caps(), ("nvidia.com/gpu",), ("huawei.com/Ascend910",)) is None


def test_the_limit_range_defaults_requests_and_caps_each_container_at_the_tenants_limit() -> None:
    limits = limit_range(T, "ns", Caps(cpu_milli=64_000, memory_mib=50), ContainerDefaults(100, 256))
    (item,) = limits["spec"]["limits"]
    assert item == {
        "type": "Container",
        "defaultRequest": {"cpu": "100m", "memory": "50Mi"},  # never above the cap
        "max": {"cpu": "64000m", "memory": "50Mi"},
        "default": {"cpu": "64000m", "memory": "50Mi"},  # never below a request fedsched placed
    }
    (uncapped,) = limit_range(T, "ns", Caps(), ContainerDefaults(250, 512))["spec"]["limits"]
    assert uncapped == {"type": "Container", "defaultRequest": {"cpu": "250m", "memory": "512Mi"}}


OPTIONS = pods.RenderOptions(ClusterId("k8s-a"), default_image="busybox:1.36")


def rendered(**job: object) -> tuple[list[dict[str, object]], object]:
    submitted = a_job("j1", **job)  # type: ignore[arg-type]
    return pods.render_pods(a_placement("j1", ("n1", "n2")), submitted, OPTIONS), submitted


def test_pods_get_the_tenants_pull_secrets_after_their_own() -> None:
    manifests, job = rendered(
        template={"spec": {"containers": [{"name": "m", "image": "nvcr.io/x"}], "imagePullSecrets": [{"name": "own"}]}}
    )
    policy = ImagePolicy(registries=("nvcr.io",), pull_secrets=("team-pull", "own"))
    out = checked(manifests, job, policy, ClusterId("k8s-a"), TenantOptions())  # type: ignore[arg-type]
    assert [p["spec"]["imagePullSecrets"] for p in out] == [[{"name": "own"}, {"name": "team-pull"}]] * 2  # type: ignore[index]
    assert with_pull_secrets({"spec": {}}, ()) == {"spec": {}}


@pytest.mark.parametrize(
    ("template", "policy", "cluster", "words"),
    [
        (
            {
                "spec": {
                    "initContainers": [{"name": "fetch", "image": "evil.io/x"}],
                    "containers": [{"name": "m", "image": "nvcr.io/x"}],
                }
            },
            ("nvcr.io",),
            None,
            "container 'fetch': image 'evil.io/x' comes from evil.io/x, which tenant team-a does not allow",
        ),
        (
            {"command": ["true"]},
            ("nvcr.io",),
            None,
            "the connector's default image: image 'busybox:1.36' comes from docker.io/library/busybox",
        ),
        (
            {"image": "nvcr.io/x"},
            None,
            ("registry.example.com",),
            "container 'main': image 'nvcr.io/x' comes from nvcr.io/x, which cluster k8s-a does not allow",
        ),
    ],
)
def test_an_image_the_tenant_or_the_cluster_does_not_allow_is_refused_by_name(
    template: dict[str, object], policy: tuple[str, ...] | None, cluster: tuple[str, ...] | None, words: str
) -> None:
    manifests, job = rendered(template=template)
    with pytest.raises(ImageRefused) as refused:
        checked(
            manifests,
            job,
            ImagePolicy(registries=policy),
            ClusterId("k8s-a"),
            TenantOptions(allowed_registries=cluster),
        )  # type: ignore[arg-type]
    assert words in str(refused.value)


def test_the_book_keeps_the_last_word_per_tenant_and_queue_and_a_deleted_tenant_has_none() -> None:
    book = TenantBook(None)
    policy = ImagePolicy(registries=("nvcr.io",))
    assert book.take(TenantRegistered(tenant=T, display_name="A", images=policy)) == T
    book.take(QuotaSet(tenant=T, lines=(line(CPU, 1, 2),), set_by="ops"))
    book.take(QuotaSet(tenant=T, queue=QueueId("q"), lines=(line(CPU, 1, 1),), set_by="ops"))
    book.take(QuotaSet(tenant=T, lines=(line(CPU, 1, 4),), set_by="governance", request_id="r1"))
    assert book.images(T) == policy and book.quotas(T)[QueueId("default")] == (line(CPU, 1, 4),)
    book.take(QuotaSet(tenant=T, queue=QueueId("q"), lines=(), set_by="ops"))
    assert list(book.quotas(T)) == [QueueId("default")]
    book.take(TenantRegistered(tenant=T, display_name="A"))
    assert book.images(T) is None and book.tenants() == [T]


def test_a_record_the_book_has_read_already_changes_nothing() -> None:
    book = TenantBook(None)

    def record(offset: int) -> LogRecord:
        return LogRecord("fedsched.governance", 0, offset, None, b"", (), 0)

    newer = QuotaSet(tenant=T, lines=(line(CPU, 1, 8),), set_by="ops")
    older = QuotaSet(tenant=T, lines=(line(CPU, 1, 2),), set_by="ops")
    assert book.apply(record(5), newer) == T
    assert book.apply(record(3), older) is None  # the group redelivers what the start-up read took in
    assert book.apply(record(5), older) is None
    assert book.quotas(T)[QueueId("default")] == newer.lines


def test_a_cluster_registry_that_is_no_host_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"allowed_registries\[1\]: 'ubuntu' is not HOST"):
        TenantOptions(allowed_registries=("nvcr.io", "ubuntu"))
    with pytest.raises(ValueError, match="container_cpu_milli: must not be negative"):
        TenantOptions(container_cpu_milli=-1)
