"""What each job kind adds to its pods, the way Kubernetes users expect it.

Called by ``pods.render_pod`` (and ``services``, for the ports) and by the API's submit validation
(``restart_problem``). Pure: plain dicts in and out.

- Training and fine-tuning (``RENDEZVOUS_KINDS``): every pod gets ``hostname`` (its pod name) and
  ``subdomain`` (the run's headless Service, ``names.service_name``), so replica 0 has a stable DNS name,
  and the environment PyTorch's launcher reads, as Kubeflow's PyTorchJob sets it: ``MASTER_ADDR`` and
  ``PET_MASTER_ADDR`` (replica 0's FQDN, ``<pod>.<service>.<namespace>.svc.<cluster domain>``),
  ``MASTER_PORT`` and ``PET_MASTER_PORT`` (``master_port``), ``PET_NNODES`` (the replicas), ``RANK`` and
  ``PET_NODE_RANK`` (the replica's number), ``PET_NPROC_PER_NODE`` and ``LOCAL_WORLD_SIZE`` (processes per
  pod: the replica's whole GPUs, else its NPUs, else 1: ``torchrun --nproc-per-node``), ``WORLD_SIZE``
  (replicas x processes per pod: every process of the run, as PyTorchJob counts it). A script started by
  ``torchrun`` needs no flags (torchrun reads ``PET_*``, and gives each worker its own ``RANK``,
  ``LOCAL_RANK`` and ``WORLD_SIZE``); one started once per pod without torchrun reads ``RANK`` as its node
  rank. A gang's replicas are all made together, so these are exact. A training job that is not a gang
  (``gang: false``) starts with the replicas that fit and grows: it gets torchrun's elastic form instead,
  as PyTorchJob's ``elasticPolicy`` gives it: ``PET_NNODES=1:<replicas>``, ``PET_RDZV_BACKEND=c10d``,
  ``PET_RDZV_ENDPOINT`` (replica 0's name and the port), ``PET_RDZV_ID`` (the run), and no ``RANK``,
  ``WORLD_SIZE`` or ``PET_NODE_RANK``, which the rendezvous assigns as replicas join.
- Inference: ``restartPolicy: Always`` unless the template says otherwise, and a readiness probe on the
  first container: the template's own if it has one; else a TCP probe on the port the first container
  declares; else none (the pod annotation ``fedsched.io/readiness`` says which, and why). The job's
  ``inference`` settings name no port or path, so no HTTP path is ever invented.
- Every other kind keeps ``restartPolicy: Never``: a failed run is retried by fedsched (a new run, counted
  against ``retry.on_application_failure`` or the policy's budget), so a template asking the kubelet to
  restart its containers (``OnFailure``, ``Always``) would retry it twice over, unseen: it is refused.
  A notebook is a server the user shuts down when done: its exit ends the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors.kubernetes import names
from events.catalog.decisions import ReplicaPlacement
from events.catalog.jobs import JobKind, JobSubmitted
from events.catalog.types import JobId

Manifest = dict[str, Any]

RENDEZVOUS_KINDS = frozenset({JobKind.TRAINING, JobKind.FINE_TUNE})
SERVICE_KINDS = frozenset({JobKind.INFERENCE, JobKind.NOTEBOOK})
"""Kinds reached over the network: a ClusterIP Service on their declared port."""
RESTARTING_KINDS = frozenset({JobKind.INFERENCE})
"""Kinds whose containers the kubelet restarts (``Always``) unless the template says otherwise."""
DEFAULT_MASTER_PORT = 29500
"""torchrun's own default."""
MASTER_PORT_NAMES = ("rendezvous", "pytorchjob-port")
"""Names of a first-container port that is the rendezvous port (ours, and Kubeflow PyTorchJob's)."""


class KindError(ValueError):
    """The template contradicts its kind; the message names the field."""


