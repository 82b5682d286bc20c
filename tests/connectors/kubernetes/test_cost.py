"""Cost works on Kubernetes: the connector's registration, restated for the models its nodes show, prices
the device time of jobs on AMD GPUs and Ascend NPUs in the projections (what gov report and cost attribution
read). The events are the connector's own (``Registration``, ``nodes.observe``), folded as a host would."""

from __future__ import annotations

import pytest

from connectors.kubernetes import ConnectorConfig, nodes
from connectors.kubernetes.connector import registered
from connectors.kubernetes.registration import Registration
from events.catalog.inventory import NodeObserved
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.types import ClusterId, JobId
from projections.stages.clusters import usage_key
from tests.unit.projections.builders import Fold, a_job, placed

from .builders import a_node

pytestmark = pytest.mark.timeout(30)

CLUSTER = ClusterId("c1")
HALF_HOUR_S = 1800


def observed(builder_node: dict[str, object]) -> NodeObserved:
    view = nodes.observe(builder_node, CLUSTER)
    assert view is not None
    return view.observed


def a_fold(rates: tuple[tuple[str, int], ...]) -> Fold:
    """The connector started (its registration), then listed an AMD node and an Ascend node."""
    config = ConnectorConfig(cluster=CLUSTER, currency="EUR", gpu_rates=rates)
    registration = Registration(registered(config), lambda: 1)
    fold = Fold()
    fold.feed(registration.stated()[0])
    listed = [observed(a_node("n1").amd_gpus(8).build()), observed(a_node("n2").ascend_npus(8).build())]
    models = [g.model for n in listed for g in n.gpus] + [n.model for node in listed for n in node.npus]
    for event, _ in registration.restated(models):
        fold.feed(event)
    for node in listed:
        fold.feed(node)
    return fold


def run_half_an_hour(fold: Fold, job: str, node: str, *, npus: int = 0) -> None:
    submitted = a_job(job, gpus=0 if npus else 2)
    event = placed(job, node, gpus=() if npus else (0, 1), milli=0 if npus else 1000)
    if npus:
        resources = submitted.resources.model_copy(update={"npus": npus})
        submitted = submitted.model_copy(update={"resources": resources})
        replica = event.replicas[0].model_copy(update={"npu_indices": tuple(range(npus))})
        event = event.model_copy(update={"replicas": (replica,)})
    fold.feed(submitted)
    fold.feed(event)
    fold.feed(JobStarted(job_id=JobId(job), cluster=CLUSTER), at_s=1)
    fold.feed(JobSucceeded(job_id=JobId(job), cluster=CLUSTER), at_s=HALF_HOUR_S)  # held from its placement at 0


def test_jobs_on_amd_gpus_and_ascend_npus_cost_their_rates() -> None:
    fold = a_fold((("AMD-Instinct-MI300X", 3_600_000),))
    run_half_an_hour(fold, "j-amd", "n1")
    run_half_an_hour(fold, "j-npu", "n2", npus=4)
    amd = fold.get("usage", usage_key("team-a", "c1", "AMD-Instinct-MI300X", 0))
    npu = fold.get("usage", usage_key("team-a", "c1", "Ascend910B3", 0, "npu"))
    assert (amd.cost_micro, amd.currency) == (3_600_000, "EUR")  # 2 GPUs x 0.5 h x 3.60 configured
    assert npu.cost_micro == 4 * 2_600_000 // 2  # 4 NPUs x 0.5 h x the Ascend910B family's default


def test_without_the_restatement_the_npu_time_would_be_free() -> None:
    """What the restatement fixes: the first registration names no rate for a model found later."""
    config = ConnectorConfig(cluster=CLUSTER, currency="EUR")
    fold = Fold()
    fold.feed(registered(config))
    fold.feed(observed(a_node("n2").ascend_npus(8).build()))
    run_half_an_hour(fold, "j-npu", "n2", npus=4)
    assert fold.get("usage", usage_key("team-a", "c1", "Ascend910B3", 0, "npu")).cost_micro == 0
