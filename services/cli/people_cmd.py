"""Sub-commands for people: ``fedsched submit | jobs | job | watch | explain | cancel | resources | quota |
budget``.

Each is a gRPC client of the API (``services.api.client``): ``--server`` (``FEDSCHED_SERVER``, default
127.0.0.1:50051) and ``--token`` (``FEDSCHED_TOKEN``, else the file ``FEDSCHED_TOKEN_FILE``, else the
development token ``fedsched up`` leaves in ``.fedsched/dev-token``); TLS with ``--ca-cert`` and, for
mutual TLS, ``--client-cert`` and ``--client-key``. Human tables by default, ``--json`` everywhere.

Exit codes: 0 done; 1 another failure; 2 invalid input (a bad job file, or INVALID_ARGUMENT, with the
field); 3 not found; 4 not authenticated or not allowed; 5 conflict (ALREADY_EXISTS,
FAILED_PRECONDITION); 6 the server cannot be reached or did not answer in time. With ``--json`` an error
is one JSON object on stderr: ``{"error": {"code", "message", "field", "reason"}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events.catalog.lifecycle import JobStatus
from events.catalog.pending_reasons import PendingReason
from services.cli import jobfile
from services.cli.args import positive_int
from services.cli.main import CliError

if TYPE_CHECKING:
    from services.api.client import CallError, Client
    from services.api.pb import resources_pb2

EXIT_CODES = {
    "INVALID_ARGUMENT": 2,
    "OUT_OF_RANGE": 2,
    "NOT_FOUND": 3,
    "UNAUTHENTICATED": 4,
    "PERMISSION_DENIED": 4,
    "ALREADY_EXISTS": 5,
    "FAILED_PRECONDITION": 5,
    "ABORTED": 5,
    "UNAVAILABLE": 6,
    "DEADLINE_EXCEEDED": 6,
}
STATUSES = tuple(status.value for status in JobStatus)
PENDING_REASONS = tuple(reason.value for reason in PendingReason)
WAITING = ("submitted", "queued")


def client_options(*, json_option: bool = True) -> argparse.ArgumentParser:
    """The options of every command that is a client of the API (a parent parser); ``json_option``:
    with ``--json`` (a command whose ``--json`` means something else adds its own)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=None, help="API address host:port (default: FEDSCHED_SERVER or local)")
    common.add_argument("--token", default=None, help="bearer token (default: FEDSCHED_TOKEN or the dev token)")
    common.add_argument("--ca-cert", type=Path, default=None, help="use TLS, trusting this CA (PEM)")
    common.add_argument("--client-cert", type=Path, default=None, help="client certificate for mutual TLS (PEM)")
    common.add_argument("--client-key", type=Path, default=None, help="client key for mutual TLS (PEM)")
    common.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an answer (default 30)")
    if json_option:
        common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return common


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = client_options()

    submit = sub.add_parser("submit", parents=[common], help="submit a job from a YAML file")
    submit.add_argument("file", type=Path, help="job YAML (the fields of JobSubmitted; '-' for stdin)")
    submit.add_argument("--request-id", help="idempotency key (default: the file's client_request_id, else new)")
    submit.set_defaults(handler=api_command(submit_job))

    jobs = sub.add_parser(
        "jobs",
        parents=[common],
        help="list jobs, newest first; waiting ones (--status queued) in the federation's order, with where "
        "each stands: its pending reason, its places in its queue and in the federation, its ETA",
    )
    jobs.add_argument("--tenant", default="")
    jobs.add_argument("--project", default="")
    jobs.add_argument("--queue", default="")
    jobs.add_argument("--status", action="append", default=[], choices=STATUSES, help="repeat for several")
    jobs.add_argument(
        "--pending-reason",
        action="append",
        default=[],
        choices=PENDING_REASONS,
        help="waiting jobs whose wait is of this category; repeat for several",
    )
    jobs.add_argument("--priority-class", default="")
    jobs.add_argument("--cluster", default="")
    jobs.add_argument("--limit", type=positive_int, default=50, help="at most this many jobs (default 50)")
    jobs.set_defaults(handler=api_command(list_jobs))

    job = sub.add_parser("job", parents=[common], help="one job: status, placement and timeline")
    job.add_argument("job_id")
    job.set_defaults(handler=api_command(show_job))

    watch = sub.add_parser("watch", parents=[common], help="follow a job's events until it ends")
    watch.add_argument("job_id")
    watch.add_argument("--skip-history", action="store_true", help="only what happens from now on")
    watch.set_defaults(handler=api_command(watch_job))

    explain = sub.add_parser("explain", parents=[common], help="why a job waits, was preempted, or went where it is")
    explain.add_argument("job_id")
    explain.set_defaults(handler=api_command(explain_job))

    cancel = sub.add_parser("cancel", parents=[common], help="ask for a job to be cancelled")
    cancel.add_argument("job_id")
    cancel.add_argument("--reason", default="", help="why, for the job's history")
    cancel.add_argument("--request-id", default=None, help="idempotency key")
    cancel.set_defaults(handler=api_command(cancel_job))

    resources = sub.add_parser(
        "resources", parents=[common], help="GPU and NPU capacity: clusters x GPU models, clusters x NPU models"
    )
    resources.add_argument("--cluster", default="", help="only this cluster")
    what = resources.add_mutually_exclusive_group()
    what.add_argument("--clusters", action="store_true", help="list clusters instead")
    what.add_argument("--nodes", action="store_true", help="list nodes instead")
    resources.add_argument(
        "--limit", type=positive_int, default=200, help="with --nodes: at most this many (default 200)"
    )
    resources.set_defaults(handler=api_command(show_resources))

    quota = sub.add_parser("quota", parents=[common], help="quota and usage of tenant queues")
    quota.add_argument("--tenant", default="")
    quota.add_argument("--queue", default="")
    quota.set_defaults(handler=api_command(show_quota))

    budget = sub.add_parser("budget", parents=[common], help="GPU-hour budgets: used, left, projected per window")
    budget.add_argument("--tenant", default="")
    budget.set_defaults(handler=api_command(show_budgets))


