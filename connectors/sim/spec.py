"""What a simulated cluster is: its id, metadata, prices and nodes (``ClusterSpec``).

Called by the CLI and ``SimFleet`` (which build specs from node lists) and by the model, which states the
spec as ``ClusterRegistered``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from connectors.sim.nodes import ClusterDefaults, NodeSpec
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.types import ClusterId

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
UNKNOWN_MODEL_RATE = 1_000_000


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    cluster: ClusterId
    nodes: tuple[NodeSpec, ...]
    """Sorted by name: the fault schedule picks nodes by position, so order must not depend on the file."""
    site: str
    region: str
    display_name: str = ""
    currency: str = "USD"
    gpu_rates: tuple[tuple[str, int], ...] = ()
    datasets: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(
        cls,
        cluster: str,
        nodes: Sequence[NodeSpec],
        *,
        site: str | None = None,
        region: str | None = None,
        display_name: str = "",
        currency: str | None = None,
        defaults: ClusterDefaults | None = None,
    ) -> ClusterSpec:
        """A spec with prices for every GPU and NPU model present; flags win over the node list's defaults."""
        d = defaults or ClusterDefaults()
        rates = dict(d.gpu_rates)
        present = {n.gpu_model for n in nodes if n.gpus} | {n.npu_model for n in nodes if n.npus}
        for model in sorted(present):
            rates.setdefault(model, DEFAULT_GPU_RATES.get(model, UNKNOWN_MODEL_RATE))
        spec = cls(
            cluster=ClusterId(cluster),
            nodes=tuple(sorted(nodes, key=lambda n: n.name)),
            site=site or d.site or cluster,
            region=region or d.region or "sim",
            display_name=display_name or d.display_name,
            currency=currency or d.currency or "USD",
            gpu_rates=tuple(sorted(rates.items())),
            datasets=d.datasets,
            labels=d.labels,
        )
        try:
            spec.registered()
        except ValidationError as error:
            raise ValueError(f"cluster {cluster!r}: {error.errors()[0]['loc']}: {error.errors()[0]['msg']}") from None
        return spec

    def registered(self) -> ClusterRegistered:
        return ClusterRegistered(
            cluster=self.cluster,
            kind=ClusterKind.SIMULATED,
            display_name=self.display_name,
            site=self.site,
            region=self.region,
            labels={"sim.fedsched.io/nodes": str(len(self.nodes)), **dict(self.labels)},
            currency=self.currency,
            gpu_rates=tuple(GpuRate(model=m, micro_per_gpu_hour=r) for m, r in self.gpu_rates),
            datasets=self.datasets,
        )


__all__ = ["DEFAULT_GPU_RATES", "ClusterSpec"]
