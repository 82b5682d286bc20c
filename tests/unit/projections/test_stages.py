"""The projection stages, one narrative case at a time, folded in memory."""

from __future__ import annotations

from events.catalog.decisions import ReplicaPlacement
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    GpuHealthReported,
    GpuHealthSample,
    JobUsage,
    NodeUsageReported,
)
from events.catalog.jobs import JobCancelled, JobPreempted, JobStarted, JobSucceeded
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.types import Health
from projections.readmodel.rows.entities import TABLES, _job_rows, _quota_rows, _usage_rows
from projections.stages.clusters import usage_key
from projections.stages.nodes import allocated_by_gpu
from tests.unit.projections.builders import Fold, a_gpu_and_npu_run, a_job, a_node, placed


def test_a_job_that_waits_runs_and_succeeds_has_its_timeline_and_waiting_time() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(), at_s=10)
    fold.feed(placed(), at_s=40)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=45)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=3645)
    job = fold.get("jobs", "j1")
    assert job.status == "succeeded"
    assert job.waiting_ms == 30_000
    assert [e.status for e in job.timeline] == ["submitted", "placed", "running", "succeeded"]
    node = fold.get("nodes", "c1/n1")
    assert node.allocations == ()
    quota = fold.get("quota", "team-a/default")
    assert quota.gpu_milli_ms_consumed == 1000 * 3_605_000
    assert len(quota.holdings) == 0


def test_a_preempted_job_returns_to_the_queue_and_frees_its_gpus() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=2))
    fold.feed(placed(gpus=(0, 1)), at_s=1)
    assert sum(m for _, m in fold.get("nodes", "c1/n1").allocations[0].gpu_milli) == 2000
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=5)
    fold.feed(JobPreempted(job_id="j1", cluster="c1"), at_s=60)
    job = fold.get("jobs", "j1")
    assert (job.status, job.preemptions, job.runs) == ("queued", 1, 1)
    assert job.cluster is None  # waiting again: no cluster holds it
    queued_since = [name for name, _ in TABLES["jobs"].columns].index("queued_since_ms")
    assert job.queued_since_ms == 1_060_000 and _job_rows("j1", job)[0][queued_since] == 1_060_000
    assert fold.get("nodes", "c1/n1").allocations == ()
    fold.feed(placed(gpus=(2, 3), run=2), at_s=90)
    job = fold.get("jobs", "j1")
    assert (job.status, job.run, job.runs, job.cluster) == ("placed", 2, 2, "c1")
    assert job.placed_ms == 1_090_000 and job.started_ms is None  # the run's own start is still to come
    assert job.waiting_ms == 1000 + 30_000 and job.queued_since_ms is None


def test_replicas_that_share_a_node_all_count_there_and_all_go_when_the_job_ends() -> None:
    fold = Fold()
    fold.feed(a_node(gpus=8))
    fold.feed(a_job(gpus=0).model_copy(update={"replicas": 4}))
    shares = [ReplicaPlacement(replica=i, node="n1", gpu_indices=(0,), gpu_milli_each=300) for i in range(3)]
    slots = (*shares, ReplicaPlacement(replica=3, node="n1", gpu_indices=(5,), gpu_milli_each=1000))
    fold.feed(placed().model_copy(update={"replicas": slots}), at_s=1)
    node = fold.get("nodes", "c1/n1")
    (held,) = node.allocations
    assert (held.cpu_milli, held.memory_mib) == (4 * 4000, 4 * 8192)
    assert allocated_by_gpu(node) == {0: 900, 5: 1000}
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=60)
    assert fold.get("nodes", "c1/n1").allocations == ()


