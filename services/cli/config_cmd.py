"""Sub-commands for configuration documents, as kubectl has them: ``fedsched apply | diff | get | delete``.

Each is a client of the API's ``ConfigService`` (the options and exit codes of ``services.cli.people_cmd``):
the caller's token decides what it may change, the server validates every document and records the
change with its author. Documents are YAML (or JSON) files: ``-f FILE`` (several documents separated by
``---``), ``-f DIR`` (its ``.yaml``, ``.yml`` and ``.json`` files, in name order) or ``-f -`` (standard
input), each ``-f`` repeatable. ``deploy/examples/`` holds a configuration to start from.

- ``apply -f ... [--dry-run]``: each document that differs from the one in force becomes one change;
  prints ``kind/name created|configured|unchanged``.
- ``diff -f ...``: what ``apply`` would change, field by field (exit 1 when something would).
- ``get KIND [NAME] [-o yaml|json]``: the documents in force (``-o yaml`` can be applied again as is).
- ``delete KIND NAME [--dry-run]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.main import CliError
from services.cli.people_cmd import api_command, client_options, table, to_dict, when

if TYPE_CHECKING:
    from services.api.client import Client

KINDS = ("Tenant", "Cohort", "Quota", "Budget", "Policy")
_SUFFIXES = (".yaml", ".yml", ".json")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = client_options()
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE|DIR",
        help="documents (repeatable; - for stdin)",
    )

    apply = sub.add_parser("apply", parents=[common, files], help="apply configuration documents (admin)")
    apply.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    apply.set_defaults(handler=api_command(apply_documents))

    diff = sub.add_parser("diff", parents=[common, files], help="what apply would change, field by field")
    diff.set_defaults(handler=api_command(diff_documents))

    get = sub.add_parser("get", parents=[common], help="configuration documents in force")
    get.add_argument("kind", type=kind_name, help=f"one of {', '.join(KINDS)} (any case; plural too)")
    get.add_argument("name", nargs="?", default="")
    get.add_argument("-o", "--output", choices=("table", "yaml", "json"), default="table")
    get.set_defaults(handler=api_command(get_documents))

    delete = sub.add_parser("delete", parents=[common], help="delete a configuration document (admin)")
    delete.add_argument("kind", type=kind_name)
    delete.add_argument("name")
    delete.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    delete.set_defaults(handler=api_command(delete_document))


def kind_name(text: str) -> str:
    """``tenant``, ``Tenants``, ``TENANT`` -> ``Tenant``."""
    folded = text.strip().lower().removesuffix("s")
    for kind in KINDS:
        if kind.lower() == folded:
            return kind
    raise argparse.ArgumentTypeError(f"unknown kind {text!r}: one of {', '.join(KINDS)}")


# -- reading documents --------------------------------------------------------------------------------


def read_documents(paths: Sequence[str]) -> list[Any]:
    """Every document of the files, directories and standard input named, in order. ``CliError`` (exit
    2) naming the file and the reason when one cannot be read as YAML."""
    import yaml

    out: list[Any] = []
    for path, text in _sources(paths):
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as error:
            raise CliError(f"{path}: not YAML: {str(error)[:300]}", 2) from None
        for document in documents:
            if isinstance(document, list):  # a JSON file holding a list of documents
                out.extend(document)
            else:
                out.append(document)
    if not out:
        raise CliError(f"no documents in {', '.join(paths)}", 2)
    return out


def _sources(paths: Sequence[str]) -> Iterator[tuple[str, str]]:
    for name in paths:
        if name == "-":
            yield "<stdin>", sys.stdin.read()
            continue
        path = Path(name)
        files = sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES) if path.is_dir() else [path]
        for file in files:
            try:
                yield str(file), file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise CliError(f"{file}: {getattr(error, 'strerror', None) or error}", 2) from None


def _request(documents: Sequence[Any], *, dry_run: bool) -> Any:
    from services.api.pb import config_pb2

    try:
        texts = [json.dumps(d, sort_keys=True, default=_refuse) for d in documents]
    except TypeError as error:
        raise CliError(f"a document holds a value JSON cannot carry: {error}", 2) from None
    return config_pb2.ApplyDocumentsRequest(documents=texts, dry_run=dry_run)


def _refuse(value: Any) -> Any:
    # YAML dates and times are not JSON: say so rather than send a string the server would misread.
    raise TypeError(f"{value!r} ({type(value).__name__}); quote it")


# -- commands -----------------------------------------------------------------------------------------


async def apply_documents(args: argparse.Namespace, client: Client) -> int:
    documents = read_documents(args.filename)
    response = await client.call(client.documents.ApplyDocuments, _request(documents, dry_run=args.dry_run))
    if args.json:
        print(json.dumps(to_dict(response), indent=2, sort_keys=True))
        return 0
    suffix = " (dry run)" if args.dry_run else ""
    for result in response.results:
        print(f"{result.kind.lower()}/{result.name} {result.action}{suffix}")
    return 0


async def diff_documents(args: argparse.Namespace, client: Client) -> int:
    documents = read_documents(args.filename)
    response = await client.call(client.documents.ApplyDocuments, _request(documents, dry_run=True))
    changed = [r for r in response.results if r.action != "unchanged"]
    if args.json:
        print(json.dumps(to_dict(response), indent=2, sort_keys=True))
        return 1 if changed else 0
    for result in changed:
        before = result.generation - 1
        print(f"{result.kind.lower()}/{result.name}: {result.action} (generation {before} -> {result.generation})")
        for change in result.changes:
            old = change.before if change.HasField("before") else "(absent)"
            new = change.after if change.HasField("after") else "(absent)"
            print(f"  {change.path}: {old} -> {new}")
    if not changed:
        print("no changes")
    return 1 if changed else 0  # as diff(1): 1 when there are differences


async def get_documents(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import config_pb2

    response = await client.call(
        client.documents.GetDocuments, config_pb2.GetDocumentsRequest(kind=args.kind, name=args.name)
    )
    if args.name and not response.documents:
        raise CliError(f"not found: no {args.kind} document named {args.name!r}", 3)
    bodies = [json.loads(d.document) for d in response.documents]
    output = "json" if args.json else args.output
    if output == "json":
        print(json.dumps(bodies[0] if args.name else bodies, indent=2, sort_keys=True))
    elif output == "yaml":
        import yaml

        print(yaml.safe_dump_all(bodies, sort_keys=False, default_flow_style=False), end="")
    else:
        rows = [[d.kind, d.name, d.generation, d.author, when(d.changed_ms)] for d in response.documents]
        print(table(["KIND", "NAME", "GENERATION", "CHANGED BY", "CHANGED"], rows))
    return 0


async def delete_document(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import config_pb2

    request = config_pb2.DeleteDocumentRequest(kind=args.kind, name=args.name, dry_run=args.dry_run)
    response = await client.call(client.documents.DeleteDocument, request)
    if args.json:
        print(json.dumps(to_dict(response), indent=2, sort_keys=True))
        return 0
    suffix = " (dry run)" if args.dry_run else ""
    print(f"{response.result.kind.lower()}/{response.result.name} deleted{suffix}")
    return 0
