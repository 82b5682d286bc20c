"""Golden fixtures of every event type and version: where they live, how to read and write them.

Layout, one folder per type under ``tests/golden/events/``::

    io.fedsched.JobSubmitted/v1.json           the JSON body exactly as the codec writes it, plus "\\n"
    io.fedsched.JobSubmitted/v1.headers.json   topic, key and the CloudEvents ce_* headers

Called by ``test_catalog_golden`` and, to write fixtures on purpose, as a script from the repository
root::

    python -m tests.unit.events.catalog_golden                  # write the missing fixtures only
    python -m tests.unit.events.catalog_golden --force TYPE...  # rewrite these types' current version

A fixture is written from the type's sample (``catalog_samples``). An existing fixture is never
rewritten without ``--force``, and a superseded version's fixture never is: it is history.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from events.catalog import REGISTRY, Event
from events.wire import codec

from .catalog_samples import envelope_for, samples

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "golden" / "events"


def body_path(event_type: str, version: int) -> Path:
    return GOLDEN_DIR / event_type / f"v{version}.json"


def headers_path(event_type: str, version: int) -> Path:
    return GOLDEN_DIR / event_type / f"v{version}.headers.json"


def wire_files(event: Event) -> tuple[bytes, bytes]:
    """The two files' bytes for an event in its golden envelope."""
    wire = codec.encode(envelope_for(event))
    meta = {
        "topic": wire.topic,
        "key": None if wire.key is None else wire.key.decode(),
        "headers": {name: value.decode() for name, value in wire.headers},
    }
    return wire.value + b"\n", (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode()


def read(event_type: str, version: int) -> tuple[bytes, dict[str, object]]:
    """A fixture's body (without the final newline) and its header file."""
    body = body_path(event_type, version).read_bytes()
    if not body.endswith(b"\n") or body.count(b"\n") != 1:
        raise AssertionError(f"{body_path(event_type, version)} must be one line ending in a newline")
    meta = json.loads(headers_path(event_type, version).read_text())
    return body[:-1], meta


def wire_headers(meta: dict[str, object]) -> codec.Headers:
    headers = meta["headers"]
    assert isinstance(headers, dict)
    return tuple((name, str(value).encode()) for name, value in headers.items())


def write(event: Event, *, force: bool = False) -> bool:
    """Write one fixture; returns whether anything was written."""
    body_file = body_path(event.event_type, event.schema_version)
    if body_file.exists() and not force:
        return False
    body, meta = wire_files(event)
    body_file.parent.mkdir(parents=True, exist_ok=True)
    body_file.write_bytes(body)
    headers_path(event.event_type, event.schema_version).write_bytes(meta)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write golden event fixtures from the samples.")
    parser.add_argument("--force", nargs="+", metavar="TYPE", default=[], help="rewrite these types' current version")
    args = parser.parse_args(argv)
    unknown = [t for t in args.force if t not in REGISTRY]
    if unknown:
        parser.error(f"unknown event types: {unknown}")
    for (event_type, version), event in sorted(samples().items()):
        current = REGISTRY.get(event_type).schema_version == version
        if write(event, force=current and event_type in args.force):
            print(f"wrote {body_path(event_type, version).relative_to(GOLDEN_DIR.parent.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