Command = Callable[[argparse.Namespace, "Client"], Awaitable[int]]


def api_command(command: Command) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """The handler of a command that calls the API: a client from the options, errors reported."""

    async def run(args: argparse.Namespace) -> int:
        from services.api.client import CallError, Client

        try:
            client = Client(client_config(args))
            try:
                return await command(args, client)
            except CallError as error:
                return _failed(args, error)
            finally:
                await client.close()
        except CliError as error:  # reported here, so it reads the same however the CLI was started
            print(f"fedsched: {error}", file=sys.stderr)
            return error.exit_code

    return run


def client_config(args: argparse.Namespace) -> Any:
    from services.api.client import DEFAULT_SERVER, ClientConfig, resolve_token

    def read(path: Path | None) -> bytes | None:
        try:
            return path.read_bytes() if path else None
        except OSError as error:
            raise CliError(f"{path}: {error.strerror}", 2) from None

    if bool(args.client_cert) != bool(args.client_key):
        raise CliError("mutual TLS needs both --client-cert and --client-key", 2)
    return ClientConfig(
        server=args.server or os.environ.get("FEDSCHED_SERVER") or DEFAULT_SERVER,
        token=resolve_token(args.token),
        ca_cert=read(args.ca_cert),
        client_cert=read(args.client_cert),
        client_key=read(args.client_key),
        timeout_s=args.timeout,
    )


#: Failures after which a submission may or may not have been made.
_UNKNOWN_OUTCOME = ("DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED", "INTERNAL", "UNKNOWN")