def test_the_same_record_or_the_same_event_twice_changes_nothing() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(), event_id="submit-1")
    position = fold.feed(placed(), at_s=1, event_id="place-1")
    before = fold.get("jobs", "j1")
    fold.feed(placed(), at_s=1, event_id="place-1", replay=position)  # redelivered record
    fold.feed(placed(), at_s=1, event_id="place-1")  # appended twice by a retrying producer
    assert fold.get("jobs", "j1") == before
    assert len(fold.get("nodes", "c1/n1").allocations) == 1


def test_a_start_read_before_its_placement_is_applied_when_the_placement_arrives() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job())
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=5)
    assert fold.get("jobs", "j1").status == "submitted"
    fold.feed(placed(), at_s=4)
    assert fold.get("jobs", "j1").status == "running"


def test_a_placement_read_before_its_submission_holds_nothing_until_the_submission_says_whose_it_is() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(placed(), at_s=2)
    assert fold.get("nodes", "c1/n1").allocations == ()
    assert fold.store.tables.get("quota", {}) == {}
    assert fold.get("jobs", "j1").status == "placed"
    fold.feed(a_job(tenant="team-b"), at_s=1)
    assert list(fold.get("quota", "team-b/default").holdings) == ["j1@c1/n1"]  # the run held node by node
    node = fold.get("nodes", "c1/n1")
    assert node.allocations[0].tenant == "team-b"
    assert node.version == 2  # observed, then held once: as if the submission had been read first
    job = fold.get("jobs", "j1")
    assert [e.status for e in job.timeline] == ["submitted", "placed"]
    assert job.waiting_ms == 1000


def test_placements_read_before_their_submissions_never_publish_two_versions_with_one_id() -> None:
    fold = Fold()
    fold.feed(a_node())
    for n in range(3):  # each placement read before its submission, then the submission
        fold.feed(placed(job_id=f"j{n}", gpus=(n,)), at_s=10 * n)
        fold.feed(a_job(job_id=f"j{n}", tenant="team-b"), at_s=10 * n + 1)
    ids: dict[str, object] = {}
    for out in fold.outputs:
        assert ids.setdefault(out.id, out.event) == out.event, f"{out.id} published with two contents"


def test_an_older_node_snapshot_is_ignored() -> None:
    fold = Fold()
    fold.feed(a_node(gpus=8, generation=5))
    fold.feed(a_node(gpus=4, generation=3))
    assert len(fold.get("nodes", "c1/n1").gpus) == 8


def test_a_gpu_failure_counts_once_lowers_health_and_capacity_and_is_published() -> None:
    fold = Fold()
    fold.feed(a_node(gpus=8))
    report = GpuHealthReported(
        cluster="c1", node="n1", gpus=(GpuHealthSample(index=3, health=Health.FAILED, xid_errors=2, last_xid=79),)
    )
    fold.feed(report, at_s=100)
    fold.feed(report, at_s=200)  # the same counters again: no new failure
    node = fold.get("nodes", "c1/n1")
    assert node.failures == 1
    profiles = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node == "n1"]
    latest = profiles[-1]
    assert latest.capacity.gpu_milli == 7000
    assert latest.health_milli < 1000 * 7 // 8 + 1
    assert [p.version for p in profiles] == list(range(1, len(profiles) + 1))


def test_usage_above_the_guarantee_is_borrowed() -> None:
    from events.catalog.governance import QuotaLine, QuotaSet
    from events.catalog.types import ResourceKind

    fold = Fold()
    fold.feed(
        QuotaSet(
            tenant="team-a", lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=2000, limit=8000),), set_by="admin"
        )
    )
    fold.feed(a_node())
    fold.feed(a_job("j1", gpus=2))
    fold.feed(a_job("j2", gpus=3))
    fold.feed(placed("j1", gpus=(0, 1)), at_s=1)
    fold.feed(placed("j2", gpus=(2, 3, 4)), at_s=1)
    latest = [o.event for o in fold.outputs if o.id.startswith("quota:team-a/default")][-1]
    gpu = next(u for u in latest.usage if u.resource == ResourceKind.GPU and u.gpu_model is None)
    assert (gpu.used, gpu.guaranteed, gpu.limit, gpu.borrowed) == (5000, 2000, 8000, 3000)


