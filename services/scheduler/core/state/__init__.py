"""What the scheduler knows, folded from the log, and the fleet snapshot it decides on.

Called by ``services.scheduler.core.decide`` (for the scheduler host, ``fedsched audit verify`` and the
benchmarks) and by ``fedsched audit at`` and ``audit whatif``. Pure: no I/O, clock or randomness; only
``events`` and the policy core's model. The facts (``facts``), the fold (``fold``), the core's models of
events (``convert``), the policy document (``policy_document``), what a hard budget has spent
(``budget_count``, which the simulations count with too) and the state that derives snapshots
(``scheduler_state``).

The fold is written so that its result does not depend on how records of *different* partitions
interleave, only on which records were folded: every entity's facts live in one partition (nodes,
tenants, policies) or are kept as sets keyed by run (a job's placements come from the decisions topic,
its lifecycle from the jobs topic). So the live scheduler, folding records as they arrive, and a
replay, folding the same records in (topic, partition, offset) order, reach the same state: that is
what makes every recorded cycle re-executable.

A job that has ended for good, with every run's placement and end folded, is *settled*: no later
record can change what it contributes to a decision. A run's first placement and first end are final
(each comes from one partition, so "first" is the same in every replay), and a job ended for good is
never placed again. So a settled job's facts are dropped at the next snapshot and only its id is kept,
to ignore what still comes for it: a service that runs for months keeps what is open, not every job
it ever saw. Its usage stays in the tenants' ledgers (and its records, packed, for a change of the
usage half-life). ``keep_settled`` keeps every job's facts, for readers of the whole history.
"""

from services.scheduler.core.state.convert import core_node_id, event_node, job_model
from services.scheduler.core.state.facts import SUSPECT_FOR_MS, JobFacts, NodeFacts, Placement
from services.scheduler.core.state.policy_document import MIN_USAGE_HALF_LIFE_MS, policy_from_document
from services.scheduler.core.state.scheduler_state import SchedulerState

__all__ = [
    "MIN_USAGE_HALF_LIFE_MS",
    "SUSPECT_FOR_MS",
    "JobFacts",
    "NodeFacts",
    "Placement",
    "SchedulerState",
    "core_node_id",
    "event_node",
    "job_model",
    "policy_from_document",
]
