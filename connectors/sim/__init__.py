"""The simulated cluster: a trace-driven stand-in for a real GPU cluster, on the event log.

Who calls it: ``fedsched connector sim`` (one cluster per process), ``fedsched up`` (``SimFleet``:
three clusters in one process) and end-to-end tests. Modules:

- ``nodes``, ``spec``: node lists (trace CSVs or YAML) and what a cluster is;
- ``config``, ``clock``: the knobs, and simulated time;
- ``jobs``, ``state``, ``checks``, ``faults``, ``reports``, ``history``, ``cluster``: the pure model
  (what a placement does, the refusal check, the seeded faults and utilisation, the restart fold);
- ``restore``, ``host``: the log side (read back at start, consume, publish).
"""

from connectors.sim.checks import Refusal, check_placement
from connectors.sim.clock import SimClock
from connectors.sim.cluster import ClusterModel
from connectors.sim.config import SimConfig
from connectors.sim.faults import Fault, FaultKind, FaultPlan
from connectors.sim.history import History
from connectors.sim.host import SimCluster, SimFleet, SimStats
from connectors.sim.jobs import JobSpec
from connectors.sim.nodes import (
    NodeList,
    NodeListError,
    NodeSpec,
    default_nodes_path,
    load_nodes,
    npu_pool,
    parse_split,
)
from connectors.sim.reports import Emit
from connectors.sim.spec import ClusterSpec

__all__ = [
    "ClusterModel",
    "ClusterSpec",
    "Emit",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "History",
    "JobSpec",
    "NodeList",
    "NodeListError",
    "NodeSpec",
    "Refusal",
    "SimClock",
    "SimCluster",
    "SimConfig",
    "SimFleet",
    "SimStats",
    "check_placement",
    "default_nodes_path",
    "load_nodes",
    "npu_pool",
    "parse_split",
]
