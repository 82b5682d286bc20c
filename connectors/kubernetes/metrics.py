"""The Kubernetes connector's ``/metrics`` samples and ``/healthz`` checks.

Called by ``fedsched connector kubernetes --metrics host:port`` (``services.cli.connector_cmd``), which
serves them with ``events.plumbing.metrics.serving`` and the consumer's lag; reads the counters the
connector's parts keep (nothing is counted twice, nothing is kept for the scrape).
"""

from __future__ import annotations

from collections.abc import Mapping

from connectors.kubernetes.connector import KubernetesConnector
from events.catalog.inventory import ClusterStatus
from events.plumbing.metrics import Check, Sample


def samples(connector: KubernetesConnector) -> list[Sample]:
    c = connector
    cluster = {"cluster": str(c.config.cluster)}
    component = f"connector-{c.config.cluster}"
    out: list[Sample] = [
        ("fedsched_connector_reachable", cluster, 0.0 if c.reachability.status is ClusterStatus.UNREACHABLE else 1.0),
        ("fedsched_connector_nodes", cluster, float(c.nodes.known)),
        ("fedsched_connector_pods_created_total", cluster, float(c.executor.created)),
        ("fedsched_connector_decisions_total", cluster, float(c.consumer.handled)),
        ("fedsched_connector_live_jobs", cluster, float(len(c.book))),
        ("fedsched_connector_events_published_total", cluster, float(c.reporter.published)),
        ("fedsched_connector_rosters_total", cluster, float(c.nodes.rosters)),
        ("fedsched_connector_usage_reports_total", cluster, float(c.usage.reported if c.usage is not None else 0)),
        ("fedsched_dead_lettered_total", {"component": component}, float(c.consumer.dead_lettered)),
    ]
    for resource, reflector in (("nodes", c.node_reflector), ("pods", c.pod_reflector)):
        labels = {**cluster, "resource": resource}
        stats = reflector.stats
        out += [
            ("fedsched_connector_lists_total", labels, float(stats.lists)),
            ("fedsched_connector_relists_gone_total", labels, float(stats.relists_gone)),
            ("fedsched_connector_watch_events_total", labels, float(stats.events)),
            ("fedsched_connector_watch_errors_total", labels, float(stats.errors)),
        ]
    return out


def checks(connector: KubernetesConnector) -> Mapping[str, Check]:
    """Failing while the API server is unreachable or refuses the connector (the log's own outage is named
    by the outage the connector rides out)."""
    return {"kubernetes-api": lambda: connector.reachability.status is not ClusterStatus.UNREACHABLE}
