"""One realistic instance of every event type and version, and builders for payloads and envelopes.

Called by the golden fixture writer (each sample becomes the fixture of its type and version), the
bad-input tests (which break one field of a sample's JSON) and the CLI tests. A test that needs an
event with one thing changed takes a sample and uses ``model_copy`` or ``broken``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import JsonValue

from events.catalog import REGISTRY, Event
from events.catalog.decisions import (
    BindingConstraint,
    CandidateScore,
    ClusterWhyNot,
    FailureKind,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    ReclaimFigures,
    ReplicaPlacement,
    RunPartEnd,
    SchedulingCycleCompleted,
    ScoreComponent,
    SuggestedChange,
    TopicOffset,
)
from events.catalog.documents import (
    BudgetMode,
    BudgetSpec,
    BudgetWindow,
    DocumentChange,
    FieldChange,
    Kind,
)
from events.catalog.governance import (
    BudgetSet,
    BudgetWindowOpened,
    CohortConfigured,
    Figure,
    FindingKind,
    GovernanceClockTicked,
    GovernanceFinding,
    JobIdleWarning,
    PolicyConfigured,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaRequestSubmitted,
    QuotaSet,
    TenantRegistered,
)
from events.catalog.images import ImagePolicy
from events.catalog.inventory import (
    ClusterKind,
    ClusterNodesListed,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuDevice,
    GpuHealthReported,
    GpuHealthSample,
    GpuRate,
    GpuUsage,
    JobUsage,
    NodeObserved,
    NodeRemoved,
    NodeUsageReported,
    NpuDevice,
    NpuHealthSample,
    NpuUsage,
    Taint,
)
from events.catalog.jobs import (
    Interconnect,
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    PriorityClass,
    RetrySpec,
    RunEnd,
    Toleration,
)
from events.catalog.legacy import (
    GpuHealthReportedV1,
    GpuHealthReportedV2,
    GpuHealthSampleV1,
    GpuUsageV1,
    JobPlacedV1,
    JobQueuedV1,
    JobReplicasAddedV1,
    JobSubmittedV1,
    JobUsageV1,
    JobUsageV2,
    NodeUsageReportedV1,
    NodeUsageReportedV2,
    PolicyConfiguredV1,
    QuotaSetV1,
    QuotaUsageUpdatedV1,
    ResourceProfileUpdatedV1,
    SchedulingCycleCompletedV1,
    TenantRegisteredV1,
    TenantRegisteredV2,
)
from events.catalog.pending_reasons import PendingReason
from events.catalog.profiles import GpuModelProfile, Quantities, QuotaUsage, QuotaUsageUpdated, ResourceProfileUpdated
from events.catalog.reasons import ReasonCode as R
from events.catalog.types import (
    ClusterId,
    CycleId,
    Health,
    JobId,
    NodeId,
    QueueId,
    QuotaRequestId,
    ResourceKind,
    Resources,
    TaintEffect,
    TenantId,
)
from events.wire.envelope import Envelope

T0 = 1_764_680_400_000  # 2025-12-02T13:00:00.000Z
HOUR = 3_600_000
JOB = JobId("llama-ft-0042")
JOB_2 = JobId("nightly-eval-0007")
C1 = ClusterId("eu-west-a100")
C2 = ClusterId("us-east-h100")
N1 = NodeId("gpu-node-017")
N2 = NodeId("gpu-node-018")
ML = TenantId("ml-research")
PROD = TenantId("search-prod")
CYCLE = CycleId("cycle-000000481516")
REQ = QuotaRequestId("qr-2025-12-0031")


def _inventory() -> list[Event]:
    a100 = "NVIDIA-A100-SXM4-80GB"
    return [
        ClusterRegistered(
            cluster=C1,
            kind=ClusterKind.KUBERNETES,
            display_name="EU West A100 pool",
            site="dub-2",
            region="eu-west",
            labels={"tier": "shared", "fedsched.io/network": "ib-hdr"},
            currency="EUR",
            gpu_rates=(GpuRate(model=a100, micro_per_gpu_hour=1_950_000),),
            datasets=("imagenet-1k", "common-crawl-2025-05"),
        ),
        ClusterNodesListed(cluster=C1, as_of=884213, taken_ms=T0, part=1, parts=1, nodes=(N1, N2)),
        ClusterStatusChanged(
            cluster=C1,
            status=ClusterStatus.DRAINING,
            reason=R.OPERATOR_REQUEST,
            message="kernel upgrade window 14:00-16:00 UTC",
        ),
        NodeObserved(
            cluster=C1,
            node=N1,
            generation=17,
            resource_version="884213",
            cpu_milli=128_000,
            memory_mib=1_031_000,
            gpus=tuple(
                GpuDevice(index=i, model=a100, memory_mib=81_920, health=Health.DEGRADED if i == 5 else Health.OK)
                for i in range(8)
            ),
            npus=(NpuDevice(index=0, model="Ascend-910B", memory_mib=65_536),),
            nvlink_domain="rack-07",
            rdma_fabric="ib-hdr-dub2",
            labels={"nvidia.com/gpu.product": a100, "topology.kubernetes.io/zone": "dub-2b"},
            taints=(Taint(key="nvidia.com/gpu", value="present", effect=TaintEffect.NO_SCHEDULE),),
            schedulable=True,
        ),
        NodeRemoved(cluster=C1, node=N2, generation=40, reason=R.NODE_LOST, message="no heartbeat for 300 s"),
        GpuHealthReported(
            cluster=C1,
            node=N1,
            gpus=(
                GpuHealthSample(
                    index=0, health=Health.OK, xid_errors=0, ecc_corrected=3, ecc_uncorrected=0, temperature_c=61
                ),
                GpuHealthSample(
                    index=5,
                    health=Health.DEGRADED,
                    xid_errors=2,
                    last_xid=48,
                    ecc_corrected=118,
                    ecc_uncorrected=1,
                    temperature_c=83,
                ),
            ),
            npus=(
                NpuHealthSample(index=0, health=Health.OK, errors=0, hbm_ecc_uncorrected=0, temperature_c=54),
                NpuHealthSample(index=3, health=Health.FAILED, errors=4, last_error_code=0x80E18402, temperature_c=71),
            ),
        ),
        NodeUsageReported(
            cluster=C1,
            node=N1,
            window_ms=60_000,
            cpu_milli_used=96_500,
            memory_used_mib=702_000,
            gpus=(
                GpuUsage(index=0, utilisation_pct=97, memory_used_mib=78_000),
                GpuUsage(index=1, utilisation_pct=95, memory_used_mib=77_500),
            ),
            jobs=(
                JobUsage(
                    job_id=JOB,
                    gpu_indices=(0, 1),
                    utilisation_pct=96,
                    gpu_memory_used_mib=155_500,
                    cpu_milli_used=32_000,
                    memory_used_mib=240_000,
                    run=2,
                ),
                JobUsage(
                    job_id=JobId("npu-serve-0007"),
                    npu_indices=(0, 1),
                    npu_utilisation_pct=88,
                    npu_memory_used_mib=101_000,
                    cpu_milli_used=12_000,
                    memory_used_mib=96_000,
                    run=1,
                ),
            ),
            npus=(
                NpuUsage(index=0, utilisation_pct=90, memory_used_mib=51_000),
                NpuUsage(index=1, utilisation_pct=86, memory_used_mib=50_000),
            ),
        ),
    ]


def _submitted() -> JobSubmitted:
    return JobSubmitted(
        job_id=JOB,
        name="llama-3-8b fine-tune on support tickets",
        tenant=ML,
        project="assistant",
        queue=QueueId("gpu-training"),
        kind=JobKind.FINE_TUNE,
        priority_class=PriorityClass.STANDARD,
        replicas=2,
        gang=True,
        resources=Resources(
            cpu_milli=16_000,
            memory_mib=131_072,
            gpus=4,
            gpu_models=("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-SXM5-80GB"),
            min_gpu_memory_mib=40_960,
        ),
        interconnect=Interconnect.NVLINK,
        interconnect_required=True,
        datasets=("support-tickets-2025",),
        tolerations=(Toleration(key="nvidia.com/gpu", effect=TaintEffect.NO_SCHEDULE),),
        preemptible=True,
        expected_runtime_s=6 * 3600,
        max_runtime_s=12 * 3600,
        template={"image": "registry.example.com/ml/trainer:2.4.1", "args": ["--epochs", "3"], "shm_gib": 64},
        labels={"team": "assistant", "cost-center": "cc-4410"},
        submitted_by="alice@example.com",
        client_request_id="mlflow/run-8c1f/submit",
        retry=RetrySpec(on_application_failure=2),
    )


def _jobs() -> list[Event]:
    return [
        _submitted(),
        JobCancelRequested(job_id=JOB, requester="alice@example.com", reason="wrong dataset version"),
        JobRejected(
            job_id=JobId("huge-sweep-0001"),
            tenant=ML,
            reason=R.NEVER_SATISFIABLE,
            message="asks 96 GPUs of one node; the largest node has 8",
            field="resources.gpus",
            client_request_id="nb-7731",
        ),
        JobStarted(job_id=JOB, cluster=C1, run=1, message="2 replicas running"),
        JobSucceeded(job_id=JOB, cluster=C1, run=1),
        JobFailed(
            job_id=JOB,
            cluster=C1,
            run=2,
            exit_code=137,
            reason=R.OUT_OF_MEMORY,
            message="replica 1 killed by the OOM killer",
            node=N1,
        ),
        JobPreempted(job_id=JOB_2, cluster=C2, run=1, checkpointed=True),
        JobReclaimed(job_id=JOB_2, cluster=C2, run=2, message="borrowed quota returned to search-prod"),
        JobCancelled(job_id=JOB, cluster=C1, run=1, requester="alice@example.com"),
    ]


def _scores() -> tuple[CandidateScore, CandidateScore]:
    chosen = CandidateScore(
        cluster=C1,
        node=N1,
        total=7_140,
        components=(
            ScoreComponent(name="fit", points=5_400),
            ScoreComponent(name="locality", points=2_100),
            ScoreComponent(name="cost", points=-360),
        ),
    )
    runner_up = CandidateScore(
        cluster=C2,
        total=6_020,
        components=(
            ScoreComponent(name="fit", points=5_700),
            ScoreComponent(name="locality", points=0),
            ScoreComponent(name="cost", points=320),
        ),
    )
    return chosen, runner_up


def _wait() -> dict[str, Any]:
    """What a JobQueued of every version says of its wait, but its places in the queues."""
    return {
        "job_id": JOB,
        "cycle_id": CYCLE,
        "reasons": (R.INSUFFICIENT_GPU, R.QUOTA_EXCEEDED),
        "message": "Waiting: no cluster has 8 free A100/H100 GPUs on NVLink, and ml-research is at its H100 limit.",
        "why_not": (
            ClusterWhyNot(cluster=C1, reasons=(R.INSUFFICIENT_GPU,), detail="4 of 8 GPUs free"),
            ClusterWhyNot(cluster=C2, reasons=(R.QUOTA_EXCEEDED,), detail="H100 limit 16000 milli"),
        ),
        "binding": BindingConstraint(
            reason=R.INSUFFICIENT_GPU,
            resource=ResourceKind.GPU,
            gpu_model="NVIDIA-A100-SXM4-80GB",
            cluster=C1,
            requested=8_000,
            available=4_000,
        ),
        "smallest_change": SuggestedChange(
            field="resources.gpus", current="4", suggested="2", message="with 2 GPUs per replica it would start now"
        ),
    }


def _decisions() -> list[Event]:
    chosen, runner_up = _scores()
    return [
        JobQueued(
            **_wait(),
            federation_position=12,
            tenant_queue_position=3,
            estimated_start_ms=T0 + 2 * HOUR,
            pending_reason=PendingReason.CAPACITY,
        ),
        JobPlaced(
            job_id=JOB,
            cycle_id=CYCLE,
            cluster=C1,
            run=1,
            replicas=(
                ReplicaPlacement(replica=0, node=N1, gpu_indices=(0, 1, 2, 3), gpu_milli_each=1000),
                ReplicaPlacement(replica=1, node=N1, gpu_indices=(4, 5, 6, 7), gpu_milli_each=1000),
            ),
            chosen=chosen,
            runner_up=(runner_up,),
            explanation="eu-west-a100 fits both replicas in one NVLink domain; us-east-h100 costs more.",
            victims=(JOB_2,),
        ),
        JobReplicasAdded(
            job_id=JOB,
            cycle_id=CYCLE,
            cluster=C1,
            run=1,
            replicas=(ReplicaPlacement(replica=2, node=N1, gpu_indices=(8, 9, 10, 11), gpu_milli_each=1000),),
            running_replicas=3,
            chosen=chosen,
            explanation="added replica 2 on n1; running 3 of 4 replicas, 1 waits for room in eu-west-a100",
        ),
        JobPreemptionRequested(
            job_id=JOB_2,
            cycle_id=CYCLE,
            cluster=C2,
            run=1,
            preemptor=JOB,
            rule="standard-over-best-effort",
            message="nightly-eval is best effort",
        ),
        JobReclaimRequested(
            job_id=JOB_2,
            cycle_id=CYCLE,
            cluster=C2,
            run=1,
            tenant=ML,
            rule="reclaim-borrowed",
            figures=ReclaimFigures(
                gpu_model="NVIDIA-H100-SXM5-80GB",
                borrower_guaranteed_milli=8_000,
                borrower_used_milli=12_000,
                lender=PROD,
                lender_guaranteed_milli=16_000,
                lender_used_milli=12_000,
                lender_pending_milli=4_000,
                reclaimed_milli=4_000,
            ),
            message="search-prod needs 4 H100 of its guarantee back",
        ),
        JobRetryScheduled(
            job_id=JOB,
            cycle_id=CYCLE,
            run=1,
            cluster=C1,
            node=N1,
            failure=R.NODE_FAILURE,
            kind=FailureKind.INFRASTRUCTURE,
            allowed=3,
            attempt=1,
            not_before_ms=T0 + 30_000,
            message="retry 1 of 3 after node gpu-a100-017 failed; back in the queue in 30 s",
        ),
        JobRetriesExhausted(
            job_id=JOB,
            cycle_id=CYCLE,
            run=3,
            cluster=C1,
            failure=R.NON_ZERO_EXIT,
            kind=FailureKind.APPLICATION,
            allowed=2,
            used=2,
            message="not retried: the workload failed (exit code 1) and the 2 retries it asked for are used",
        ),
        JobRunClosed(
            job_id=JOB,
            cycle_id=CYCLE,
            run=2,
            cluster=C2,
            outcome=RunEnd.FAILED,
            reason=R.NODE_FAILURE,
            node=N1,
            parts=(
                RunPartEnd(cluster=C1, outcome=RunEnd.PREEMPTED),
                RunPartEnd(cluster=C2, outcome=RunEnd.FAILED, reason=R.NODE_FAILURE),
            ),
            message="2 replicas in eu-west-a100 (preempted), then 2 in us-east-h100 (node n1 failed)",
        ),
        SchedulingCycleCompleted(**_cycle(), engine="decisions-3"),
    ]


def _governance() -> list[Event]:
    return [
        GovernanceClockTicked(ticked_by="governance"),
        PolicyConfigured(
            policy="default",
            policy_version="default.g7",
            description="cost weight raised",
            document={
                "node_policy": "fgd",
                "cluster_weights": {"fit": 6, "locality": 3, "cost": 2},
                "preemption": True,
                "max_victims": 16,
            },
            configured_by="ops@example.com",
            change=DocumentChange(
                kind=Kind.POLICY,
                name="default",
                generation=7,
                author="ops@example.com",
                changes=(FieldChange(path="spec.cluster_weights.cost", before="1", after="2"),),
            ),
        ),
        TenantRegistered(
            tenant=ML,
            display_name="ML Research",
            cohort="research",
            weight=2,
            labels={"cost-center": "cc-4410"},
            hot_model_cap_milli=16_000,
            default_priority_class=PriorityClass.CRITICAL_TRAINING,
            images=ImagePolicy(registries=("registry.example.com/ml-research", "nvcr.io"), pull_secrets=("ml-pull",)),
            change=DocumentChange(
                kind=Kind.TENANT,
                name=ML,
                generation=1,
                author="ops@example.com",
                changes=(FieldChange(path="spec.weight", after="2"),),
                labels={"cost-center": "cc-4410"},
            ),
        ),
        CohortConfigured(
            cohort="research",
            display_name="Research",
            description="ML research teams share their GPUs",
            change=DocumentChange(kind=Kind.COHORT, name="research", generation=2, author="ops@example.com"),
        ),
        BudgetSet(
            budget="ml-research-monthly",
            spec=BudgetSpec(
                tenant=ML, window=BudgetWindow.MONTH, timezone="Europe/Paris", gpu_hours=500, mode=BudgetMode.HARD
            ),
            change=DocumentChange(
                kind=Kind.BUDGET,
                name="ml-research-monthly",
                generation=3,
                author="finance@example.com",
                changes=(FieldChange(path="spec.gpu_hours", before="400", after="500"),),
            ),
        ),
        BudgetWindowOpened(
            budget="ml-research-monthly",
            window=BudgetWindow.MONTH,
            label="2025-12",
            start_ms=T0 - 24 * HOUR,
            end_ms=T0 + 30 * 24 * HOUR,
            opened_by="governance",
        ),
        QuotaSet(
            tenant=ML,
            queue=QueueId("gpu-training"),
            set_by="ops@example.com",
            request_id=REQ,
            lines=(
                QuotaLine(resource=ResourceKind.GPU, gpu_model="NVIDIA-H100-SXM5-80GB", guaranteed=8_000, limit=16_000),
                QuotaLine(resource=ResourceKind.CPU, guaranteed=256_000),
            ),
            change=DocumentChange(
                kind=Kind.QUOTA, name="ml-research-gpu-training", generation=1, author="ops@example.com", deleted=False
            ),
        ),
        QuotaRequestSubmitted(
            request_id=REQ,
            tenant=ML,
            queue=QueueId("gpu-training"),
            resource=ResourceKind.GPU,
            gpu_model="NVIDIA-H100-SXM5-80GB",
            amount=8_000,
            period_start_ms=T0,
            period_end_ms=T0 + 14 * 24 * HOUR,
            justification="conference deadline",
            requester="alice@example.com",
        ),
        QuotaRequestApproved(
            request_id=REQ,
            tenant=ML,
            rule="auto-approve-under-8-gpus",
            approved_amount=8_000,
            effective_from_ms=T0,
            expires_ms=T0 + 14 * 24 * HOUR,
        ),
        QuotaRequestRejected(
            request_id=QuotaRequestId("qr-2025-12-0032"),
            tenant=ML,
            decided_by="bob@example.com",
            comment="no H100 capacity left this quarter",
        ),
        GovernanceFinding(
            finding_id="crash-loop.ml-research.llama-ft.3",
            kind=FindingKind.CRASH_LOOP,
            rule="crash-loop",
            reason=R.CRASH_LOOP,
            tenant=ML,
            job_id=JOB,
            cluster=C1,
            node=N1,
            figures=(Figure(name="failures", value=3), Figure(name="window_ms", value=600_000)),
            observed_ms=T0,
            message="llama-ft failed 3 times within 10 minutes",
        ),
        JobIdleWarning(
            job_id=JOB_2,
            tenant=ML,
            cluster=C2,
            run=1,
            rule="idle-notebook",
            idle_since_ms=T0 - 1_800_000,
            threshold_pct=5,
            mean_utilisation_pct=1,
            idle_ms=1_800_000,
            reclaim_at_ms=T0 + 900_000,
            message="GPUs idle for 30 minutes; reclaimed in 15 minutes unless used",
        ),
    ]


def _quota_usage() -> QuotaUsageUpdated:
    return QuotaUsageUpdated(
        tenant=ML,
        queue=QueueId("gpu-training"),
        version=77,
        period_start_ms=T0 - 24 * HOUR,
        gpu_hours_milli=412_750,
        npu_hours_milli=96_000,
        usage=(
            QuotaUsage(
                resource=ResourceKind.GPU,
                gpu_model="NVIDIA-H100-SXM5-80GB",
                used=12_000,
                guaranteed=8_000,
                limit=16_000,
                borrowed=4_000,
            ),
        ),
    )


def _profiles() -> list[Event]:
    return [
        ResourceProfileUpdated(
            cluster=C1,
            node=N1,
            version=3_310,
            capacity=Quantities(cpu_milli=128_000, memory_mib=1_031_000, gpu_milli=8_000, npus=1),
            allocated=Quantities(cpu_milli=96_000, memory_mib=700_000, gpu_milli=6_000),
            free=Quantities(cpu_milli=32_000, memory_mib=331_000, gpu_milli=2_000, npus=1),
            gpu_models=(
                GpuModelProfile(
                    model="NVIDIA-A100-SXM4-80GB",
                    gpus=8,
                    memory_mib=81_920,
                    capacity_milli=8_000,
                    allocated_milli=6_000,
                    free_milli=2_000,
                    largest_free_block_milli=2_000,
                ),
            ),
            health_milli=875,
            failures_per_kgpu_hour_milli=2_500,
            congestion_milli=310,
            hot_models=("NVIDIA-A100-SXM4-80GB",),
            fit_training=True,
            fit_inference=False,
            last_seen_ms=T0 - 15_000,
            recent_failures=1,
        ),
        _quota_usage(),
    ]


def _cycle() -> dict[str, Any]:
    """The fields a cycle record has had since v1."""
    return {
        "cycle_id": CYCLE,
        "sequence": 481_516,
        "input_offsets": (
            TopicOffset(topic="fedsched.governance", partition=0, offset=912),
            TopicOffset(topic="fedsched.jobs", partition=0, offset=40_211),
            TopicOffset(topic="fedsched.jobs", partition=1, offset=39_877),
            TopicOffset(topic="fedsched.profiles", partition=3, offset=1_204_551),
        ),
        "logical_time_ms": T0,
        "policy_version": "policy-v7",
        "decision_count": 4,
        "decisions_digest": "9f2c4b1e0d8a7f6e5d4c3b2a190817263544536271809a8b7c6d5e4f3a2b1c0d",
    }


def _legacy() -> list[Event]:
    chosen, runner_up = _scores()
    return [
        JobSubmittedV1(
            **_submitted().model_dump(
                exclude={
                    "interconnect_required": True,
                    "retry": True,
                    "resources": {"npu_models", "min_npu_memory_mib"},
                }
            )
        ),
        JobQueuedV1(**_wait(), queue_position=3, estimated_start_ms=T0 + 2 * HOUR),
        JobPlacedV1(
            job_id=JOB,
            cycle_id=CYCLE,
            cluster=C1,
            run=1,
            replicas=(
                ReplicaPlacement(replica=0, node=N1, gpu_indices=(0, 1, 2, 3), gpu_milli_each=1000),
                ReplicaPlacement(replica=1, node=N1, gpu_indices=(4, 5, 6, 7), gpu_milli_each=1000),
            ),
            chosen=chosen,
            runner_up=(runner_up,),
            explanation="eu-west-a100 fits both replicas in one NVLink domain; us-east-h100 costs more.",
        ),
        JobReplicasAddedV1(
            job_id=JOB,
            cycle_id=CYCLE,
            cluster=C1,
            run=1,
            replicas=(ReplicaPlacement(replica=2, node=N1, gpu_indices=(8, 9, 10, 11), gpu_milli_each=1000),),
            running_replicas=3,
            chosen=chosen,
            explanation="added replica 2 on n1; running 3 of 4 replicas, 1 waits for room in eu-west-a100",
        ),
        GpuHealthReportedV1(
            cluster=C1,
            node=N1,
            gpus=(
                GpuHealthSampleV1(index=0, health=Health.OK, errors=0, temperature_c=58),
                GpuHealthSampleV1(index=5, health=Health.DEGRADED, errors=3, temperature_c=81),
            ),
        ),
        SchedulingCycleCompletedV1(**_cycle()),
        PolicyConfiguredV1(
            policy="default",
            policy_version="policy-v7",
            description="cost weight raised",
            document={
                "node_policy": "fgd",
                "cluster_weights": {"fit": 6, "locality": 3, "cost": 2},
                "preemption": True,
                "max_victims": 16,
            },
            configured_by="ops@example.com",
        ),
        TenantRegisteredV2(
            tenant=ML,
            display_name="ML Research",
            cohort="research",
            weight=2,
            labels={"cost-center": "cc-4410"},
            hot_model_cap_milli=16_000,
            default_priority_class=PriorityClass.CRITICAL_TRAINING,
            change=DocumentChange(
                kind=Kind.TENANT,
                name=ML,
                generation=1,
                author="ops@example.com",
                changes=(FieldChange(path="spec.weight", after="2"),),
                labels={"cost-center": "cc-4410"},
            ),
        ),
        TenantRegisteredV1(
            tenant=ML, display_name="ML Research", cohort="research", weight=2, labels={"cost-center": "cc-4410"}
        ),
        QuotaSetV1(
            tenant=ML,
            queue=QueueId("gpu-training"),
            set_by="ops@example.com",
            request_id=REQ,
            lines=(
                QuotaLine(resource=ResourceKind.GPU, gpu_model="NVIDIA-H100-SXM5-80GB", guaranteed=8_000, limit=16_000),
                QuotaLine(resource=ResourceKind.CPU, guaranteed=256_000),
            ),
        ),
        ResourceProfileUpdatedV1(**_profiles()[0].model_dump(exclude={"recent_failures"})),
        NodeUsageReportedV1(
            cluster=C1,
            node=N1,
            window_ms=60_000,
            gpus=(GpuUsageV1(index=0, utilisation_pct=97, memory_used_mib=78_000),),
            jobs=(JobUsageV1(job_id=JOB, gpu_indices=(0,), utilisation_pct=96),),
        ),
        QuotaUsageUpdatedV1(**_quota_usage().model_dump(exclude={"npu_hours_milli"})),
        GpuHealthReportedV2(**_inventory_of(GpuHealthReported).model_dump(exclude={"npus"})),
        NodeUsageReportedV2(
            cluster=C1,
            node=N1,
            window_ms=60_000,
            gpus=(GpuUsageV1(index=0, utilisation_pct=97, memory_used_mib=78_000),),
            jobs=(JobUsageV2(job_id=JOB, gpu_indices=(0,), utilisation_pct=96, run=2),),
        ),
    ]


def _inventory_of(kind: type[Event]) -> Event:
    (found,) = (e for e in _inventory() if isinstance(e, kind))
    return found


def samples() -> dict[tuple[str, int], Event]:
    """(type, version) -> one sample, for every declared type and version."""
    events = [*_inventory(), *_jobs(), *_decisions(), *_governance(), *_profiles(), *_legacy()]
    return {(e.event_type, e.schema_version): e for e in events}


def sample(cls: type[Event]) -> Event:
    return samples()[(cls.event_type, cls.schema_version)]


def envelope_for(event: Event, *, id: str | None = None) -> Envelope:
    """A fixed, realistic envelope (what the golden fixtures hold)."""
    short = event.event_type.rsplit(".", 1)[-1]
    tenant = getattr(event, "tenant", None)
    return Envelope(
        id=id or f"golden-{short}-v{event.schema_version}",
        time_ms=T0,
        data=event,
        source="urn:fedsched:golden",
        subject=event.partition_key(),
        tenant=None if tenant is None else str(tenant),
        correlation_id="golden-correlation-1",
    )


def payload(cls: type[Event]) -> dict[str, JsonValue]:
    """A sample's JSON object, to break in a test."""
    return sample(cls).model_dump(mode="json")


def broken(cls: type[Event], path: str, value: JsonValue | Callable[[JsonValue], JsonValue]) -> dict[str, JsonValue]:
    """A sample's JSON object with the value at a dotted ``path`` replaced (or transformed)."""
    data = copy.deepcopy(payload(cls))
    *parents, last = path.split(".")
    node: JsonValue = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index]
    if isinstance(node, list):
        index = int(last)
        node[index] = value(node[index]) if callable(value) else value
    elif isinstance(node, dict):
        node[last] = value(node.get(last)) if callable(value) else value
    return data


def check_complete() -> None:
    missing = [(c.event_type, c.schema_version) for c in REGISTRY.all_classes()]
    missing = [key for key in missing if key not in samples()]
    if missing:
        raise AssertionError(f"no sample for {missing}")
