"""The names the Kubernetes connector writes and reads: labels, annotations, object names, event ids.

Called by the pure mappers (``nodes``, ``pods``, ``lifecycle``) and by the watchers and the executor.
Pure: no I/O. Everything here is deterministic, so a placement applied twice names the same pods and a
transition reported twice carries the same event id (a recognisable duplicate).

Node labels read (documented in ``connectors/kubernetes/README.md``):

- ``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` (MiB per GPU), ``nvidia.com/gpu.count``: NVIDIA GPU
  feature discovery; ``nvidia.com/gpu`` in ``status.allocatable`` is the number of usable GPUs.
- ``nvidia.com/gpu.clique`` (GPU feature discovery on multi-node NVLink systems) or
  ``fedsched.io/nvlink-domain``: the NVLink domain. ``fedsched.io/rdma-fabric``: the RDMA fabric.
- ``fedsched.io/gpu-health`` (label, whole node: ok, degraded, failed) and the annotation
  ``fedsched.io/gpu-health`` (JSON list of per-GPU samples) written by a node health agent; the same for
  NPUs as ``fedsched.io/npu-health``.
- AMD GPUs and Ascend NPUs: their device plugins' resources and labels, listed in ``accelerators``.

Pods written: labels ``app.kubernetes.io/managed-by=fedsched``, ``fedsched.io/cluster``,
``fedsched.io/job-id``, ``fedsched.io/run``, ``fedsched.io/replica``, ``fedsched.io/tenant``; the finalizer
``fedsched.io/lifecycle`` (held until the job's outcome is reported); annotations for the full job id,
the replica count (and, for a job spread over clusters, its part's here), the GPU indices chosen, what
was reported and why the pod is being stopped. Services (``services``) carry the same labels but the
replica's, and are named after the run (``service_name``).
"""

from __future__ import annotations

import hashlib
import re

from events.catalog.types import ClusterId, JobId, TenantId

# -- pods and namespaces ------------------------------------------------------------------------------

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "fedsched"
LABEL_CLUSTER = "fedsched.io/cluster"
LABEL_JOB = "fedsched.io/job-id"
LABEL_RUN = "fedsched.io/run"
LABEL_REPLICA = "fedsched.io/replica"
LABEL_TENANT = "fedsched.io/tenant"
LABEL_JOB_NAME = "fedsched.io/job-name"
"""The job's name as its submitter gave it (a label value, hashed when too long): ``kubectl get svc -l``
finds a job's pods and Services by the name people know. Not in any selector (pods made before it
existed lack it)."""

ANN_JOB = "fedsched.io/job-id"
"""The full job id (the label holds a shortened form when the id is longer than 63 characters)."""
ANN_TENANT = "fedsched.io/tenant"
ANN_REPLICAS = "fedsched.io/replicas"
ANN_PART_REPLICAS = "fedsched.io/part-replicas"
"""For a job spread over clusters: how many of its run's replicas this cluster holds (the run's part here)
with this pod's decision; the run's own count (``ANN_REPLICAS``) includes other clusters' replicas."""
ANN_GPU_INDICES = "fedsched.io/gpu-indices"
ANN_NPU_INDICES = "fedsched.io/npu-indices"
ANN_GPU_MILLI = "fedsched.io/gpu-milli"
ANN_CYCLE = "fedsched.io/cycle-id"
ANN_REPORTED = "fedsched.io/reported"
"""Comma-separated transitions already published for this run (``started,succeeded``)."""
ANN_READINESS = "fedsched.io/readiness"
"""How a service's pod is found ready: ``template`` (its own probe), ``tcp:<port>``, or ``none`` and why."""
ANN_STOP = "fedsched.io/stop"
"""Why fedsched is stopping the pod: ``preempted``, ``reclaimed``, ``cancelled`` or ``failed``."""
ANN_STOP_BY = "fedsched.io/stop-requester"
ANN_STOP_GRACE = "fedsched.io/stop-grace-s"
"""The grace period of the stop, so that whoever deletes the pod (executor, or pod watcher after a restart)
asks for the same one."""
FINALIZER = "fedsched.io/lifecycle"