def _failed(args: argparse.Namespace, error: CallError, *, answered: bool = False) -> int:
    """Report a failed call. ``answered``: the server did answer this call (a stream that was cut off)."""
    code = EXIT_CODES.get(error.code, 1)
    if args.json:
        print(json.dumps({"error": error.as_json()}), file=sys.stderr)
        return code
    where = f" (field {error.field})" if error.field and error.field not in error.message else ""
    hint = ""
    if error.code == "UNAVAILABLE" and not answered and error.reason is None:
        # Every error the API itself returns carries a reason code; without one no server answered, so
        # asking whether it runs helps. An API that answered "database down" is running.
        hint = f"; is the API running at {args.server or os.environ.get('FEDSCHED_SERVER') or '127.0.0.1:50051'}?"
    elif error.code == "UNAUTHENTICATED":
        from services.api.client import DEV_TOKEN_FILE

        hint = (
            "; pass --token or set FEDSCHED_TOKEN (fedsched up leaves its development token in "
            f"{DEV_TOKEN_FILE} of the directory it runs in)"
        )
    raise CliError(f"{error.code.lower().replace('_', ' ')}: {error.message}{where}{hint}", code)


async def every_page(
    client: Client, method: Any, request: Any, items: str, limit: int | None = None
) -> tuple[list[Any], bool]:
    """The ``items`` of a paged list (a request with ``page_size`` and ``page_token``), page after page, up
    to ``limit`` of them (``None``: every one); and whether more remain."""
    found: list[Any] = []
    while limit is None or len(found) < limit:
        request.page_size = 1000 if limit is None else min(1000, limit - len(found))
        page = await client.call(method, request)
        found += getattr(page, items)
        request.page_token = page.next_page_token
        if not request.page_token:
            break
    return found, bool(request.page_token)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def to_dict(message: Any) -> dict[str, Any]:
    """The message as ``--json`` prints it: protobuf's JSON mapping, but with 64-bit integers as numbers
    (the mapping writes them as strings, so ``memory_mib`` was ``"262144"`` beside ``gpus`` as 2)."""
    from google.protobuf.json_format import MessageToDict

    out: dict[str, Any] = MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _wide_ints(message.DESCRIPTOR, out)


