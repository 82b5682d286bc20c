"""A placement as Kubernetes objects: the tenant's namespace and one pod per replica.

Called by ``executor`` when a ``JobPlaced`` or a ``JobReplicasAdded`` for this cluster arrives, and by
unit tests. A pod says how many replicas its run held when it was made (``FEDSCHED_REPLICAS``,
``fedsched.io/replicas``): a run that grows has pods made with more; the pod watcher takes the most. A pod
of a job spread over clusters also says how many the run's part in this cluster held
(``fedsched.io/part-replicas``, what the pod watcher counts then). Pure: takes the
decision and the job's ``JobSubmitted`` and returns manifests (plain dicts), deterministic for the same
inputs, so applying a decision twice creates nothing new (the second create gets 409 AlreadyExists).

The job's ``template`` (opaque to the scheduler) is read in one of three forms:

- a pod template: ``{"metadata": {...}, "spec": {...}}`` (a Kubernetes ``PodTemplateSpec``);
- a shorthand: ``{"image": ..., "command": [...], "args": [...], "env": {"NAME": "value"}, "workingDir": ...,
  "port": 8080}`` (``port``: the one port the container serves on, named ``main``);
- empty: one container named ``main`` with the connector's default image, if it has one.

The connector owns: the pod's name, namespace, ``nodeName`` (the replica's node: no scheduler runs
again), the first container's resource requests (CPU, memory, and the device plugins' resources of the
replica's GPU and NPU indices on its node, ``accelerators.requests``: ``nvidia.com/gpu`` or ``amd.com/gpu``
per whole GPU, one ``nvidia.com/gpu.shared`` for a share of a GPU, ``huawei.com/Ascend910`` per NPU, ...),
the job's tolerations, the
``fedsched.io`` labels and annotations, the finalizer, ``FEDSCHED_*`` environment variables and, unless
the template sets it, ``activeDeadlineSeconds`` from ``max_runtime_s``. What the job's kind adds (the
restart policy, the rendezvous environment and DNS name of training, the readiness of services) is in
``kinds``. A template that asks accelerators beyond the job's request (``template_guard``) or a restart
policy its kind cannot have is refused (``RenderError``) before any object is made.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.kubernetes import accelerators, kinds, names, template_guard
from events.catalog.decisions import JobPlaced, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import JobKind, JobSubmitted, Toleration
from events.catalog.types import ClusterId, TenantId

Manifest = dict[str, Any]

RunPods = JobPlaced | JobReplicasAdded
"""What names pods of a run: its placement, or replicas added to it later (same labels and names)."""


def replica_count(placed: RunPods) -> int:
    """How many replicas the run holds with these pods (a growing run: with those added so far)."""
    return placed.running_replicas if isinstance(placed, JobReplicasAdded) else len(placed.replicas)


class RenderError(ValueError):
    """The job's template cannot become a pod; the message says why, for the person who submitted it."""


def _unseen(node: str) -> accelerators.NodeDevices | None:
    return None


@dataclass(frozen=True, slots=True)
class RenderOptions:
    cluster: ClusterId
    namespace_prefix: str = "fedsched-"
    default_image: str | None = None
    gpu_resource: str = names.GPU_RESOURCE
    gpu_shared_resource: str = names.GPU_SHARED_RESOURCE
    pod_security: str | None = "baseline"
    """Pod Security Admission level enforced in the tenant namespaces the connector creates (None: none)."""
    devices: Callable[[str], accelerators.NodeDevices | None] = _unseen
    """A node's GPU and NPU resources by index, as the node watcher last saw them (None: not seen)."""
    rendezvous_port: int = kinds.DEFAULT_MASTER_PORT
    """``MASTER_PORT`` of training runs whose template names none (``kinds.master_port``)."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain, in ``MASTER_ADDR`` (the kubelet's ``--cluster-domain``)."""


