"""``fedsched events list`` and ``fedsched events schema``: what people and integrators see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.catalog import REGISTRY
from events.catalog.jobs import JobSubmitted
from services.cli.main import main

pytestmark = pytest.mark.timeout(30)


def test_events_list_prints_one_row_per_type_with_version_topic_key_and_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["events", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["TYPE", "VERSION", "TOPIC", "KEY", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if line.startswith("io.fedsched.")}
    assert sorted(rows) == REGISTRY.types()
    assert rows["io.fedsched.GpuHealthReported"][1:4] == ["3", "fedsched.inventory", "cluster/node"]
    assert "A client asked to run a job" in " ".join(rows["io.fedsched.JobSubmitted"])
    assert lines[-1] == f"{len(REGISTRY.types())} event types"


def test_events_list_as_json_gives_every_field_for_tools(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["type"] for row in rows] == REGISTRY.types()
    by_type = {row["type"]: row for row in rows}
    assert by_type["io.fedsched.GpuHealthReported"]["versions"] == [1, 2, 3]
    assert by_type["io.fedsched.JobSubmitted"] == {
        "type": "io.fedsched.JobSubmitted",
        "version": 2,
        "versions": [1, 2],
        "topic": "fedsched.jobs",
        "key": "job_id",
        "description": JobSubmitted.doc_line(),
    }


def test_events_schema_writes_one_json_schema_per_type_and_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "schemas"
    assert main(["events", "schema", "--out", str(out)]) == 0
    expected = sorted(f"{c.event_type}.v{c.schema_version}.json" for c in REGISTRY.all_classes())
    assert sorted(p.name for p in out.iterdir()) == expected
    assert f"wrote {len(expected)} JSON Schema files" in capsys.readouterr().out

    v1 = json.loads((out / "io.fedsched.GpuHealthReported.v1.json").read_text())
    v2 = json.loads((out / "io.fedsched.GpuHealthReported.v2.json").read_text())
    v3 = json.loads((out / "io.fedsched.GpuHealthReported.v3.json").read_text())
    assert v1["$id"] == "urn:fedsched:schema:io.fedsched.GpuHealthReported:v1"
    assert v3["title"] == "io.fedsched.GpuHealthReported v3"
    assert (v1["x-fedsched-current"], v2["x-fedsched-current"], v3["x-fedsched-current"]) == (False, False, True)
    assert v3["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "errors" in v1["$defs"]["GpuHealthSampleV1"]["properties"]
    assert "xid_errors" in v2["$defs"]["GpuHealthSampleV2"]["properties"]
    assert "xid_errors" in v3["$defs"]["GpuHealthSample"]["properties"]
    assert "last_error_code" in v3["$defs"]["NpuHealthSample"]["properties"]
    gpus = v2["properties"]["gpus"]
    assert (gpus["x-fedsched-unique-by"], gpus["x-fedsched-increasing"], gpus["minItems"]) == (["index"], True, 1)
    npus = v3["properties"]["npus"]
    assert (npus["x-fedsched-unique-by"], npus["x-fedsched-increasing"], "minItems" in npus) == (["index"], True, False)

    submitted = json.loads((out / "io.fedsched.JobSubmitted.v1.json").read_text())
    assert submitted["additionalProperties"] is False
    assert submitted["properties"]["job_id"]["maxLength"] == 128
    assert set(submitted["required"]) == {"job_id", "name", "tenant", "resources"}
    assert submitted["x-fedsched-topic"] == "fedsched.jobs" and submitted["x-fedsched-key"] == "job_id"


def test_events_schema_writes_the_same_bytes_twice(tmp_path: Path) -> None:
    main(["events", "schema", "--out", str(tmp_path / "a")])
    main(["events", "schema", "--out", str(tmp_path / "b")])
    for path in sorted((tmp_path / "a").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes()


def test_events_schema_into_a_place_it_cannot_write_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["events", "schema", "--out", str(blocker / "schemas")]) == 1
    assert capsys.readouterr().err.startswith("fedsched: cannot write schemas to")
