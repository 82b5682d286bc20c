"""Governance: quota approval, reclamation of idle and stale resources, abnormal-job findings, reports.

Who calls what:

- the pure core (``core``: ``config``, ``state``, ``quota``, ``reclaim``, ``abnormal``, ``failures``,
  ``rules``, ``figures``) is called by the host, the quota rules the API is given and the report; it does
  no I/O and takes time as input;
- ``host.GovernanceHost`` follows the log and publishes what the rules decide (``fedsched gov run``, and
  inside ``fedsched up``);
- ``commands`` publishes people's quota requests and decisions (``fedsched gov quota ...``), and
  ``quota_rules`` answers the API's questions about them (the API's ``QuotaRules`` port);
- ``report`` builds ``fedsched gov report`` from the read models and findings (``services.cli.gov_render``
  prints it).

The names below are the pure, public part; importing them pulls in no I/O library.
"""

from services.governance.core.config import AutoApproveRule, GovConfig, IdleRule, LeaseRule, RuntimeRule, from_document
from services.governance.core.quota import DecisionError, auto_decide, decide, effective_lines
from services.governance.core.rules import evaluate
from services.governance.core.state import SOURCE, GovState, Output

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
