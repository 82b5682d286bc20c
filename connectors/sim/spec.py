"""What a simulated cluster is: its id, metadata, prices and nodes (``ClusterSpec``).

Called by the CLI and ``SimFleet`` (which build specs from node lists) and by the model, which states the
spec as ``ClusterRegistered``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from connectors.rates import DEFAULT_GPU_RATES, rates_for
from connectors.sim.nodes import ClusterDefaults, NodeSpec
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.types import ClusterId


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
        present = {n.gpu_model for n in nodes if n.gpus} | {n.npu_model for n in nodes if n.npus}
        spec = cls(
            cluster=ClusterId(cluster),
            nodes=tuple(sorted(nodes, key=lambda n: n.name)),
            site=site or d.site or cluster,
            region=region or d.region or "sim",
            display_name=display_name or d.display_name,
            currency=currency or d.currency or "USD",
            gpu_rates=rates_for(present, d.gpu_rates),
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
