"""``fedsched.v1.ResourceService``: the unified resource view (clusters, nodes, GPU and NPU capacity).

Called by the gRPC server through ``services.api.handlers``. Reads the read models only. The fleet is
not tenant data: any authenticated role may read it.
"""

from __future__ import annotations

from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import NpuCapacity
from services.api import convert, validation
from services.api.errors import NotFound
from services.api.handlers import Context
from services.api.pb import resources_pb2


class ResourceService:
    def __init__(self, reads: ReadModels) -> None:
        self._reads = reads

    async def ListClusters(
        self, request: resources_pb2.ListClustersRequest, context: Context
    ) -> resources_pb2.ListClustersResponse:
        npus: dict[str, list[NpuCapacity]] = {}
        for row in await self._reads.npu_capacity(None):
            npus.setdefault(row.cluster, []).append(row)
        clusters = [convert.cluster(r, npus.get(r.cluster, ())) for r in await self._reads.clusters()]
        return resources_pb2.ListClustersResponse(clusters=clusters)

    async def ListNodes(
        self, request: resources_pb2.ListNodesRequest, context: Context
    ) -> resources_pb2.ListNodesResponse:
        cluster = validation.optional_identifier("cluster", request.cluster)
        model = validation.optional_gpu_model("gpu_model", request.gpu_model)
        size = validation.page_size(request.page_size)
        await self._known(cluster)
        query = {"cluster": cluster, "gpu_model": model or ""}
        after = validation.decode_page_token(request.page_token, query, 2)
        position = None if after is None else (str(after[0]), str(after[1]))
        rows = await self._reads.nodes(cluster, model, size + 1, position)
        out = resources_pb2.ListNodesResponse(nodes=[convert.node(r) for r in rows[:size]])
        if len(rows) > size:
            last = rows[size - 1]
            out.next_page_token = validation.encode_page_token(query, [last.cluster, last.node])
        return out

    async def GetCapacity(self, request: resources_pb2.GetCapacityRequest, context: Context) -> resources_pb2.Capacity:
        cluster = validation.optional_identifier("cluster", request.cluster)
        await self._known(cluster)
        per_cluster = await self._reads.capacity(cluster)
        every_npu = await self._reads.npu_capacity(None)  # hot and congested are judged across the federation
        npus = [n for n in every_npu if cluster is None or n.cluster == cluster]
        fleet = await self._reads.fleet_models()
        return convert.capacity(per_cluster, fleet, npus, every_npu, await self._reads.pending_npus())

    async def _known(self, cluster: str | None) -> None:
        """A filter on a cluster the federation never heard of is a mistake (a typo), not an empty fleet."""
        if cluster and cluster not in {row.cluster for row in await self._reads.clusters()}:
            raise NotFound(f"no cluster {cluster}", field="cluster")
