"""Sub-commands: ``fedsched events list`` and ``fedsched events schema``, the catalogue for people.

``list`` prints every event type with its current schema version, topic, partition key and the first
line of its docstring (``--json`` for tools). ``schema --out DIR`` writes one JSON Schema file per type
and version (``io.fedsched.JobSubmitted.v1.json``) for integrators who produce or consume our topics.
Imports the catalogue inside the handlers so ``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    events = sub.add_parser("events", help="the event catalogue: list types, write JSON Schemas")
    events_sub = events.add_subparsers(dest="events_command", metavar="WHAT", required=True)

    listing = events_sub.add_parser("list", help="every event type with its version, topic and key")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=list_events)

    schema = events_sub.add_parser("schema", help="write one JSON Schema file per event type and version")
    schema.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write into")
    schema.set_defaults(handler=write_schemas)


def catalogue_rows() -> list[dict[str, object]]:
    from events.catalog import REGISTRY

    return [
        {
            "type": cls.event_type,
            "version": cls.schema_version,
            "versions": REGISTRY.versions(cls.event_type),
            "topic": cls.topic,
            "key": cls.key_field,
            "description": cls.doc_line(),
        }
        for cls in REGISTRY.classes()
    ]


def list_events(args: argparse.Namespace) -> int:
    rows = catalogue_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    columns = ("type", "version", "topic", "key", "description")
    table = [[str(row[c]) if row[c] is not None else "-" for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns[:-1])]
    for cells in [[c.upper() for c in columns], *table]:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + "  " + cells[-1])
    print(f"\n{len(rows)} event types")
    return 0


def write_schemas(args: argparse.Namespace) -> int:
    from events.catalog.schema import all_schemas
    from services.cli.main import CliError

    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
        schemas = all_schemas()
        for name, document in schemas.items():
            (out / name).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    except OSError as error:
        raise CliError(f"cannot write schemas to {out}: {error.strerror}") from None
    print(f"wrote {len(schemas)} JSON Schema files to {out}")
    return 0
