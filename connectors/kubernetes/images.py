"""The image policy on a placement's pods: every image allowed, and the tenant's pull secrets named.

Called by the executor once a placement's pods are rendered (``pods.render_pods``), before any is made:
a refusal fails the launch (``JobFailed`` with ``LaunchFailed`` and this module's words, no pod made).
Pure: reads the manifests, the tenant's ``ImagePolicy`` (``connectors.kubernetes.tenants``) and the
cluster's own allowed registries (``ConnectorConfig.allowed_registries``).

The API refuses a template naming an image its tenant does not allow at submission; the connector checks
again because it alone knows the rest: the image a template that names none runs (the connector's
default image), a policy changed since the submission, and the cluster's own allowed registries, which
every image must also match (a tenant cannot widen what the cluster's operator allows). Matching is
``events.catalog.images``': the reference as Docker normalises it, host and whole path components.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from connectors.kubernetes.pods import RenderError
from connectors.kubernetes.tenants import TenantOptions
from events.catalog.images import ImagePolicy, refusal, template_images
from events.catalog.jobs import JobSubmitted
from events.catalog.types import ClusterId, TenantId

Manifest = dict[str, Any]


def _containers(manifest: Manifest) -> list[Manifest]:
    spec = manifest.get("spec") or {}
    found = []
    for key in ("initContainers", "containers"):
        found += [c for c in spec.get(key) or [] if isinstance(c, dict)]
    return found


def launch_refusal(
    manifests: Sequence[Manifest],
    tenant: TenantId,
    policy: ImagePolicy | None,
    cluster: ClusterId,
    cluster_registries: Sequence[str] | None,
    *,
    default_image: bool,
) -> str | None:
    """Why these pods may not be made (the first image refused), or ``None``. ``default_image``: the
    job's template names none, so its first container runs the connector's default image."""
    tenant_registries = policy.registries if policy is not None else None
    for manifest in manifests[:1]:  # every replica's pod is rendered from the one template
        for container in _containers(manifest):
            image = container.get("image")
            if not isinstance(image, str):
                continue  # the API server refuses a container without an image, naming it
            reason = refusal(tenant_registries, image, whose=f"tenant {tenant}") or refusal(
                cluster_registries, image, whose=f"cluster {cluster}"
            )
            if reason is not None:
                what = "the connector's default image" if default_image else f"container {container.get('name')!r}"
                return f"{what}: {reason}"
    return None


class ImageRefused(RenderError):
    """An image of the job's pods may not run here; the message names it and why."""


def checked(
    manifests: list[Manifest], job: JobSubmitted, policy: ImagePolicy | None, cluster: ClusterId, options: TenantOptions
) -> list[Manifest]:
    """The placement's pods with the tenant's pull secrets named; raises ``ImageRefused`` when an image
    may not run (the executor then fails the launch, no pod made)."""
    reason = launch_refusal(
        manifests,
        job.tenant,
        policy,
        cluster,
        options.allowed_registries,
        default_image=not template_images(job.template),
    )
    if reason is not None:
        raise ImageRefused(reason)
    secrets = policy.pull_secrets if policy is not None else ()
    return [with_pull_secrets(m, secrets) for m in manifests]


def with_pull_secrets(manifest: Manifest, secrets: Sequence[str]) -> Manifest:
    """The pod with ``imagePullSecrets`` naming ``secrets`` after the template's own (each once)."""
    if not secrets:
        return manifest
    spec = manifest["spec"]
    named = [s for s in spec.get("imagePullSecrets") or [] if isinstance(s, dict)]
    have = {s.get("name") for s in named}
    spec["imagePullSecrets"] = named + [{"name": s} for s in secrets if s not in have]
    return manifest