def restart_problem(kind: JobKind, spec: Mapping[str, Any]) -> str | None:
    """Why the template's ``restartPolicy`` cannot be used for this kind, or None."""
    policy = spec.get("restartPolicy")
    if policy is None or kind in RESTARTING_KINDS or policy == "Never":
        return None
    return (
        f"template.spec.restartPolicy {policy!r} would restart the workload inside its pod, unseen by fedsched, "
        f"which retries a failed {kind.value} job itself (retry.on_application_failure): leave it out or use 'Never'"
    )


def restart_policy(kind: JobKind, spec: Mapping[str, Any]) -> str:
    problem = restart_problem(kind, spec)
    if problem:
        raise KindError(problem)
    return str(spec.get("restartPolicy") or ("Always" if kind in RESTARTING_KINDS else "Never"))


def declared_port(spec: Mapping[str, Any]) -> Manifest | None:
    """The first port the first container declares (the one a Service and a probe use), or None."""
    containers = spec.get("containers") or []
    ports = containers[0].get("ports") if containers and isinstance(containers[0], Mapping) else None
    if not isinstance(ports, list):
        return None
    for port in ports:
        if isinstance(port, Mapping) and isinstance(port.get("containerPort"), int):
            return dict(port)
    return None


def readiness(container: Manifest, spec: Mapping[str, Any]) -> str:
    """Give a service's first container a readiness probe if it has none and declares a port; says how it
    is found ready (``names.ANN_READINESS``)."""
    if container.get("readinessProbe"):
        return "template"
    port = declared_port(spec)
    if port is None:
        return "none: the template declares no port and no readiness probe"
    container["readinessProbe"] = {"tcpSocket": {"port": port["containerPort"]}, "periodSeconds": 10}
    return f"tcp:{port['containerPort']}"


def master_port(spec: Mapping[str, Any], default: int) -> int:
    """The rendezvous port: a first-container port named ``rendezvous`` (or PyTorchJob's
    ``pytorchjob-port``), else a numeric ``MASTER_PORT`` the template's first container sets, else
    ``default``."""
    containers = spec.get("containers") or []
    first = containers[0] if containers and isinstance(containers[0], Mapping) else {}
    for port in first.get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") in MASTER_PORT_NAMES:
            number = port.get("containerPort")
            if isinstance(number, int):
                return number
    for env in first.get("env") or []:
        if isinstance(env, Mapping) and env.get("name") == "MASTER_PORT" and str(env.get("value", "")).isdigit():
            return int(str(env["value"]))
    return default


def processes_per_pod(job: JobSubmitted, replica: ReplicaPlacement) -> int:
    """One process per whole GPU the replica holds, else per NPU it asks, else one."""
    if replica.gpu_indices and replica.gpu_milli_each >= 1000:
        return len(replica.gpu_indices)
    return job.resources.npus or 1


def master_fqdn(job_id: JobId, run: int, namespace: str, cluster_domain: str) -> str:
    """Replica 0's name through the run's headless Service."""
    return f"{names.pod_name(job_id, run, 0)}.{names.service_name(job_id, run)}.{namespace}.svc.{cluster_domain}"


def rendezvous_env(
    job: JobSubmitted, run: int, replica: ReplicaPlacement, replicas: int, namespace: str, port: int, domain: str
) -> list[Manifest]:
    """The launcher's environment for one replica of a run of ``replicas``."""
    local = processes_per_pod(job, replica)
    master = master_fqdn(job.job_id, run, namespace, domain)
    values = {"MASTER_ADDR": master, "MASTER_PORT": str(port)}
    if job.is_gang():
        values |= {"WORLD_SIZE": str(replicas * local), "RANK": str(replica.replica)}
    values |= {
        "LOCAL_WORLD_SIZE": str(local),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
        "PET_NPROC_PER_NODE": str(local),
    }
    if job.is_gang():
        values |= {"PET_NNODES": str(replicas), "PET_NODE_RANK": str(replica.replica)}
    else:
        values |= {
            "PET_NNODES": f"1:{job.replicas}",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{master}:{port}",
            "PET_RDZV_ID": names.service_name(job.job_id, run),
        }
    return [{"name": k, "value": v} for k, v in values.items()]
