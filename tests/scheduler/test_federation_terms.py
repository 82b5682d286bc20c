"""Each term of the federation score changes where a job goes, and the placement says which term decided.

Two clusters alike in every node; only the profile term under test differs. Without the difference the
stable cluster order picks ``sim-1``; each case makes ``sim-2`` the better one by that term alone.
"""

from __future__ import annotations

import pytest

from events.catalog.jobs import JobKind, PriorityClass
from events.catalog.types import ClusterId
from services.scheduler.core.policy import Cluster, ClusterWeights, Place, PolicyConfig, schedule
from services.scheduler.core.state.policy_document import policy_from_document
from tests.scheduler.builders import a_job, a_node, snapshot

pytestmark = pytest.mark.timeout(30)

NODES = [a_node("n1").cluster("sim-1").build(), a_node("n2").cluster("sim-2").build()]
LONG_TRAINING = a_job("train").gpus(8).kind(JobKind.TRAINING).runtime(expected_s=3 * 24 * 3600)


def place(job, sim_1: Cluster, sim_2: Cluster) -> Place:
    r = schedule(snapshot(NODES, [job.build()], clusters=[sim_1, sim_2]))
    (p,) = [d for d in r.decisions if isinstance(d, Place)]
    return p


def cluster(name: str, **profile: object) -> Cluster:
    return Cluster(ClusterId(name), **profile)  # type: ignore[arg-type]


def test_alike_clusters_go_by_the_stable_cluster_order():
    assert place(LONG_TRAINING, cluster("sim-1"), cluster("sim-2")).cluster == "sim-1"


@pytest.mark.parametrize(
    ("case", "job", "sim_1", "sim_2", "said"),
    [
        ("recent GPU failures lose a long training job to a stable cluster", LONG_TRAINING,
         cluster("sim-1", stability_milli=610, failures_per_kgpu_hour_milli=2400, recent_failures=3),
         cluster("sim-2", stability_milli=980),
         "sim-2 over sim-1: stability 980 vs 610 (3 GPU failures in the last day)"),
        ("a profile that does not count its failures gives their rate", LONG_TRAINING,
         cluster("sim-1", stability_milli=610, failures_per_kgpu_hour_milli=2400),
         cluster("sim-2", stability_milli=980),
         "sim-2 over sim-1: stability 980 vs 610 (GPU failures in the last day: 2.40 per 1,000 GPU-hours)"),
        ("a congested cluster loses to an idle one", a_job("j").gpus(2),
         cluster("sim-1", congestion_milli=950), cluster("sim-2", congestion_milli=40),
         "sim-2 over sim-1: congestion 40 vs 950"),
        ("the cluster holding the job's datasets wins", a_job("j").gpus(2).datasets("imagenet", "laion"),
         cluster("sim-1", datasets=("laion",)), cluster("sim-2", datasets=("imagenet", "laion")),
         "sim-2 over sim-1: data locality (0 vs 1 of the job's datasets missing)"),
        ("the cheaper cluster for the model it would use wins best-effort work, though dearer on average",
         a_job("j").gpus(1).models("A100").priority(PriorityClass.BEST_EFFORT),
         cluster("sim-1", gpu_rates=(("A100", 2000), ("T4", 200))),
         cluster("sim-2", gpu_rates=(("A100", 1200), ("H100", 4000))),
         "sim-2 over sim-1: cost 1.20 vs 2.00 per GPU-hour"),
        ("a cluster with no node fit for training loses a training job", LONG_TRAINING,
         cluster("sim-1", fit_training=False), cluster("sim-2"),
         "sim-2 over sim-1: no node of sim-1 suits training"),
        ("a cluster with no node fit for serving loses an inference job", a_job("j").gpus(1).kind(JobKind.INFERENCE),
         cluster("sim-1", fit_inference=False), cluster("sim-2"),
         "sim-2 over sim-1: no node of sim-1 suits serving"),
    ],
)  # fmt: skip
def test_one_term_decides_and_the_placement_says_so(case, job, sim_1, sim_2, said):
    p = place(job, sim_1, sim_2)
    assert p.cluster == "sim-2", case
    assert said in p.message, (case, p.message)