def _wide_ints(descriptor: Any, value: dict[str, Any]) -> dict[str, Any]:
    from google.protobuf.descriptor import FieldDescriptor

    wide = {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.type in wide:
            value[field.name] = [int(x) for x in item] if isinstance(item, list) else int(item)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.GetOptions().map_entry:
            for sub in item if isinstance(item, list) else [item]:
                if isinstance(sub, dict):
                    _wide_ints(field.message_type, sub)
    return value


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], blank: str = "") -> str:
    """Aligned columns; ``blank`` stands for a cell with nothing in it (``None`` or empty text)."""
    cells = [[str(h) for h in headers], *[[blank if c is None or c == "" else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def gpus(milli: int) -> str:
    return f"{milli / 1000:g}"


def duration(ms: int) -> str:
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def when(ms: int) -> str:
    """RFC 3339 in UTC with milliseconds, as the events write time."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


# -- commands ------------------------------------------------------------------------------------------


async def submit_job(args: argparse.Namespace, client: Client) -> int:
    from services.api.client import CallError
    from services.api.pb import jobs_pb2

    try:
        text = sys.stdin.read() if str(args.file) == "-" else args.file.read_text()
    except OSError as error:
        raise CliError(f"{args.file}: {error.strerror}", 2) from None
    try:
        spec, file_request_id = jobfile.parse(text)
    except jobfile.JobFileError as error:
        from events.catalog.reasons import ReasonCode

        # Reported as the server reports a bad field, so a script reads one shape, on one stream, either way.
        local = CallError("INVALID_ARGUMENT", f"{args.file}: {error}", error.field, ReasonCode.INVALID_REQUEST.value)
        return _failed(args, local)
    request_id = args.request_id or file_request_id or f"cli-{uuid.uuid4().hex}"
    request = jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=request_id)
    try:
        response = await client.call(client.jobs.SubmitJob, request)
    except CallError as error:
        if error.code not in _UNKNOWN_OUTCOME:
            raise
        # No answer is not "not submitted": the API may have appended it. The same request id returns
        # that job on a retry, where a new one (the default) would submit a second job.
        raise CallError(
            error.code,
            f"{error.message}; the job may have been submitted: retry with --request-id {request_id} "
            "to get it rather than a second one",
            error.field,
            error.reason,
        ) from None
    warnings = list(response.warnings)
    if args.json:
        print(
            json.dumps(
                {
                    "job_id": response.job_id,
                    "created": response.created,
                    "client_request_id": request_id,
                    "warnings": warnings,
                }
            )
        )
        return 0
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if response.created:
        print(f"submitted {response.job_id} ({spec.tenant}/{spec.name})")
    else:
        print(f"{response.job_id} was already submitted with request id {request_id}: nothing new")
    return 0


async def list_jobs(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import jobs_pb2

    request = jobs_pb2.ListJobsRequest(
        tenant=args.tenant,
        project=args.project,
        queue=args.queue,
        statuses=args.status,
        priority_class=args.priority_class,
        cluster=args.cluster,
        pending_reasons=args.pending_reason,
    )
    found, more = await every_page(client, client.jobs.ListJobs, request, "jobs", args.limit)
    if args.json:
        _print_json({"jobs": [to_dict(j) for j in found], "more": more})
        return 0
    if args.pending_reason or (args.status and set(args.status) <= set(WAITING)):
        print(_waiting_table(found))
    else:
        print(_jobs_table(found))
    if more:
        print(f"(more than {len(found)} jobs; raise --limit or filter)")
    return 0


def _waiting_table(found: Sequence[Any]) -> str:
    """Waiting jobs in the federation's order (those the scheduler has not placed in it yet last), with
    where each stands: the category of its wait, its places in its own queue and in the federation's order,
    and when it may start, from this machine's clock."""
    import time

    now = int(time.time() * 1000)
    order = sorted(found, key=lambda j: (not j.HasField("federation_position"), j.federation_position))
    rows = [
        [
            j.job_id,
            j.name[:40],
            f"{j.tenant}/{j.queue}",
            j.priority_class,
            gpus(j.gpu_milli * j.replicas),
            j.npus * j.replicas or "",
            j.pending_reason,
            j.tenant_queue_position if j.HasField("tenant_queue_position") else "-",
            j.federation_position if j.HasField("federation_position") else "-",
            f"in {duration(max(0, j.estimated_start_ms - now))}" if j.HasField("estimated_start_ms") else "-",
            duration(j.waiting_ms),
            j.last_reason,
        ]
        for j in order
    ]
    headers = ["JOB", "NAME", "QUEUE", "PRIORITY", "GPUS", "NPUS", "PENDING", "IN-QUEUE", "IN-FED", "ETA", "WAITED"]
    return table([*headers, "REASON"], rows, blank="-")


def _jobs_table(found: Sequence[Any]) -> str:
    rows = [
        [
            j.job_id,
            j.name[:40],
            j.tenant,
            j.status,
            j.priority_class,
            _held(j, gpus(j.gpu_milli * len(j.placement)), gpus(j.gpu_milli * j.replicas)) if j.gpu_milli else "-",
            _held(j, str(j.npus * len(j.placement)), str(j.npus * j.replicas)) if j.npus else "-",
            _where(j),
            duration(j.waiting_ms),
            j.last_reason,
        ]
        for j in found
    ]
    return table(["JOB", "NAME", "TENANT", "STATUS", "PRIORITY", "GPUS", "NPUS", "CLUSTER", "WAITED", "REASON"], rows)


def _where(job: Any) -> str:
    """Where its run holds replicas: a spread service's clusters joined ("sim-1+sim-2"), or its cluster."""
    return (
        "+".join(job.clusters) if len(job.clusters) > 1 else (job.clusters[0] if job.clusters else job.cluster or "-")
    )


def _part(part: Any) -> str:
    """One part of a spread run: its replicas, when it opened, and whether it holds them or how it ended."""
    opened = f"{part.replicas} replica(s) from {when(part.opened_ms)}"
    if not part.ended:
        return f"{opened}, running"
    reason = f" ({part.reason})" if part.reason else ""
    at = f" at {when(part.ended_ms)}" if part.HasField("ended_ms") else ""
    return f"{opened}, {part.ended}{reason}{at}"


def _running_fewer(job: Any) -> bool:
    """Whether the job runs with fewer replicas than it asks (an elastic run not yet grown to all)."""
    return job.status in ("placed", "running") and 0 < len(job.placement) < job.replicas


def _per_replica(job: Any) -> str:
    devices = [f"{gpus(job.gpu_milli)} GPU"] if job.gpu_milli or not job.npus else []
    return " + ".join([*devices, *([f"{job.npus} NPU"] if job.npus else [])])


def _replicas(job: Any) -> str:
    if _running_fewer(job):
        return f"running {len(job.placement)} of {job.replicas} replica(s)"
    return f"{job.replicas} replica(s)"


def _held(job: Any, held: str, asked: str) -> str:
    """What a job asks; for a run holding fewer replicas than asked, what it holds of that ("2/4")."""
    return f"{held}/{asked}" if _running_fewer(job) else asked


def render_job(job: Any) -> str:
    """``fedsched job``'s text: the job's fields, a spread service's parts, its replicas, its timeline."""
    retried = f", retried {job.retries} times after failures" if job.retries else ""
    fields = [
        ("job", job.job_id),
        ("name", job.name),
        ("tenant", f"{job.tenant} / project {job.project} / queue {job.queue}"),
        ("kind", f"{job.kind}, {job.priority_class}, {_replicas(job)} x {_per_replica(job)}"),
        ("status", job.status + (f" on {_where(job)}" if job.cluster or job.clusters else "")),
        ("reason", f"{job.last_reason} {job.last_message}".strip() or "-"),
        ("runs", f"{job.runs} (preempted {job.preemptions} times{retried}), waited {duration(job.waiting_ms)}"),
    ]
    for name in ("submitted_ms", "placed_ms", "started_ms", "ended_ms"):
        if job.HasField(name):
            fields.append((name.removesuffix("_ms"), when(getattr(job, name))))
    for part in job.parts:  # a service spread over clusters: its run, cluster by cluster
        fields.append((f"part in {part.cluster}", _part(part)))
    for slot in job.placement:
        held = [f"GPUs {list(slot.gpu_indices)} x {slot.gpu_milli_each}"] if slot.gpu_indices else []
        held += [f"NPUs {list(slot.npu_indices)}"] if slot.npu_indices else []
        node = f"{slot.cluster}/{slot.node}" if job.parts and slot.cluster else slot.node
        fields.append((f"replica {slot.replica}", f"{node} {', '.join(held) or 'no GPU or NPU'}"))
    width = max(len(k) for k, _ in fields)
    text = "\n".join(f"{k.ljust(width)}  {v}" for k, v in fields)
    if job.timeline:
        rows = [[when(e.time_ms), e.event, e.status, e.reason, e.message[:80]] for e in job.timeline]
        text += "\n\n" + table(["TIME", "EVENT", "STATUS", "REASON", "MESSAGE"], rows)
    return text


async def show_job(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import jobs_pb2

    job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=args.job_id))
    if args.json:
        _print_json(to_dict(job))
        return 0
    print(render_job(job))
    return 0


async def watch_job(args: argparse.Namespace, client: Client) -> int:
    import grpc

    from services.api.client import call_error
    from services.api.pb import jobs_pb2

    request = jobs_pb2.WatchJobRequest(job_id=args.job_id, skip_history=args.skip_history)
    events = 0
    try:
        async for event in client.stream(client.jobs.WatchJob, request):
            events += 1
            if args.json:
                print(json.dumps(to_dict(event)), flush=True)
            else:
                text = f"{when(event.time_ms)}  {event.event:<24} {event.status:<10} {event.reason}"
                print((text + (f"  {event.message[:100]}" if event.message else "")).rstrip(), flush=True)
    except grpc.aio.AioRpcError as error:
        if not events:
            raise call_error(error) from None
        cut = call_error(error)
        cut.message += f" (the watch ended after {events} events: the API stopped or restarted; watch again)"
        return _failed(args, cut, answered=True)
    return 0


async def explain_job(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import jobs_pb2

    answer = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=args.job_id))
    if args.json:
        _print_json(to_dict(answer))
        return 0
    print(f"{answer.job_id}: {answer.status}")
    for line in answer.summary:
        print(line)
    return 0


async def cancel_job(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import jobs_pb2

    request = jobs_pb2.CancelJobRequest(
        job_id=args.job_id, reason=args.reason, client_request_id=args.request_id or f"cli-{uuid.uuid4().hex}"
    )
    response = await client.call(client.jobs.CancelJob, request)
    if args.json:
        print(json.dumps({"job_id": response.job_id, "status": response.status, "cancel_requested": True}))
    else:
        print(f"cancellation of {response.job_id} requested (it was {response.status})")
    return 0


async def show_resources(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import resources_pb2

    if args.clusters:
        clusters = await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest())
        if args.json:
            _print_json(to_dict(clusters))
            return 0
        rows = [
            [
                c.cluster,
                c.status,
                c.kind,
                c.region,
                c.nodes,
                c.gpus,
                gpus(c.gpu_capacity_milli),
                gpus(c.gpu_free_milli),
                ", ".join(f"{n.free}/{n.healthy}/{n.total} {n.npu_model}" for n in c.npus) or "-",
            ]
            for c in clusters.clusters
        ]
        headers = ["CLUSTER", "STATUS", "KIND", "REGION", "NODES", "GPUS", "HEALTHY", "FREE", "NPUS FREE/HEALTHY/TOTAL"]
        print(table(headers, rows))
        return 0
    if args.nodes:
        return await _show_nodes(args, client)
    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=args.cluster))
    if args.json:
        _print_json(to_dict(capacity))
        return 0
    rows = [
        [
            c.cluster,
            c.gpu_model or "-",
            c.nodes,
            gpus(c.total_milli),
            gpus(c.healthy_milli),
            gpus(c.free_milli),
            gpus(c.allocated_milli),
            "",
        ]
        for c in capacity.clusters
    ]
    for m in capacity.models:
        hot = " (hot)" if m.hot else ""
        rows.append(
            [
                "ALL",
                m.gpu_model or "-",
                "",
                gpus(m.total_milli),
                gpus(m.healthy_milli),
                gpus(m.free_milli),
                "",
                gpus(m.pending_milli) + hot,
            ]
        )
    print(table(["CLUSTER", "GPU MODEL", "NODES", "TOTAL", "HEALTHY", "FREE", "ALLOCATED", "PENDING"], rows))
    print("(GPUs; pending demand is federation-wide per model: a job that accepts several models counts for each)")
    if capacity.npus:
        npu_rows: list[list[object]] = [
            [n.cluster, n.npu_model or "-", n.nodes, n.total, n.healthy, n.degraded, n.failed, n.free, ""]
            for n in capacity.npus
        ]
        models: dict[str, list[int]] = {}
        for n in capacity.npus:
            sums = models.setdefault(n.npu_model, [0, 0, 0, 0, 0, n.pending, int(n.hot)])
            for i, figure in enumerate((n.total, n.healthy, n.degraded, n.failed, n.free)):
                sums[i] += figure
        for model, (total, healthy, degraded, failed, free, pending, marked) in sorted(models.items()):
            mark = f"{pending}{' (hot)' if marked else ''}"
            npu_rows.append(["ALL", model or "-", "", total, healthy, degraded, failed, free, mark])
        print()
        headers = ["CLUSTER", "NPU MODEL", "NODES", "TOTAL", "HEALTHY", "DEGRADED", "FAILED", "FREE", "PENDING"]
        print(table(headers, npu_rows))
        print(
            "(NPUs, whole devices; healthy counts the degraded ones, which are taken last; a failed NPU is never free;"
            " pending demand is federation-wide per model; a hot model is one the scheduler steers jobs off and caps"
            " tenants on)"
        )
    return 0