# -- nodes --------------------------------------------------------------------------------------------

GPU_RESOURCE = "nvidia.com/gpu"
GPU_SHARED_RESOURCE = "nvidia.com/gpu.shared"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_CLIQUE = "nvidia.com/gpu.clique"
LABEL_NVLINK_DOMAIN = "fedsched.io/nvlink-domain"
LABEL_RDMA_FABRIC = "fedsched.io/rdma-fabric"
LABEL_GPU_HEALTH = "fedsched.io/gpu-health"
ANN_GPU_HEALTH = "fedsched.io/gpu-health"
LABEL_NPU_HEALTH = "fedsched.io/npu-health"
ANN_NPU_HEALTH = "fedsched.io/npu-health"

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ID = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
_EVENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$")


def digest(text: str, length: int = 12) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _dns_label(text: str, budget: int) -> str:
    """``text`` as a DNS label of at most ``budget`` characters; a hash keeps shortened names distinct."""
    clean = re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")
    if clean == text and len(clean) <= budget and _DNS_LABEL.match(clean):
        return clean
    head = clean[: max(budget - 13, 1)].strip("-") or "x"
    return f"{head}-{digest(text)}"


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 characters), shortened with a hash when it does not fit."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:50].strip("-_.") or "x"
    return f"{head}-{digest(text)}"


def run_selector(cluster: ClusterId, job_id: JobId, run: int | None = None) -> str:
    """The label selector of the objects the connector made for a job here (of one run, or of every run)."""
    parts = [
        f"{MANAGED_BY}={MANAGED_BY_VALUE}",
        f"{LABEL_CLUSTER}={label_value(cluster)}",
        f"{LABEL_JOB}={job_label(job_id)}",
    ]
    if run is not None:
        parts.append(f"{LABEL_RUN}={run}")
    return ",".join(parts)


def job_label(job_id: JobId) -> str:
    return label_value(job_id)


def pod_name(job_id: JobId, run: int, replica: int) -> str:
    """The pod of one replica of one run: a DNS label (so also a valid hostname), the same every time."""
    suffix = f"-{run}-{replica}"
    return _dns_label(job_id, 63 - len(suffix)) + suffix


def service_name(job_id: JobId, run: int) -> str:
    """The Service of one run (its headless rendezvous Service, or its service's): a DNS-1035 label (it
    starts with a letter), the same every time, distinct for distinct job ids."""
    suffix = f"-{run}"
    head = _dns_label(job_id, 63 - len(suffix))
    if not head[0].isalpha():  # hashed, so that job "1a" and job "j-1a" keep distinct names
        head = f"j-{head[: 63 - len(suffix) - 15].strip('-')}-{digest(job_id)}"
    return head + suffix


def namespace_name(tenant: TenantId, prefix: str) -> str:
    """The namespace of a tenant: ``prefix`` + the tenant id, as a DNS label."""
    return _dns_label(prefix + tenant, 63)


def event_id(cluster: ClusterId, *parts: object) -> str:
    """A deterministic CloudEvents id: ``k8s/<cluster>/<part>/...``; hashed if it would be too long."""
    text = "/".join(["k8s", cluster, *(str(p) for p in parts)])
    if _EVENT_ID.match(text):
        return text
    return f"k8s/{digest(text, 40)}"


def is_id(text: str) -> bool:
    """True when ``text`` is a valid fedsched identifier (node ids, topology domains)."""
    return bool(_ID.match(text))


def to_id(text: str) -> str | None:
    """``text`` made into a fedsched identifier (lowercased, other characters to ``-``), or None."""
    clean = re.sub(r"[^a-z0-9._-]", "-", text.strip().lower()).strip("._-")
    if len(clean) > 128:
        clean = clean[:115].strip("._-") + "-" + digest(text)
    return clean if clean and _ID.match(clean) else None
