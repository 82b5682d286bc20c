"""Fuzzed requests against ``fedsched api`` running as its own process: the server never crashes and
every refusal of a malformed request is INVALID_ARGUMENT naming a field (never INTERNAL or UNKNOWN)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from services.api.pb import (
    governance_pb2,
    governance_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    resources_pb2,
    resources_pb2_grpc,
)
from services.api.validation import encode_page_token
from tests.api.conftest import RunningApi

pytestmark = [pytest.mark.property, pytest.mark.postgres]

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-5, 70)
TEXT = st.text(max_size=300)
IDS = st.one_of(st.sampled_from(["team-a", "", "default", "A", "-x", "a" * 129, "x.y_z-1"]), st.text(max_size=140))
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
}
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def json_values() -> st.SearchStrategy[str]:
    import json

    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
    tree = st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4))
    return st.one_of(st.just(""), st.text(max_size=50), tree.map(json.dumps))


resources = st.fixed_dictionaries(
    {},
    optional={
        "cpu_milli": st.one_of(SMALL, INT64),
        "memory_mib": st.one_of(SMALL, INT64),
        "gpus": st.one_of(SMALL, INT32),
        "gpu_milli": st.one_of(st.integers(0, 1200), INT32),
        "npus": SMALL,
        "gpu_models": st.lists(st.one_of(st.just("A100-80G"), TEXT), max_size=40),
        "min_gpu_memory_mib": INT64,
    },
).map(lambda d: jobs_pb2.Resources(**d))

specs = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fuzz"), TEXT), "tenant": IDS},
    optional={
        "project": IDS,
        "queue": IDS,
        "kind": st.one_of(st.sampled_from(["training", "batch", "inference"]), TEXT),
        "priority_class": st.one_of(st.sampled_from(["standard", "best_effort"]), TEXT),
        "replicas": st.one_of(SMALL, INT32),
        "gang": st.booleans(),
        "resources": resources,
        "interconnect": st.one_of(st.sampled_from(["none", "nvlink"]), TEXT),
        "datasets": st.lists(IDS, max_size=70),
        "tolerations": st.lists(
            st.builds(jobs_pb2.Toleration, key=TEXT, value=TEXT, effect=st.one_of(st.just("NoSchedule"), TEXT)),
            max_size=34,
        ),
        "preemptible": st.booleans(),
        "expected_runtime_s": st.one_of(SMALL, INT64),
        "max_runtime_s": st.one_of(SMALL, INT64),
        "inference": st.builds(jobs_pb2.InferenceSpec, min_replicas=SMALL, spread_clusters=SMALL),
        "template_json": json_values(),
        "labels": st.dictionaries(TEXT, TEXT, max_size=70),
    },
).map(lambda d: jobs_pb2.JobSpec(**d))


def field_of(error: grpc.RpcError) -> str | None:
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "fedsched-field":
            return str(value)
    return None


def check(call: object) -> None:
    """Run a call; a refusal must be an allowed code, and INVALID_ARGUMENT must name a field."""
    try:
        call()  # type: ignore[operator]
        event("OK")
    except grpc.RpcError as error:
        code = error.code()  # type: ignore[attr-defined]
        event(f"{code.name} {field_of(error)}")
        assert code in ALLOWED, (code, error.details())  # type: ignore[attr-defined]
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            assert field_of(error), error.details()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def channel(api_process: RunningApi) -> grpc.Channel:
    with grpc.insecure_channel(api_process.address) as channel:
        yield channel


@pytest.fixture(scope="module")
def metadata(api_process: RunningApi) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_process.keys.admin()}"),)


def test_fuzzed_submissions_are_accepted_or_refused_naming_the_field(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], api_process: RunningApi
) -> None:
    stub = jobs_pb2_grpc.JobServiceStub(channel)

    @FUZZ
    @given(spec=specs, request_id=st.one_of(st.just(""), IDS, st.text(max_size=200)))
    def submit(spec: jobs_pb2.JobSpec, request_id: str) -> None:
        request = jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=request_id)
        check(lambda: stub.SubmitJob(request, metadata=metadata, timeout=30))

    submit()
    assert_alive(channel, api_process)


def test_fuzzed_reads_and_writes_of_every_service_never_fail_inside(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], api_process: RunningApi
) -> None:
    jobs = jobs_pb2_grpc.JobServiceStub(channel)
    resources_stub = resources_pb2_grpc.ResourceServiceStub(channel)
    quota = quota_pb2_grpc.QuotaServiceStub(channel)
    requests = st.one_of(
        st.builds(lambda j: (jobs.GetJob, jobs_pb2.GetJobRequest(job_id=j)), IDS),
        st.builds(lambda j: (jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=j)), IDS),
        st.builds(
            lambda j, r, c: (jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=j, reason=r, client_request_id=c)),
            IDS,
            TEXT,
            TEXT,
        ),
        st.builds(
            lambda t, s, n, p: (
                jobs.ListJobs,
                jobs_pb2.ListJobsRequest(tenant=t, statuses=s, page_size=n, page_token=p),
            ),
            IDS,
            st.lists(st.one_of(st.just("queued"), TEXT), max_size=12),
            st.one_of(SMALL, INT32),
            st.one_of(st.just(""), TEXT),
        ),
        st.builds(
            lambda c, m, p: (
                resources_stub.ListNodes,
                resources_pb2.ListNodesRequest(cluster=c, gpu_model=m, page_token=p),
            ),
            IDS,
            TEXT,
            TEXT,
        ),
        st.builds(lambda c: (resources_stub.GetCapacity, resources_pb2.GetCapacityRequest(cluster=c)), IDS),
        st.builds(lambda t, q: (quota.GetQuota, quota_pb2.GetQuotaRequest(tenant=t, queue=q)), IDS, IDS),
        st.builds(
            lambda t, lines: (quota.SetQuota, quota_pb2.SetQuotaRequest(tenant=t, lines=lines)),
            IDS,
            st.lists(
                st.builds(
                    quota_pb2.QuotaLine, resource=st.one_of(st.just("gpu"), TEXT), gpu_model=TEXT, guaranteed=INT64
                ),
                max_size=66,
            ),
        ),
        st.builds(
            lambda t, r, a, s, e, n, j: (
                quota.RequestQuota,
                quota_pb2.RequestQuotaRequest(
                    tenant=t, resource=r, amount=a, period_start_ms=s, period_end_ms=e, period_ms=n, justification=j
                ),
            ),
            IDS,
            st.one_of(st.just("gpu"), TEXT),
            INT64,
            INT64,
            st.one_of(st.just(0), INT64),
            st.one_of(st.just(0), INT64),
            TEXT,
        ),
        st.builds(
            lambda r, a, n: (
                quota.DecideQuotaRequest,
                quota_pb2.DecideQuotaRequestRequest(request_id=r, approve=a, approved_amount=n),
            ),
            IDS,
            st.booleans(),
            INT64,
        ),
    )

    call_each(requests, metadata)
    assert_alive(channel, api_process)


def call_each(requests: st.SearchStrategy[tuple[object, object]], metadata: tuple[tuple[str, str], ...]) -> None:
    """Fuzz: each drawn (method, request) is answered or refused with an allowed code (``check``)."""

    @FUZZ
    @given(item=requests)
    def call(item: tuple[object, object]) -> None:
        method, request = item
        check(lambda: method(request, metadata=metadata, timeout=30))  # type: ignore[operator]

    call()


def tokens(query: dict[str, str]) -> st.SearchStrategy[str]:
    """Page tokens as a client could forge them for ``query`` (the list's filters all empty), holding any
    key, beside text that is no token at all."""
    keys = st.lists(st.one_of(INT64, st.text(max_size=20), st.booleans()), min_size=1, max_size=2)
    return st.one_of(st.just(""), TEXT, st.builds(lambda after: encode_page_token(query, after), keys))


def test_fuzzed_governance_reads_never_fail_inside(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], api_process: RunningApi
) -> None:
    governance = governance_pb2_grpc.GovernanceServiceStub(channel)
    quota = quota_pb2_grpc.QuotaServiceStub(channel)
    requests = st.one_of(
        st.builds(
            lambda n, u, t: (governance.GetReport, governance_pb2.GetReportRequest(period_ms=n, until_ms=u, tenant=t)),
            st.one_of(st.just(86_400_000), INT64),
            st.one_of(st.none(), INT64),
            st.one_of(st.just(""), IDS),
        ),
        st.builds(
            lambda t, n, p: (
                governance.ListFindings,
                governance_pb2.ListFindingsRequest(tenant=t, page_size=n, page_token=p),
            ),
            st.one_of(st.just(""), IDS),
            st.one_of(SMALL, INT32),
            tokens({"tenant": ""}),
        ),
        st.builds(
            lambda t, s, n, p: (
                quota.ListQuotaRequests,
                quota_pb2.ListQuotaRequestsRequest(tenant=t, status=s, page_size=n, page_token=p),
            ),
            st.one_of(st.just(""), IDS),
            st.one_of(st.sampled_from(["", "pending", "approved"]), TEXT),
            st.one_of(SMALL, INT32),
            tokens({"tenant": "", "status": ""}),
        ),
    )

    call_each(requests, metadata)
    assert_alive(channel, api_process)


def test_random_bytes_and_oversized_messages_are_refused_before_the_handler(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], api_process: RunningApi
) -> None:
    raw = channel.unary_unary("/fedsched.v1.JobService/SubmitJob")

    @FUZZ
    @given(data=st.binary(max_size=512))
    def send(data: bytes) -> None:
        check(lambda: raw(data, metadata=metadata, timeout=30))

    send()
    with pytest.raises(grpc.RpcError) as caught:
        raw(b"\x0a\x03\x0a\x01" + b"\xff" * 20, metadata=metadata, timeout=30)
    assert (caught.value.code(), field_of(caught.value)) == (grpc.StatusCode.INVALID_ARGUMENT, "request")  # type: ignore[attr-defined]
    huge = jobs_pb2.SubmitJobRequest(spec=jobs_pb2.JobSpec(name="x" * (5 * 1024 * 1024), tenant="team-a"))
    with pytest.raises(grpc.RpcError) as caught:
        jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(huge, metadata=metadata, timeout=30)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert_alive(channel, api_process)


def assert_alive(channel: grpc.Channel, api_process: RunningApi) -> None:
    assert api_process.process.poll() is None
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