def test_pending_demand_congests_a_model_and_allocation_beyond_the_hot_pressure_makes_it_hot() -> None:
    fold = Fold()
    fold.feed(a_node(gpus=10, model="H100"))
    fold.feed(a_job("j1", gpus=8))
    fold.feed(a_job("j2", gpus=10))
    fleet = fold.get("fleet", "fleet")
    assert fleet.congestion()["H100"] == 1800 and fleet.hot_models() == ()  # wanted, not yet taken
    fold.feed(placed("j1", gpus=tuple(range(8))), at_s=1)
    assert fold.get("fleet", "fleet").hot_models() == ()  # 800 of 1000 taken: below the scheduler's 900
    fold.feed(a_job("j3", gpus=1))
    fold.feed(placed("j3", gpus=(8,)), at_s=2)
    assert fold.get("fleet", "fleet").hot_models() == ("H100",)  # 900: hot, as the scheduler counts it
    rollups = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node is None]
    assert rollups[-1].hot_models == ("H100",)


def test_a_job_larger_than_the_fleet_counts_as_demand_only_once_the_fleet_could_hold_it() -> None:
    fold = Fold()
    fold.feed(a_node(node="n1", gpus=8, model="H100"))
    fold.feed(a_node(node="n2", gpus=8, model="A100"))
    fold.feed(a_job("huge", gpus=0).model_copy(update={"replicas": 3, "resources": a_job(gpus=8).resources}))
    fleet = fold.get("fleet", "fleet")
    assert fleet.congestion() == {"A100": 0, "H100": 0}  # 24 GPUs of 16: never
    fold.feed(a_node(node="n3", gpus=8, model="A100"))  # 24 GPUs now: it could run, and it waits
    fleet = fold.get("fleet", "fleet")
    assert fleet.congestion() == {"A100": 1500, "H100": 3000}
    fold.feed(JobCancelled(job_id="huge", cluster="c1", run=0))
    fleet = fold.get("fleet", "fleet")
    assert fleet.congestion() == {"A100": 0, "H100": 0} and fleet.demand_by_model == {} and fleet.demand_any == 0


def test_a_share_of_a_gpu_is_measured_as_the_share_not_the_whole_gpu() -> None:
    fold = Fold()
    fold.feed(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"))
    fold.feed(a_node(gpus=2))
    fold.feed(a_job(gpus=0, gpu_milli=300))
    fold.feed(placed(gpus=(0,), milli=300), at_s=1)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=2)
    usage = JobUsage(job_id="j1", gpu_indices=(0,), utilisation_pct=50)
    fold.feed(NodeUsageReported(cluster="c1", node="n1", window_ms=60_000, jobs=(usage,)), at_s=62)
    hour = 1_062_000 - 1_062_000 % 3_600_000
    bucket = fold.get("usage", usage_key("team-a", "c1", "A100", hour))
    assert bucket.used_milli_ms == 300 * 50 // 100 * 60_000  # half of 0.3 GPU for a minute


