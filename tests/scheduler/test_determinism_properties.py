"""Determinism across PYTHONHASHSEED and input order, and Hypothesis properties of whole cycles."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.jobs import PriorityClass
from services.scheduler.core.policy import FleetSnapshot, NodePolicy, Place, PolicyConfig, Quota, schedule
from tests.scheduler.builders import a_job, a_node, snapshot, tenant

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
from tests.scheduler.test_determinism_properties import rich_snapshot
from services.scheduler.core.policy import schedule
print(schedule(rich_snapshot()).to_json())
"""


def rich_snapshot() -> FleetSnapshot:
    nodes = [
        a_node(f"{c}-n{i}").cluster(c).model(m).gpus(g).build()
        for c, m, g in (("cluster-a", "A100", 8), ("cluster-b", "T4", 4), ("cluster-c", "V100", 8))
        for i in range(3)
    ]
    jobs = [
        a_job(f"j{i:02d}")
        .tenant(f"t{i % 3}")
        .gpus([1, 2, 4, 8][i % 4])
        .priority(list(PriorityClass)[i % 4])
        .submitted(i)
        .build()
        for i in range(14)
    ] + [a_job(f"s{i}").tenant("t1").share(250 + 50 * i).submitted(20 + i).build() for i in range(5)]
    jobs.append(a_job("gang").tenant("t0").gpus(8).replicas(3).submitted(30).build())
    tenants = [
        tenant("t0", Quota("gpu", 16000, 32000), cohort="c"),
        tenant("t1", Quota("gpu", 8000, 16000), cohort="c"),
    ]
    return snapshot(nodes, jobs, tenants=tenants)


@pytest.mark.timeout(120)
def test_the_same_input_gives_byte_identical_decisions_under_any_hash_seed():
    outs = set()
    for seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(REPO))
        res = subprocess.run(
            [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        outs.add(res.stdout)
    assert len(outs) == 1
    assert '"kind":"place"' in outs.pop()


@pytest.mark.timeout(60)
def test_the_order_entities_are_given_in_does_not_matter():
    s = rich_snapshot()
    shuffled = FleetSnapshot(
        now_ms=s.now_ms,
        clusters=tuple(reversed(s.clusters)),
        nodes=tuple(reversed(s.nodes)),
        tenants=tuple(reversed(s.tenants)),
        running=s.running,
        pending=tuple(s.pending[1::2] + s.pending[::2]),
    )
    assert schedule(s).to_json() == schedule(shuffled).to_json()


job_st = st.builds(
    lambda i, t, g, share, r, p, cpu: (
        a_job(f"p{i:03d}")
        .tenant(f"t{t}")
        .gpus(g if not share else 0)
        .share(share if share else 0)
        .replicas(r if g and not share else 1)
        .priority(list(PriorityClass)[p])
        .cpu(cpu)
        .submitted(i)
        .build()
    ),
    i=st.integers(0, 999),
    t=st.integers(0, 2),
    g=st.sampled_from([1, 2, 4, 8]),
    share=st.sampled_from([0, 0, 0, 200, 500]),
    r=st.integers(1, 3),
    p=st.integers(0, 3),
    cpu=st.sampled_from([1000, 8000, 32000]),
)


def fleet_st():
    return st.lists(
        st.tuples(
            st.sampled_from(["cluster-a", "cluster-b"]), st.sampled_from([2, 4, 8]), st.sampled_from(["A100", "T4"])
        ),
        min_size=1,
        max_size=6,
    ).map(lambda xs: [a_node(f"n{i}").cluster(c).gpus(g).model(m).build() for i, (c, g, m) in enumerate(xs)])


@pytest.mark.property
@pytest.mark.timeout(120)
@settings(max_examples=30, deadline=None)
@given(
    nodes=fleet_st(),
    jobs=st.lists(job_st, min_size=1, max_size=12, unique_by=lambda j: j.job_id),
    policy=st.sampled_from(list(NodePolicy)),
    limit=st.sampled_from([2000, 8000, 64000]),
)
def test_a_cycle_never_overcommits_holds_quotas_keeps_gangs_whole_and_is_order_invariant(nodes, jobs, policy, limit):
    tenants = [tenant(f"t{i}", Quota("gpu", limit // 2, limit)) for i in range(3)]
    snap = snapshot(nodes, jobs, tenants=tenants)
    cfg = PolicyConfig(node_policy=policy, seed=3)
    result = schedule(snap, cfg)
    by_id = {j.job_id: j for j in jobs}
    node = {n.node_id: n for n in nodes}
    gpu_used: dict[tuple[str, int], int] = defaultdict(int)
    cpu_used: dict[str, int] = defaultdict(int)
    tenant_gpu: dict[str, int] = defaultdict(int)
    for d in result.decisions:
        if not isinstance(d, Place):
            continue
        job = by_id[d.job_id]
        assert len(d.replicas) == job.replicas  # all or nothing
        assert len({node[p.node_id].cluster for p in d.replicas}) == 1  # one cluster
        for p in d.replicas:
            cpu_used[p.node_id] += job.cpu_milli
            assert len(p.gpu_indices) == (job.gpus or (1 if job.gpu_milli else 0))
            for g in p.gpu_indices:
                gpu_used[(p.node_id, g)] += p.gpu_milli_each
        tenant_gpu[job.tenant] += job.total_gpu_milli()
    assert all(v <= 1000 for v in gpu_used.values())
    assert all(cpu_used[n] <= node[n].cpu_free_milli for n in cpu_used)
    assert all(v <= limit for v in tenant_gpu.values())
    placed = {d.job_id for d in result.decisions if isinstance(d, Place)}
    queued = {d.job_id for d in result.decisions if d.kind == "queue"}
    assert placed | queued == set(by_id) and not placed & queued
    again = schedule(snapshot(list(reversed(nodes)), list(reversed(jobs)), tenants=list(reversed(tenants))), cfg)
    assert again.to_json() == result.to_json()
