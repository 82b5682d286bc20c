"""Container images: references read as Docker reads them, a tenant's image policy, and the images a job's
template names.

Called by ``events.catalog.documents`` (a ``Tenant``'s ``images``), ``events.catalog.governance``
(``TenantRegistered`` carries it), the API (a submission whose template names an image its tenant does
not allow is refused) and the Kubernetes connector (``connectors.kubernetes.images``: the same check
before any pod is made, also for the connector's default image). Pure.

A reference is parsed the way Docker's ``distribution/reference`` normalises it (``ParseNormalizedNamed``):
the first path component is the registry host when it holds a ``.`` or a ``:`` (a port), is
``localhost``, or holds an upper-case letter; otherwise the host is ``docker.io`` and a one-component name
is an official image (``ubuntu`` is ``docker.io/library/ubuntu``); ``index.docker.io`` is ``docker.io``.
A tag (after the last ``:`` past the last ``/``) and a digest (after ``@``) are allowed and do not take
part in matching.

An allowed registry is ``HOST[:PORT][/PATH]`` (``nvcr.io``, ``registry.example.com/team-a``,
``localhost:5000``). A reference matches when its host is the same (hosts compare case-insensitively, as
DNS does; a port is part of the host, so ``registry.example.com:5000`` is another registry than
``registry.example.com``) and its repository path is the pattern's path or lies below it, component by
component (``team-a`` allows ``team-a/x``, never ``team-ab/x``). Docker Hub is ``docker.io``
(``docker.io/library`` for official images only).

Decided, for a tenant that names no ``images`` (or no ``registries``): any registry, not none. Deny by
default is the house rule, but every tenant registered before this field existed would otherwise stop
running the moment the release is deployed, which no operator expects from an upgrade. The deny side
belongs to whoever runs the cluster: a Kubernetes connector's ``--allowed-registry`` list binds every
image in its cluster whatever the tenant allows (a tenant never widens it), so a cluster that must only
pull from its mirror says so once. ``registries: []`` is an explicit "no image at all". A reference that
is no reference (``Bad/Ref``) is refused whatever the policy: it could never be pulled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from events.catalog.types import Frozen, Unique

DOCKER_HUB = "docker.io"
_LEGACY_HUB = "index.docker.io"
_OFFICIAL = "library"
MAX_NAME = 255
"""The longest repository name (host and path) Docker accepts."""

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])"
_DOMAIN = re.compile(rf"^{_HOST}(?::[0-9]+)?$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_IMAGE_ID = re.compile(r"^[a-f0-9]{64}$")


class ImageReferenceError(ValueError):
    """Not an image reference Docker would pull; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    host: str
    """The registry host as written, with its port (``docker.io`` for Docker Hub)."""
    path: str
    """The repository path inside the registry (``library/ubuntu``)."""
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.path}"


def _is_host(component: str) -> bool:
    return any(c in component for c in ".:") or component == "localhost" or component.lower() != component


def _host_of(host: str) -> str:
    return DOCKER_HUB if host.lower() == _LEGACY_HUB else host


def parse_reference(reference: str) -> ImageRef:
    """The reference as Docker normalises it; raises ``ImageReferenceError`` saying why it is not one."""
    if not reference:
        raise ImageReferenceError("is empty")
    if _IMAGE_ID.fullmatch(reference):
        raise ImageReferenceError("is an image id, not a reference to a registry's image")
    name, at, digest = reference.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        raise ImageReferenceError(f"has an invalid digest {digest!r} (algorithm:hex, e.g. sha256:...)")
    tag: str | None = None
    colon, slash = name.rfind(":"), name.rfind("/")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ImageReferenceError(f"has an invalid tag {tag!r}")
    first, sep, rest = name.partition("/")
    if sep and _is_host(first):
        host, path = first, rest
        if not _DOMAIN.fullmatch(host):
            raise ImageReferenceError(f"has an invalid registry host {host!r}")
    else:
        host, path = DOCKER_HUB, name
    host = _host_of(host)
    if host == DOCKER_HUB and "/" not in path:
        path = f"{_OFFICIAL}/{path}"
    _check_path(path)
    if len(host) + 1 + len(path) > MAX_NAME:
        raise ImageReferenceError(f"names a repository longer than {MAX_NAME} characters")
    return ImageRef(host, path, tag, digest or None)


