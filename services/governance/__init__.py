"""Governance: quota approval, reclamation of idle and stale resources, abnormal-job findings, reports.

Who calls what:

- the pure rules (``config``, ``state``, ``quota``, ``reclaim``, ``abnormal``, ``rules``, ``figures``) are
  called by the host and by the API; they do no I/O and take time as input;
- ``host.GovernanceHost`` follows the log and publishes what the rules decide (``fedsched gov run``, and
  inside ``fedsched up``);
- ``commands`` publishes people's quota requests and decisions (``fedsched gov quota ...``, the API);
- ``report`` and ``render`` build ``fedsched gov report`` from the read models and findings.

The names below are the pure, public part; importing them pulls in no I/O library.
"""

from services.governance.config import AutoApproveRule, GovConfig, IdleRule, LeaseRule, RuntimeRule, from_document
from services.governance.quota import DecisionError, auto_decide, decide, effective_lines
from services.governance.rules import evaluate
from services.governance.state import SOURCE, GovState, Output

__all__ = [
    "SOURCE",
    "AutoApproveRule",
    "DecisionError",
    "GovConfig",
    "GovState",
    "IdleRule",
    "LeaseRule",
    "Output",
    "RuntimeRule",
    "auto_decide",
    "decide",
    "effective_lines",
    "evaluate",
    "from_document",
]