def namespace_manifest(tenant: TenantId, options: RenderOptions) -> Manifest:
    labels = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.LABEL_TENANT: names.label_value(tenant)}
    if options.pod_security:
        labels["pod-security.kubernetes.io/enforce"] = options.pod_security
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": names.namespace_name(tenant, options.namespace_prefix),
            "labels": labels,
            "annotations": {names.ANN_TENANT: tenant},
        },
    }


def workload(job: JobSubmitted, options: RenderOptions) -> tuple[Manifest, Manifest]:
    """(metadata, spec) of the workload, from the template's form (copies: the job's own is not touched)."""
    template: Mapping[str, Any] = job.template
    if "spec" in template:
        meta, spec = template.get("metadata") or {}, template["spec"]
        if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
            raise RenderError("template.spec and template.metadata must be objects")
        spec = copy.deepcopy(dict(spec))
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
            raise RenderError("template.spec.containers must list at least one container")
        return copy.deepcopy(dict(meta)), spec
    image = template.get("image") or options.default_image
    if not image or not isinstance(image, str):
        raise RenderError("the job's template names no image and the connector has no default image")
    container: Manifest = {"name": "main", "image": image}
    for key in ("command", "args"):
        if key in template:
            value = template[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise RenderError(f"template.{key} must be a list of strings")
            container[key] = list(value)
    env = template.get("env") or {}
    if not isinstance(env, Mapping):
        raise RenderError("template.env must be an object of names to values")
    container["env"] = [{"name": str(k), "value": str(v)} for k, v in sorted(env.items())]
    if isinstance(template.get("workingDir"), str):
        container["workingDir"] = template["workingDir"]
    if "port" in template:
        port = template["port"]
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise RenderError("template.port must be a port number (1-65535)")
        container["ports"] = [{"name": "main", "containerPort": port, "protocol": "TCP"}]
    return {}, {"containers": [container]}


def _requests(job: JobSubmitted, replica: ReplicaPlacement, options: RenderOptions) -> dict[str, str]:
    wanted: dict[str, str] = {}
    if job.resources.cpu_milli:
        wanted["cpu"] = f"{job.resources.cpu_milli}m"
    if job.resources.memory_mib:
        wanted["memory"] = f"{job.resources.memory_mib}Mi"
    try:
        wanted |= accelerators.requests(
            replica.node,
            options.devices(replica.node),
            replica.gpu_indices,
            replica.gpu_milli_each,
            replica.npu_indices,
            nvidia=options.gpu_resource,
            nvidia_shared=options.gpu_shared_resource,
        )
    except accelerators.DeviceRequestError as error:
        raise RenderError(str(error)) from None
    return wanted


def _env(placed: RunPods, replica: ReplicaPlacement) -> list[Manifest]:
    values = {
        "FEDSCHED_JOB_ID": placed.job_id,
        "FEDSCHED_RUN": str(placed.run),
        "FEDSCHED_REPLICA": str(replica.replica),
        "FEDSCHED_REPLICAS": str(replica_count(placed)),
        "FEDSCHED_GPU_INDICES": ",".join(str(i) for i in replica.gpu_indices),
        "FEDSCHED_NPU_INDICES": ",".join(str(i) for i in replica.npu_indices),
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def _container(container: Manifest, env: list[Manifest], requests: Mapping[str, str] | None) -> Manifest:
    ours = {e["name"] for e in env}
    container["env"] = [e for e in container.get("env") or [] if e.get("name") not in ours] + env
    if requests is not None:
        resources = container.setdefault("resources", {})
        resources["requests"] = {**(resources.get("requests") or {}), **requests}
        extended = {k: v for k, v in requests.items() if k not in ("cpu", "memory")}
        if extended:  # extended resources must have limits equal to requests
            resources["limits"] = {**(resources.get("limits") or {}), **extended}
    return container


def _toleration(toleration: Toleration) -> Manifest:
    out: Manifest = {"key": toleration.key}
    if toleration.value is None:
        out["operator"] = "Exists"
    else:
        out["operator"] = "Equal"
        out["value"] = toleration.value
    if toleration.effect is not None:
        out["effect"] = toleration.effect.value
    return out


def pod_labels(placed: RunPods, replica: int, tenant: TenantId, cluster: ClusterId) -> dict[str, str]:
    return {
        names.MANAGED_BY: names.MANAGED_BY_VALUE,
        names.LABEL_CLUSTER: names.label_value(cluster),
        names.LABEL_JOB: names.job_label(placed.job_id),
        names.LABEL_RUN: str(placed.run),
        names.LABEL_REPLICA: str(replica),
        names.LABEL_TENANT: names.label_value(tenant),
    }


def render_pod(
    placed: RunPods,
    job: JobSubmitted,
    replica: ReplicaPlacement,
    options: RenderOptions,
    part_replicas: int | None = None,
) -> Manifest:
    meta, spec = workload(job, options)
    namespace = names.namespace_name(job.tenant, options.namespace_prefix)
    requests = _requests(job, replica, options)
    own = (options.gpu_resource, options.gpu_shared_resource)
    refused = template_guard.problems(job.template, template_guard.exactly(requests), own)
    if refused:
        raise RenderError("; ".join(refused))
    env = _env(placed, replica)
    extra: dict[str, str] = {}
    if job.kind in kinds.RENDEZVOUS_KINDS:
        port = kinds.master_port(spec, options.rendezvous_port)
        count = replica_count(placed)
        env += kinds.rendezvous_env(job, placed.run, replica, count, namespace, port, options.cluster_domain)
        spec["hostname"] = names.pod_name(placed.job_id, placed.run, replica.replica)
        spec["subdomain"] = names.service_name(placed.job_id, placed.run)
    try:
        spec["restartPolicy"] = kinds.restart_policy(job.kind, spec)
    except kinds.KindError as error:
        raise RenderError(str(error)) from None
    spec["containers"] = [_container(c, env, requests if i == 0 else None) for i, c in enumerate(spec["containers"])]
    if job.kind is JobKind.INFERENCE:
        extra[names.ANN_READINESS] = kinds.readiness(spec["containers"][0], spec)
    spec["nodeName"] = replica.node
    if job.max_runtime_s is not None:
        spec.setdefault("activeDeadlineSeconds", max(job.max_runtime_s, 1))
    tolerations = [_toleration(t) for t in job.tolerations]
    if tolerations:
        spec["tolerations"] = list(spec.get("tolerations") or []) + tolerations
    annotations = {
        **(meta.get("annotations") or {}),
        names.ANN_JOB: placed.job_id,
        names.ANN_TENANT: job.tenant,
        names.ANN_REPLICAS: str(replica_count(placed)),
        names.ANN_GPU_INDICES: ",".join(str(i) for i in replica.gpu_indices),
        names.ANN_NPU_INDICES: ",".join(str(i) for i in replica.npu_indices),
        names.ANN_GPU_MILLI: str(replica.gpu_milli_each),
        names.ANN_CYCLE: placed.cycle_id,
        **extra,
    }
    if part_replicas is not None:
        annotations[names.ANN_PART_REPLICAS] = str(part_replicas)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.pod_name(placed.job_id, placed.run, replica.replica),
            "namespace": namespace,
            "labels": {
                **(meta.get("labels") or {}),
                **pod_labels(placed, replica.replica, job.tenant, options.cluster),
                names.LABEL_JOB_NAME: names.label_value(job.name),
            },
            "annotations": annotations,
            "finalizers": [names.FINALIZER],
        },
        "spec": spec,
    }


def render_pods(
    placed: RunPods, job: JobSubmitted, options: RenderOptions, part_replicas: int | None = None
) -> list[Manifest]:
    """One pod per replica (of a placement, or added to its run), in replica order; ``part_replicas``: for
    a job spread over clusters, how many replicas the run's part here holds with these. Raises
    ``RenderError`` when the template cannot work."""
    if placed.job_id != job.job_id:
        raise ValueError("the placement and the submission are of different jobs")
    return [render_pod(placed, job, replica, options, part_replicas) for replica in placed.replicas]
