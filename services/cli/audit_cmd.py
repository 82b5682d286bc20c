"""Sub-commands: ``fedsched audit ...`` (archive the log, verify the hash chain against signed checkpoints,
make a signing key, prove one record's inclusion, and the replays: verify, export, at, whatif).

These are offline tools for an operator or an auditor who can read the log and the archive (its DSN or
log URL): they change no state (``archive`` is the archiver service, which copies the log into the
archive). ``audit timeline`` is the exception: a client of the API with the caller's token
(``services.cli.timeline_cmd``), like every command that reads tenants' data for people."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from events.plumbing.signals import stop_on_signals
from services.cli import timeline_cmd
from services.cli.args import rfc3339_ms, time_range

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    from events.audit.checkpoint import Checkpoint, CheckpointProblem
    from events.audit.checkpoint_files import CheckpointDir
    from events.audit.proof import InclusionProof
    from services.scheduler.core.policy.model import Quota


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit", help="the audit trail: archive, chain, verify, timeline, export, at (a past moment), whatif"
    )
    audit.description = (
        "timeline asks the API with your token; the others are offline tools over a log and an archive you can"
        " read (--log, --dsn or the environment) and change nothing"
    )
    audit_sub = audit.add_subparsers(dest="audit", metavar="WHAT")

    chain = audit_sub.add_parser(
        "chain",
        help="check the hash chain of the audit archive (against signed checkpoints, with --public-key);"
        " offline, changes nothing",
        epilog="exit status: 0 every chain holds (and matches every checkpoint); 1 a problem was found; 2 bad"
        " arguments or key; 3 --public-key given but no checkpoint to check against",
    )
    chain.add_argument("--verify", action="store_true", required=True, help="walk every chain and report")
    chain.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    chain.add_argument(
        "--public-key",
        action="append",
        metavar="KEY",
        help="the archiver's public key (PEM file, or 64 hex digits); repeat for keys used over time",
    )
    signed = chain.add_mutually_exclusive_group()
    signed.add_argument("--checkpoint-dir", metavar="DIR", help="check against every checkpoint in DIR")
    signed.add_argument("--checkpoint", metavar="FILE", help="check against this one checkpoint")
    chain.add_argument("--json", action="store_true", help="print one JSON object")
    chain.set_defaults(handler=verify_chain)

    keygen = audit_sub.add_parser(
        "keygen", help="make the archiver's Ed25519 key pair for signed checkpoints (offline: writes two files)"
    )
    keygen.add_argument("--out", required=True, metavar="FILE", help="private key file to create (mode 0600)")
    keygen.add_argument("--public-out", metavar="FILE", help="public key file to create (default: FILE.pub)")
    keygen.set_defaults(handler=run_keygen)

    proof = audit_sub.add_parser(
        "proof",
        help="prove that one archived record is in a signed checkpoint (RFC 6962), or --check such a proof;"
        " offline, changes nothing",
        epilog="exit status: 0 the proof was made (or holds); 1 it does not hold; 2 bad arguments, key or file;"
        " 3 no proof can be made for that record",
    )
    proof.add_argument("--topic")
    proof.add_argument("--partition", type=int)
    proof.add_argument("--offset", type=int, help="the record's log offset")
    proof.add_argument("--checkpoint", metavar="FILE", help="the signed checkpoint to prove against")
    proof.add_argument("--public-key", action="append", metavar="KEY", required=True, help="as for audit chain")
    proof.add_argument("--check", metavar="PROOF_FILE", help="check a proof offline (no database)")
    proof.add_argument("--out", metavar="FILE", help="write the proof here (default: standard output)")
    proof.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    proof.add_argument("--json", action="store_true", help="with --check: print one JSON object")
    proof.set_defaults(handler=run_proof)

    verify = audit_sub.add_parser(
        "verify",
        help="re-execute every recorded scheduling cycle and compare (offline: reads the log, changes nothing)",
        epilog="exit status: 0 every cycle re-executed identically; 1 some cycle differs; 2 bad arguments;"
        " 3 no scheduling cycle recorded in the range, so nothing was verified",
    )
    verify.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    verify.add_argument("--namespace", default="", help="topic prefix the scheduler ran with")
    verify.add_argument("--since", type=rfc3339_ms, help="only cycles at or after this time (RFC 3339)")
    verify.add_argument("--until", type=rfc3339_ms, help="only cycles at or before this time (RFC 3339)")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.set_defaults(handler=run_verify)

    timeline_cmd.register(audit_sub)

    export = audit_sub.add_parser("export", help="the whole archive as JSON lines or CSV (offline, changes nothing)")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument("--out", help="file to write (default: standard output)")
    export.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    export.set_defaults(handler=run_export)

    at = audit_sub.add_parser(
        "at", help="the fleet, queues and quotas as they stood at a moment (offline: replays the log, changes nothing)"
    )
    at.add_argument("time", type=rfc3339_ms, help="RFC 3339, e.g. 2026-12-01T09:00:00Z")
    at.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    at.add_argument("--namespace", default="")
    at.add_argument("--json", action="store_true", help="print one JSON object")
    at.set_defaults(handler=run_at)

    whatif = audit_sub.add_parser(
        "whatif",
        help="replay recorded history under another policy, beside what happened (offline, changes nothing)",
    )
    whatif.add_argument(
        "--policy", required=True, help="a Policy document (YAML or JSON, as fedsched apply takes), or its bare spec"
    )
    whatif.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    whatif.add_argument("--namespace", default="")
    whatif.add_argument("--since", type=rfc3339_ms, help="only submissions at or after this time (RFC 3339)")
    whatif.add_argument("--until", type=rfc3339_ms, help="only submissions at or before this time (RFC 3339)")
    whatif.add_argument("--json", action="store_true", help="print one JSON object")
    whatif.set_defaults(handler=run_whatif)

    archive = audit_sub.add_parser(
        "archive", help="the archiver service: copy every event of every topic into the archive (never the log)"
    )
    archive.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    archive.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    archive.add_argument("--once", action="store_true", help="catch up and exit instead of following the log")
    archive.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    archive.add_argument(
        "--signing-key",
        metavar="FILE",
        help="sign checkpoints with this Ed25519 private key file (default: FEDSCHED_AUDIT_SIGNING_KEY_FILE;"
        " without one, checkpoints are off)",
    )
    archive.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="write each checkpoint here, outside the database (default: FEDSCHED_AUDIT_CHECKPOINT_DIR)",
    )
    archive.add_argument(
        "--checkpoint-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="sign the heads at most this often while following the log, when they moved (default: 60)",
    )
    archive.set_defaults(handler=run_archiver)


_UNSIGNED_NOTE = (
    "no signed checkpoint was checked: a tail rewritten with recomputed hashes (and its heads), a head"
    " rewound with its records, or a partition dropped with its head cannot be detected without one"
    " (--public-key with --checkpoint-dir or --checkpoint)"
)


async def verify_chain(args: argparse.Namespace) -> int:
    import asyncpg

    from events.audit.archive import verify_chain as verify
    from services.cli.config import postgres_dsn
    from services.cli.main import CliError

    keys = _public_keys(args.public_key)
    where = args.checkpoint_dir or args.checkpoint
    if keys and not where:
        raise CliError("--public-key needs --checkpoint-dir DIR or --checkpoint FILE to check against", 2)
    if where and not keys:
        raise CliError("--checkpoint-dir and --checkpoint need --public-key to check the signatures", 2)
    checkpoints, checkpoint_problems = _checkpoints(keys, args.checkpoint_dir, args.checkpoint)
    if keys and not checkpoints and not checkpoint_problems:
        raise CliError(f"no checkpoint in {where}: nothing signed to check the archive against", 3)

    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    try:
        report = await verify(pool, checkpoints, checkpoint_problems)
    finally:
        await pool.close()
    newest = report.newest_checkpoint
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "partitions": report.partitions,
                    "records": report.records,
                    "checkpoints": report.checkpoints,
                    "newest_checkpoint": None
                    if newest is None
                    else {"seq": newest.seq, "made_at_ms": newest.made_at_ms, "key_id": newest.key_id},
                    "unsigned_records": report.unsigned_records if keys else None,
                    "problems": [
                        {
                            "kind": p.kind.value,
                            "topic": p.topic,
                            "partition": p.partition,
                            "seq": p.seq,
                            "offset": p.offset,
                            "through_seq": p.through_seq,
                            "detail": p.detail,
                        }
                        for p in report.problems
                    ],
                    "checkpoint_problems": [
                        {"kind": p.kind.value, "checkpoint": p.checkpoint, "source": p.source, "detail": p.detail}
                        for p in report.checkpoint_problems
                    ],
                    "note": None if keys else _UNSIGNED_NOTE,
                }
            )
        )
        return 0 if report.ok else 1
    if report.ok:
        print(f"OK: {report.records} records in {report.partitions} partition chains verified")
    else:
        broken = len(report.problems) + len(report.checkpoint_problems)
        print(f"BROKEN: {broken} problems ({len(report.problems)} of {report.partitions} partition chains)")
        for problem in report.checkpoint_problems:
            print(f"  {problem}")
        for chain_problem in report.problems:
            print(f"  {chain_problem}")
    if not keys:
        print(f"note: {_UNSIGNED_NOTE}")
    elif newest is not None:
        from events.wire.envelope import format_time

        print(
            f"checked against {report.checkpoints} signed checkpoints, the newest #{newest.seq} made at"
            f" {format_time(newest.made_at_ms)} (key id {newest.key_id}); {report.unsigned_records} records"
            " archived after it are not yet covered by a signature"
        )
    return 0 if report.ok else 1


def _public_keys(specs: list[str] | None) -> dict[str, Ed25519PublicKey]:
    from events.audit.checkpoint_files import KeyFileError, load_public_key, trusted
    from services.cli.main import CliError

    try:
        return trusted(load_public_key(spec) for spec in specs or ())
    except KeyFileError as error:
        raise CliError(str(error), 2) from None


def _checkpoints(
    keys: dict[str, Ed25519PublicKey], directory: str | None, file: str | None
) -> tuple[list[Checkpoint], list[CheckpointProblem]]:
    from pathlib import Path

    from events.audit.checkpoint_files import load_checkpoints
    from services.cli.main import CliError

    if directory:
        if not Path(directory).is_dir():
            raise CliError(f"--checkpoint-dir {directory}: not a directory", 2)
        return load_checkpoints(keys, directory=Path(directory))
    if file:
        return load_checkpoints(keys, file=Path(file))
    return [], []


async def run_keygen(args: argparse.Namespace) -> int:
    from pathlib import Path

    from events.audit.checkpoint import key_id
    from events.audit.checkpoint_files import public_pem, write_key_pair
    from services.cli.main import CliError

    private = Path(args.out)
    public = Path(args.public_out or f"{args.out}.pub")
    try:
        key = write_key_pair(private, public)
    except FileExistsError as error:
        raise CliError(f"{error.filename}: exists; a key file is never replaced", 2) from None
    except OSError as error:
        raise CliError(f"{error.filename or args.out}: {error.strerror or error}", 2) from None
    print(public_pem(key).decode(), end="")
    print(f"wrote the private key to {private} (mode 0600) and the public key to {public}; key id {key_id(key)}")
    print(
        "give the archiver the private key's path (--signing-key or FEDSCHED_AUDIT_SIGNING_KEY_FILE); give"
        " auditors the public key"
    )
    return 0


async def run_proof(args: argparse.Namespace) -> int:
    from pathlib import Path

    from events.audit.checkpoint import CheckpointError
    from events.audit.proof import parse_proof, problems
    from services.cli.main import CliError

    keys = _public_keys(args.public_key)
    if args.check:
        try:
            proof = parse_proof(Path(args.check).read_bytes(), source=args.check)  # noqa: ASYNC240
        except OSError as error:
            raise CliError(f"{args.check}: {error.strerror or error}", 2) from None
        except CheckpointError as error:
            raise CliError(str(error), 2) from None
        wrong = problems(proof, keys)
        _print_proof_check(proof, wrong, as_json=args.json)
        return 1 if wrong else 0

    missing = [f"--{n}" for n in ("topic", "partition", "offset", "checkpoint") if getattr(args, n) is None]
    if missing:
        raise CliError(f"to make a proof, give {', '.join(missing)} (or --check PROOF_FILE to check one)", 2)
    return await _make_proof(args, keys)


async def _make_proof(args: argparse.Namespace, keys: dict[str, Ed25519PublicKey]) -> int:
    from pathlib import Path

    import asyncpg

    from events.audit.archive import ProofError, inclusion_proof
    from events.audit.checkpoint_files import load_checkpoints
    from events.log.contract import TopicPartition
    from services.cli.config import postgres_dsn
    from services.cli.main import CliError

    checkpoints, wrong = load_checkpoints(keys, file=Path(args.checkpoint))
    if wrong:
        raise CliError(str(wrong[0]), 2)
    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    try:
        proof = await inclusion_proof(pool, checkpoints[0], TopicPartition(args.topic, args.partition), args.offset)
    except ProofError as error:
        raise CliError(str(error), 3) from None
    finally:
        await pool.close()
    if args.out:
        Path(args.out).write_bytes(proof.to_bytes())  # noqa: ASYNC240
        print(
            f"wrote the proof that {args.topic}[{args.partition}] log offset {args.offset} (seq {proof.seq}) is in"
            f" checkpoint #{proof.checkpoint.seq} to {args.out} ({len(proof.path)} hashes)"
        )
    else:
        print(proof.to_bytes().decode(), end="")
    return 0


def _print_proof_check(proof: InclusionProof, wrong: list[str], *, as_json: bool) -> None:
    from events.log.headers import unpack_headers
    from events.wire.envelope import format_time

    try:
        event_type = dict(unpack_headers(proof.headers)).get("ce_type", b"").decode() or None
    except (ValueError, UnicodeDecodeError, IndexError):
        event_type = None
    checkpoint = proof.checkpoint
    if as_json:
        print(
            json.dumps(
                {
                    "ok": not wrong,
                    "topic": proof.topic,
                    "partition": proof.partition,
                    "seq": proof.seq,
                    "offset": proof.offset,
                    "event_type": event_type,
                    "checkpoint": checkpoint.seq,
                    "made_at_ms": checkpoint.made_at_ms,
                    "key_id": checkpoint.key_id,
                    "problems": wrong,
                }
            )
        )
        return
    where = f"{proof.topic}[{proof.partition}] seq {proof.seq} (log offset {proof.offset})"
    if wrong:
        print(f"DOES NOT HOLD: {where}")
        for line in wrong:
            print(f"  {line}")
        return
    what = f", a {event_type}," if event_type else ""
    print(
        f"OK: the record at {where}{what} is in checkpoint #{checkpoint.seq}, made at"
        f" {format_time(checkpoint.made_at_ms)} and signed by key id {checkpoint.key_id}"
    )


async def run_archiver(args: argparse.Namespace) -> int:
    from events.audit.archive import ArchiveBroken, AuditArchiver
    from events.audit.checkpointer import Checkpointer
    from events.catalog.topics import TOPICS
    from events.hosting.lag import Lag
    from events.plumbing.collector import tune_for_service
    from events.plumbing.logs import configure as configure_logging
    from events.plumbing.metrics import serving
    from services.cli.config import log_url, postgres_dsn, started_log, started_pool
    from services.cli.main import CliError

    configure_logging()
    tune_for_service()

    signing = _signing(args)
    log = await started_log(log_url(args.log), "archiver")
    pool = await started_pool(postgres_dsn(args.dsn), "archiver", 4)
    checkpointer = None
    if signing is not None:
        key, directory = signing
        checkpointer = Checkpointer(key, directory, event_log=log, every_s=args.checkpoint_every)
    archiver = AuditArchiver(log, pool, [spec.name for spec in TOPICS], checkpointer=checkpointer)
    try:
        if args.once:
            progress = await archiver.catch_up()
            print(f"archived {progress.archived} records")
            if checkpointer is not None and checkpointer.newest is not None:
                print(f"signed checkpoint #{checkpointer.newest.seq} into {checkpointer.directory.path}")
        else:
            stop = stop_on_signals()
            lag = Lag(log, "archiver", lambda: archiver.positions)
            async with serving(args.metrics, [archiver.samples], lag=lag):
                await archiver.run(stop)
    except ArchiveBroken as error:
        raise CliError(str(error), 1) from None
    finally:
        await archiver.close()
        await pool.close()
        await log.close()
    return 0


def _signing(args: argparse.Namespace) -> tuple[Ed25519PrivateKey, CheckpointDir] | None:
    """The archiver's signing key and checkpoint directory, from the flags or the environment; None (and
    a warning, from the archiver) when no key is configured."""
    import os
    from pathlib import Path

    from events.audit.checkpoint_files import (
        CHECKPOINT_DIR_ENV,
        SIGNING_KEY_ENV,
        CheckpointDir,
        KeyFileError,
        load_signing_key,
    )
    from services.cli.main import CliError

    key_file = args.signing_key or os.environ.get(SIGNING_KEY_ENV) or None
    directory = args.checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV) or None
    if args.checkpoint_every <= 0:
        raise CliError(f"--checkpoint-every: {args.checkpoint_every:g} is not a positive number of seconds", 2)
    if key_file is None:
        if directory is not None:
            raise CliError(f"--checkpoint-dir needs a signing key (--signing-key or {SIGNING_KEY_ENV})", 2)
        return None
    if directory is None:
        raise CliError(
            "a signing key needs a checkpoint directory outside the database"
            f" (--checkpoint-dir or {CHECKPOINT_DIR_ENV})",
            2,
        )
    try:
        key = load_signing_key(Path(key_file))
        checkpoints = CheckpointDir(Path(directory))
        checkpoints.ensure()
    except KeyFileError as error:
        raise CliError(str(error), 2) from None
    except OSError as error:
        raise CliError(f"--checkpoint-dir {directory}: {error.strerror or error}", 2) from None
    return key, checkpoints


async def run_verify(args: argparse.Namespace) -> int:
    from events.log import open_log
    from events.plumbing.collector import tune_for_service
    from services.audit.verify import verify
    from services.cli.config import log_url
    from services.scheduler.core.decide import INPUT_TOPICS

    time_range(args.since, args.until)
    tune_for_service()  # the whole folded history stays alive: full collections over it cost ~25%

    log = open_log(log_url(args.log))
    await log.start()
    prefix = f"{args.namespace}." if args.namespace else ""
    try:
        report = await verify(
            log, topics=tuple(prefix + t for t in INPUT_TOPICS), since_ms=args.since, until_ms=args.until
        )
    finally:
        await log.close()
    if report.cycles == 0 and not report.problems:
        # Nothing re-executed is no evidence either way: not "100% identical", and not success.
        if args.json:
            print(json.dumps(report.to_json()))
        else:
            print(
                f"nothing verified: no scheduling cycle recorded{_range_text(args.since, args.until)}"
                f" ({report.events_read} events read)"
            )
        return 3
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _range_text(since_ms: int | None, until_ms: int | None) -> str:
    from events.wire.envelope import format_time

    since = "" if since_ms is None else f" from {format_time(since_ms)}"
    until = "" if until_ms is None else f" until {format_time(until_ms)}"
    return since + until


async def run_export(args: argparse.Namespace) -> int:
    import sys

    import asyncpg

    from services.audit.queries import export
    from services.cli.config import postgres_dsn

    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115, ASYNC230
    count = 0
    try:
        async for line in export(pool, args.format):
            out.write(line)
            count += 1
    finally:
        await pool.close()
        if args.out:
            out.close()
    if args.out:
        print(f"wrote {count} lines to {args.out}", file=sys.stderr)
    return 0


async def run_at(args: argparse.Namespace) -> int:
    from events.log import open_log
    from events.wire.envelope import format_time
    from services.audit.queries import state_at
    from services.cli.config import log_url

    moment = args.time
    log = open_log(log_url(args.log))
    await log.start()
    try:
        state = await state_at(log, moment, namespace=args.namespace)
    finally:
        await log.close()
    snapshot = state.snapshot(moment)
    fleet: dict[tuple[str, str], list[int]] = {}
    for node in snapshot.nodes:
        entry = fleet.setdefault((node.cluster, node.gpu_model or "-"), [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += len(node.gpus)
        entry[2] += sum(g.free_milli for g in node.gpus) // 1000
        entry[3] += sum(1 for g in node.gpus if g.health.value == "ok")
    queues: dict[str, int] = {}
    for job in snapshot.pending:
        queues[job.priority_class.value] = queues.get(job.priority_class.value, 0) + 1
    quotas = [
        {
            "tenant": t.tenant_id,
            "resource": q.resource,
            "queue": q.queue or "default",
            "guaranteed": q.guaranteed,
            "limit": q.limit,
        }
        for t in snapshot.tenants
        for q in t.quotas
    ]
    policy = policy_in_force(state)
    if args.json:
        print(
            json.dumps(
                {
                    "time_ms": moment,
                    "fleet": [
                        {
                            "cluster": c,
                            "gpu_model": m,
                            "nodes": v[0],
                            "gpus": v[1],
                            "free_gpus": v[2],
                            "healthy_gpus": v[3],
                        }
                        for (c, m), v in sorted(fleet.items())
                    ],
                    "running": len(snapshot.running),
                    "pending_by_priority": queues,
                    "quotas": quotas,
                    "policy": policy,
                }
            )
        )
        return 0
    print(f"as of {format_time(moment)}: {len(snapshot.running)} jobs running, {len(snapshot.pending)} waiting")
    print(f"{'cluster':<16}{'gpu model':<16}{'nodes':>7}{'gpus':>7}{'free':>7}{'healthy':>9}")
    for (cluster, model), (nodes, gpus, free, healthy) in sorted(fleet.items()):
        print(f"{cluster:<16}{model:<16}{nodes:>7}{gpus:>7}{free:>7}{healthy:>9}")
    for priority, count in sorted(queues.items()):
        print(f"waiting {priority}: {count}")
    for t in snapshot.tenants:
        for q in t.quotas:
            print(quota_line(t.tenant_id, q))
    import yaml

    print("policy in force (as a Policy document, every setting):")
    print(yaml.safe_dump(policy, sort_keys=False, default_flow_style=False), end="")
    return 0


def policy_in_force(state: Any) -> dict[str, Any]:
    """The policy a state decides under, as the ``Policy`` document ``fedsched apply`` and ``audit whatif
    --policy`` take (every setting; ``metadata.name`` the policy's, ``default`` when none was applied)."""
    from events.catalog.documents import API_VERSION, PolicySpec

    event = state.policy
    settings = {} if event is None else dict(event.document)
    try:
        spec: dict[str, Any] = PolicySpec.model_validate_json(json.dumps(settings)).model_dump(mode="json")
    except ValueError:  # a document of an earlier release the spec no longer reads: as it was written
        spec = settings
    name = "default" if event is None else event.policy
    metadata = {"name": name, "labels": {"version": state.policy_config().version}}
    return {"api_version": API_VERSION, "kind": "Policy", "metadata": metadata, "spec": spec}


UNBOUNDED = 2**62
"""The limit the scheduler's state gives a quota line without one."""


def quota_line(tenant: str, quota: Quota) -> str:
    """One quota as ``audit at`` prints it, amounts in the units of ``fedsched quota`` (``gpu:A100`` in GPUs,
    an unbounded limit as ``-``)."""
    from services.cli.quantities import unit_of

    scale, unit = unit_of(quota.resource)
    limit = "-" if quota.limit >= UNBOUNDED else f"{quota.limit / scale:g}"
    where = f"{tenant}/{quota.queue or 'default'}"
    return f"quota {where} {quota.resource}: guaranteed {quota.guaranteed / scale:g} limit {limit} ({unit})"


def comparison_lines(columns: dict[str, dict[str, Any]]) -> list[str]:
    """The whatif table: one row per figure, one column per outcome, each column as wide as its widest
    cell (a policy file's name makes a header of any length) and two spaces between columns."""
    rows: list[tuple[str, list[str]]] = []
    priorities = sorted({p for c in columns.values() for p in c["wait_by_priority"]})
    for priority in priorities:
        for stat in ("p50_s", "p95_s"):
            waits = [c["wait_by_priority"].get(priority, {}) for c in columns.values()]
            # No job of the class started in that column: no wait to show (not a wait of 0).
            rows.append((f"wait {priority} {stat}", [f"{w[stat]:.1f}" if w.get("jobs") else "-" for w in waits]))
    for key in ("preemptions", "gpu_allocation_pct", "never_started", "held_by_budget"):
        rows.append((key, [str(c[key]) for c in columns.values()]))
    tenants = sorted({t for c in columns.values() for t in c["cost_micro_by_tenant"]})
    for tenant in tenants:
        rows.append(
            (f"cost {tenant}", [f"{c['cost_micro_by_tenant'].get(tenant, 0) / 1e6:.2f}" for c in columns.values()])
        )
    label = max([len(r[0]) for r in rows], default=0)
    widths = [max(len(name), *(len(r[1][i]) for r in rows)) for i, name in enumerate(columns)]
    lines = ["".ljust(label) + "".join(f"  {n:>{w}}" for n, w in zip(columns, widths, strict=True))]
    lines += [r[0].ljust(label) + "".join(f"  {v:>{w}}" for v, w in zip(r[1], widths, strict=True)) for r in rows]
    return lines


async def run_whatif(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from events.log import open_log
    from services.audit.whatif import load_history, simulate
    from services.cli.config import log_url
    from services.cli.main import CliError
    from services.scheduler.core.state import policy_from_document

    try:
        document = yaml.safe_load(Path(args.policy).read_text(encoding="utf-8")) or {}  # noqa: ASYNC240
        candidate = policy_from_document(f"whatif:{Path(args.policy).name}", policy_settings(document))
    except (OSError, yaml.YAMLError, ValueError, TypeError) as error:
        raise CliError(f"--policy {args.policy}: {error}", 2) from None
    time_range(args.since, args.until)
    log = open_log(log_url(args.log))
    await log.start()
    try:
        history = await load_history(log, namespace=args.namespace, since_ms=args.since, until_ms=args.until)
    finally:
        await log.close()
    current = history.state.policy_config()
    columns = {
        "recorded": history.actual.summary(),
        f"simulated ({current.version})": simulate(history, current).summary(),
        f"simulated ({candidate.version})": simulate(history, candidate).summary(),
    }
    if args.json:
        print(json.dumps({"jobs": len(history.arrivals), "columns": columns}))
        return 0
    print(f"{len(history.arrivals)} recorded submissions replayed; policy in force: {current.version}")
    print("\n".join(comparison_lines(columns)))
    return 0


def policy_settings(document: Any) -> Any:
    """A ``Policy`` document's settings (checked as ``fedsched apply`` checks them), as the scheduler reads
    them; a file of the bare settings (the ``document`` of ``PolicyConfigured``) is read as it is."""
    from events.catalog.documents import DocumentError, Kind, parse

    if isinstance(document, dict) and "kind" in document:
        try:
            parsed = parse(document)
        except DocumentError as error:
            raise ValueError(str(error)) from None
        if parsed.kind is not Kind.POLICY:
            raise ValueError(f"a {parsed.kind.value} document, not a Policy")
        return parsed.spec_json()
    return document
