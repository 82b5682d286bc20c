"""Image references as Docker normalises them, allowed registries, and the images a template names."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from events.catalog.documents import TenantSpec
from events.catalog.governance import TenantRegistered
from events.catalog.images import ImagePolicy, ImageRef, ImageReferenceError, parse_reference, refusal, template_images

pytestmark = pytest.mark.timeout(10)

ALLOWED = ("registry.example.com/team-a", "nvcr.io", "localhost:5000", "docker.io/library")


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("ubuntu", ImageRef("docker.io", "library/ubuntu")),
        ("ubuntu:22.04", ImageRef("docker.io", "library/ubuntu", tag="22.04")),
        ("team/app", ImageRef("docker.io", "team/app")),
        ("index.docker.io/library/ubuntu", ImageRef("docker.io", "library/ubuntu")),
        ("docker.io/ubuntu", ImageRef("docker.io", "library/ubuntu")),
        ("localhost/x", ImageRef("localhost", "x")),
        ("localhost:5000/x:1", ImageRef("localhost:5000", "x", tag="1")),
        ("registry:5000/x", ImageRef("registry:5000", "x")),
        ("registry:5000", ImageRef("docker.io", "library/registry", tag="5000")),
        ("nvcr.io/nvidia/pytorch:24.01-py3", ImageRef("nvcr.io", "nvidia/pytorch", tag="24.01-py3")),
        (
            "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
            ImageRef("nvcr.io", "nvidia/pytorch", digest="sha256:" + "a" * 64),
        ),
        ("Registry.Example.com/team-a/x", ImageRef("Registry.Example.com", "team-a/x")),
        ("[::1]:5000/x", ImageRef("[::1]:5000", "x")),
    ],
)
def test_a_reference_is_read_as_docker_normalises_it(reference: str, expected: ImageRef) -> None:
    assert parse_reference(reference) == expected


@pytest.mark.parametrize(
    "reference",
    ["", "Ubuntu", "team/App", "x:bad tag", "x@sha256:short", "a" * 64, "registry.example.com/-x", "x//y", "ubuntu\n"],
)
def test_what_docker_would_not_pull_is_not_a_reference(reference: str) -> None:
    with pytest.raises(ImageReferenceError):
        parse_reference(reference)


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/team-a",
        "registry.example.com/team-a/trainer:1.2",
        "registry.example.com/team-a/sub/trainer@sha256:" + "b" * 64,
        "REGISTRY.example.com/team-a/trainer",  # DNS names compare without case
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "localhost:5000/anything",
        "ubuntu",  # docker.io/library/ubuntu
        "index.docker.io/library/busybox:1.36",
    ],
)
def test_an_image_from_an_allowed_registry_and_path_runs(image: str) -> None:
    assert refusal(ALLOWED, image) is None


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com.evil.io/team-a/x",  # another host that starts with the allowed one
        "registry.example.com:5000/team-a/x",  # a port is another registry
        "registry.example.com/team-ab/x",  # a path prefix is matched by whole components
        "registry.example.com/x",
        "evil.io/registry.example.com/team-a/x",
        "localhost/x",  # localhost without the port
        "localhost:5001/x",
        "nvcr.io.evil.io/x",
        "team/app",  # docker.io/team/app: Docker Hub, but not its official images
        "evil.io/library/ubuntu",
    ],
)
def test_an_image_from_anywhere_else_is_refused_naming_its_registry(image: str) -> None:
    reason = refusal(ALLOWED, image)
    assert reason is not None
    assert "does not allow" in reason and repr(image) in reason


def test_no_limit_allows_any_valid_reference_but_never_an_invalid_one() -> None:
    assert refusal(None, "anything.example/x:1") is None
    reason = refusal(None, "Bad/Ref")
    assert reason is not None and "invalid repository path" in reason


def test_an_empty_list_allows_no_registry() -> None:
    assert refusal((), "nvcr.io/x") == "image 'nvcr.io/x' is refused: the tenant allows no registry"


@pytest.mark.parametrize(
    "pattern", ["ubuntu", "library/ubuntu", "nvcr.io/x:1", "nvcr.io/x@sha256:" + "a" * 64, "nvcr.io/X", "nvcr.io/"]
)
def test_an_allowed_registry_must_be_a_host_and_a_path_prefix(pattern: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TenantSpec.model_validate_json(json.dumps({"images": {"registries": [pattern]}}))
    assert caught.value.errors()[0]["loc"] == ("images", "registries", 0)


def test_pull_secrets_are_kubernetes_secret_names() -> None:
    with pytest.raises(ValidationError):
        ImagePolicy.model_validate_json('{"pull_secrets": ["Team_A"]}')
    assert ImagePolicy.model_validate_json('{"pull_secrets": ["team-a.pull"]}').pull_secrets == ("team-a.pull",)


def test_every_container_and_init_container_image_is_named_by_its_field() -> None:
    template = {
        "spec": {
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [{"name": "main", "image": "nvcr.io/x"}, {"name": "side", "image": 7}],
        }
    }
    assert template_images(template) == [
        ("template.spec.initContainers[0].image", "busybox"),
        ("template.spec.containers[0].image", "nvcr.io/x"),
        ("template.spec.containers[1].image", "7"),
    ]
    assert template_images({"image": "ubuntu", "command": ["true"]}) == [("template.image", "ubuntu")]
    assert template_images({}) == [] and template_images({"image": ""}) == []


def test_a_v2_tenant_reads_as_one_with_no_image_policy_of_its_own() -> None:
    from events.wire import codec

    from .catalog_golden import read, wire_headers

    body, meta = read("io.fedsched.TenantRegistered", 2)
    tenant = codec.decode(wire_headers(meta), body).data
    assert isinstance(tenant, TenantRegistered) and tenant.images is None
    assert tenant.default_priority_class is not None  # v2's own fields come through
