"""The pure model of a simulated cluster: lifecycle timing, stops, node snapshots and usage."""

from __future__ import annotations

import pytest

from connectors.sim import SimConfig
from connectors.sim.faults import usage_draw
from events.catalog.inventory import ClusterRegistered, NodeObserved, NodeUsageReported
from events.catalog.jobs import (
    JobCancelled,
    JobFailed,
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobStarted,
    JobSucceeded,
)
from events.catalog.reasons import ReasonCode

from .builders import (
    CLUSTER,
    Story,
    a_cluster,
    a_job,
    a_node,
    a_placement,
    cancel_request,
    preemption_request,
    reclaim_request,
)

pytestmark = pytest.mark.timeout(30)


def test_beginning_states_the_cluster_and_every_node() -> None:
    story = Story(a_cluster(a_node("gpu-a"), a_node("gpu-b").gpus(2, "T4", 15109)))
    kinds = [type(e.event).__name__ for e in story.emitted]
    assert kinds == ["ClusterRegistered", "NodeObserved", "NodeObserved"]
    registered = story.emitted[0].event
    assert isinstance(registered, ClusterRegistered)
    assert {r.model for r in registered.gpu_rates} == {"A100-SXM4-80GB", "T4"}
    t4 = story.emitted[2].event
    assert isinstance(t4, NodeObserved)
    assert (t4.node, t4.generation, len(t4.gpus), t4.gpus[0].model) == ("gpu-b", 1, 2, "T4")


def test_a_placed_job_starts_after_the_start_delay_and_succeeds_after_its_runtime() -> None:
    story = Story().at(10).start(a_job().gpus(2).runtime(600), a_placement().on("node-0", 0, 1))
    story.at(10_000)
    [started] = story.events(JobStarted)
    [succeeded] = story.events(JobSucceeded)
    assert story.seconds(started) == 15
    assert story.seconds(succeeded) == 615
    assert (started.id, succeeded.id) == ("sim:sim-test:job-1:1:started", "sim:sim-test:job-1:1:succeeded")
    assert started.tenant == "team-a"


def test_runtime_comes_from_the_trace_times_carried_in_labels() -> None:
    job = a_job().runtime(None).label("trace.fedsched.io/creation-time", "427061")
    job.label("trace.fedsched.io/deletion-time", "427161")
    story = Story().start(job, a_placement().on("node-0")).at(1000)
    assert story.seconds(story.events(JobSucceeded)[0]) == 105


def test_a_job_past_its_max_runtime_fails_with_runtime_exceeded() -> None:
    story = Story().start(a_job().runtime(None).max_runtime(60).kind(JobKind.BATCH), a_placement().on("node-0"))
    story.at(1000)
    [failed] = story.events(JobFailed)
    assert failed.event.reason is ReasonCode.RUNTIME_EXCEEDED  # type: ignore[attr-defined]
    assert story.seconds(failed) == 65


def test_a_notebook_runs_until_it_is_cancelled() -> None:
    story = Story().start(a_job().notebook().gpus(1), a_placement().on("node-0", 3)).at(86_400)
    assert story.events(JobStarted) and not story.events(JobSucceeded)
    story.send(cancel_request("job-1")).at(86_410)
    [cancelled] = story.events(JobCancelled)
    assert story.seconds(cancelled) == 86_402
    assert cancelled.event.requester == "alice@example.com"  # type: ignore[attr-defined]


def test_a_cancel_before_the_placement_arrives_cancels_it_on_arrival_without_starting() -> None:
    story = Story().submit(a_job()).send(cancel_request("job-1")).at(5).place(a_placement().on("node-0")).at(100)
    [cancelled] = story.events(JobCancelled)
    assert cancelled.event.message == "cancelled before it started"  # type: ignore[attr-defined]
    assert not story.events(JobStarted)


def test_preempting_a_running_training_job_checkpoints_and_gives_its_gpus_back() -> None:
    story = Story().start(a_job().gpus(8), a_placement().on("node-0", *range(8))).at(100)
    story.send(preemption_request("job-1", grace_s=30)).at(200)
    [preempted] = story.events(JobPreempted)
    assert story.seconds(preempted) == 102
    assert preempted.event.checkpointed  # type: ignore[attr-defined]
    last = story.events(NodeObserved)[-1].event
    assert last.labels["sim.fedsched.io/allocated-gpu-milli"] == "0"  # type: ignore[attr-defined]
    # The freed GPUs take the next placement.
    story.start(a_job("job-2").gpus(8), a_placement("job-2").on("node-0", *range(8))).at(300)
    assert story.events(JobStarted, "job-2")


