"""Topology constraints: which nodes share an NVLink domain or an RDMA fabric, and how many replicas of a
shape fit inside one.

Called by the placement trial (``Ctx.try_place``), preemption's room search, backfill's earliest start
and reservation, the fewer-replicas step and explanations; reads the fleet's per-node domain numbers
(``FleetState.nvlink_of`` / ``rdma_of``, -1 for a node without one). Pure integer arithmetic.

A job that asks for ``interconnect: nvlink`` or ``rdma`` with ``interconnect_required`` is constrained
hard: every replica goes on a node in one and the same domain of that kind (nodes without one never
take it), so a cluster holds it now only if one of its domains has room for all of its replicas. Without
``interconnect_required`` the interconnect is a preference: the trial adds ``cross_domain_penalty`` for
nodes outside the first replica's domain, and a node without a domain shares one with no node.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy.fleet import FleetState
from services.scheduler.core.policy.model import Interconnect, Job

I64 = npt.NDArray[np.int64]

KIND_NAMES = {Interconnect.NVLINK: "NVLink domain", Interconnect.RDMA: "RDMA fabric"}
"""How explanations name one domain of each kind."""


def required(job: Job) -> Interconnect | None:
    """The interconnect the job must stay inside, if it asks for one as a hard constraint."""
    if job.interconnect_required and job.interconnect is not Interconnect.NONE:
        return job.interconnect
    return None


def preferred(job: Job) -> Interconnect | None:
    """The interconnect a multi-replica job prefers to stay inside (soft: a cost, not a rule)."""
    if job.replicas > 1 and not job.interconnect_required and job.interconnect is not Interconnect.NONE:
        return job.interconnect
    return None


def domain_of(fs: FleetState, kind: Interconnect) -> I64:
    """Per node, its domain of ``kind`` as a number (-1: none)."""
    return fs.nvlink_of if kind is Interconnect.NVLINK else fs.rdma_of


def domain_name(fs: FleetState, kind: Interconnect, number: int) -> str:
    return (fs.nvlink_domains if kind is Interconnect.NVLINK else fs.rdma_fabrics)[number]


class Room(NamedTuple):
    """The domain with the most room for a job's replicas in a range of nodes (-1 and 0: none)."""

    domain: int
    replicas: int


def room_by_domain(fs: FleetState, kind: Interconnect, cap: I64, lo: int, hi: int) -> I64:
    """Replicas that fit in each domain of ``kind`` (indexed by domain number), given ``cap``, the
    replicas that fit on each node of ``lo:hi``. Nodes without a domain count for none."""
    dom = domain_of(fs, kind)[lo:hi]
    inside = dom >= 0
    sums = np.zeros(len(fs.nvlink_domains if kind is Interconnect.NVLINK else fs.rdma_fabrics), dtype=np.int64)
    np.add.at(sums, dom[inside], cap[inside])
    return sums


def largest_room(fs: FleetState, kind: Interconnect, cap: I64, lo: int, hi: int) -> Room:
    """The domain with room for the most replicas (the first by name among equals), given ``cap``."""
    sums = room_by_domain(fs, kind, cap, lo, hi)
    if not sums.size:
        return Room(-1, 0)
    best = int(sums.argmax())  # domain numbers follow their names' order: the first among equals
    return Room(best, int(sums[best])) if sums[best] > 0 else Room(-1, 0)


def fits(job: Job, cap: I64, fs: FleetState, lo: int, hi: int) -> bool:
    """Do all of the job's replicas fit in ``lo:hi`` given ``cap`` (per node), within one domain of the
    interconnect it requires, if it requires one."""
    kind = required(job)
    if kind is None:
        return int(cap.sum()) >= job.replicas
    return largest_room(fs, kind, cap, lo, hi).replicas >= job.replicas


def most_in_one(job: Job, cap: I64, fs: FleetState, lo: int, hi: int) -> int:
    """The most replicas that fit in ``lo:hi`` as the job asks (in one domain if it requires one)."""
    kind = required(job)
    return int(cap.sum()) if kind is None else largest_room(fs, kind, cap, lo, hi).replicas


def outside(fs: FleetState, kind: Interconnect, cap: I64, job: Job, lo: int, hi: int) -> I64:
    """Per node of the fleet: True (1) where a replica of a hard-constrained job may not start the
    placement, i.e. the node is outside every domain of ``kind`` in ``lo:hi`` with room for all of its
    replicas. The trial masks these, then masks everything outside the first replica's domain."""
    dom = domain_of(fs, kind)
    sums = room_by_domain(fs, kind, cap, lo, hi)
    ok_domain = np.append(sums >= job.replicas, False)  # index -1 (no domain) reads the appended False
    return (~ok_domain[dom]).astype(np.int64)


def other_domain(fs: FleetState, kind: Interconnect, node: int) -> I64:
    """Per node: 1 where it does not share ``node``'s domain of ``kind`` (a node without one shares none)."""
    dom = domain_of(fs, kind)
    mine = int(dom[node])
    other: I64 = ((dom != mine) | (dom < 0)).astype(np.int64)
    return other


__all__ = [
    "KIND_NAMES",
    "Room",
    "domain_name",
    "domain_of",
    "fits",
    "largest_room",
    "most_in_one",
    "other_domain",
    "outside",
    "preferred",
    "required",
    "room_by_domain",
]
