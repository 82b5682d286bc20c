"""Each job kind's pods and Services, as Kubernetes users expect them (plain dicts, no API server).

Training finds its peers (headless Service, hostname/subdomain, torchrun's environment); a service is
restarted by the kubelet, probed for readiness and reachable through a Service; a notebook is reachable;
batch keeps ``Never`` and a template asking the kubelet to retry what fedsched retries is refused; a
template asking accelerators beyond the job's request is refused, naming the container and the resource.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kubernetes import kinds, names, pods, services, template_guard
from events.catalog.decisions import CandidateScore, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import InferenceSpec, JobKind
from events.catalog.types import ClusterId, JobId, NodeId, Resources

from .builders import a_job, a_placement

OPTIONS = pods.RenderOptions(ClusterId("k8s-a"))
NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3")


def env_of(pod: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][container]["env"]}


def a_gang(job_id: str = "llm-1", **changes: Any) -> tuple[Any, Any]:
    job = a_job(job_id, kind=JobKind.TRAINING, gpus=8, replicas=4, **changes)
    return a_placement(job_id, NODES, gpus_each=8), job


def test_a_training_gangs_replicas_get_ranks_and_one_master_through_the_runs_headless_service() -> None:
    placed, job = a_gang()
    manifests = pods.render_pods(placed, job, OPTIONS)
    envs = [env_of(p) for p in manifests]
    master = "llm-1-1-0.llm-1-1.fedsched-team-a.svc.cluster.local"
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["PET_NODE_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["MASTER_ADDR"] for e in envs} == {e["PET_MASTER_ADDR"] for e in envs} == {master}
    assert {(e["MASTER_PORT"], e["PET_MASTER_PORT"]) for e in envs} == {("29500", "29500")}
    # torchrun --nproc-per-node = the replica's GPUs; the world counts every process of the run.
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["PET_NPROC_PER_NODE"], e["PET_NNODES"]) for e in envs} == {
        ("32", "8", "8", "4")
    }
    assert [(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in manifests] == [
        (f"llm-1-1-{i}", "llm-1-1") for i in range(4)
    ]
    assert {p["spec"]["restartPolicy"] for p in manifests} == {"Never"}

    (service,) = services.render_services(placed, job, OPTIONS)
    assert service["metadata"]["name"] == "llm-1-1" and service["metadata"]["namespace"] == "fedsched-team-a"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]
    selector = service["spec"]["selector"]
    assert names.LABEL_REPLICA not in selector and selector[names.LABEL_RUN] == "1"
    assert all(p["metadata"]["labels"].items() >= selector.items() for p in manifests)  # selects every replica


def test_the_rendezvous_port_is_the_templates_when_it_names_one() -> None:
    named = {
        "spec": {"containers": [{"name": "t", "image": "i", "ports": [{"name": "rendezvous", "containerPort": 23456}]}]}
    }
    by_env = {"image": "i", "env": {"MASTER_PORT": "24000"}}
    for template, port in ((named, "23456"), (by_env, "24000"), ({"image": "i"}, "29501")):
        placed, job = a_gang(template=template)
        options = pods.RenderOptions(ClusterId("k8s-a"), rendezvous_port=29501)
        (pod, *_) = pods.render_pods(placed, job, options)
        assert env_of(pod)["MASTER_PORT"] == port
        assert services.render_services(placed, job, options)[0]["spec"]["ports"][0]["port"] == int(port)


def test_fine_tuning_on_a_share_of_a_gpu_runs_one_process_per_pod() -> None:
    job = a_job("ft-1", kind=JobKind.FINE_TUNE, resources=Resources(gpu_milli=500), replicas=2)
    share = (ReplicaPlacement(replica=i, node=NodeId(f"n{i}"), gpu_indices=(0,), gpu_milli_each=500) for i in (0, 1))
    placed = a_placement("ft-1", ("n0", "n1")).model_copy(update={"replicas": tuple(share)})
    envs = [env_of(p) for p in pods.render_pods(placed, job, OPTIONS)]
    assert [(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["RANK"]) for e in envs] == [("2", "1", "0"), ("2", "1", "1")]


def test_service_names_are_dns_1035_labels_distinct_for_distinct_jobs() -> None:
    digit, lettered = names.service_name(JobId("1a"), 1), names.service_name(JobId("j-1a"), 1)
    assert digit[0].isalpha() and digit != lettered and lettered == "j-1a-1"
    long_name = names.service_name(JobId("9" * 128), 2**40)
    assert len(long_name) <= 63 and long_name[0].isalpha() and long_name.endswith(f"-{2**40}")
    placed, job = a_gang("7-llm")
    pod = pods.render_pods(placed, job, OPTIONS)[0]
    assert pod["spec"]["subdomain"] == services.render_services(placed, job, OPTIONS)[0]["metadata"]["name"]
    assert env_of(pod)["MASTER_ADDR"].startswith(f"{pod['metadata']['name']}.{pod['spec']['subdomain']}.")


def test_an_inference_service_restarts_is_probed_on_its_port_and_gets_a_cluster_ip_service() -> None:
    job = a_job("chat", kind=JobKind.INFERENCE, template={"image": "vllm:1", "port": 8000})
    placed = a_placement("chat", NODES[:2])
    manifests = pods.render_pods(placed, job, OPTIONS)
    assert {p["spec"]["restartPolicy"] for p in manifests} == {"Always"}
    main = manifests[0]["spec"]["containers"][0]
    assert main["ports"] == [{"name": "main", "containerPort": 8000, "protocol": "TCP"}]
    assert main["readinessProbe"] == {"tcpSocket": {"port": 8000}, "periodSeconds": 10}
    assert manifests[0]["metadata"]["annotations"][names.ANN_READINESS] == "tcp:8000"
    assert "MASTER_ADDR" not in env_of(manifests[0]) and "subdomain" not in manifests[0]["spec"]
    (service,) = services.render_services(placed, job, OPTIONS)
    assert service["spec"]["type"] == "ClusterIP" and "clusterIP" not in service["spec"]
    assert service["spec"]["ports"] == [{"name": "main", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    # Found by the name people know (kubectl get svc -l fedsched.io/job-name=...), selected without it.
    assert service["metadata"]["labels"][names.LABEL_JOB_NAME] == names.label_value(job.name)
    assert names.LABEL_JOB_NAME not in service["spec"]["selector"]


def test_a_services_own_probe_and_restart_policy_are_kept_and_no_port_means_no_probe_and_no_service() -> None:
    probe = {"httpGet": {"path": "/health", "port": 8080}}
    container = {"name": "s", "image": "i", "ports": [{"name": "http", "containerPort": 8080}], "readinessProbe": probe}
    own = a_job(
        "s1", kind=JobKind.INFERENCE, template={"spec": {"containers": [container], "restartPolicy": "OnFailure"}}
    )
    (pod,) = pods.render_pods(a_placement("s1"), own, OPTIONS)
    assert pod["spec"]["containers"][0]["readinessProbe"] == probe and pod["spec"]["restartPolicy"] == "OnFailure"
    assert pod["metadata"]["annotations"][names.ANN_READINESS] == "template"
    assert services.render_services(a_placement("s1"), own, OPTIONS)[0]["spec"]["ports"][0]["name"] == "http"

    bare = a_job("s2", kind=JobKind.INFERENCE, template={"image": "i"})
    (pod,) = pods.render_pods(a_placement("s2"), bare, OPTIONS)
    assert "readinessProbe" not in pod["spec"]["containers"][0]
    assert pod["metadata"]["annotations"][names.ANN_READINESS].startswith("none: the template declares no port")
    assert services.render_services(a_placement("s2"), bare, OPTIONS) == []


def test_a_notebook_gets_a_service_for_its_port_and_ends_when_its_server_exits() -> None:
    job = a_job("nb", kind=JobKind.NOTEBOOK, template={"image": "jupyter:1", "port": 8888})
    (pod,) = pods.render_pods(a_placement("nb"), job, OPTIONS)
    assert pod["spec"]["restartPolicy"] == "Never" and "readinessProbe" not in pod["spec"]["containers"][0]
    (service,) = services.render_services(a_placement("nb"), job, OPTIONS)
    assert service["spec"]["ports"][0]["port"] == 8888 and service["spec"]["type"] == "ClusterIP"


@pytest.mark.parametrize("kind", [JobKind.BATCH, JobKind.TRAINING, JobKind.FINE_TUNE, JobKind.NOTEBOOK])
@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_a_template_restarting_what_fedsched_retries_is_refused(kind: JobKind, policy: str) -> None:
    template = {"spec": {"containers": [{"name": "m", "image": "i"}], "restartPolicy": policy}}
    with pytest.raises(pods.RenderError, match=f"restartPolicy '{policy}' would restart .*retry.on_application"):
        pods.render_pods(a_placement(), a_job(kind=kind, template=template), OPTIONS)


def test_batch_keeps_never_and_gets_no_service() -> None:
    job = a_job(template={"image": "i", "port": 80}, retry={"on_application_failure": 3})
    (pod,) = pods.render_pods(a_placement(), job, OPTIONS)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert services.render_services(a_placement(), job, OPTIONS) == []


def pod_template(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"spec": spec}


def asking(name: str, resources: dict[str, Any], part: str = "limits") -> dict[str, Any]:
    return {"name": name, "image": "i", "resources": {part: resources}}


PLAIN = {"name": "main", "image": "i"}


@pytest.mark.parametrize(
    ("template", "named"),
    [
        (
            pod_template(PLAIN, asking("sidecar", {"nvidia.com/gpu": "1"})),
            "containers[1] (sidecar) limits nvidia.com/gpu: 1",
        ),
        (
            pod_template(PLAIN, init=(asking("warm", {"amd.com/gpu": 1}, "requests"),)),
            "initContainers[0] (warm) requests amd.com/gpu: 1",
        ),
        (pod_template(asking("main", {"nvidia.com/gpu": "4"})), "containers[0] (main) limits nvidia.com/gpu: 4"),
        (
            pod_template(asking("main", {"huawei.com/Ascend910": "2"})),
            "containers[0] (main) limits huawei.com/Ascend910: 2",
        ),
        (
            pod_template(asking("main", {"nvidia.com/gpu.shared": "1"})),
            "containers[0] (main) limits nvidia.com/gpu.shared: 1",
        ),
    ],
)
def test_a_template_asking_accelerators_beyond_the_jobs_request_is_refused_naming_them(
    template: dict[str, Any], named: str
) -> None:
    with pytest.raises(pods.RenderError) as refused:
        pods.render_pods(a_placement(gpus_each=2), a_job(gpus=2, template=template), OPTIONS)
    assert f"template.spec.{named}, beyond the job's request" in str(refused.value)


def test_a_template_restating_the_placements_gpus_or_asking_other_devices_is_accepted() -> None:
    main = {
        "name": "main",
        "image": "i",
        "resources": {"limits": {"nvidia.com/gpu": 2, "rdma/hca_shared_devices_a": "1"}},
    }
    (pod,) = pods.render_pods(a_placement(gpus_each=2), a_job(gpus=2, template=pod_template(main)), OPTIONS)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "2",
        "rdma/hca_shared_devices_a": "1",
    }


@pytest.mark.parametrize(
    ("resource", "accelerator"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("amd.com/gpu", True),
        ("huawei.com/Ascend310P", True),
        ("gpu.intel.com/i915", True),
        ("example.com/npu-v2", True),
        ("nvidia.com/rdma_shared_device_a", False),
        ("rdma/hca", False),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("ephemeral-storage", False),
    ],
)
def test_what_counts_as_an_accelerator(resource: str, accelerator: bool) -> None:
    assert template_guard.is_accelerator(resource) is accelerator


def test_processes_per_pod_follow_whole_gpus_else_npus() -> None:
    whole = ReplicaPlacement(replica=0, node=NodeId("n"), gpu_indices=(0, 1, 2), gpu_milli_each=1000)
    none = ReplicaPlacement(replica=0, node=NodeId("n"))
    assert kinds.processes_per_pod(a_job(gpus=3), whole) == 3
    assert kinds.processes_per_pod(a_job(resources=Resources(npus=4)), none) == 4
    assert kinds.processes_per_pod(a_job(resources=Resources(cpu_milli=1)), none) == 1


def test_each_part_of_a_spread_service_gets_its_own_service_in_its_cluster() -> None:
    job = a_job(
        "chat",
        kind=JobKind.INFERENCE,
        replicas=4,
        inference=InferenceSpec(spread_clusters=2),
        template={"image": "i", "port": 80},
    )
    replicas = tuple(
        ReplicaPlacement(replica=i, node=NodeId(f"n{i}"), gpu_indices=(0,), gpu_milli_each=1000) for i in (2, 3)
    )
    for cluster, decided in (
        ("k8s-a", a_placement("chat", ("n0", "n1"), cluster="k8s-a")),
        (
            "k8s-b",
            JobReplicasAdded(
                job_id=JobId("chat"),
                cycle_id="cycle-9",
                cluster=ClusterId("k8s-b"),
                run=1,
                replicas=replicas,
                running_replicas=4,
                chosen=CandidateScore(cluster=ClusterId("k8s-b"), total=0),
                explanation="the second part",
            ),
        ),
    ):
        (service,) = services.render_services(decided, job, pods.RenderOptions(ClusterId(cluster)))
        assert service["metadata"]["name"] == "chat-1" and service["spec"]["selector"][names.LABEL_CLUSTER] == cluster


def test_training_that_is_not_a_gang_gets_torchruns_elastic_rendezvous_as_it_grows() -> None:
    job = a_job("grow", kind=JobKind.TRAINING, gpus=4, replicas=8, gang=False)
    first = a_placement("grow", NODES[:2], gpus_each=4)
    later = JobReplicasAdded(
        job_id=JobId("grow"),
        cycle_id="cycle-9",
        cluster=ClusterId("k8s-a"),
        run=1,
        replicas=(ReplicaPlacement(replica=2, node=NodeId("n2"), gpu_indices=(0, 1, 2, 3), gpu_milli_each=1000),),
        running_replicas=3,
        chosen=CandidateScore(cluster=ClusterId("k8s-a"), total=0),
        explanation="topped up",
    )
    envs = [env_of(p) for p in pods.render_pods(first, job, OPTIONS) + pods.render_pods(later, job, OPTIONS)]
    master = "grow-1-0.grow-1.fedsched-team-a.svc.cluster.local"
    for env in envs:  # the same for every replica, whenever it joined: the rendezvous assigns the ranks
        assert {k: env[k] for k in env if k.startswith("PET_") or k in ("MASTER_ADDR", "LOCAL_WORLD_SIZE")} == {
            "MASTER_ADDR": master,
            "LOCAL_WORLD_SIZE": "4",
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": "29500",
            "PET_NPROC_PER_NODE": "4",
            "PET_NNODES": "1:8",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{master}:29500",
            "PET_RDZV_ID": "grow-1",
        }
        assert not {"RANK", "WORLD_SIZE", "PET_NODE_RANK"} & env.keys()