def test_a_stop_within_the_grace_period_of_zero_is_immediate_and_does_not_checkpoint() -> None:
    story = Story().start(a_job().gpus(1), a_placement().on("node-0", 0)).at(100)
    story.send(reclaim_request("job-1", grace_s=0)).at(100)
    [reclaimed] = story.events(JobReclaimed)
    assert story.seconds(reclaimed) == 100 and not reclaimed.event.checkpointed  # type: ignore[attr-defined]


def test_reclaiming_a_job_that_has_not_started_stops_it_at_once() -> None:
    story = Story().at(10).start(a_job().gpus(1), a_placement().on("node-0", 0)).at(12)
    story.send(reclaim_request("job-1")).at(100)
    assert [story.seconds(e) for e in story.events(JobReclaimed)] == [12]
    assert not story.events(JobStarted)


def test_a_stop_request_for_another_run_or_cluster_is_ignored() -> None:
    story = Story().start(a_job().gpus(1), a_placement().on("node-0", 0)).at(100)
    story.send(preemption_request("job-1", run=2), preemption_request("job-1", cluster="elsewhere")).at(1000)
    assert story.events(JobSucceeded) and not story.events(JobPreempted)


def test_a_placement_waits_for_its_job_submission() -> None:
    story = Story().place(a_placement().on("node-0")).at(50)
    assert not story.events(JobStarted)
    story.submit(a_job()).at(60)
    assert story.seconds(story.events(JobStarted)[0]) == 55


def test_a_placement_delivered_twice_runs_once() -> None:
    placement = a_placement().on("node-0", 0)
    story = Story().submit(a_job().gpus(1)).place(placement).at(1).place(placement).at(2000)
    assert len(story.events(JobStarted)) == 1 and len(story.events(JobSucceeded)) == 1


def test_a_second_run_after_a_preemption_is_executed_as_a_new_attempt() -> None:
    story = Story().start(a_job().gpus(1), a_placement().on("node-0", 0)).at(100)
    story.send(preemption_request("job-1")).at(110).place(a_placement().on("node-0", 1).run(2)).at(2000)
    assert [e.event.run for e in story.events(JobStarted)] == [1, 2]  # type: ignore[attr-defined]
    assert [e.event.run for e in story.events(JobSucceeded)] == [2]  # type: ignore[attr-defined]


def test_node_snapshots_follow_allocation_with_increasing_generations() -> None:
    story = Story().start(a_job().share(460).cpu(6000), a_placement().on("node-0", 2, milli=460)).at(1000)
    snapshots = [e.event for e in story.events(NodeObserved)]
    assert [s.generation for s in snapshots] == [1, 2, 3]  # type: ignore[attr-defined]
    taken = snapshots[1].labels  # type: ignore[attr-defined]
    assert taken["sim.fedsched.io/gpu-allocation"] == "0,0,460,0,0,0,0,0"
    assert taken["sim.fedsched.io/allocated-cpu-milli"] == "6000"
    assert snapshots[2].labels["sim.fedsched.io/allocated-gpu-milli"] == "0"  # type: ignore[attr-defined]


def test_a_label_makes_every_run_fail_after_a_while_with_its_exit_code() -> None:
    job = a_job().label("sim.fedsched.io/fail-after-s", "30").label("sim.fedsched.io/exit-code", "137")
    story = Story().start(job, a_placement().on("node-0")).at(1000)
    [failed] = story.events(JobFailed)
    assert (failed.event.reason, failed.event.exit_code) == (ReasonCode.OUT_OF_MEMORY, 137)  # type: ignore[attr-defined]
    assert story.seconds(failed) == 35


def test_the_job_failure_rate_fails_the_same_runs_for_the_same_seed() -> None:
    def failed_jobs(seed: int) -> list[str]:
        config = SimConfig(job_failure_rate=0.3, seed=seed, start_delay_s=0)
        story = Story(a_cluster(a_node().cpu(10**6).memory(10**7)), config)
        for n in range(40):
            story.start(a_job(f"job-{n}").cpu(100).memory(100), a_placement(f"job-{n}").on("node-0"))
        story.at(10_000)
        return [e.event.job_id for e in story.events(JobFailed)]  # type: ignore[attr-defined]

    first = failed_jobs(1)
    assert first == failed_jobs(1)
    assert 4 <= len(first) <= 24
    assert first != failed_jobs(2)


