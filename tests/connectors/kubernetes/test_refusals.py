"""The API server refusing the connector itself (403 from RBAC) is the cluster's problem, not the job's.

The connector runs as a service account of its own whose rights the test controls: it may watch
nodes and pods but not create pods, as when its RBAC is incomplete or not loaded yet after an API
server restart. Then the missing right is granted.
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from connectors.kubernetes import KubeError
from connectors.kubernetes.kubeapi import resource_of
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged, NodeObserved
from events.catalog.jobs import JobFailed, JobStarted
from events.catalog.reasons import ReasonCode
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running
from .support import Kube, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

RBAC = "/apis/rbac.authorization.k8s.io/v1"


async def service_account_kubeconfig(kube: Kube, kube_config: str, directory: Path, name: str) -> str:
    """A kubeconfig for a new service account (no rights yet), through the TokenRequest API."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.api.request("POST", "/api/v1/namespaces", body=namespace)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    await kube.api.request("POST", f"/api/v1/namespaces/{name}/serviceaccounts", body=account)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    path = f"/api/v1/namespaces/{name}/serviceaccounts/{name}/token"
    token = (await kube.api.request("POST", path, body=request))["status"]["token"]
    return _write_kubeconfig(kube_config, kube.directory / "ca.crt", token, directory / f"{name}.kubeconfig")


def _write_kubeconfig(admin: str, ca: Path, token: str, out: Path) -> str:
    server = re.search(r"server: (\S+)", Path(admin).read_text())
    assert server is not None
    out.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server.group(1)}\n    certificate-authority: {ca}\n"
        f"users:\n- name: u\n  user:\n    token: {token}\n"
        "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
    )
    return str(out)


async def grant(kube: Kube, name: str, rules: list[dict[str, Any]], account: str) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}}
    role["rules"] = rules
    await kube.api.request("POST", f"{RBAC}/clusterroles", body=role)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account}],
    }
    await kube.api.request("POST", f"{RBAC}/clusterrolebindings", body=binding)


async def revoke(kube: Kube, name: str) -> None:
    for kind in ("clusterrolebindings", "clusterroles"):
        with contextlib.suppress(KubeError):
            await kube.api.request("DELETE", f"{RBAC}/{kind}/{name}")


async def test_an_authorisation_refusal_is_told_from_a_refusal_about_the_object() -> None:
    rbac = 'pods is forbidden: User "system:serviceaccount:a:b" cannot create resource "pods" in API group ""'
    assert KubeError(403, "Forbidden", rbac).denied and KubeError(403, "Forbidden", rbac).retryable
    assert KubeError(401, "Unauthorized", "Unauthorized").denied
    security = 'pods "p" is forbidden: violates PodSecurity "baseline:latest": privileged (container "main")'
    assert not KubeError(403, "Forbidden", security).denied and not KubeError(403, "Forbidden", security).retryable
    assert not KubeError(422, "Invalid", "spec.containers[0].name: Invalid value").retryable
    assert resource_of("/api/v1/namespaces/ns/pods/p/status") == "pods"
    assert resource_of("/api/v1/pods") == "pods"
    assert resource_of("/apis/rbac.authorization.k8s.io/v1/clusterroles") == "clusterroles"


async def test_a_connector_refused_by_rbac_reports_the_cluster_unreachable_and_fails_no_job(
    kube: Kube,
    tap: Tap,
    scheduler: Publisher,
    connectors: Running,
    kube_config: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = unique("denied")
    account = cluster.replace("_", "-")
    nodes = [f"{cluster}-n0"]
    watch = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete", "patch"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "create", "delete"]},
        {
            "apiGroups": [""],
            "resources": ["resourcequotas", "limitranges"],
            "verbs": ["get", "create", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch"]},
    ]  # what deploy/kubernetes/rbac.yaml grants, but creating pods
    create = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    caplog.set_level(logging.INFO, logger="fedsched.connector.kubernetes")
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(8).build())
        user = await service_account_kubeconfig(kube, kube_config, tmp_path, account)
        await grant(kube, f"{account}-watch", watch, account)
        await connectors.start(config(cluster), kubeconfig=user)
        await tap.wait(NodeObserved, node=nodes[0])
        await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.REACHABLE)

        job = unique("train")
        await scheduler.publish([a_job(job, tenant=unique("tenant")), a_placement(job, (nodes[0],), cluster=cluster)])
        (down,) = await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.UNREACHABLE)
        assert down.reason is ReasonCode.CLUSTER_API_UNAVAILABLE
        assert "refused the connector (POST pods)" in down.message and "403" in down.message
        # The refusal outlasts the placement's first attempts; other requests (watches, ticks) succeed
        # meanwhile and must not make the cluster look reachable again.
        await wait_until(
            lambda: sum("event=api_retry" in r.getMessage() and "403" in r.getMessage() for r in caplog.records) >= 3,
            30,
            "the placement retried",
        )
        await tap.poll()
        assert tap.events(JobFailed, job_id=job) == []
        assert len(tap.events(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.REACHABLE)) == 1

        await grant(kube, f"{account}-create", create, account)  # the missing right arrives
        (pod,) = await wait_until(lambda: kube.job_pods(cluster, job), 30, "the pod, once allowed")
        await tap.wait(ClusterStatusChanged, 2, cluster=cluster, status=ClusterStatus.REACHABLE)
        await kube.set_pod_status(pod, pod_status("Running", container_status(**running())))
        await tap.wait(JobStarted, job_id=job)
        assert tap.events(JobFailed, job_id=job) == []
        assert not [r for r in caplog.records if r.exc_info]  # no traceback
        assert len(tap.events(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.UNREACHABLE)) == 1
    finally:
        await revoke(kube, f"{account}-watch")
        await revoke(kube, f"{account}-create")
        await delete_nodes(kube, nodes)


async def test_a_refusal_that_lasts_gives_the_placement_up_without_failing_the_job(
    kube: Kube,
    tap: Tap,
    scheduler: Publisher,
    connectors: Running,
    kube_config: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = unique("refused")
    account = cluster.replace("_", "-")
    nodes = [f"{cluster}-n0"]
    watch = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete", "patch"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "create", "delete"]},
    ]
    caplog.set_level(logging.INFO, logger="fedsched.connector.kubernetes")
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(8).build())
        user = await service_account_kubeconfig(kube, kube_config, tmp_path, account)
        await grant(kube, f"{account}-watch", watch, account)
        await connectors.start(config(cluster, denied_retry_s=3.0), kubeconfig=user)
        await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.REACHABLE)
        job, after = unique("train"), unique("after")
        await scheduler.publish([a_job(job, tenant=unique("tenant")), a_placement(job, (nodes[0],), cluster=cluster)])
        await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.UNREACHABLE)

        def given_up() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "event=decision_given_up" in r.getMessage()]

        (line,) = await wait_until(given_up, 30, "the placement given up")
        assert line.levelno == logging.ERROR and "403" in line.getMessage() and not line.exc_info
        # The consumer goes on: the next decision is handled (and given up) in turn.
        await scheduler.publish([a_job(after), a_placement(after, (nodes[0],), cluster=cluster)])
        await wait_until(lambda: len(given_up()) >= 2, 30, "the next placement handled")
        await tap.poll()
        assert tap.events(JobFailed, job_id=job) == [] and tap.events(JobFailed, job_id=after) == []
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        await revoke(kube, f"{account}-watch")
        await delete_nodes(kube, nodes)
