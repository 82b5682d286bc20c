"""A placement becomes one pod per replica, pinned to its node, named the same way every time."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kubernetes import names, pods
from events.catalog.decisions import CandidateScore, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import JobKind
from events.catalog.types import ClusterId, JobId, NodeId, TenantId

from .builders import a_job, a_placement, tolerate

OPTIONS = pods.RenderOptions(ClusterId("k8s-a"))


def test_each_replica_gets_a_pod_on_its_node_with_its_gpus_and_our_labels() -> None:
    placed = a_placement("job-1", ("gpu-node-1", "gpu-node-2"), gpus_each=4)
    manifests = pods.render_pods(placed, a_job("job-1", gpus=4), OPTIONS)
    assert [m["metadata"]["name"] for m in manifests] == ["job-1-1-0", "job-1-1-1"]
    assert [m["spec"]["nodeName"] for m in manifests] == ["gpu-node-1", "gpu-node-2"]
    first = manifests[0]
    assert first["metadata"]["namespace"] == "fedsched-team-a"
    assert first["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "fedsched",
        "fedsched.io/cluster": "k8s-a",
        "fedsched.io/job-id": "job-1",
        "fedsched.io/run": "1",
        "fedsched.io/replica": "0",
        "fedsched.io/tenant": "team-a",
        "fedsched.io/job-name": names.label_value("job-1 name"),  # the name, as a label value
    }
    assert first["metadata"]["finalizers"] == [names.FINALIZER]
    assert first["metadata"]["annotations"][names.ANN_GPU_INDICES] == "0,1,2,3"
    container = first["spec"]["containers"][0]
    assert container["image"] == "registry.example/train:1"
    assert container["command"] == ["python", "train.py"]
    assert container["resources"] == {
        "requests": {"cpu": "4000m", "memory": "16384Mi", "nvidia.com/gpu": "4"},
        "limits": {"nvidia.com/gpu": "4"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["EPOCHS"] == "3" and env["FEDSCHED_REPLICA"] == "0" and env["FEDSCHED_GPU_INDICES"] == "0,1,2,3"
    assert first["spec"]["restartPolicy"] == "Never"


def test_the_same_decision_renders_the_same_manifests() -> None:
    placed, job = a_placement(), a_job()
    assert pods.render_pods(placed, job, OPTIONS) == pods.render_pods(placed, job, OPTIONS)


def test_a_pod_template_is_kept_and_only_our_fields_are_overridden() -> None:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": "bert"}, "annotations": {"team": "nlp"}},
        "spec": {
            "containers": [
                {"name": "trainer", "image": "img:2", "resources": {"limits": {"memory": "20Gi"}}},
                {"name": "sidecar", "image": "log:1"},
            ],
            "restartPolicy": "OnFailure",
            "nodeName": "somewhere-else",
        },
    }
    job = a_job(
        template=template, kind=JobKind.INFERENCE, max_runtime_s=3600, tolerations=(tolerate("nvidia.com/gpu"),)
    )  # a service may restart its containers (other kinds are retried by fedsched: ``test_mapping_kinds``)
    (pod,) = pods.render_pods(a_placement(), job, OPTIONS)
    assert pod["metadata"]["labels"]["app"] == "bert" and pod["metadata"]["annotations"]["team"] == "nlp"
    assert pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    trainer, sidecar = pod["spec"]["containers"]
    assert trainer["resources"]["limits"] == {"memory": "20Gi", "nvidia.com/gpu": "1"}
    assert "resources" not in sidecar and any(e["name"] == "FEDSCHED_JOB_ID" for e in sidecar["env"])
    assert template["spec"]["nodeName"] == "somewhere-else"  # the job's own template is not touched


def test_a_share_of_a_gpu_asks_for_the_shared_resource() -> None:
    placed = a_placement(gpus_each=0).model_copy(
        update={"replicas": (ReplicaPlacement(replica=0, node=NodeId("n"), gpu_indices=(2,), gpu_milli_each=250),)}
    )
    (pod,) = pods.render_pods(placed, a_job(), OPTIONS)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.shared": "1"}
    assert pod["metadata"]["annotations"][names.ANN_GPU_MILLI] == "250"


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ({}, "names no image"),
        ({"spec": {"containers": []}}, "at least one container"),
        ({"image": "x", "command": "python train.py"}, "list of strings"),
    ],
)
def test_a_template_that_cannot_become_a_pod_says_why(template: dict[str, object], why: str) -> None:
    with pytest.raises(pods.RenderError, match=why):
        pods.render_pods(a_placement(), a_job(template=template), OPTIONS)


def test_an_empty_template_uses_the_connectors_default_image() -> None:
    options = pods.RenderOptions(ClusterId("k8s-a"), default_image="busybox:1.36")
    (pod,) = pods.render_pods(a_placement(), a_job(template={}), options)
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"


def test_names_are_dns_labels_and_long_or_odd_ids_stay_distinct() -> None:
    assert names.pod_name(JobId("a_b"), 1, 0) != names.pod_name(JobId("a-b"), 1, 0)
    long_id = JobId("j" * 128)
    name = names.pod_name(long_id, 2**40, 4095)
    assert len(name) <= 63 and name.endswith(f"-{2**40}-4095")
    dotted, dashed = (names.namespace_name(TenantId(t), "fedsched-") for t in ("team.a", "team-a"))
    assert dotted != dashed and dashed == "fedsched-team-a"
    assert len(names.job_label(long_id)) <= 63
    assert names.event_id(ClusterId("c"), "job-1", 1, "started") == "k8s/c/job-1/1/started"
    assert names.event_id(ClusterId("c" * 128), long_id, 1, "started").startswith("k8s/")


def test_replicas_added_to_a_run_get_pods_named_after_the_runs_others_and_say_how_many_it_holds() -> None:
    placed = a_placement("job-1", ("gpu-node-1", "gpu-node-2"), gpus_each=4)
    third = ReplicaPlacement(replica=2, node=NodeId("gpu-node-3"), gpu_indices=(0, 1, 2, 3), gpu_milli_each=1000)
    added = JobReplicasAdded(
        job_id=JobId("job-1"),
        cycle_id="cycle-9",
        cluster=ClusterId("k8s-a"),
        run=1,
        replicas=(third,),
        running_replicas=3,
        chosen=CandidateScore(cluster=ClusterId("k8s-a"), total=0),
        explanation="added 1 replica",
    )
    job = a_job("job-1", gpus=4)
    (pod,) = pods.render_pods(added, job, OPTIONS)
    first = pods.render_pods(placed, job, OPTIONS)[0]
    assert pod["metadata"]["name"] == "job-1-1-2" and pod["spec"]["nodeName"] == "gpu-node-3"
    assert pod["metadata"]["labels"] == {**first["metadata"]["labels"], "fedsched.io/replica": "2"}
    assert pod["metadata"]["annotations"][names.ANN_REPLICAS] == "3"
    assert first["metadata"]["annotations"][names.ANN_REPLICAS] == "2"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert (env["FEDSCHED_REPLICA"], env["FEDSCHED_REPLICAS"]) == ("2", "3")