def test_an_idle_notebook_reports_low_utilisation_while_training_stays_busy() -> None:
    config = SimConfig(start_delay_s=0, usage_interval_s=300, notebook_active_s=600)
    story = Story(a_cluster(a_node()), config)
    story.start(a_job("nb").notebook().gpus(1), a_placement("nb").on("node-0", 0))
    story.start(a_job("train").gpus(1).runtime(10**6), a_placement("train").on("node-0", 1)).at(3600)
    reports = [e.event for e in story.events(NodeUsageReported)]
    assert [story.seconds(e) for e in story.events(NodeUsageReported)] == [300 * k for k in range(1, 13)]
    by_job = {(i, u.job_id): u for i, r in enumerate(reports) for u in r.jobs}  # type: ignore[attr-defined]
    assert by_job[(0, "nb")].utilisation_pct >= 20  # active in its first ten minutes
    assert all(by_job[(i, "nb")].utilisation_pct <= 3 for i in range(2, 12))
    assert all(by_job[(i, "train")].utilisation_pct >= 80 for i in range(12))
    gpu0 = [r.gpus[0] for r in reports]  # type: ignore[attr-defined]
    assert all(g.utilisation_pct <= 3 and g.memory_used_mib > 0 for g in gpu0[2:])


def test_a_node_whose_work_ended_reports_zero_usage_once_then_stops_reporting() -> None:
    config = SimConfig(start_delay_s=0, usage_interval_s=60)
    story = Story(a_cluster(a_node()), config).start(a_job().gpus(1).runtime(90), a_placement().on("node-0", 0))
    story.at(600)
    assert [story.seconds(e) for e in story.events(NodeUsageReported)] == [60, 120]
    assert story.events(NodeUsageReported)[-1].event.jobs == ()  # type: ignore[attr-defined]


def test_the_usage_label_fixes_a_jobs_utilisation() -> None:
    config = SimConfig(start_delay_s=0, usage_interval_s=60)
    job = a_job().gpus(2).label("sim.fedsched.io/utilisation-pct", "42")
    story = Story(a_cluster(a_node()), config).start(job, a_placement().on("node-0", 0, 1)).at(60)
    [report] = [e.event for e in story.events(NodeUsageReported)]
    assert report.jobs[0].utilisation_pct == 42 and report.jobs[0].gpu_indices == (0, 1)  # type: ignore[attr-defined]
    assert [g.utilisation_pct for g in report.gpus[:3]] == [42, 42, 0]  # type: ignore[attr-defined]


def test_a_run_that_starts_within_a_window_reports_its_average_over_the_window() -> None:
    """As an exporter averages: busy at 42% for 40 s of a 60 s window is 28% of it (reported as 42%,
    a short job used more GPU time than it held)."""
    config = SimConfig(start_delay_s=20, usage_interval_s=60)
    job = a_job().gpus(1).runtime(10**6).label("sim.fedsched.io/utilisation-pct", "42")
    story = Story(a_cluster(a_node()), config).start(job, a_placement().on("node-0", 0)).at(120)
    reports = [e.event for e in story.events(NodeUsageReported)]
    assert [r.jobs[0].utilisation_pct for r in reports] == [28, 42]  # type: ignore[attr-defined]


def test_an_npu_run_is_measured_as_a_gpu_run_is_from_the_same_draw() -> None:
    """Each NPU the job holds runs at the job's utilisation and holds its share of the NPU's memory; the
    job's figures name its NPUs and no GPU; a GPU job beside it draws what it drew before NPUs were
    measured (its figures come from its own run's draw, untouched)."""
    config = SimConfig(start_delay_s=0, usage_interval_s=60)
    node = a_node().gpus(2).npus(8)
    npu_job = a_job("npu").npus(2).label("sim.fedsched.io/utilisation-pct", "37")
    story = Story(a_cluster(node), config).start(npu_job, a_placement("npu").on("node-0", npus=(1, 3)))
    story.start(a_job("gpu").gpus(1).runtime(10**6), a_placement("gpu").on("node-0", 0)).at(120)
    reports = [e.event for e in story.events(NodeUsageReported)]
    assert len(reports) == 2
    last = reports[-1]
    assert isinstance(last, NodeUsageReported)
    by_job = {u.job_id: u for u in last.jobs}
    npu = by_job["npu"]
    assert (npu.npu_indices, npu.npu_utilisation_pct, npu.gpu_indices, npu.utilisation_pct) == ((1, 3), 37, (), 0)
    assert npu.npu_memory_used_mib == sum(n.memory_used_mib for n in last.npus) > 0
    assert [n.utilisation_pct for n in last.npus] == [0, 37, 0, 37, 0, 0, 0, 0]
    assert [n.memory_used_mib > 0 for n in last.npus] == [False, True, False, True, False, False, False, False]
    gpu = by_job["gpu"]
    assert gpu.npu_indices == () and gpu.npu_utilisation_pct == 0 and 80 <= gpu.utilisation_pct <= 98
    draw = usage_draw(config, CLUSTER, "gpu", 1, 2, JobKind.TRAINING, False)
    assert gpu.utilisation_pct == draw.utilisation_pct
