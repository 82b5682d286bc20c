"""A policy document (``PolicyConfigured``) as the core's ``PolicyConfig``, every setting checked.

Called by the fold (an invalid document never takes effect), by ``SchedulerState.policy_config`` and by
``fedsched audit whatif`` (a policy file). Pure.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from events.catalog.documents import MAX_BACKOFF_S, MAX_GRACE_PERIOD_S, MAX_RETRIES
from services.scheduler.core.policy import model as m

MIN_USAGE_HALF_LIFE_MS = 60_000


def policy_from_document(version: str, document: Any) -> m.PolicyConfig:
    """The policy configuration from a ``PolicyConfigured`` document; unknown keys are refused."""
    doc = json.loads(json.dumps(document))  # a plain, detached copy
    base = m.PolicyConfig()
    known = {name for name in base.__dataclass_fields__ if name not in ("version",)}
    unknown = sorted(set(doc) - known)
    if unknown:
        # Named beside the valid ones, so a misspelt key can be corrected without reading the code.
        raise ValueError(f"unknown settings {', '.join(unknown)}; valid settings: {', '.join(sorted(known))}")
    for name, value in doc.items():
        _check_setting(name, value, getattr(base, name))
    if "class_aging_ceiling" in doc:
        doc["class_aging_ceiling"] = m.PriorityClass(doc["class_aging_ceiling"])
    if "node_policy" in doc:
        doc["node_policy"] = m.NodePolicy(doc["node_policy"])
    if "cluster_weights" in doc:
        doc["cluster_weights"] = m.ClusterWeights(**doc["cluster_weights"])
    if "preemption_classes" in doc:
        given = doc["preemption_classes"]
        doc["preemption_classes"] = tuple((p, m.PreemptionRules(**given.get(p.value, {}))) for p in m.PRIORITY_ORDER)
    if "retry_classes" in doc:
        given = doc["retry_classes"]
        defaults = dict(m.DEFAULT_RETRY_RULES)
        doc["retry_classes"] = tuple((p, replace(defaults[p], **given.get(p.value, {}))) for p in m.PRIORITY_ORDER)
    if "typical_shapes" in doc:
        doc["typical_shapes"] = tuple(
            m.Shape(**{**s, "models": tuple(s.get("models", ()))}) for s in doc["typical_shapes"]
        )
    config = m.PolicyConfig(version=version, **doc)
    if config.usage_half_life_ms < 0 or 0 < config.usage_half_life_ms < MIN_USAGE_HALF_LIFE_MS:
        # Fair share's history keeps one sum per 32 half-lives: a half-life of milliseconds would keep
        # one per few records and make every cycle read them all (0 means no decay at all).
        raise ValueError(f"usage_half_life_ms must be 0 or at least {MIN_USAGE_HALF_LIFE_MS} ms")
    return config


_PERCENT = {"typical_coverage_pct": 100}
_MILLI_SCALE = {"hot_pressure_milli": 1000, "aging_unit_milli": 1000}
_LIMITS = {"max_preemptions_per_cycle", "max_preemptions_per_tenant_hour"}
_AT_LEAST_ONE = {"max_decisions", "aging_step_ms", *_LIMITS}
_NULLABLE = {"hot_model_cap_milli", *_LIMITS}  # a whole number, or null for none
_AGING_CEILINGS = ("critical_training", "standard", "best_effort")
_RETRY_HIGH = {"max_retries": MAX_RETRIES, "backoff_s": MAX_BACKOFF_S, "max_backoff_s": MAX_BACKOFF_S}
_RULE_HIGH = {"interruption_budget": 1000, "grace_period_s": MAX_GRACE_PERIOD_S, "min_runtime_s": 10 * 365 * 24 * 3600}


def _check_setting(name: str, value: Any, default: Any) -> None:
    """A setting of the type its default has, in its range: a quoted ``"false"`` would otherwise be a
    true value (preemption stays on), and a negative count a slice from the end."""

    def refuse(reason: str) -> None:
        raise ValueError(f"setting {name}: {reason}, not {json.dumps(value)}")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            refuse("must be true or false")
    elif isinstance(default, int) or name in _NULLABLE:
        if value is None and name in _NULLABLE:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            refuse("must be a whole number" + (" or null" if name in _NULLABLE else ""))
        low = 1 if name in _AT_LEAST_ONE else 0
        high = _PERCENT.get(name, _MILLI_SCALE.get(name))
        if value < low or (high is not None and value > high):
            refuse(f"must be from {low}" + (f" to {high}" if high is not None else " up"))
    elif isinstance(default, m.ClusterWeights):
        if not isinstance(value, dict):
            refuse("must be a mapping of weights")
        for term, weight in value.items():
            if term not in default.__dataclass_fields__:
                refuse(f"has an unknown term {term!r} (terms: {', '.join(default.__dataclass_fields__)})")
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
                refuse(f"weight {term} must be a whole number from 0 up")
    elif name == "preemption_classes":
        _check_classes(value, refuse)
    elif name == "class_aging_ceiling":
        if value not in _AGING_CEILINGS:
            refuse(f"must be one of {', '.join(_AGING_CEILINGS)} (never production_inference)")
    elif name == "retry_classes":
        _check_classes(value, refuse, _RETRY_HIGH)
        defaults = {p.value: rules for p, rules in m.DEFAULT_RETRY_RULES}
        for named, rules in value.items():
            backoff = rules.get("backoff_s", defaults[named].backoff_s)
            if backoff > rules.get("max_backoff_s", defaults[named].max_backoff_s):
                refuse(f"class {named} has a backoff_s of {backoff}, more than its max_backoff_s")
    elif isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            refuse("must be a list of shapes")
    elif isinstance(default, str) and not isinstance(value, str):
        refuse("must be a string")


def _check_classes(value: Any, refuse: Any, highs: dict[str, int] = _RULE_HIGH) -> None:
    """A mapping of priority class -> its rules (preemption's, or ``highs``), each a whole number in its
    range."""
    if not isinstance(value, dict):
        refuse("must be a mapping of priority class to its rules")
    classes = [p.value for p in m.PRIORITY_ORDER]
    for name, rules in value.items():
        if name not in classes:
            refuse(f"has an unknown priority class {name!r} (classes: {', '.join(classes)})")
        if not isinstance(rules, dict):
            refuse(f"class {name} must be a mapping of rules")
        for rule, number in rules.items():
            if rule not in highs:
                refuse(f"class {name} has an unknown rule {rule!r} (rules: {', '.join(highs)})")
            if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= highs[rule]:
                refuse(f"class {name} rule {rule} must be a whole number from 0 to {highs[rule]}")