def test_the_fit_read_is_the_one_of_the_jobs_kind():
    unfit_for_training = cluster("sim-1", fit_training=False)
    assert place(a_job("j").gpus(1).kind(JobKind.INFERENCE), unfit_for_training, cluster("sim-2")).cluster == "sim-1"
    assert place(a_job("j").gpus(4).kind(JobKind.BATCH), unfit_for_training, cluster("sim-2")).cluster == "sim-1"
    # Training on one GPU needs no 8-GPU node nor a fast interconnect.
    assert place(a_job("j").gpus(1).kind(JobKind.TRAINING), unfit_for_training, cluster("sim-2")).cluster == "sim-1"
    assert place(a_job("j").gpus(2).kind(JobKind.FINE_TUNE), unfit_for_training, cluster("sim-2")).cluster == "sim-2"


def test_a_cpu_only_job_pays_for_no_gpu_hour():
    dear = cluster("sim-1", gpu_rates=(("A100", 9000),))
    p = place(a_job("j").cpu(2000), dear, cluster("sim-2", gpu_rates=(("A100", 100),)))
    assert p.cluster == "sim-1" and dict(p.chosen.breakdown)["cost"] == 0


def test_a_model_without_a_listed_rate_costs_the_flat_price():
    assert cluster("c", gpu_rates=(("A100", 1200),), cost_milli_per_gpu_hour=700).rate_of("T4") == 700


def test_the_policy_documents_weights_decide_how_much_a_term_counts():
    shaky, steady = cluster("sim-1", stability_milli=610), cluster("sim-2")
    snap = snapshot(NODES, [LONG_TRAINING.build()], clusters=[shaky, steady])
    ignoring_health = policy_from_document("p2", {"cluster_weights": {"health": 0}})
    assert ignoring_health.cluster_weights == ClusterWeights(health=0)
    (p,) = [d for d in schedule(snap, ignoring_health).decisions if isinstance(d, Place)]
    assert p.cluster == "sim-1"  # a tie again: the stable cluster order


def test_a_tie_names_no_term_though_the_terms_differ():
    # sim-2 more stable (500 x 2 points) and dearer (1000 x 1 point, normalised): equal totals.
    shaky = cluster("sim-1", stability_milli=500, gpu_rates=(("A100", 1000),))
    dear = cluster("sim-2", gpu_rates=(("A100", 1780),))
    weights = ClusterWeights(health=2, cost=1)
    snap = snapshot(NODES, [LONG_TRAINING.build()], clusters=[shaky, dear])
    (p,) = [d for d in schedule(snap, PolicyConfig(cluster_weights=weights)).decisions if isinstance(d, Place)]
    assert dict(p.chosen.breakdown)["total"] == dict(p.runner_up.breakdown)["total"], p.message
    assert " over " not in p.message and "a tie decided by the stable cluster order" in p.message


def test_a_placement_with_no_runner_up_says_its_cluster_was_the_only_one_with_room():
    both = place(a_job("small").gpus(2), cluster("sim-1"), cluster("sim-2"))
    assert both.runner_up is not None and "the only one" not in both.message
    nodes = [a_node("n1").cluster("sim-1").build(), a_node("n2").cluster("sim-2").gpus(4).build()]
    r = schedule(snapshot(nodes, [a_job("whole").gpus(8).build()], clusters=[cluster("sim-1"), cluster("sim-2")]))
    (only,) = [d for d in r.decisions if isinstance(d, Place)]
    assert only.cluster == "sim-1" and only.runner_up is None
    assert "the only one of the federation's 2 clusters with room for it now" in only.message


def test_a_cluster_with_npus_counts_the_failures_of_its_gpus_and_npus():
    nodes = [
        a_node("n1").cluster("sim-1").build(),
        a_node("npu-1").cluster("sim-1").no_gpus().npus(8, "Ascend910B").build(),
        a_node("n2").cluster("sim-2").build(),
    ]
    sim_1 = cluster("sim-1", stability_milli=610, failures_per_kgpu_hour_milli=2400, recent_failures=3)
    r = schedule(snapshot(nodes, [LONG_TRAINING.build()], clusters=[sim_1, cluster("sim-2", stability_milli=980)]))
    (p,) = [d for d in r.decisions if isinstance(d, Place)]
    assert "sim-2 over sim-1: stability 980 vs 610 (3 GPU and NPU failures in the last day)" in p.message
    rated = cluster("sim-1", stability_milli=610, failures_per_kgpu_hour_milli=2400)
    r = schedule(snapshot(nodes, [LONG_TRAINING.build()], clusters=[rated, cluster("sim-2", stability_milli=980)]))
    (p,) = [d for d in r.decisions if isinstance(d, Place)]
    assert "(GPU and NPU failures in the last day: 2.40 per 1,000 device-hours)" in p.message
