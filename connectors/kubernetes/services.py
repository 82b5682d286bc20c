"""The Services of a run: how its pods find each other (training) or are reached (inference, notebooks).

Called by ``executor`` when it launches a run's pods (the Services are made first, so a replica's DNS name
exists before it starts), and by unit tests. Pure: takes the decision and the job's ``JobSubmitted``
and returns manifests (plain dicts), deterministic, named after the run (``names.service_name``), so a
decision applied twice makes nothing new (409 AlreadyExists).

- Training and fine-tuning (``kinds.RENDEZVOUS_KINDS``): a headless Service (``clusterIP: None``,
  ``publishNotReadyAddresses: true``: peers resolve before any readiness) selecting the run's pods;
  with the pods' ``hostname``/``subdomain`` it gives replica 0 the name ``MASTER_ADDR`` holds.
- Inference and notebooks (``kinds.SERVICE_KINDS``): a ClusterIP Service on the port the template's first
  container declares, selecting the run's pods (those ready, for inference). A job spread over clusters
  has one in each cluster holding a part of its run. No port declared: no Service (nothing to route to).
- Batch: none.

Services carry the pods' labels but the replica's, and the full job id in ``fedsched.io/job-id``: nothing
owns them, so the connector deletes them when the run ends (``service_keeper``).
"""

from __future__ import annotations

from typing import Any

from connectors.kubernetes import kinds, names, pods
from events.catalog.jobs import JobSubmitted

Manifest = dict[str, Any]


def run_labels(placed: pods.RunPods, job: JobSubmitted, options: pods.RenderOptions) -> dict[str, str]:
    labels = pods.pod_labels(placed, 0, job.tenant, options.cluster)
    del labels[names.LABEL_REPLICA]
    return labels


def render_services(placed: pods.RunPods, job: JobSubmitted, options: pods.RenderOptions) -> list[Manifest]:
    """The run's Services here (none, or one). Raises ``pods.RenderError`` when the template cannot work."""
    _, spec = pods.workload(job, options)
    labels = run_labels(placed, job, options)
    if job.kind in kinds.RENDEZVOUS_KINDS:
        port = kinds.master_port(spec, options.rendezvous_port)
        body: Manifest = {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}],
        }
    elif job.kind in kinds.SERVICE_KINDS and (declared := kinds.declared_port(spec)) is not None:
        number = declared["containerPort"]
        name, protocol = str(declared.get("name") or "main"), str(declared.get("protocol") or "TCP")
        body = {
            "type": "ClusterIP",
            "ports": [{"name": name, "port": number, "targetPort": number, "protocol": protocol}],
        }
    else:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": names.service_name(placed.job_id, placed.run),
                "namespace": names.namespace_name(job.tenant, options.namespace_prefix),
                "labels": {**labels, names.LABEL_JOB_NAME: names.label_value(job.name)},
                "annotations": {names.ANN_JOB: placed.job_id, names.ANN_TENANT: job.tenant},
            },
            "spec": {**body, "selector": dict(labels)},
        }
    ]
