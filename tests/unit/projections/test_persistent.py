"""The persistent collections behind the quota and fleet entities: every version keeps saying what it said
(read, changed, compared, pickled and written by the stage codec in any order), and the stages built on
them fold a long stream to what the copying layout they replaced folded (its logic kept here as the
reference)."""

from __future__ import annotations

import pickle
import random
from bisect import bisect_left
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.readmodel.rows.entities import TABLES
from projections.stages import quota as quota_module
from projections.stages.codec import dumps, loads
from projections.stages.codec_types import Registry
from projections.stages.core import Batch, Input
from projections.stages.deltas import NodeCapacity, PendingDemand, QueueAllocation
from projections.stages.fleet import FleetStage, FleetState
from projections.stages.persistent import PMap, RunSet
from projections.stages.quota import QueueQuota, QuotaStage


@dataclass
class _Holds:
    """A version of each collection, as an entity holds one (what the stage codec writes)."""

    map: PMap[int, int]
    runs: RunSet


_CODEC = Registry({"Holds": _Holds})


def _written_and_read(version: PMap[int, int] | RunSet) -> PMap[int, int] | RunSet:
    held = _Holds(version, RunSet()) if isinstance(version, PMap) else _Holds(PMap(), version)
    read = _CODEC.from_json(_CODEC.to_json(held))
    return read.map if isinstance(version, PMap) else read.runs  # type: ignore[no-any-return]


ops = st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from(["set", "remove", "read"]), st.integers(0, 9), st.integers()),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_every_version_of_a_map_keeps_its_content(ops: list[tuple[int, str, int, int]]) -> None:
    versions: list[PMap[int, int]] = [PMap()]
    expected: list[dict[int, int]] = [{}]
    for which, op, key, value in ops:
        at = which % len(versions)  # any version, old ones included
        version, content = versions[at], expected[at]
        if op == "read":
            assert version.get(key) == content.get(key) and (key in version) == (key in content)
            assert len(version) == len(content) and sorted(version) == sorted(content)
            continue
        if op == "set":
            versions.append(version.set(key, value))
            expected.append({**content, key: value})
        else:
            versions.append(version.remove(key))
            expected.append({k: v for k, v in content.items() if k != key})
    for version, content in reversed(list(zip(versions, expected, strict=True))):
        assert version.to_dict() == content
        assert pickle.loads(pickle.dumps(version)).to_dict() == content
        assert _written_and_read(version) == version
    for a, b in zip(versions, expected, strict=True):
        for c, d in zip(versions, expected, strict=True):
            assert (a == c) == (b == d)
            assert a != c or hash(a) == hash(c)


def _old_add(runs: tuple[int, ...], run: int, cap: int) -> tuple[int, ...]:
    """How the quota stage kept its released runs before: a sorted tuple, its greatest ``cap``."""
    where = bisect_left(runs, run)
    if where < len(runs) and runs[where] == run:
        return runs
    return (*runs[:where], run, *runs[where:])[-cap:]


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(1, 6), ops=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 20)), max_size=60))
def test_every_version_of_a_capped_run_set_is_the_sorted_tuple_it_replaced(
    cap: int, ops: list[tuple[int, int]]
) -> None:
    versions = [RunSet(cap=cap)]
    expected: list[tuple[int, ...]] = [()]
    for which, run in ops:
        at = which % len(versions)
        assert (run in versions[at]) == (run in expected[at])
        versions.append(versions[at].add(run))
        expected.append(_old_add(expected[at], run, cap))
    for version, content in reversed(list(zip(versions, expected, strict=True))):
        assert version.sorted() == content and len(version) == len(content)
        assert pickle.loads(pickle.dumps(version)) == version
        assert _written_and_read(version).sorted() == content  # type: ignore[union-attr]


class _OldQuota:
    """The quota stage's holdings, released runs and GPU-time before the persistent layout (sorted
    tuples copied on every change), folded alongside the stage as the reference."""

    def __init__(self) -> None:
        self.holdings: tuple[tuple[str, int, int, str | None], ...] = ()
        self.released: tuple[tuple[str, int, str], ...] = ()
        self.consumed = 0

    def fold(self, delta: QueueAllocation, now: int, cap: int) -> None:
        holdings = self.holdings
        at = bisect_left(holdings, delta.job_id, key=lambda h: h[0])
        current = holdings[at] if at < len(holdings) and holdings[at][0] == delta.job_id else None
        run = (delta.job_id, delta.run, delta.part)
        where = bisect_left(self.released, run)
        was_released = where < len(self.released) and self.released[where] == run
        if delta.held:
            if was_released or (current is not None and current[1] > delta.run):
                return
            rest = holdings[at + 1 :] if current is not None else holdings[at:]
            holding = (delta.job_id, delta.run, delta.gpu_milli, delta.gpu_model)
            self.holdings = (*holdings[:at], holding, *rest)
            return
        if was_released:
            return
        self.consumed += delta.gpu_milli * max(0, (delta.at_ms or now) - delta.since_ms)
        if current is not None and current[1] == delta.run:
            self.holdings = (*holdings[:at], *holdings[at + 1 :])
        self.released = (*self.released[:where], run, *self.released[where:])[-cap:]


