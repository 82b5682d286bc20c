"""Default prices of a device-hour per GPU or NPU model, for clusters that configure none.

Called by the simulated connector (``connectors.sim.spec``: every model of its nodes gets a rate) and
by the Kubernetes connector (``connectors.kubernetes.registration``: every model it discovers gets a
rate), so cost attribution works on any cluster; a rate configured in the ``cluster:`` section
(``connectors.cluster_section``) always wins. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_GPU_RATES: Mapping[str, int] = {
    "A10": 1_100_000,
    "A100-SXM4-80GB": 3_700_000,
    "A800-SXM4-80GB": 3_400_000,
    "G1": 1_500_000,
    "G2": 1_800_000,
    "G3": 2_200_000,
    "H800": 5_500_000,
    "P100": 1_460_000,
    "T4": 350_000,
    "V100M16": 2_480_000,
    "V100M32": 2_970_000,
    "Ascend910B": 2_600_000,
}
"""Price of one device-hour per model (a GPU's or an NPU's), in millionths of the currency unit (public
cloud list prices, rounded; Ascend910B, with no common public price, an estimate near an A100's); models
without an entry cost 1.0 per device-hour."""

SAME_MODEL: Mapping[str, str] = {
    "NVIDIA-A10": "A10",
    "NVIDIA-A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA-A800-SXM4-80GB": "A800-SXM4-80GB",
    "NVIDIA-H800": "H800",
    "Tesla-P100-PCIE-16GB": "P100",
    "Tesla-T4": "T4",
    "Tesla-V100-SXM2-16GB": "V100M16",
    "Tesla-V100-SXM2-32GB": "V100M32",
    "Ascend910B1": "Ascend910B",
    "Ascend910B2": "Ascend910B",
    "Ascend910B3": "Ascend910B",
    "Ascend910B4": "Ascend910B",
}
"""Names a real cluster reports for a model of the table (NVIDIA GPU feature discovery's products, the
Ascend chip names of the 910B family): they cost what the table's entry costs."""

UNKNOWN_MODEL_RATE = 1_000_000


def default_rate(model: str) -> int:
    """The table's price of ``model`` (under its own name or one it is known by), else 1.0."""
    return DEFAULT_GPU_RATES.get(model, DEFAULT_GPU_RATES.get(SAME_MODEL.get(model, ""), UNKNOWN_MODEL_RATE))


def rates_for(models: Iterable[str], configured: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """The configured rates, plus a default for every model in ``models`` without one; sorted by model."""
    rates = dict(configured)
    for model in sorted(set(models)):
        rates.setdefault(model, default_rate(model))
    return tuple(sorted(rates.items()))


__all__ = ["DEFAULT_GPU_RATES", "SAME_MODEL", "UNKNOWN_MODEL_RATE", "default_rate", "rates_for"]
