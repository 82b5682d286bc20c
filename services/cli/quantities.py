"""How the CLI shows amounts of resources: whole CPUs and GPUs (the API and the log count milli-units),
MiB of memory, NPUs; and the units the log counts them in. Called by ``fedsched quota``, ``audit at`` and
``gov quota list``, so they read alike."""

from __future__ import annotations

QUOTA_UNITS: dict[str, tuple[int, str]] = {
    "cpu": (1000, "CPUs"),
    "gpu": (1000, "GPUs"),
    "memory": (1, "MiB"),
    "npu": (1, "NPUs"),
}
"""Resource -> (milli-units or units per shown unit, the unit's name)."""

RAW_UNITS = {"cpu": "milli-CPU", "gpu": "milli-GPU", "memory": "MiB", "npu": "NPUs"}
"""The unit the API, the log and quota requests count each resource in."""


def unit_of(resource: str) -> tuple[int, str]:
    """The scale and unit of a quota resource (``gpu:A100`` is counted as ``gpu``)."""
    return QUOTA_UNITS.get(resource.partition(":")[0], (1, "units"))
