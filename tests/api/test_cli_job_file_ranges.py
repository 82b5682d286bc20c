"""A job file's value too large for its protobuf field is reported at the field's place in the file."""

from __future__ import annotations

import pytest

from services.cli import jobfile

pytestmark = pytest.mark.timeout(30)

BASE = "name: n\ntenant: t\n"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("resources: {gpus: 99999999999999}", "resources.gpus"),
        ("resources: {gpus: 1, memory_mib: -99999999999999999999}", "resources.memory_mib"),
        ("resources: {gpus: 1}\ninference: {min_replicas: 99999999999}", "inference.min_replicas"),
        ("resources: {gpus: 1}\nreplicas: 99999999999", "replicas"),
        ("resources: {gpus: 1}\nexpected_runtime: 99999999999999999999d", "expected_runtime"),
        ("resources: {gpus: 1}\nmax_runtime_s: 99999999999999999999", "max_runtime_s"),
    ],
)
def test_an_out_of_range_value_names_its_place_in_the_file(text: str, field: str) -> None:
    with pytest.raises(jobfile.JobFileError, match="out of range") as caught:
        jobfile.parse(BASE + text)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
