"""Pod statuses of one run become lifecycle transitions, each once, with the container's reason."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kubernetes import lifecycle, names, pods
from connectors.kubernetes.lifecycle import Outcome, ReplicaState, Transition
from events.catalog.jobs import JobCancelled, JobFailed, JobStarted
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, JobId
from events.wire.envelope import parse_time

from .builders import (
    a_job,
    a_placement,
    container_status,
    pod_status,
    running,
    terminated,
    waiting,
)

NOW = parse_time("2026-12-02T13:05:00Z")
MARGIN = 30_000
CLUSTER = ClusterId("k8s-a")


def the_pods(replicas: int = 2) -> list[dict[str, Any]]:
    nodes = tuple(f"gpu-node-{i}" for i in range(replicas))
    return pods.render_pods(a_placement("job-1", nodes), a_job("job-1"), pods.RenderOptions(CLUSTER))


def with_status(pod: dict[str, Any], status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {**pod, "status": status, "metadata": {**pod["metadata"], **meta}}


def stopping(pod: dict[str, Any], why: str, deadline: str = "2026-12-02T13:04:00Z", grace: int = 30) -> dict[str, Any]:
    annotations = {**pod["metadata"]["annotations"], names.ANN_STOP: why, names.ANN_STOP_BY: "alice"}
    return {
        **pod,
        "metadata": {
            **pod["metadata"],
            "annotations": annotations,
            "deletionTimestamp": deadline,
            "deletionGracePeriodSeconds": grace,
        },
    }


def states(*pods_: dict[str, Any]) -> list[ReplicaState]:
    out = []
    for pod in pods_:
        ident = lifecycle.identify(pod)
        assert ident is not None
        out.append(lifecycle.replica_state(pod, ident.replica, NOW, MARGIN))
    return out


def decide(*pods_: dict[str, Any], reported: frozenset[Transition] = frozenset()) -> list[Outcome]:
    return lifecycle.decide(states(*pods_), 2, reported)


def kinds(outcomes: list[Outcome]) -> list[Transition]:
    return [o.transition for o in outcomes]


RUNNING = pod_status("Running", container_status(**running()))
SUCCEEDED = pod_status("Succeeded", container_status(**terminated(0)))


def test_a_pod_is_identified_by_our_labels_and_annotations() -> None:
    ident = lifecycle.identify(the_pods()[1])
    assert ident == lifecycle.PodIdentity(lifecycle.RunKey(JobId("job-1"), 1), 1, 2)
    assert lifecycle.identify({"metadata": {"name": "someone-elses"}}) is None


def test_nothing_happens_while_pods_are_pending() -> None:
    a, b = the_pods()
    assert decide(with_status(a, pod_status("Pending")), with_status(b, RUNNING)) == []


def test_the_job_starts_when_every_replica_runs_and_only_once() -> None:
    a, b = the_pods()
    assert kinds(decide(with_status(a, RUNNING))) == []  # one replica's pod not seen yet
    assert kinds(decide(with_status(a, RUNNING), with_status(b, RUNNING))) == [Transition.STARTED]
    assert decide(with_status(a, RUNNING), with_status(b, RUNNING), reported=frozenset({Transition.STARTED})) == []


def test_success_needs_every_replica_and_reports_started_first_if_it_was_missed() -> None:
    a, b = the_pods()
    assert kinds(decide(with_status(a, SUCCEEDED), with_status(b, RUNNING))) == [Transition.STARTED]
    assert kinds(decide(with_status(a, SUCCEEDED), with_status(b, SUCCEEDED))) == [
        Transition.STARTED,
        Transition.SUCCEEDED,
    ]


@pytest.mark.parametrize(
    ("status", "reason", "exit_code", "words"),
    [
        (pod_status("Failed", container_status(**terminated(3, "Error", "loss is NaN"))), "NonZeroExit", 3, "NaN"),
        (pod_status("Failed", container_status(**terminated(137, "OOMKilled"))), "OutOfMemory", 137, "OOMKilled"),
        (pod_status("Failed", reason="DeadlineExceeded"), "RuntimeExceeded", None, "DeadlineExceeded"),
        (pod_status("Failed", reason="Evicted"), "NodeFailure", None, "Evicted"),
        (pod_status("Pending", container_status(**waiting("InvalidImageName"))), "LaunchFailed", None, "Invalid"),
    ],
)
def test_a_failed_replica_fails_the_job_with_the_containers_reason(
    status: dict[str, Any], reason: str, exit_code: int | None, words: str
) -> None:
    a, b = the_pods()
    started = frozenset({Transition.STARTED})
    assert decide(with_status(a, RUNNING), with_status(b, status), reported=started) == []  # replica 0 still runs
    # The pod watcher deleted both (grace 0: the kubelet's final word); replica 1's reason stands.
    gone = {"deletionTimestamp": "2026-12-02T13:06:00Z", "deletionGracePeriodSeconds": 0}
    killed = stopping(with_status(a, RUNNING), "failed", grace=0)
    (outcome,) = decide(killed, with_status(b, status, **gone), reported=started)
    assert outcome.transition is Transition.FAILED and outcome.failure is not None
    assert (outcome.failure.reason, outcome.failure.exit_code) == (ReasonCode(reason), exit_code)
    assert words in outcome.failure.message and "replica 1" in outcome.failure.message
    event = lifecycle.to_event(outcome, lifecycle.RunKey(JobId("job-1"), 1), CLUSTER, 2)
    assert isinstance(event, JobFailed) and event.node == "gpu-node-1"


def test_a_pod_deleted_by_someone_else_fails_the_job_with_the_disruption_reason() -> None:
    a, b = the_pods()
    status = pod_status("Running", conditions=[{"type": "DisruptionTarget", "reason": "DeletionByTaintManager"}])
    deleted = with_status(b, status, deletionTimestamp="2026-12-02T13:06:00Z")
    assert kinds(decide(with_status(a, RUNNING), deleted)) == [Transition.STARTED]  # until replica 0 stops
    started, outcome = decide(
        stopping(with_status(a, RUNNING), "failed", grace=0),
        with_status(b, status, deletionTimestamp="2026-12-02T13:04:00Z"),
    )
    assert (started.transition, outcome.transition) == (Transition.STARTED, Transition.FAILED)
    assert outcome.failure is not None and outcome.failure.reason is ReasonCode.NODE_FAILURE


def test_a_stop_waits_for_every_pod_and_outranks_the_failures_it_causes() -> None:
    a, b = the_pods()
    killed = pod_status("Failed", container_status(**terminated(143, "Error")))
    still_running = stopping(with_status(b, RUNNING), "preempted", deadline="2026-12-02T13:06:00Z")
    started = frozenset({Transition.STARTED})
    assert decide(stopping(with_status(a, killed), "preempted"), still_running, reported=started) == []
    outcomes = decide(stopping(with_status(a, killed), "preempted"), stopping(with_status(b, RUNNING), "preempted"))
    assert kinds(outcomes) == [Transition.STARTED, Transition.PREEMPTED]


def test_a_pod_past_its_deadline_counts_as_stopped_without_any_kubelet() -> None:
    (a,) = the_pods(1)
    late = stopping(with_status(a, RUNNING), "cancelled", deadline="2026-12-02T13:04:29Z")
    early = stopping(with_status(a, RUNNING), "cancelled", deadline="2026-12-02T13:04:31Z")
    final = stopping(with_status(a, RUNNING), "cancelled", deadline="2026-12-02T13:10:00Z", grace=0)
    started = frozenset({Transition.STARTED})
    assert kinds(lifecycle.decide(states(late), 1, started)) == [Transition.CANCELLED]
    assert kinds(lifecycle.decide(states(early), 1, started)) == []
    (outcome,) = lifecycle.decide(states(final), 1, started)
    event = lifecycle.to_event(outcome, lifecycle.RunKey(JobId("job-1"), 1), CLUSTER, 1)
    assert isinstance(event, JobCancelled) and event.requester == "alice" and event.run == 1


def test_a_run_that_succeeded_before_the_stop_took_hold_stays_succeeded() -> None:
    a, b = the_pods()
    done = [stopping(with_status(p, SUCCEEDED), "preempted") for p in (a, b)]
    assert kinds(decide(*done, reported=frozenset({Transition.STARTED}))) == [Transition.SUCCEEDED]


def test_after_a_terminal_transition_nothing_more_is_reported() -> None:
    a, b = the_pods()
    failed = pod_status("Failed", container_status(**terminated(1)))
    assert decide(with_status(a, failed), with_status(b, failed), reported=frozenset({Transition.FAILED})) == []


def test_a_pod_removed_before_it_finished_is_a_failure_unless_it_was_being_stopped() -> None:
    a, b = the_pods()
    (gone_a, run_b) = states(with_status(a, RUNNING), with_status(b, RUNNING))
    assert lifecycle.decide([lifecycle.removed(gone_a), run_b], 2, frozenset({Transition.STARTED})) == []
    outcomes = lifecycle.decide(
        [lifecycle.removed(gone_a), lifecycle.removed(run_b)], 2, frozenset({Transition.STARTED})
    )
    assert kinds(outcomes) == [Transition.FAILED]
    (stopped_a, stopped_b) = states(*(stopping(with_status(p, RUNNING), "reclaimed", grace=30) for p in (a, b)))
    outcomes = lifecycle.decide([lifecycle.removed(stopped_a), lifecycle.removed(stopped_b)], 2, frozenset())
    assert kinds(outcomes) == [Transition.STARTED, Transition.RECLAIMED]


def test_reported_transitions_round_trip_through_the_annotation() -> None:
    (a,) = the_pods(1)
    a["metadata"]["annotations"][names.ANN_REPORTED] = "succeeded,started,bogus"
    reported = lifecycle.reported_of(a)
    assert reported == {Transition.STARTED, Transition.SUCCEEDED}
    assert lifecycle.format_reported(reported) == "started,succeeded"


def test_events_carry_ids_derived_from_job_run_and_transition() -> None:
    key = lifecycle.RunKey(JobId("job-1"), 3)
    assert lifecycle.event_id(CLUSTER, key, Transition.STARTED) == "k8s/k8s-a/job-1/3/started"
    event = lifecycle.to_event(Outcome(Transition.STARTED), key, CLUSTER, 2)
    assert isinstance(event, JobStarted) and event.run == 3 and event.cluster == "k8s-a"
