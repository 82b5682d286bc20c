"""Governance's pure core: its settings, the state folded from the log, and the rules that decide.

Called by the governance host (``services.governance.host``: fold, then ``evaluate``), the quota rules the
API is given (``services.governance.quota_rules``), the quota commands and the report. Pure: no I/O, clock,
randomness or environment; time comes in as the log's. ``config`` (the settings and their checks),
``state`` (what the rules read, folded from the log; a job's ``facts`` and how its run events change them,
``runs``, a run spread over clusters part by part), ``quota`` (requests, approvals, the quota in force),
``reclaim`` (idle and stale resources), ``abnormal`` and ``failures`` (findings), ``rules`` (``evaluate``:
every rule, in order) and ``figures`` (the report's numbers).
"""
