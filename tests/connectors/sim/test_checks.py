"""The second check on the scheduler: placements that do not fit are refused with the reason."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from connectors.sim import SimConfig
from events.catalog.jobs import JobFailed, JobStarted
from events.catalog.reasons import ReasonCode

from .builders import JobBuilder, PlacementBuilder, Story, a_cluster, a_job, a_node, a_placement

pytestmark = pytest.mark.timeout(30)


def fleet() -> Story:
    """Two A100 nodes (one already half full) on fabric ib-a, one on ib-b, a cordoned node, a tainted T4
    node, a CPU node."""
    spec = a_cluster(
        a_node("a100-0").on_fabric("ib-a"),
        a_node("a100-1").on_fabric("ib-a"),
        a_node("a100-2").on_fabric("ib-b"),
        a_node("cordoned").cordoned(),
        a_node("t4-spot").gpus(4, "T4", 15109).tainted("spot", "true"),
        a_node("cpu-0").gpus(0).cpu(8000).memory(32_768),
    )
    story = Story(spec, SimConfig(start_delay_s=0))
    story.start(a_job("resident").gpus(4).cpu(32_000), a_placement("resident").on("a100-1", 0, 1, 2, 3))
    story.start(a_job("sharer").share(700), a_placement("sharer").on("a100-1", 4, milli=700))
    return story


@dataclass(frozen=True)
class Case:
    name: str
    job: JobBuilder
    placement: PlacementBuilder
    reason: ReasonCode
    words: str

    def __str__(self) -> str:
        return self.name


def j() -> JobBuilder:
    return a_job("newcomer")


def p() -> PlacementBuilder:
    return a_placement("newcomer")


REFUSED = [
    Case("a whole GPU already taken", j().gpus(1), p().on("a100-1", 3), ReasonCode.INSUFFICIENT_GPU, "GPU 3 has 0"),
    Case("a share that does not fit the rest of a GPU", j().share(400), p().on("a100-1", 4, milli=400),
         ReasonCode.INSUFFICIENT_GPU_SHARE, "300 milli-GPU free"),
    Case("two replicas on one GPU", j().gpus(1).replicas(2), p().on("a100-0", 0).on("a100-0", 0),
         ReasonCode.INSUFFICIENT_GPU, "replica 1"),
    Case("the wrong GPU model", j().gpus(1).models("H100", "H800"), p().on("a100-0", 0),
         ReasonCode.GPU_MODEL_UNAVAILABLE, "allows only H100, H800"),
    Case("too little GPU memory", j().gpus(1).min_gpu_memory(100_000), p().on("a100-0", 0),
         ReasonCode.GPU_MEMORY_TOO_SMALL, "at least 100000 MiB"),
    Case("a node that does not exist", j().gpus(1), p().on("ghost", 0), ReasonCode.NO_FEASIBLE_NODE, "no such node"),
    Case("a cordoned node", j().gpus(1), p().on("cordoned", 0), ReasonCode.NODE_UNSCHEDULABLE, "cordoned"),
    Case("a taint the job does not tolerate", j().gpus(1), p().on("t4-spot", 0), ReasonCode.TAINT_NOT_TOLERATED,
         "spot=true:NoSchedule"),
    Case("a GPU index past the node's GPUs", j().gpus(1), p().on("a100-0", 8), ReasonCode.LAUNCH_FAILED,
         "GPU 8 does not exist"),
    Case("fewer GPUs than the job asks", j().gpus(2), p().on("a100-0", 0), ReasonCode.LAUNCH_FAILED,
         "asks 2 whole GPUs"),
    Case("more CPU than is left", j().gpus(1).cpu(40_000), p().on("a100-1", 5), ReasonCode.INSUFFICIENT_CPU,
         "28000 milli-CPU free"),
    Case("more memory than the node has", j().memory(40_000), p().on("cpu-0"), ReasonCode.INSUFFICIENT_MEMORY,
         "32768 MiB"),
    Case("an incomplete gang", j().gpus(1).replicas(2, gang=True), p().on("a100-0", 0), ReasonCode.LAUNCH_FAILED,
         "gang of 2"),
    Case("more replicas than the job has", j().gpus(1), p().on("a100-0", 0).on("a100-0", 1),
         ReasonCode.LAUNCH_FAILED, "names 2 replicas"),
    Case("a required fabric spanned", j().gpus(1).replicas(2).requires_rdma(), p().on("a100-0", 0).on("a100-2", 0),
         ReasonCode.INTERCONNECT_UNAVAILABLE, "one RDMA fabric; the placement spans ib-a (a100-0), ib-b (a100-2)"),
    Case("a required fabric on a node without one", j().gpus(1).tolerates("spot").requires_rdma(), p().on("t4-spot", 0),
         ReasonCode.INTERCONNECT_UNAVAILABLE, "replica 0 on node t4-spot: the job requires one RDMA fabric"),
]  # fmt: skip


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_a_placement_that_does_not_fit_is_refused_naming_why(case: Case) -> None:
    story = fleet().submit(case.job).place(case.placement).at(100)
    [failed] = story.events(JobFailed, "newcomer")
    event = failed.event
    assert isinstance(event, JobFailed)
    assert event.reason is case.reason
    assert case.words in event.message
    assert event.message.startswith("placement refused: ")
    assert not story.events(JobStarted, "newcomer")


ACCEPTED = [
    Case("the rest of a shared GPU", j().share(300), p().on("a100-1", 4, milli=300), ReasonCode.PLACED, ""),
    Case("a tolerated taint", j().gpus(1).tolerates("spot"), p().on("t4-spot", 0), ReasonCode.PLACED, ""),
    Case("an allowed model", j().gpus(2).models("T4", "A100-SXM4-80GB"), p().on("a100-0", 6, 7), ReasonCode.PLACED,
         ""),
    Case("a gang over two nodes", j().gpus(3).replicas(2, gang=True), p().on("a100-0", 0, 1, 2).on("a100-1", 5, 6, 7),
         ReasonCode.PLACED, ""),
    Case("a CPU-only job", j().cpu(8000), p().on("cpu-0"), ReasonCode.PLACED, ""),
    Case("a required fabric kept", j().gpus(1).replicas(2).requires_rdma(), p().on("a100-0", 0).on("a100-1", 5),
         ReasonCode.PLACED, ""),
    Case("a preferred fabric spanned", j().gpus(1).replicas(2), p().on("a100-0", 0).on("a100-2", 0),
         ReasonCode.PLACED, ""),
]  # fmt: skip


@pytest.mark.parametrize("case", ACCEPTED, ids=str)
def test_a_placement_that_fits_starts(case: Case) -> None:
    story = fleet().submit(case.job).place(case.placement).at(100)
    assert not story.events(JobFailed, "newcomer")
    assert story.events(JobStarted, "newcomer")


def test_a_refused_placement_takes_nothing() -> None:
    story = fleet().submit(a_job("big").gpus(8)).place(a_placement("big").on("a100-1", *range(8))).at(10)
    assert story.events(JobFailed, "big")
    story.start(a_job("fits").gpus(3), a_placement("fits").on("a100-1", 5, 6, 7)).at(20)
    assert story.events(JobStarted, "fits")
