"""A thin JSON client for the Kubernetes API, on kubernetes-asyncio's authenticated ``ApiClient``.

Called by the reflector (list and watch), the executor and the pod watcher (create, patch, delete).
Calls the API server. Objects stay the API's JSON (dicts): the pure mappers read them as they are, and
nothing is converted into generated model classes and back.

Every request takes a token from the rate limiter and reports its result to ``on_result`` (the
reachability tracker). Errors are typed: ``KubeError.status`` is the HTTP status, 0 when the server
could not be reached; ``retryable`` is true for 0, 429, 5xx and a refusal of the connector itself
(``denied``: 401, or a 403 from the authoriser, e.g. RBAC missing or not yet loaded after a restart).
Those are the infrastructure's problems, not the job's; a 403 from an admission check about the object
(Pod Security, quota) is not ``denied``. Each request's result goes to ``on_result`` with what it was
(method and resource, e.g. ``POST pods``), so a refusal of one kind of request is cleared only by a
success of the same kind.

Authentication comes from a kubeconfig (tokens, client certificates, exec plugins: whatever
kubernetes-asyncio supports) or, inside a pod, from the service account (``in_cluster``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import load_incluster_config, load_kube_config

from connectors.kubernetes.throttle import RateLimiter

log = logging.getLogger("fedsched.connector.kubernetes")

Obj = dict[str, Any]
ResultHook = Callable[["KubeError | None", str], None]

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


#: The authoriser's refusal, as the API server words it: 'User "x" cannot create resource "pods" ...'.
_AUTHZ_DENIAL = re.compile(r'\bcannot [a-z]+ (?:resource|path) "')


def resource_of(path: str) -> str:
    """The kind of object a request path is about: ``/api/v1/namespaces/ns/pods/p/status`` -> ``pods``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1/... or /apis/group/version/...
    if len(parts) >= 3 and parts[0] == "namespaces":
        return parts[2]
    return parts[0] if parts else ""


class KubeError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"unreachable: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def denied(self) -> bool:
        """The server refused the connector itself: not authenticated (401), or not authorised (403 from
        the authoriser). Not about the object: an admission check's 403 (Pod Security, quota) is not."""
        return self.status == 401 or (self.status == 403 and bool(_AUTHZ_DENIAL.search(self.message)))

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status == 429 or self.status >= 500 or self.denied

    @property
    def unreachable(self) -> bool:
        """The server did not answer, or answered that it cannot serve (5xx other than 501)."""
        return self.status == 0 or (self.status >= 500 and self.status != 501)


def _status_error(status: int, body: bytes) -> KubeError:
    try:
        doc = json.loads(body)
        return KubeError(status, str(doc.get("reason", "")), str(doc.get("message", "")))
    except (ValueError, AttributeError):
        return KubeError(status, "", body[:500].decode(errors="replace"))


class KubeApi:
    def __init__(
        self,
        client: ApiClient,
        *,
        limiter: RateLimiter | None = None,
        request_timeout_s: float = 30.0,
        on_result: ResultHook | None = None,
    ) -> None:
        self._client = client
        self.limiter = limiter or RateLimiter(20.0, 40)
        self.request_timeout_s = request_timeout_s
        self.on_result = on_result

    @classmethod
    async def from_kubeconfig(cls, path: str | None, context: str | None = None, **kwargs: Any) -> KubeApi:
        configuration = Configuration()
        await load_kube_config(config_file=path, context=context, client_configuration=configuration)
        return cls(ApiClient(configuration), **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> KubeApi:
        configuration = Configuration()
        load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(ApiClient(configuration), **kwargs)

    @property
    def host(self) -> str:
        return str(self._client.configuration.host)

    async def close(self) -> None:
        await self._client.close()

    def _report(self, error: KubeError | None, what: str) -> None:
        if self.on_result is not None:
            self.on_result(error, what)

    async def _open(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: object,
        content_type: str,
        limits: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        await self.limiter.acquire()
        what = f"{method} {resource_of(path)}"
        try:
            response: aiohttp.ClientResponse = await self._client.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=limits,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            failure = KubeError(0, type(error).__name__, str(error) or type(error).__name__)
            self._report(failure, what)
            raise failure from error
        if response.status >= 400:
            failure = _status_error(response.status, await response.read())
            response.release()
            self._report(failure if failure.unreachable or failure.denied else None, what)
            raise failure
        self._report(None, what)
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = JSON,
    ) -> Obj:
        """One request; the decoded JSON answer. Raises ``KubeError``."""
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        response = await self._open(method, path, list((query or {}).items()), body, content_type, timeout)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise KubeError(0, type(error).__name__, str(error)) from error
        finally:
            response.release()
        try:
            doc = json.loads(data) if data else {}
        except ValueError as error:
            raise KubeError(response.status, "BadResponse", f"not JSON: {data[:200]!r}") from error
        return doc if isinstance(doc, dict) else {"items": doc}

    async def watch(self, path: str, query: Mapping[str, str], *, idle_timeout_s: float) -> AsyncIterator[Obj]:
        """The events of a watch, as decoded JSON objects (``{"type": ..., "object": ...}``), until the
        server ends the stream. A stream silent for ``idle_timeout_s`` counts as broken (``KubeError(0)``)."""
        timeout = aiohttp.ClientTimeout(total=None, connect=self.request_timeout_s, sock_read=idle_timeout_s)
        response = await self._open("GET", path, [*query.items(), ("watch", "true")], None, JSON, timeout)
        try:
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, OSError) as error:
                    raise KubeError(0, type(error).__name__, str(error) or "watch stream broken") from error
                if not line:
                    return
                try:
                    event = json.loads(line)
                except ValueError as error:
                    raise KubeError(0, "BadWatchEvent", f"not JSON: {line[:200]!r}") from error
                if isinstance(event, dict):
                    yield event
        finally:
            response.close()
