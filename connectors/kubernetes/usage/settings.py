"""Where the Kubernetes connector reads GPU usage from, and how often: ``ConnectorConfig.usage``.

Called by ``connectors.kubernetes.connector`` (which builds the usage task from it) and by the CLI
(``fedsched connector kubernetes --usage-*``, ``--dcgm-*``, ``--prometheus-url``). Pure. A bad value is
refused when the settings are made, with the flag's field and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SELECTORS = ("app=nvidia-dcgm-exporter", "app.kubernetes.io/name=dcgm-exporter")
"""The GPU operator's label of its exporter, and dcgm-exporter's own Helm chart's."""


@dataclass(frozen=True, slots=True)
class UsageSettings:
    interval_s: float = 60.0
    """Window of each ``NodeUsageReported`` (the mean of its scrapes); 0: no usage is read."""
    scrape_s: float = 15.0
    """Between scrapes (the exporter refreshes its figures every 30 s by default: ``-c 30000``)."""
    timeout_s: float = 10.0
    """Deadline of one scrape of every exporter (or of the Prometheus query)."""
    selectors: tuple[str, ...] = DEFAULT_SELECTORS
    """Label selectors of the DCGM exporter pods (each listed; a pod matched twice is scraped once)."""
    namespace: str = ""
    """The exporters' namespace ("": every namespace)."""
    port: int = 9400
    path: str = "/metrics"
    prometheus_url: str | None = None
    """Read the DCGM metrics from this Prometheus (``/api/v1/query``) instead of scraping the exporters."""

    def __post_init__(self) -> None:
        if self.interval_s < 0:
            raise ValueError(f"usage.interval_s: {self.interval_s} is negative (0 turns usage off)")
        if self.interval_s and not 0 < self.scrape_s <= self.interval_s:
            raise ValueError(
                f"usage.scrape_s: {self.scrape_s} must be above 0 and at most the window, {self.interval_s}"
            )
        if self.timeout_s <= 0:
            raise ValueError(f"usage.timeout_s: {self.timeout_s} must be above 0")
        if not self.prometheus_url and not [s for s in self.selectors if s.strip()]:
            raise ValueError("usage.selectors: no label selector of the DCGM exporter pods")
        if not 0 < self.port < 65536:
            raise ValueError(f"usage.port: {self.port} is not a TCP port")
        if not self.path.startswith("/"):
            raise ValueError(f"usage.path: {self.path!r} must start with /")
        if self.prometheus_url is not None and not self.prometheus_url.startswith(("http://", "https://")):
            raise ValueError(f"usage.prometheus_url: {self.prometheus_url!r} is not an http(s) URL")

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0
