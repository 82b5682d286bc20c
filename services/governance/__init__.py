"""Governance: quota approval, reclamation of idle and stale resources, abnormal-job findings, reports.

Who calls what:

- the pure core (``core``: ``config``, ``state``, ``quota``, ``reclaim``, ``abnormal``, ``failures``,
  ``rules``, ``figures``) is called by the host, the quota rules the API is given and the report; it does
  no I/O and takes time as input;
- ``host.GovernanceHost`` follows the log and publishes what the rules decide (``fedsched gov run``, and
  inside ``fedsched up``);
- ``topic`` reads the governance topic (quota requests and decisions, findings); ``quota_rules`` and
  ``api_reads`` answer the API's questions from it (its ``QuotaRules`` and ``GovernanceReads`` ports):
  people's quota requests, decisions, findings and reports go through the API with their token
  (``fedsched gov quota ...``, ``gov findings``, ``gov report``);
- ``report`` builds the governance report from the read models and findings (the API's ``GetReport``;
  ``services.cli.gov_render`` prints it).

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
