"""The Kubernetes connector's configuration file: ``fedsched connector kubernetes --config FILE``.

Called by the CLI (``services.cli.connector_cmd``), which then gives the ``ConnectorConfig`` to the
connector, and by tests. Reads one YAML file; nothing else.

```yaml
cluster:                # what the cluster is: the simulated connector's node lists have the same section
  display_name: GPU East 1
  site: dc-east
  region: us-east
  currency: EUR
  gpu_rates: {NVIDIA-H100-80GB-HBM3: 4200000, AMD-Instinct-MI300X: 3600000, Ascend910B3: 2600000}
  datasets: [imagenet]
  labels: {tier: prod}
connector:              # any ConnectorConfig field but the cluster id, the cluster section's own and usage
  namespace_prefix: fedsched-
  default_image: registry.example/base:1
  cancel_grace_s: 60
usage:                  # where GPU usage is read from (``connectors.kubernetes.usage.UsageSettings``)
  interval_s: 60
  selectors: [app=nvidia-dcgm-exporter]
  namespace: gpu-operator
```

The ``cluster:`` section is read by ``connectors.cluster_section``. The ``connector:`` section is checked
against ``ConnectorConfig``'s fields and their types, whatever fields it has, and the ``usage:`` section
against ``UsageSettings``'s: an unknown key or a value of the wrong type is an error naming the file and
the key. A flag given on the command line wins over
the file, which wins over the defaults. The cluster's description is checked as the event catalogue
will (``ClusterRegistered``) before the connector starts.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from connectors import cluster_section
from connectors.cluster_section import ClusterDefaults
from connectors.kubernetes.connector import ConnectorConfig, registered
from connectors.kubernetes.usage import UsageSettings
from events.catalog.types import ClusterId

FROM_CLUSTER_SECTION = frozenset(cluster_section.KEYS)
"""``ConnectorConfig`` fields the ``cluster:`` section gives (not accepted under ``connector:``)."""
FROM_FLAGS_ONLY = frozenset({"cluster"})
SECTIONS = frozenset({"usage"})
"""``ConnectorConfig`` fields given by a section of their own."""


class ConfigFileError(ValueError):
    """A configuration file that cannot be used: the message names the file, the key and the reason."""


@dataclass(frozen=True, slots=True)
class ConfigFile:
    path: str
    cluster: ClusterDefaults = field(default_factory=ClusterDefaults)
    connector: Mapping[str, object] = field(default_factory=dict)
    """``ConnectorConfig`` field -> value, checked against the field's type."""
    usage: Mapping[str, object] = field(default_factory=dict)
    """``UsageSettings`` field -> value, checked against the field's type."""


def _hints(kind: type = ConnectorConfig) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def connector_keys() -> tuple[str, ...]:
    """The keys the ``connector:`` section accepts: every ``ConnectorConfig`` field but the cluster's."""
    return tuple(
        f.name
        for f in dataclasses.fields(ConnectorConfig)
        if f.name not in FROM_CLUSTER_SECTION and f.name not in FROM_FLAGS_ONLY and f.name not in SECTIONS
    )


def describe(kind: Any) -> str:
    """A type as words for an error message."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        return " or ".join("null" if a is type(None) else describe(a) for a in args)
    if origin is tuple or origin is list:
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin is dict:
        return f"a mapping of {describe(args[0])} to {describe(args[1])}"
    supertype = getattr(kind, "__supertype__", None)
    if supertype is not None:
        return describe(supertype)
    words = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if kind in words:
        return words[kind]
    raise TypeError(f"a configuration file cannot give a value of type {kind!r}")


def convert(kind: Any, value: object) -> object:
    """``value`` (from YAML) as ``kind``; ``ValueError`` when it is not one."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        for option in args:
            if option is type(None):
                continue
            try:
                return convert(option, value)
            except ValueError:
                continue
        raise ValueError
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise ValueError
        items = [convert(args[0], v) for v in value] if args and args[-1] is Ellipsis else None
        if items is None:
            if args and len(args) != len(value):
                raise ValueError
            items = [convert(a, v) for a, v in zip(args, value, strict=False)] if args else list(value)
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ValueError
        return {convert(args[0], k): convert(args[1], v) for k, v in value.items()}
    supertype = getattr(kind, "__supertype__", None)
    if supertype is not None:
        return convert(supertype, value)
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    raise ValueError