def test_an_npu_run_is_shown_on_its_job_held_on_its_node_and_counted_on_its_npu_quota_lines() -> None:
    from events.catalog.governance import QuotaLine, QuotaSet
    from events.catalog.inventory import NpuDevice
    from events.catalog.types import ResourceKind

    fold = Fold()
    fold.feed(QuotaSet(tenant="team-a", lines=(QuotaLine(resource=ResourceKind.NPU, guaranteed=2),), set_by="admin"))
    npus = tuple(NpuDevice(index=i, model="Ascend910B", memory_mib=65536) for i in range(8))
    fold.feed(a_node(gpus=0).model_copy(update={"npus": npus}))
    submitted = a_job(gpus=0)
    fold.feed(submitted.model_copy(update={"resources": submitted.resources.model_copy(update={"npus": 4})}))
    event = placed(gpus=(), milli=0)
    replica = ReplicaPlacement(replica=0, node="n1", npu_indices=(2, 3, 4, 5))
    fold.feed(event.model_copy(update={"replicas": (replica,)}), at_s=1)
    job = fold.get("jobs", "j1")
    assert [(s.node, s.npu_indices, s.gpu_indices) for s in job.placement] == [("n1", (2, 3, 4, 5), ())]
    placement = [name for name, _ in TABLES["jobs"].columns].index("placement")
    assert _job_rows("j1", job)[0][placement] == '[["n1",[],0,[2,3,4,5],"c1",0]]'
    profile = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node == "n1"]
    assert (profile[-1].capacity.npus, profile[-1].allocated.npus, profile[-1].free.npus) == (8, 4, 4)
    latest = [o.event for o in fold.outputs if o.id.startswith("quota:team-a/default")][-1]
    lines = {(u.resource, u.gpu_model): (u.used, u.borrowed) for u in latest.usage}
    assert lines[(ResourceKind.NPU, None)] == (4, 2)
    assert lines[(ResourceKind.NPU, "Ascend910B")] == (4, 0)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=60)
    profile = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node == "n1"]
    assert profile[-1].free.npus == 8
    latest = [o.event for o in fold.outputs if o.id.startswith("quota:team-a/default")][-1]
    assert {(u.resource, u.gpu_model): u.used for u in latest.usage}[(ResourceKind.NPU, None)] == 0


def test_npu_time_is_counted_and_priced_apart_from_gpu_time() -> None:
    fold = a_gpu_and_npu_run(gpu_rate=2_000_000, npu_rate=1_500_000)
    gpu = fold.get("usage", usage_key("team-a", "c1", "A100", 0))
    npu = fold.get("usage", usage_key("team-a", "c1", "Ascend910B", 0, "npu"))
    half_hour = 1_800_000
    assert (gpu.kind, gpu.allocated_milli_ms, gpu.cost_micro) == ("gpu", 1000 * half_hour, 1_000_000)
    # 4 NPUs for half an hour: 2 NPU-hours at the cluster's rate for the NPU's model.
    assert (npu.kind, npu.allocated_milli_ms, npu.cost_micro, npu.currency) == (
        "npu",
        4000 * half_hour,
        3_000_000,
        "EUR",
    )
    assert npu.projects == (("default", 4000 * half_hour, 3_000_000),)
    kind = [name for name, _ in TABLES["usage"].columns].index("kind")
    assert _usage_rows("k", npu)[0][kind] == "npu" and _usage_rows("k", gpu)[0][kind] == "gpu"


def test_a_gpu_only_run_reports_no_npu_time() -> None:
    fold = Fold()
    fold.feed(a_node(gpus=2))
    fold.feed(a_job(gpus=1))
    fold.feed(placed())
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=60)
    assert fold.get("usage", usage_key("team-a", "c1", "A100", 0)).allocated_milli_ms == 1000 * 60_000
    assert [key for key in fold.store.tables.get("usage", {}) if "|npu|" in key] == []


def test_a_queues_npu_hours_are_counted_apart_from_its_gpu_hours() -> None:
    from events.catalog.profiles import QuotaUsageUpdated

    fold = a_gpu_and_npu_run()
    latest = [o.event for o in fold.outputs if isinstance(o.event, QuotaUsageUpdated)][-1]
    # 1 GPU and 4 NPUs for half an hour.
    assert (latest.gpu_hours_milli, latest.npu_hours_milli) == (500, 2000)
    row = _quota_rows("team-a/default", fold.get("quota", "team-a/default"))[0]
    columns = [name for name, _ in TABLES["quota"].columns]
    assert (row[columns.index("gpu_hours_milli")], row[columns.index("npu_hours_milli")]) == (500, 2000)