def _check_path(path: str) -> None:
    for component in path.split("/"):
        if not _PATH_COMPONENT.fullmatch(component):
            raise ImageReferenceError(
                f"has an invalid repository path component {component!r} "
                "(lowercase letters, digits and single separators . _ __ -)"
            )


@dataclass(frozen=True, slots=True)
class RegistryPattern:
    host: str
    path: str = ""

    def matches(self, image: ImageRef) -> bool:
        if image.host.lower() != self.host.lower():
            return False
        return not self.path or image.path == self.path or image.path.startswith(self.path + "/")


_C = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_P = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = rf"^(?:(?:{_C}(?:\.{_C})+|localhost)(?::[0-9]{{1,5}})?|{_C}:[0-9]{{1,5}})(?:/{_P})*$"
_REGISTRY_MATCH = re.compile(_REGISTRY)
Registry = Annotated[str, StringConstraints(pattern=_REGISTRY, min_length=1, max_length=MAX_NAME)]
"""An allowed registry: ``HOST[:PORT][/PATH]``."""
_SECRET = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SecretName = Annotated[str, StringConstraints(pattern=_SECRET, max_length=253)]
"""A Kubernetes Secret's name (a DNS subdomain)."""


def parse_registry(pattern: str) -> RegistryPattern:
    """``HOST[:PORT][/PATH]``; raises ``ValueError`` saying why it is not one."""
    if not _REGISTRY_MATCH.fullmatch(pattern) or len(pattern) > MAX_NAME:
        raise ValueError(
            f"{pattern!r} is not HOST[:PORT][/PATH]: a registry host with a '.' or a port, or localhost "
            "(docker.io/library for Docker Hub's official images), then lowercase path components, "
            "without a tag or digest"
        )
    host, _, path = pattern.partition("/")
    return RegistryPattern(_host_of(host), path)


class ImagePolicy(Frozen):
    """Where a tenant's images may come from, and the secrets its pods pull them with."""

    registries: Annotated[tuple[Registry, ...], Field(max_length=64), Unique()] | None = None
    """Registries (``HOST[:PORT][/PATH]``) the tenant's images may come from. ``None`` (left out): the
    tenant sets no limit (a cluster's connector may still set one); ``[]``: no image is allowed."""
    pull_secrets: Annotated[tuple[SecretName, ...], Field(max_length=16), Unique()] = ()
    """Names of ``kubernetes.io/dockerconfigjson`` Secrets the tenant's pods pull images with; a
    Kubernetes connector copies each from its own namespace into the tenant's."""


def refusal(registries: Sequence[str] | None, image: str, *, whose: str = "the tenant") -> str | None:
    """Why ``image`` may not run under the allowed ``registries`` (``None``: no limit), or ``None``."""
    try:
        ref = parse_reference(image)
    except ImageReferenceError as error:
        return f"image {image!r} {error}"
    if registries is None:
        return None
    patterns = [parse_registry(r) for r in registries]
    if any(p.matches(ref) for p in patterns):
        return None
    if not patterns:
        return f"image {image!r} is refused: {whose} allows no registry"
    allowed = ", ".join(registries)
    return f"image {image!r} comes from {ref.repository}, which {whose} does not allow (allowed: {allowed})"


def template_images(template: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The images a job's template names, as (field, image), in the template's order: every container and
    init container of a pod template (``template.spec.containers[0].image``), or the shorthand's
    ``template.image``. A value that is not a string is returned as its JSON text, so the check refuses
    it by name rather than passing over it."""
    spec = template.get("spec")
    if isinstance(spec, Mapping):
        found = []
        for key in ("initContainers", "containers"):
            containers = spec.get(key)
            if not isinstance(containers, list):
                continue
            for i, container in enumerate(containers):
                if isinstance(container, Mapping) and "image" in container:
                    found.append((f"template.spec.{key}[{i}].image", _text(container["image"])))
        return found
    if template.get("image"):  # an empty shorthand image is the connector's default, as for no image
        return [("template.image", _text(template["image"]))]
    return []


def _text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


__all__ = [
    "DOCKER_HUB",
    "ImagePolicy",
    "ImageRef",
    "ImageReferenceError",
    "Registry",
    "RegistryPattern",
    "SecretName",
    "parse_reference",
    "parse_registry",
    "refusal",
    "template_images",
]