def _settings(path: Path, title: str, section: object, kind: type, known: set[str]) -> dict[str, object]:
    """A section of settings of ``kind`` (a dataclass): each key one of ``known``, its value of the
    field's type."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigFileError(f"{path}: '{title}' must be a mapping of settings")
    hints = _hints(kind)
    out: dict[str, object] = {}
    for key, value in section.items():
        name = str(key)
        if title == "connector" and name in FROM_CLUSTER_SECTION:
            raise ConfigFileError(f"{path}: connector.{name} belongs in the 'cluster' section")
        if title == "connector" and name in FROM_FLAGS_ONLY:
            raise ConfigFileError(f"{path}: connector.{name} is given by --{name}, not by the file")
        if title == "connector" and name in SECTIONS:
            raise ConfigFileError(f"{path}: connector.{name} is a section of its own ('{name}:')")
        if name not in known:
            raise ConfigFileError(f"{path}: {title}.{name} is not a setting; known: {', '.join(sorted(known))}")
        try:
            out[name] = convert(hints[name], value)
        except ValueError:
            raise ConfigFileError(f"{path}: {title}.{name} must be {describe(hints[name])}, got {value!r}") from None
    return out


def load(path: Path) -> ConfigFile:
    """Read and check the file (its sections' shapes and types)."""
    if not path.is_file():
        raise ConfigFileError(f"{path}: no such configuration file")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigFileError(f"{path}: not YAML: {error}") from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigFileError(f"{path}: expected a mapping with 'cluster' and 'connector' sections")
    unknown = sorted(str(k) for k in document if k not in ("cluster", "connector", "usage"))
    if unknown:
        raise ConfigFileError(f"{path}: unknown sections {unknown}; known: cluster, connector, usage")
    try:
        cluster = cluster_section.parse(document.get("cluster"))
    except cluster_section.ClusterSectionError as error:
        raise ConfigFileError(f"{path}: {error}") from None
    connector = _settings(path, "connector", document.get("connector"), ConnectorConfig, set(connector_keys()))
    usage = _settings(path, "usage", document.get("usage"), UsageSettings, set(_hints(UsageSettings)))
    return ConfigFile(str(path), cluster, connector, usage)


def _from_cluster(defaults: ClusterDefaults) -> dict[str, object]:
    values: dict[str, object] = {"gpu_rates": defaults.gpu_rates, "datasets": defaults.datasets}
    if defaults.labels:
        values["labels"] = dict(defaults.labels)
    if defaults.display_name:
        values["display_name"] = defaults.display_name
    for key in ("site", "region", "currency"):
        if getattr(defaults, key) is not None:
            values[key] = getattr(defaults, key)
    return values


def build(
    cluster: str,
    file: ConfigFile | None = None,
    flags: Mapping[str, object] | None = None,
    usage_flags: Mapping[str, object] | None = None,
) -> ConnectorConfig:
    """The connector's configuration: defaults, then the file, then the flags given (``None``: not given),
    for the connector's settings and for its usage settings alike. The cluster's description is checked
    as ``ClusterRegistered`` will check it."""
    values: dict[str, object] = {}
    usage: dict[str, object] = {}
    if file is not None:
        values |= _from_cluster(file.cluster) | dict(file.connector)
        usage |= dict(file.usage)
    values |= {k: v for k, v in (flags or {}).items() if v is not None}
    usage |= {k: v for k, v in (usage_flags or {}).items() if v is not None}
    source = f"{file.path}: " if file is not None else ""
    try:
        values["usage"] = UsageSettings(**usage)  # type: ignore[arg-type]
    except ValueError as error:
        raise ConfigFileError(f"{source}{error}") from None
    config = ConnectorConfig(cluster=ClusterId(cluster), **values)  # type: ignore[arg-type]
    try:
        registered(config)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigFileError(f"{source}cluster {where}: {first['msg']}") from None
    return config


__all__ = ["ConfigFile", "ConfigFileError", "build", "connector_keys", "convert", "describe", "load"]
