"""The ``cluster:`` section of a connector's YAML: what a cluster is, for people and for governance.

Called by the simulated connector's node list reader (``connectors.sim.nodes``) and by the Kubernetes
connector's configuration file reader (``connectors.kubernetes.config_file``), so both connectors read
the same section the same way. Pure: takes the parsed YAML mapping, returns ``ClusterDefaults``.

Keys (all optional): ``display_name``, ``site``, ``region``, ``currency`` (ISO 4217), ``gpu_rates`` (a
mapping of GPU or NPU model to millionths of the currency per device-hour), ``datasets`` (a list of
dataset ids) and ``labels`` (a mapping of strings). Values the event catalogue refuses (a site that is not
an id, a currency that is not three letters) are refused when the connector builds its
``ClusterRegistered``; this module checks the shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

KEYS = ("display_name", "site", "region", "currency", "gpu_rates", "datasets", "labels")


class ClusterSectionError(ValueError):
    """A ``cluster:`` section that cannot be read: the message names the key and what is wrong."""


@dataclass(frozen=True, slots=True)
class ClusterDefaults:
    """Cluster metadata a YAML file may carry; flags given on the command line win."""

    display_name: str = ""
    site: str | None = None
    region: str | None = None
    currency: str | None = None
    gpu_rates: tuple[tuple[str, int], ...] = ()
    datasets: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


def _text(section: Mapping[object, object], key: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ClusterSectionError(f"cluster.{key} must be a string, got {value!r}")
    return str(value)


def _rates(section: Mapping[object, object]) -> tuple[tuple[str, int], ...]:
    rates = section.get("gpu_rates") or {}
    if not isinstance(rates, Mapping):
        raise ClusterSectionError("cluster.gpu_rates and cluster.labels must be mappings")
    out = []
    for model, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 0:
            raise ClusterSectionError(
                f"cluster.gpu_rates.{model} must be a non-negative integer (millionths per device-hour), got {rate!r}"
            )
        out.append((str(model), rate))
    return tuple(sorted(out))


def parse(section: object) -> ClusterDefaults:
    """The section as ``ClusterDefaults``; ``None`` (no section) gives the empty defaults."""
    if section is None:
        return ClusterDefaults()
    if not isinstance(section, Mapping):
        raise ClusterSectionError("'cluster' must be a mapping")
    unknown = sorted(str(k) for k in section if k not in KEYS)
    if unknown:
        raise ClusterSectionError(f"cluster: unknown keys {unknown}; known: {', '.join(KEYS)}")
    labels = section.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ClusterSectionError("cluster.gpu_rates and cluster.labels must be mappings")
    datasets = section.get("datasets") or ()
    if isinstance(datasets, str) or not isinstance(datasets, list | tuple):
        raise ClusterSectionError(f"cluster.datasets must be a list of dataset ids, got {datasets!r}")
    return ClusterDefaults(
        display_name=_text(section, "display_name") or "",
        site=_text(section, "site"),
        region=_text(section, "region"),
        currency=_text(section, "currency"),
        gpu_rates=_rates(section),
        datasets=tuple(str(d) for d in datasets),
        labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )


__all__ = ["KEYS", "ClusterDefaults", "ClusterSectionError", "parse"]
