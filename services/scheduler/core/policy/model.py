"""The scheduling core's input model: a fleet snapshot, the policy configuration and a logical time.

Plain frozen dataclasses, integers only (milli-CPU, MiB, milli-GPU, milliseconds). A later service builds
a ``FleetSnapshot`` from projections at a set of log offsets; the simulator and the tests build it
directly. Nothing here reads a clock or the environment. Collections are tuples; the core sorts every
collection by a stable key before it uses it, so the order in which entities are given never matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from events.catalog.jobs import Interconnect, JobKind, PriorityClass
from events.catalog.profiles import HOT_PRESSURE_MILLI
from events.catalog.types import ClusterId, JobId, NodeId, TenantId

MILLI = 1000
PREEMPTION_RATE_WINDOW_MS = 3_600_000
"""The window of the policy's ``max_preemptions_per_tenant_hour``."""

# Priority classes from most to least important (the catalogue's enum is declared in that order).
PRIORITY_ORDER: tuple[PriorityClass, ...] = tuple(PriorityClass)


def priority_rank(priority: PriorityClass) -> int:
    """0 for the most important class; larger is less important."""
    return PRIORITY_ORDER.index(priority)


class Health(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"


class NodePolicy(StrEnum):
    """How a node (and the GPUs inside it) is chosen for one replica."""

    # Ours: least increase of the model-aware expected fragmentation, within a window per replica kind,
    # then a secondary key for CPU-only replicas, then the stable rank (see placer and scoring).
    FRAGMENTATION = "fgd"
    FGD_PAPER = "fgd-paper"  # the FGD authors' scoring: sigmoid-quantised fragmentation increase
    BEST_FIT = "bestfit"
    PACKING = "packing"  # the FGD paper's GPU Packing baseline (the authors' score)
    CLUSTERING = "clustering"  # the FGD paper's GPU Clustering baseline (the authors' score)
    SPREAD = "spread"
    RANDOM = "random"  # seeded, deterministic baseline
    DOT_PRODUCT = "dotprod"  # the FGD paper's DotProd baseline (Tetris alignment, the authors' score)


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    free_milli: int = MILLI
    health: Health = Health.OK
    model: str = ""
    """This card's model; "" means the node's ``gpu_model`` (a node of one model need not repeat it)."""
    memory_mib: int = 0
    """This card's memory; 0 means the node's ``gpu_memory_mib``."""


@dataclass(frozen=True, slots=True)
class Npu:
    """One NPU (a whole device: NPUs are not shared between replicas)."""

    index: int
    model: str = ""
    memory_mib: int = 0
    free: bool = True
    health: Health = Health.OK


Taint = tuple[str, str, str]
"""(key, value, effect) of a node taint."""
Toleration = tuple[str, str | None, str | None]
"""(key, value, effect) of a job's toleration; a None value or effect matches any."""
HARD_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
"""Effects that keep an untolerating job off a node (PreferNoSchedule only asks, and is not one)."""


def tolerates(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    """Does a job with ``tolerations`` tolerate every hard one of ``taints`` (the rule of Kubernetes)."""
    return all(
        any(
            key == t_key and (value is None or value == t_value) and (effect is None or effect == t_effect)
            for key, value, effect in tolerations
        )
        for t_key, t_value, t_effect in taints
        if t_effect in HARD_TAINT_EFFECTS
    )


def hard_taints(taints: Sequence[Taint]) -> tuple[Taint, ...]:
    return tuple(t for t in taints if t[2] in HARD_TAINT_EFFECTS)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: NodeId
    cluster: ClusterId
    cpu_milli: int
    memory_mib: int
    cpu_free_milli: int
    memory_free_mib: int
    gpu_model: str = ""
    """The model of its GPUs (of its first GPU when they differ: each ``Gpu`` then names its own)."""
    gpu_memory_mib: int = 0
    gpus: tuple[Gpu, ...] = ()
    schedulable: bool = True
    nvlink_domain: str = ""
    """The NVLink/NVSwitch domain the node's GPUs share with other nodes' (one NVL72 rack); "" = none."""
    rdma_fabric: str = ""
    """The RDMA fabric (InfiniBand or RoCE) the node is on; "" = none. An empty domain or fabric is never
    one that nodes share (see ``policy.topology``)."""
    taints: tuple[Taint, ...] = ()
    """Sorted; those with a hard effect (``HARD_TAINT_EFFECTS``) keep a job off unless it tolerates them."""
    npus: tuple[Npu, ...] = ()


@dataclass(frozen=True, slots=True)
class Cluster:
    cluster_id: ClusterId
    datasets: tuple[str, ...] = ()
    congestion_milli: int = 0  # 0 idle .. 1000 saturated network / storage, from profiles
    stability_milli: int = MILLI  # 1000 = no recent failures
    cost_milli_per_gpu_hour: int = 0
    """A flat price for a GPU-hour of a model ``gpu_rates`` does not name (0: free or unknown)."""
    gpu_model_pressure_milli: tuple[tuple[str, int], ...] = ()  # profile-reported demand pressure
    status: str = "reachable"  # as its connector last reported: reachable, unreachable or draining
    gpu_rates: tuple[tuple[str, int], ...] = ()
    """(GPU model, milli-units of its currency per GPU-hour), by model: what a job pays for the model it
    would use here."""
    fit_training: bool = True
    """Some node of it suits long multi-GPU training (enough GPUs or a fast interconnect, healthy)."""
    fit_inference: bool = True
    """Some node of it suits serving (healthy, seldom failing)."""
    failures_per_kgpu_hour_milli: int = 0
    """GPU failures in the last day per 1,000 GPU-hours of its GPUs, in thousandths (part of what lowered
    ``stability_milli``, for explanations)."""
    recent_failures: int | None = None
    """GPU and NPU failures of its nodes in the last day (None: not known), for explanations."""

    def rate_of(self, model: str) -> int:
        """The price of a GPU-hour of ``model`` here: its listed rate, else the flat one."""
        for named, rate in self.gpu_rates:
            if named == model:
                return rate
        return self.cost_milli_per_gpu_hour

    def fit_for(self, job: Job) -> bool:
        """Whether its nodes suit ``job``: training and fine-tuning on more than one GPU want a node fit
        for training, inference one fit for serving; other work (and one-GPU training) any node."""
        if job.kind in (JobKind.TRAINING, JobKind.FINE_TUNE) and job.total_gpu_milli() > MILLI:
            return self.fit_training
        if job.kind is JobKind.INFERENCE:
            return self.fit_inference
        return True


@dataclass(frozen=True, slots=True)
class Quota:
    """Guaranteed (nominal) and limit for one resource of one tenant (or one tenant's queue).

    ``resource`` is ``"gpu"`` (milli-GPU), ``"cpu"`` (milli-CPU), ``"memory"`` (MiB), ``"npu"`` (NPUs),
    ``"gpu:<MODEL>"`` (milli-GPU of that model) or ``"npu:<MODEL>"`` (NPUs of that model).
    Usage above ``guaranteed`` is borrowed from the cohort and reclaimable; usage never exceeds ``limit``.
    """

    resource: str
    guaranteed: int
    limit: int
    queue: str = ""  # "" = the tenant as a whole


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """GPU usage that ended (or was sampled) at ``at_ms``: milli-GPU x milliseconds."""

    at_ms: int
    gpu_milli_ms: int


@dataclass(frozen=True, slots=True)
class UsageHistory:
    """A tenant's past GPU usage as per-epoch sums of grown records (see ``policy.usage``): it decays to
    any moment in a few integer divisions, however long the history."""

    half_life_ms: int = 0
    """The half-life the records were grown with (fair share refuses another)."""
    epochs: tuple[tuple[int, int, int], ...] = ()
    """(epoch start ms, grown sum, plain sum), by start."""


@dataclass(frozen=True, slots=True)
class Tenant:
    tenant_id: TenantId
    weight: int = 1
    cohort: str = ""
    quotas: tuple[Quota, ...] = ()
    usage: UsageHistory = UsageHistory()
    hot_model_cap_milli: int | None = None  # None: the policy default


@dataclass(frozen=True, slots=True)
class Job:
    """A job request: ``replicas`` identical replicas, each asking for the per-replica resources."""

    job_id: JobId
    tenant: TenantId
    queue: str = "default"
    kind: JobKind = JobKind.BATCH
    priority_class: PriorityClass = PriorityClass.STANDARD
    replicas: int = 1
    gang: bool = False
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0  # whole GPUs per replica
    gpu_milli: int = 0  # share of one GPU per replica (1..999), exclusive with ``gpus``
    gpu_models: tuple[str, ...] = ()  # acceptable models; empty = any
    min_gpu_memory_mib: int = 0
    interconnect: Interconnect = Interconnect.NONE
    """What its replicas talk over: they are kept inside one NVLink domain (``nvlink``) or RDMA fabric
    (``rdma``), as a preference (a cost per replica outside the first one's) unless required."""
    interconnect_required: bool = False
    """The interconnect is a hard constraint: all replicas in one domain of it, on nodes that have one,
    or the job waits (``policy.topology``)."""
    datasets: tuple[str, ...] = ()
    preemptible: bool = True
    expected_runtime_s: int | None = None
    max_runtime_s: int | None = None
    submitted_at_ms: int = 0
    times_preempted: int = 0
    """Runs of it that were preempted or reclaimed; its class's ``interruption_budget`` bounds them."""
    tolerations: tuple[Toleration, ...] = ()
    """Sorted; see ``tolerates``."""
    min_replicas: int | None = None
    """Fewest replicas the job may start with when not all fit (a job that is not a gang: 1, or an
    inference service's ``inference.min_replicas``); None: all of them or none (a gang). A run started
    with fewer grows in its cluster as room appears (``RunningJob.replicas_asked``)."""
    npus: int = 0  # whole NPUs per replica
    npu_models: tuple[str, ...] = ()  # acceptable NPU models; empty = any
    min_npu_memory_mib: int = 0
    application_retries: int = 0
    """Retries it asked for after its own workload fails a run (``retry.on_application_failure``)."""
    spread_clusters: int = 1
    """How many clusters its replicas may live in (an inference service's ``inference.spread_clusters``):
    above 1, no cluster holds more than ``per_cluster_cap`` of them and its run has a part per cluster."""

    def per_cluster_cap(self) -> int:
        """The most replicas one cluster may hold of it: all of them, or ceil(replicas / spread_clusters)."""
        return -(-self.replicas // self.spread_clusters)

    def gpu_milli_per_replica(self) -> int:
        return self.gpus * MILLI + self.gpu_milli

    def total_gpu_milli(self) -> int:
        return self.gpu_milli_per_replica() * self.replicas

    def total_npu_milli(self) -> int:
        """Its NPUs in milli-NPU (1000 an NPU), as the hot-model cap counts them."""
        return self.npus * MILLI * self.replicas


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    node_id: NodeId
    gpu_indices: tuple[int, ...] = ()
    gpu_milli_each: int = 0  # milli-GPU taken from each listed GPU
    npu_indices: tuple[int, ...] = ()  # whole NPUs taken


@dataclass(frozen=True, slots=True)
class RunningJob:
    job: Job
    cluster: ClusterId
    placements: tuple[ReplicaPlacement, ...]
    started_at_ms: int = 0
    stopping: bool = False
    """Its run was asked to stop (preempted or reclaimed) and has not stopped yet: it still holds its
    resources, but no preemption may count on stopping it again."""
    stopping_for: JobId | None = None
    """The job it is stopping to make room for (a preemption), if any: that job counts on its room."""
    replicas_asked: int = 0
    """What its job asks when the run holds fewer (a job that is not a gang starts with what fits, and
    grows in its cluster as room appears: ``job.replicas`` is what it holds); 0: it holds all of them."""
    parts: tuple[tuple[ClusterId, int], ...] = ()
    """A spread run's live parts, (cluster, replicas held there) in the order they opened: what a top-up
    may add to under the per-cluster cap. Empty for a run in one cluster. In a snapshot's ``running`` a
    spread run is one entry per part (``cluster``, ``placements`` and ``job.replicas`` that part's), so
    preemption and quota see each part where it is; its ``growing`` entry is the whole run."""
    left: tuple[ClusterId, ...] = ()
    """Clusters where a part of this spread run ended: it is never reopened there."""

    def missing(self) -> int:
        """Replicas its job asks that the run does not hold yet."""
        return max(0, self.replicas_asked - self.job.replicas)

    def requested(self) -> Job:
        """Its job as asked (all its replicas): what goes back to the queue when the run is stopped."""
        return replace(self.job, replicas=self.replicas_asked) if self.replicas_asked else self.job

    @staticmethod
    def started(job: Job, cluster: ClusterId, placements: tuple[ReplicaPlacement, ...], at_ms: int) -> RunningJob:
        """The run a placement of ``job`` starts at ``at_ms``, holding ``placements`` (fewer than the job
        asks for a job that is not a gang and started with what fit)."""
        held = len(placements)
        if held < job.replicas:
            return RunningJob(replace(job, replicas=held), cluster, placements, at_ms, replicas_asked=job.replicas)
        return RunningJob(job, cluster, placements, at_ms)

    def grown(self, placements: tuple[ReplicaPlacement, ...]) -> RunningJob:
        """The run with ``placements`` added (a top-up)."""
        held = self.job.replicas + len(placements)
        return replace(
            self,
            job=replace(self.job, replicas=held),
            placements=(*self.placements, *placements),
            replicas_asked=self.replicas_asked if held < self.replicas_asked else 0,
        )


@dataclass(frozen=True, slots=True)
class PreemptionRules:
    """How the jobs of one priority class may be preempted (the class of the victim)."""

    interruption_budget: int = 3
    """How many runs of one job may be preempted or reclaimed (0: never preempted)."""
    grace_period_s: int = 30
    """How long a victim is given to checkpoint and stop once asked."""
    min_runtime_s: int = 0
    """How long a run must have run (since its start) before it may be preempted."""


@dataclass(frozen=True, slots=True)
class RetryRules:
    """How the jobs of one priority class are retried after the infrastructure failed their run (a node
    failed, was lost or removed, a GPU failed, the job was evicted). Retry n waits
    ``backoff_s * 2**(n-1)`` seconds after the failure, at most ``max_backoff_s``."""

    max_retries: int = 2
    """Retries of one job after infrastructure failures (0: none; it ends failed at the first)."""
    backoff_s: int = 30
    max_backoff_s: int = 600


DEFAULT_RETRY_RULES: tuple[tuple[PriorityClass, RetryRules], ...] = (
    (PriorityClass.PRODUCTION_INFERENCE, RetryRules(max_retries=10, backoff_s=5, max_backoff_s=300)),
    (PriorityClass.CRITICAL_TRAINING, RetryRules(max_retries=3, backoff_s=30, max_backoff_s=600)),
    (PriorityClass.STANDARD, RetryRules(max_retries=2, backoff_s=60, max_backoff_s=900)),
    (PriorityClass.BEST_EFFORT, RetryRules(max_retries=1, backoff_s=120, max_backoff_s=1800)),
)
"""The retry rules of each class unless the policy says otherwise: the more important, the more retries
and the sooner."""


@dataclass(frozen=True, slots=True)
class FailedRun:
    """A run that failed for a cause that may be retried, awaiting the scheduler's verdict."""

    job: Job
    run: int
    cluster: ClusterId
    node: str | None
    failure: str
    """The ``JobFailed`` reason code."""
    infrastructure: bool
    """The infrastructure's failure (else the workload's own)."""
    failed_at_ms: int
    retries_used: int
    """Retries of this kind (infrastructure or application) the job had before this failure."""


@dataclass(frozen=True, slots=True)
class ClusterWeights:
    """Weights of the federation score; each term is normalised to 0..1000 before weighting."""

    fit: int = 6
    locality: int = 3
    congestion: int = 1
    hot_spot: int = 2
    health: int = 2
    cost: int = 1


@dataclass(frozen=True, slots=True)
class Shape:
    """A typical replica shape and its weight (count) in the target workload (for fragmentation)."""

    cpu_milli: int
    gpu_milli: int  # per GPU: 1000 for whole GPUs, < 1000 for a share, 0 for CPU-only
    gpus: int
    models: tuple[str, ...] = ()
    weight: int = 1


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    version: str = "policy-v1"
    node_policy: NodePolicy = NodePolicy.FRAGMENTATION
    seed: int = 0  # for the random policy and tie-breaking only
    typical_shapes: tuple[Shape, ...] = ()  # empty: derived from the running and pending jobs
    typical_coverage_pct: int = 95
    cluster_weights: ClusterWeights = field(default_factory=ClusterWeights)
    degraded_gpu_penalty: int = 1_000_000
    # Fragmentation policy: nodes whose fragmentation increase is within this many expected milli-GPU
    # of the best are equally good; among them the stable rank decides (it consolidates load). One window
    # for whole-GPU and CPU-only replicas, one for GPU shares (exact: 0).
    frag_window_milli: int = 60
    frag_share_window_milli: int = 0
    cross_domain_penalty: int = 500_000
    """A preferred interconnect's cost for a node outside the first replica's domain (``topology``)."""
    # Fair share.
    usage_half_life_ms: int = 7 * 24 * 3600 * 1000
    aging_step_ms: int = 3600 * 1000  # each full step of waiting lowers the fair-share key by one unit
    aging_unit_milli: int = 100  # ... by this much (in the 0..1000 dominant-share scale)
    class_aging_step_ms: int = 4 * 3600 * 1000
    """Across classes: each full step of waiting orders a job as the next priority class up (0: never),
    up to ``class_aging_ceiling``; see ``ordering_rank``."""
    class_aging_ceiling: PriorityClass = PriorityClass.STANDARD
    """The most important class aging orders a job as (never production inference)."""
    # Hot-spot governance.
    hot_pressure_milli: int = HOT_PRESSURE_MILLI  # a GPU or NPU model this much allocated is hot (``is_hot``)
    hot_model_cap_milli: int | None = None
    """Per-tenant cap on hot models: milli-GPU of hot GPU models, and as many milli-NPU (1000 an NPU) of hot
    NPU models, counted apart; None: none."""
    # Preemption and backfill.
    preemption: bool = True
    max_victims: int = 16
    preemption_classes: tuple[tuple[PriorityClass, PreemptionRules], ...] = tuple(
        (p, PreemptionRules()) for p in PriorityClass
    )
    """Per priority class of the victim (every class, in ``PRIORITY_ORDER``): see ``rules_for``."""
    max_preemptions_per_cycle: int | None = None  # jobs asked to stop in one cycle; None: no limit
    max_preemptions_per_tenant_hour: int | None = None
    """Jobs of one tenant asked to stop within an hour of the log's time (this cycle's included); None:
    no limit."""
    backfill: bool = True
    reservation_min_gpus: int = 8  # head-of-line gang jobs asking at least this many GPUs get a reservation
    default_runtime_s: int = 3600  # used for estimates when a job states no expected runtime
    max_decisions: int = 10_000
    estimate_limit: int = 64  # queued jobs (in queue order) that get an estimated start time
    retry_classes: tuple[tuple[PriorityClass, RetryRules], ...] = DEFAULT_RETRY_RULES
    """Per priority class of the job whose run the infrastructure failed (every class, in
    ``PRIORITY_ORDER``): see ``retry_rules_for``."""

    def rules_for(self, priority: PriorityClass) -> PreemptionRules:
        """The preemption rules of a class (the defaults for a class the policy does not name)."""
        for named, rules in self.preemption_classes:
            if named is priority:
                return rules
        return PreemptionRules()

    def retry_rules_for(self, priority: PriorityClass) -> RetryRules:
        """The retry rules of a class (the class's defaults for a class the policy does not name)."""
        for named, rules in (*self.retry_classes, *DEFAULT_RETRY_RULES):
            if named is priority:
                return rules
        return RetryRules()


def ordering_rank(job: Job, now_ms: int, config: PolicyConfig) -> int:
    """The class a waiting job is ordered as (``priority_rank`` of a class): its own, one class up for
    every ``class_aging_step_ms`` it has waited since it was submitted, but never above the policy's
    ``class_aging_ceiling``. Jobs that waited long all meet in the ceiling's class, where the longest wait
    goes first (fair share's aging), so a stream of jobs of classes up to the ceiling cannot starve a job
    for ever: it waits at most a step per class below the ceiling, then as long as a job of that class.
    (Were every class raised without a ceiling, the jobs of the stream would be raised too and stay
    ahead.) Order only: preemption keeps the job's own class."""
    rank = priority_rank(job.priority_class)
    step = config.class_aging_step_ms
    ceiling = priority_rank(config.class_aging_ceiling)
    if step <= 0 or rank <= ceiling:
        return rank
    return max(ceiling, rank - max(0, now_ms - job.submitted_at_ms) // step)


@dataclass(frozen=True, slots=True)
class RunningDelta:
    """How a snapshot's ``running`` differs from an earlier snapshot's (``base``, the very tuple): what
    came and what went. A hint for ``CycleMemo``, which then counts running jobs by what changed instead
    of comparing every running job each cycle; a hint that does not fit what the memo counted last is
    ignored, so it never changes a result."""

    base: tuple[RunningJob, ...]
    added: tuple[RunningJob, ...] = ()
    removed: tuple[RunningJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Budget:
    """A hard GPU-hour budget in the window in force: what its tenants (one, or a cohort's members) may
    still start. ``spent_milli_ms`` is the GPU time held within the window so far (runs that ended and
    running ones, up to the snapshot's time) plus what the running ones are expected to hold in it still."""

    name: str
    tenants: tuple[TenantId, ...]
    window: str
    """The window's label (``2026-12``)."""
    window_end_ms: int
    limit_milli_ms: int
    spent_milli_ms: int


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Everything one scheduling cycle decides on, as of ``now_ms`` (logical time, from the log)."""

    now_ms: int
    clusters: tuple[Cluster, ...]
    nodes: tuple[Node, ...]
    tenants: tuple[Tenant, ...] = ()
    running: tuple[RunningJob, ...] = ()
    pending: tuple[Job, ...] = ()
    budgets: tuple[Budget, ...] = ()
    """The hard budgets in force, by name."""
    preempted_last_hour: tuple[tuple[TenantId, int], ...] = ()
    """Per tenant (by id), its jobs the scheduler asked to stop within the hour up to ``now_ms``: what
    the policy's ``max_preemptions_per_tenant_hour`` counts."""
    failed: tuple[FailedRun, ...] = ()
    """Runs that failed for a cause that may be retried and have no verdict yet, by job id."""
    # Not part of what is decided on (two snapshots with the same jobs are equal with or without it).
    running_delta: RunningDelta | None = field(default=None, compare=False, repr=False)
    growing: tuple[RunningJob, ...] | None = field(default=None, compare=False, repr=False)
    """The running jobs that hold fewer replicas than they ask (``RunningJob.replicas_asked``), when the
    caller keeps them (the scheduler's state does): derived from ``running``, so not compared either;
    ``None``: the cycle finds them in ``running``."""


__all__ = [
    "DEFAULT_RETRY_RULES",
    "HARD_TAINT_EFFECTS",
    "MILLI",
    "PREEMPTION_RATE_WINDOW_MS",
    "PRIORITY_ORDER",
    "Budget",
    "Cluster",
    "ClusterId",
    "ClusterWeights",
    "FailedRun",
    "FleetSnapshot",
    "Gpu",
    "Health",
    "Interconnect",
    "Job",
    "JobId",
    "JobKind",
    "Node",
    "NodeId",
    "NodePolicy",
    "Npu",
    "PolicyConfig",
    "PreemptionRules",
    "PriorityClass",
    "Quota",
    "ReplicaPlacement",
    "RetryRules",
    "RunningDelta",
    "RunningJob",
    "Shape",
    "Taint",
    "Tenant",
    "TenantId",
    "Toleration",
    "UsageHistory",
    "UsageRecord",
    "hard_taints",
    "ordering_rank",
    "priority_rank",
    "tolerates",
]