async def _show_nodes(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import resources_pb2

    request = resources_pb2.ListNodesRequest(cluster=args.cluster)
    nodes, more = await every_page(client, client.resources.ListNodes, request, "nodes", args.limit)
    if args.json:
        _print_json({"nodes": [to_dict(n) for n in nodes], "more": more})
        return 0
    rows = [
        [
            n.cluster,
            n.node,
            "yes" if n.present and n.schedulable else "no",
            n.gpu_model or "-",
            n.gpus,
            gpus(n.gpu_free_milli),
            _npus_of(n) if n.npus else "-",
            f"{n.health_milli / 10:g}%",
            n.jobs,
        ]
        for n in nodes
    ]
    print(table(["CLUSTER", "NODE", "SCHEDULABLE", "GPU MODEL", "GPUS", "FREE", "NPUS FREE", "HEALTH", "JOBS"], rows))
    return 0


def _npus_of(node: resources_pb2.Node) -> str:
    """A node's free NPUs of all it has, and how many are failed or degraded (``6/8 Ascend910B, 1 failed``)."""
    text = f"{node.npus_free}/{node.npus} {node.npu_model}"
    failed = node.npus - node.npus_healthy
    if failed:
        text += f", {failed} failed"
    if node.npus_degraded:
        text += f", {node.npus_degraded} degraded"
    return text


async def show_quota(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import quota_pb2

    answer = await client.call(client.quota.GetQuota, quota_pb2.GetQuotaRequest(tenant=args.tenant, queue=args.queue))
    if args.json:
        _print_json(to_dict(answer))
        return 0
    from services.cli.quantities import unit_of

    rows = []
    for q in answer.queues:
        for index, line in enumerate(q.lines):
            scale, _ = unit_of(line.resource)
            # RUNNING, GPU-HOURS and NPU-HOURS are the queue's, not a line's: shown once, on its first line.
            first = index == 0
            limit = f"{line.limit / scale:g}" if line.HasField("limit") else "-"
            rows.append(
                [
                    q.tenant,
                    q.queue,
                    line.resource + (f":{line.gpu_model}" if line.gpu_model else ""),
                    f"{line.used / scale:g}",
                    f"{line.guaranteed / scale:g}",
                    limit,
                    f"{line.borrowed / scale:g}",
                    q.running_jobs if first else "",
                    f"{q.gpu_hours_milli / 1000:g}" if first else "",
                    f"{q.npu_hours_milli / 1000:g}" if first else "",
                ]
            )
        if not q.lines:
            hours = [f"{q.gpu_hours_milli / 1000:g}", f"{q.npu_hours_milli / 1000:g}"]
            rows.append([q.tenant, q.queue, "(no quota)", "", "", "", "", q.running_jobs, *hours])
    headers = [
        "TENANT", "QUEUE", "RESOURCE", "USED", "GUARANTEED", "LIMIT", "BORROWED", "RUNNING", "GPU-HOURS", "NPU-HOURS"
    ]  # fmt: skip
    print(table(headers, rows))
    print("(cpu in CPUs, gpu in GPUs, npu in NPUs, memory in MiB; RUNNING, GPU-HOURS and NPU-HOURS per queue)")
    return 0


async def show_budgets(args: argparse.Namespace, client: Client) -> int:
    from events.catalog.budget_windows import gpu_hours
    from services.api.pb import quota_pb2

    answer = await client.call(client.quota.GetBudgets, quota_pb2.GetBudgetsRequest(tenant=args.tenant))
    if args.json:
        _print_json(to_dict(answer))
        return 0
    rows = []
    for b in answer.budgets:
        limit = b.gpu_hours * 1000 * 3_600_000
        left = max(0, limit - b.used_gpu_milli_ms)
        rows.append(
            [
                b.name,
                b.tenant or f"cohort {b.cohort}",
                f"{b.window_label} ({b.timezone})",
                b.mode,
                gpu_hours(b.used_gpu_milli_ms),
                gpu_hours(left),
                gpu_hours(b.projected_gpu_milli_ms),
                b.gpu_hours,
                f"{b.used_gpu_milli_ms * 100 // limit}%" if limit else "-",
                b.running_jobs,
            ]
        )
    headers = ["BUDGET", "FOR", "WINDOW", "MODE", "USED", "LEFT", "PROJECTED", "GPU-HOURS", "USED%", "RUNNING"]
    print(table(headers, rows) if rows else "no budgets")
    if rows:
        print(
            "(GPU-hours; PROJECTED: used, plus what the runs holding GPUs now are expected to hold still in the"
            " window; a hard budget starts a job whose expected need fits in GPU-HOURS - PROJECTED)"
        )
    return 0
