"""GPU usage from what Kubernetes clusters already run: DCGM exporter metrics -> ``NodeUsageReported``.

``exposition`` parses the Prometheus text format, ``dcgm`` reads GPUs from its samples, ``window``
averages scrapes into reports, ``settings`` says where from and how often (these four are pure);
``sources`` finds and scrapes the exporters (or queries Prometheus) and ``task`` is the connector's loop
around them.
"""

from connectors.kubernetes.usage.dcgm import GpuReading, PodRef
from connectors.kubernetes.usage.exposition import Limits, Parsed, Sample, parse
from connectors.kubernetes.usage.settings import DEFAULT_SELECTORS, UsageSettings
from connectors.kubernetes.usage.sources import ExporterSource, PrometheusSource, source_of
from connectors.kubernetes.usage.task import UsageTask
from connectors.kubernetes.usage.window import Window

__all__ = [
    "DEFAULT_SELECTORS",
    "ExporterSource",
    "GpuReading",
    "Limits",
    "Parsed",
    "PodRef",
    "PrometheusSource",
    "Sample",
    "UsageSettings",
    "UsageTask",
    "Window",
    "parse",
    "source_of",
]
