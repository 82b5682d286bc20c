"""How a run's failures read when the kubelet restarts its containers (a service) and when a GPU it held
failed: a restart is not a failure, a crash loop is (with its last termination's reason); a container
failure on a GPU the node reports failed is the infrastructure's ``GpuFailure`` (plain dicts)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kubernetes import lifecycle, names, pods
from connectors.kubernetes.lifecycle import Failure, Outcome, Transition
from events.catalog.inventory import GpuHealthSample, NpuHealthSample
from events.catalog.jobs import JobKind
from events.catalog.lifecycle import FailureKind, failure_kind
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health
from events.wire.envelope import parse_time

from .builders import a_job, a_placement, container_status, pod_status, running, terminated

NOW = parse_time("2026-12-02T13:05:00Z")
MARGIN = 30_000


def service_pods() -> list[dict[str, Any]]:
    job = a_job("chat", kind=JobKind.INFERENCE, template={"image": "vllm:1", "port": 8000})
    return pods.render_pods(a_placement("chat", ("n0", "n1")), job, pods.RenderOptions(ClusterId("k8s-a")))


def restarted(restarts: int, state: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "state": state, "lastState": last, "restartCount": restarts, "ready": False}


def with_status(pod: dict[str, Any], status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {**pod, "status": status, "metadata": {**pod["metadata"], **meta}}


def state(pod: dict[str, Any], replica: int = 0, crash_restarts: int = 5) -> lifecycle.ReplicaState:
    return lifecycle.replica_state(pod, replica, NOW, MARGIN, crash_restarts)


BACKOFF = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting failed container"}}


def test_a_service_container_restarting_a_few_times_is_no_failure() -> None:
    pod = with_status(service_pods()[0], pod_status("Running", restarted(2, BACKOFF, terminated(1, "Error"))))
    now = state(pod)
    assert now.failure is None and now.started and not now.stopped


def test_a_crash_looping_service_container_fails_its_replica_with_the_last_termination() -> None:
    pod = with_status(service_pods()[0], pod_status("Running", restarted(5, BACKOFF, terminated(3, "Error", "boom"))))
    failure = state(pod).failure
    assert failure is not None
    assert (failure.reason, failure.exit_code, failure.node) == (ReasonCode.NON_ZERO_EXIT, 3, "n0")
    assert "container main crash-looping: restarted 5 times, last Error with exit code 3: boom" in failure.message
    oom = with_status(service_pods()[0], pod_status("Running", restarted(7, BACKOFF, terminated(137, "OOMKilled"))))
    assert state(oom).failure == Failure(
        ReasonCode.OUT_OF_MEMORY,
        "replica 0 (pod chat-1-0 on node n0): container main crash-looping: restarted 7 times, last OOMKilled "
        "with exit code 137",
        137,
        "n0",
        (0,),
    )
    assert state(pod, crash_restarts=6).failure is None  # the threshold is the connector's setting
    init = pod_status("Pending")
    init["initContainerStatuses"] = [{**restarted(5, BACKOFF, terminated(1, "Error")), "name": "fetch-weights"}]
    failure = state(with_status(service_pods()[0], init)).failure  # Init:CrashLoopBackOff
    assert failure is not None and "container fetch-weights crash-looping" in failure.message


def test_the_crash_loop_fails_the_run_once_every_replica_has_stopped() -> None:
    crashing, healthy = service_pods()
    crashing = with_status(crashing, pod_status("Running", restarted(5, BACKOFF, terminated(1, "Error"))))
    healthy = with_status(healthy, pod_status("Running", {"name": "main", "state": running(), "restartCount": 0}))
    states = [state(crashing, 0), state(healthy, 1)]
    assert lifecycle.failing(states)
    assert [o.transition for o in lifecycle.decide(states, 2, frozenset({Transition.STARTED}))] == []
    gone = [lifecycle.removed(s) for s in states]
    (outcome,) = lifecycle.decide(gone, 2, frozenset({Transition.STARTED}))
    assert outcome.transition is Transition.FAILED and outcome.failure is not None
    assert outcome.failure.reason is ReasonCode.NON_ZERO_EXIT and outcome.failure.gpu_indices == (0,)


def test_a_restarting_pod_between_two_runs_of_its_container_has_not_stopped_until_it_is_deleted() -> None:
    between = with_status(service_pods()[0], pod_status("Running", restarted(1, terminated(1, "Error"), {})))
    assert not state(between).stopped
    deleted = with_status(between, between["status"], deletionTimestamp="2026-12-02T13:06:00Z")
    assert state(deleted).stopped


def failed_on_gpus(reason: ReasonCode, *gpus: int) -> Outcome:
    return Outcome(Transition.FAILED, Failure(reason, "replica 0: exit code 1", 1, "n0", gpus))


def sample(index: int, health: Health, xid: int | None = None) -> GpuHealthSample:
    return GpuHealthSample(index=index, health=health, xid_errors=1 if xid else 0, last_xid=xid)


def test_a_container_failure_on_a_gpu_reported_failed_is_the_infrastructures_gpu_failure() -> None:
    health = (sample(0, Health.OK), sample(1, Health.FAILED, 79), sample(2, Health.FAILED))
    blamed = lifecycle.blame_devices(failed_on_gpus(ReasonCode.NON_ZERO_EXIT, 0, 1), health)
    assert blamed.failure is not None and blamed.failure.reason is ReasonCode.GPU_FAILURE
    assert (
        blamed.failure.message == "replica 0: exit code 1; node n0 reports GPU 1 (XID 79) failed, held by this replica"
    )
    event = lifecycle.to_event(blamed, lifecycle.RunKey("j", 1), ClusterId("k8s-a"), 1)  # type: ignore[arg-type]
    assert event.reason is ReasonCode.GPU_FAILURE and event.exit_code == 1  # type: ignore[attr-defined]


def test_no_blame_for_a_gpu_not_held_a_degraded_one_or_a_failure_a_gpu_does_not_explain() -> None:
    health = (sample(0, Health.DEGRADED, 13), sample(3, Health.FAILED, 79))
    for outcome in (
        failed_on_gpus(ReasonCode.NON_ZERO_EXIT, 0, 1),  # GPU 3 is not its; GPU 0 only degraded
        failed_on_gpus(ReasonCode.OUT_OF_MEMORY, 3),  # the host's memory, not the GPU
        failed_on_gpus(ReasonCode.NODE_LOST, 3),  # already the infrastructure's
    ):
        assert lifecycle.blame_devices(outcome, health) == outcome
    assert (
        lifecycle.blame_devices(failed_on_gpus(ReasonCode.UNKNOWN, 3), health).failure.reason is ReasonCode.GPU_FAILURE
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "cause", ["DeletionByTaintManager", "TerminationByKubelet", "PreemptionByScheduler", "EvictionByEvictionAPI"]
)
def test_a_pod_kubernetes_took_away_is_an_infrastructure_failure_fedsched_retries(cause: str) -> None:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": cause, "message": "by the cluster"}
    pod = with_status(
        service_pods()[0], pod_status("Running", conditions=[condition]), deletionTimestamp="2026-12-02T13:06:00Z"
    )
    failure = state(pod).failure
    assert failure is not None and failure_kind(failure.reason) is FailureKind.INFRASTRUCTURE
    assert f"{cause}: by the cluster" in failure.message


def test_a_container_failure_on_an_npu_reported_failed_is_the_infrastructures_npu_failure() -> None:
    failed = Outcome(
        Transition.FAILED, Failure(ReasonCode.NON_ZERO_EXIT, "replica 0: exit code 1", 1, "n0", (), (2, 3))
    )
    npus = (
        NpuHealthSample(index=2, health=Health.OK, errors=0),
        NpuHealthSample(index=3, health=Health.FAILED, errors=4, last_error_code=0x80E18402),
        NpuHealthSample(index=5, health=Health.FAILED, errors=1),  # not held
    )
    blamed = lifecycle.blame_devices(failed, (), npus)
    assert blamed.failure is not None and blamed.failure.reason is ReasonCode.NPU_FAILURE
    assert blamed.failure.message.endswith("node n0 reports NPU 3 (error 0x80E18402) failed, held by this replica")
    healthy = (NpuHealthSample(index=3, health=Health.DEGRADED, errors=1),)
    assert lifecycle.blame_devices(failed, (), healthy) == failed


def test_a_failed_pod_names_the_npus_its_replica_held() -> None:
    pod = with_status(service_pods()[0], pod_status("Failed", container_status(**terminated(1, "Error"))))
    pod["metadata"]["annotations"][names.ANN_NPU_INDICES] = "2,3"
    failure = state(pod).failure
    assert failure is not None and failure.npu_indices == (2, 3)