def test_the_quota_stage_folds_a_long_stream_as_the_copying_layout_did(monkeypatch: pytest.MonkeyPatch) -> None:
    cap = 300  # small, so the released runs overflow many times (the stage keeps 10,000)
    monkeypatch.setattr(quota_module, "RELEASED_RUNS", cap)
    rng = random.Random(7)
    stage, entity, reference = QuotaStage(), None, _OldQuota()
    kept = []
    for i in range(6000):
        job = f"j{rng.randrange(i + 1):05d}" if rng.random() < 0.6 else f"j{i:05d}"
        gpu = rng.choice([0, 500, 1000])
        delta = QueueAllocation(
            job, rng.randint(1, 3), rng.random() < 0.5, "t/q", "c1", 1000, 2048, gpu,
            rng.choice(["A100", "H100", None]) if gpu else None, rng.randrange(i + 1), i if rng.random() < 0.8 else 0,
        )  # fmt: skip
        entity, _ = stage.reduce(entity, Input("t/q", i, None, delta, ""))
        reference.fold(delta, i, cap)
        assert entity is not None
        assert [(h.job_id, h.run, h.gpu_milli, h.gpu_model) for _, h in sorted(entity.holdings.items())] == list(
            reference.holdings
        )
        assert entity.released_runs.sorted() == reference.released
        assert entity.gpu_milli_ms_consumed == reference.consumed
        if i % 500 == 0:
            kept.append((entity, TABLES["quota"].rows("t/q", entity), entity.released_runs.sorted()))
    assert entity.totals.gpu_milli == sum(h.gpu_milli for _, h in entity.holdings.items())
    for old, rows, released in kept:  # older versions, read after the newest moved on
        assert TABLES["quota"].rows("t/q", old) == rows and old.released_runs.sorted() == released
        assert loads(dumps(old), QueueQuota) == old


def test_a_batch_folded_twice_from_one_stored_entity_gives_the_same_entity_and_outputs() -> None:
    """As a faust stage does when a batch is folded again over the table's version (a crash before the
    changelog write): the stored version must not have seen the first attempt's changes."""
    stage = QuotaStage()
    stored = None
    for i in range(50):
        held = QueueAllocation(f"j{i}", 1, True, "t/q", "c1", 1000, 1024, 1000, "A100", 0, i)
        stored, _ = stage.reduce(stored, Input("t/q", i, None, held, ""))
    results = []
    for _ in range(2):
        batch, entity = Batch(stage), stored
        for i in range(50):
            release = QueueAllocation(f"j{i}", 1, False, "t/q", "c1", 1000, 1024, 1000, "A100", 0, 100 + i)
            entity, _ = batch.fold(entity, Input("t/q", 100 + i, None, release, ""))
        outputs = batch.publish(lambda key, latest=entity: latest)
        results.append((entity, [(out.id, out.event) for out, _ in outputs]))
    assert results[0][1] == results[1][1] and results[0][1]
    assert results[0][0] == results[1][0]
    assert stored is not None and len(stored.holdings) == 50 and len(stored.released_runs) == 0


def test_the_fleet_folds_a_long_stream_of_nodes_and_demand_to_consistent_totals() -> None:
    rng = random.Random(11)
    stage, fleet = FleetStage(), None
    nodes: dict[tuple[str, str], NodeCapacity] = {}
    pending: dict[str, PendingDemand] = {}
    kept = []
    for i in range(5000):
        if rng.random() < 0.6:
            n = rng.randrange(400)
            present = rng.random() < 0.85
            per = ((rng.choice(["A100", "H100"]), 8000, rng.randrange(0, 8001, 1000)),) if present else ()
            health = (8, rng.randrange(0, 1001), rng.randrange(3), rng.random() < 0.5, rng.random() < 0.5)
            delta: NodeCapacity | PendingDemand = NodeCapacity(f"c{n % 3}", f"n{n}", present, per, *health)
            if present:
                nodes[(delta.cluster, delta.node)] = delta
            else:
                nodes.pop((delta.cluster, delta.node), None)
        else:
            delta = PendingDemand(f"p{rng.randrange(300)}", rng.random() < 0.6, 1000, ("A100",) * rng.randint(0, 1))
            if delta.pending:
                pending[delta.job_id] = delta
            else:
                pending.pop(delta.job_id, None)
        fleet, _ = stage.reduce(fleet, Input("fleet", i, None, delta, ""))
        assert fleet is not None
        if i % 250 == 0:
            kept.append((fleet, dict(nodes), dict(pending), TABLES["fleet"].rows("fleet", fleet)))
    assert fleet is not None and fleet.nodes.to_dict() == nodes and fleet.pending.to_dict() == pending
    models: dict[str, tuple[int, int]] = {}
    for node in nodes.values():
        for model, capacity, free in node.per_model:
            cap, fr = models.get(model, (0, 0))
            models[model] = (cap + capacity, fr + free)
    assert fleet.per_model() == models
    assert fleet.demand_any == sum(d.gpu_milli for d in pending.values() if not d.gpu_models)
    # Each cluster's health sums, kept delta by delta, equal a count from scratch.
    for cluster in ("c0", "c1", "c2"):
        mine = [node for node in nodes.values() if node.cluster == cluster]
        expected = (
            sum(node.gpus for node in mine),
            sum(node.gpus * node.health_milli for node in mine),
            sum(node.recent_failures for node in mine),
            sum(node.fit_training for node in mine),
            sum(node.fit_inference for node in mine),
        )
        assert fleet.health.get(cluster, (0, 0, 0, 0, 0)) == expected, cluster
    for old, old_nodes, old_pending, rows in kept:
        assert old.nodes.to_dict() == old_nodes and old.pending.to_dict() == old_pending
        assert TABLES["fleet"].rows("fleet", old) == rows
        assert loads(dumps(old), FleetState) == old
