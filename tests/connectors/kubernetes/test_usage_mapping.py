"""DCGM exporter readings averaged over a window into one ``NodeUsageReported`` per node, with the
connector's own pods attributed to their job and run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from connectors.kubernetes.lifecycle import RunKey
from connectors.kubernetes.usage import UsageSettings, Window, parse
from connectors.kubernetes.usage.dcgm import FAMILIES, GpuReading, PodRef, readings
from connectors.kubernetes.usage.exposition import Sample
from connectors.kubernetes.usage.task import pod_runs
from events.catalog.inventory import GpuUsage, JobUsage
from events.catalog.types import ClusterId, JobId

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
OURS = {
    PodRef("fedsched-team-a", "train-job-1-0"): RunKey(JobId("train-job"), 1),
    PodRef("fedsched-team-a", "idle-job-1-0"): RunKey(JobId("idle-job"), 1),
    PodRef("fedsched-team-b", "serve-job-1-0"): RunKey(JobId("serve-job"), 1),
    PodRef("fedsched-team-b", "serve-job-1-1"): RunKey(JobId("serve-job"), 1),
}


def scrape(name: str, node: str | None = None) -> list[GpuReading]:
    found, problems = readings(parse((FIXTURES / name).read_text(), FAMILIES).samples, node)
    assert problems == []
    return found


def sample(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, tuple(sorted(labels.items())), value)


def test_each_gpu_of_the_recorded_answers_is_read_with_its_pods() -> None:
    a, b = scrape("node-a.prom"), scrape("node-b.prom")
    assert [(r.node, r.index, r.utilisation_pct, r.memory_used_mib) for r in a + b] == [
        ("gpu-node-a", 0, 92, 61440),
        ("gpu-node-a", 1, 88, 61312),
        ("gpu-node-a", 2, 35, 20480),
        ("gpu-node-a", 3, 0, 0),
        ("gpu-node-b", 0, 0, 4096),
        ("gpu-node-b", 1, 31, 30720),
        ("gpu-node-b", 2, 0, 0),
        ("gpu-node-b", 3, None, None),  # DCGM's blank and NaN: not measured, not 0
    ]
    assert b[1].pods == (PodRef("fedsched-team-b", "serve-job-1-0"), PodRef("fedsched-team-b", "serve-job-1-1"))
    assert a[3].pods == () and a[0].uuid == "GPU-7a1c2e0b-3f4d-4c2a-9e51-0d8b6f2a1c01"


def test_the_node_discovery_found_wins_over_the_hostname_label() -> None:
    assert {r.node for r in scrape("node-b.prom", node="k8s-worker-7")} == {"k8s-worker-7"}


def test_the_profiling_counter_stands_in_when_gpu_util_is_absent() -> None:
    found, _ = readings([sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.423, gpu="0", Hostname="n")])
    assert found[0].utilisation_pct == 42 and found[0].memory_used_mib is None


def test_old_pod_label_names_are_read_too() -> None:
    found, _ = readings([sample("DCGM_FI_DEV_GPU_UTIL", 5, gpu="0", Hostname="n", pod_name="p", pod_namespace="ns")])
    assert found[0].pods == (PodRef("ns", "p"),)


def test_a_series_without_node_or_gpu_index_is_a_problem_not_a_reading() -> None:
    found, problems = readings(
        [sample("DCGM_FI_DEV_GPU_UTIL", 5, gpu="0"), sample("DCGM_FI_DEV_FB_USED", 5, Hostname="n")]
    )
    assert found == [] and len(problems) == 2


def test_mig_instances_join_their_gpu() -> None:
    found, _ = readings(
        [
            sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.8, gpu="0", GPU_I_ID="1", Hostname="n"),
            sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.2, gpu="0", GPU_I_ID="2", Hostname="n"),
            sample("DCGM_FI_DEV_FB_USED", 1000, gpu="0", GPU_I_ID="1", Hostname="n"),
            sample("DCGM_FI_DEV_FB_USED", 500, gpu="0", GPU_I_ID="2", Hostname="n"),
        ]
    )
    assert [(r.index, r.utilisation_pct, r.memory_used_mib) for r in found] == [(0, 50, 1500)]


def test_a_window_reports_per_node_per_gpu_and_per_job_of_ours() -> None:
    window = Window(ClusterId("k8s-a"))
    window.add(scrape("node-a.prom") + scrape("node-b.prom"), OURS.get)
    a, b = window.close(60_000)
    assert (a.cluster, a.node, a.window_ms, b.node) == ("k8s-a", "gpu-node-a", 60_000, "gpu-node-b")
    assert a.gpus == (
        GpuUsage(index=0, utilisation_pct=92, memory_used_mib=61440),
        GpuUsage(index=1, utilisation_pct=88, memory_used_mib=61312),
        GpuUsage(index=2, utilisation_pct=35, memory_used_mib=20480),
        GpuUsage(index=3, utilisation_pct=0, memory_used_mib=0),
    )
    # the notebook is not ours: its GPU counts for the node, and no job is reported for it
    assert a.jobs == (
        JobUsage(job_id="train-job", run=1, gpu_indices=(0, 1), utilisation_pct=90, gpu_memory_used_mib=122752),
    )
    assert [g.index for g in b.gpus] == [0, 1, 2], "GPU 3 was not measured: not reported as idle"
    assert b.jobs == (
        JobUsage(job_id="idle-job", run=1, gpu_indices=(0,), utilisation_pct=0, gpu_memory_used_mib=4096),
        # a shared GPU's memory is the device's, no one pod's share: not counted for the job
        JobUsage(job_id="serve-job", run=1, gpu_indices=(1,), utilisation_pct=31, gpu_memory_used_mib=0),
    )
    assert (a.cpu_milli_used, a.memory_used_mib, a.jobs[0].cpu_milli_used) == (0, 0, 0), "not measured by DCGM"


def test_the_window_is_the_mean_of_its_scrapes_and_starts_over_when_closed() -> None:
    window = Window(ClusterId("k8s-a"))
    pod = (PodRef("fedsched-team-a", "train-job-1-0"),)
    for pct, mib in ((90, 1000), (30, 3000), (60, 2000)):
        window.add([GpuReading("n1", 0, "GPU-0", "H100", pct, mib, pod)], OURS.get)
    window.add([GpuReading("n1", 0, "GPU-0", "H100", None, None, pod)], OURS.get)  # a blank: not a zero
    (report,) = window.close(60_000)
    assert report.gpus == (GpuUsage(index=0, utilisation_pct=60, memory_used_mib=2000),)
    assert report.jobs[0].utilisation_pct == 60
    assert window.close(60_000) == [], "nothing measured since: no report (no usage data), not zeros"


def test_a_node_whose_gpus_were_never_measured_reports_nothing() -> None:
    window = Window(ClusterId("k8s-a"))
    window.add([GpuReading("n1", 0, "", "", None, None, ())], OURS.get)
    assert window.close(60_000) == []


def test_a_job_seen_in_two_runs_is_reported_once_for_the_later_run() -> None:
    window = Window(ClusterId("k8s-a"))
    runs = {PodRef("ns", "j-1-0"): RunKey(JobId("j"), 1), PodRef("ns", "j-2-0"): RunKey(JobId("j"), 2)}
    window.add([GpuReading("n1", 0, "", "", 10, 1, (PodRef("ns", "j-1-0"),))], runs.get)
    window.add([GpuReading("n1", 1, "", "", 70, 1, (PodRef("ns", "j-2-0"),))], runs.get)
    (report,) = window.close(1000)
    # 70% in the second of the window's two scrapes: half the window
    assert [(j.job_id, j.run, j.gpu_indices, j.utilisation_pct) for j in report.jobs] == [("j", 2, (1,), 35)]


def test_our_pods_are_known_by_their_fedsched_labels() -> None:
    pod = {
        "metadata": {
            "namespace": "fedsched-team-a",
            "name": "train-job-1-0",
            "labels": {"fedsched.io/job-id": "train-job", "fedsched.io/run": "1", "fedsched.io/replica": "0"},
            "annotations": {"fedsched.io/job-id": "train-job", "fedsched.io/replicas": "1"},
        }
    }
    stranger = {"metadata": {"namespace": "research", "name": "notebook-x-0", "labels": {}}}
    assert pod_runs([pod, stranger]) == {PodRef("fedsched-team-a", "train-job-1-0"): RunKey(JobId("train-job"), 1)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"interval_s": -1}, "usage.interval_s: -1 is negative"),
        ({"scrape_s": 0}, "usage.scrape_s: 0 must be above 0"),
        ({"interval_s": 10, "scrape_s": 30}, "at most the window"),
        ({"timeout_s": 0}, "usage.timeout_s"),
        ({"selectors": (" ",)}, "usage.selectors: no label selector"),
        ({"port": 70000}, "usage.port: 70000 is not a TCP port"),
        ({"path": "metrics"}, "usage.path: 'metrics' must start with /"),
        ({"prometheus_url": "prom:9090"}, "usage.prometheus_url: 'prom:9090' is not an http(s) URL"),
    ],
)
def test_bad_usage_settings_are_refused_naming_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        UsageSettings(**kwargs)


def test_usage_off_needs_no_scrape_cadence() -> None:
    assert not UsageSettings(interval_s=0, scrape_s=0).enabled


def test_a_run_seen_in_part_of_the_window_used_its_gpus_for_that_part_only() -> None:
    window = Window(ClusterId("k8s-a"))
    pod = (PodRef("fedsched-team-a", "train-job-1-0"),)
    window.add([GpuReading("n1", 0, "", "", 0, 0, ())], OURS.get)  # before the run's pod existed
    window.add([], OURS.get)  # the exporter did not answer: counts neither way
    for _ in range(3):
        window.add([GpuReading("n1", 0, "", "", 80, 1000, pod)], OURS.get)
    (report,) = window.close(50_000)
    assert report.window_ms == 40_000, "4 of the window's 5 scrapes read the node"
    assert report.jobs[0].utilisation_pct == 60, "80% for 3 of the 4 scrapes that read the node"
    assert report.jobs[0].gpu_memory_used_mib == 1000, "memory is what it held while it ran"
    assert report.gpus[0].utilisation_pct == 60, "the GPU's own mean over the scrapes that read it"
