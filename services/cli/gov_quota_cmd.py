"""Sub-commands: ``fedsched gov quota request | approve | reject | list``, clients of the API's
``QuotaService`` (``RequestQuota``, ``DecideQuotaRequest``, ``ListQuotaRequests``).

Registered by ``services.cli.gov_cmd``. The options, the token and the exit codes are those of
``services.cli.people_cmd`` (2 invalid input, 3 not found, 4 not allowed, 5 conflict): who asks and who
decides is the subject of the caller's token, recorded by the API (``--by`` is refused, saying so), and
the server checks what the command used to (the request's fields, a GPU model on a resource that has
none, a period already over, a key reused for another request, a request already decided); its errors
name the field, and here the option too.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from services.cli.args import positive_float, positive_int, retire, rfc3339_ms
from services.cli.people_cmd import api_command, client_options, every_page, table, to_dict, when

if TYPE_CHECKING:
    from services.api.client import Client

#: The option that gives each field the server may name in an error.
OPTIONS = {
    "client_request_id": "--id",
    "tenant": "--tenant",
    "queue": "--queue",
    "resource": "--resource",
    "gpu_model": "--gpu-model",
    "amount": "--amount",
    "period_start_ms": "--from",
    "period_end_ms": "--from/--hours",
    "period_ms": "--hours",
    "request": "--from/--hours",
    "justification": "--justification",
    "approved_amount": "--amount",
    "expires_ms": "--until",
    "comment": "--comment",
}
_BY = (
    "the {who} is the subject of the caller's token (--token, FEDSCHED_TOKEN or FEDSCHED_TOKEN_FILE),"
    " as the API records it"
)


def register(gov_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = client_options()
    quota = gov_sub.add_parser("quota", help="quota requests: request, approve, reject, list (through the API)")
    quota_sub = quota.add_subparsers(dest="quota", metavar="ACTION")

    request = quota_sub.add_parser("request", parents=[common], help="ask for more quota for a period")
    request.add_argument("--id", required=True, help="the request's key: the same key again is the same request")
    request.add_argument("--tenant", required=True)
    request.add_argument("--queue", default="default")
    request.add_argument("--resource", default="gpu", choices=("cpu", "memory", "gpu", "npu"))
    request.add_argument("--gpu-model")
    request.add_argument(
        "--amount", type=positive_int, required=True, help="in the resource's unit (milli-GPU for gpu)"
    )
    request.add_argument("--from", dest="start", type=rfc3339_ms, help="RFC 3339 start (default: now)")
    request.add_argument("--hours", type=positive_float, default=24.0, help="length of the period (default 24)")
    request.add_argument("--justification", required=True)
    retire(request, "--by", why=_BY.format(who="requester"))
    retire(request, "--log")
    request.set_defaults(handler=api_command(request_quota))

    for action in ("approve", "reject"):
        decide = quota_sub.add_parser(action, parents=[common], help=f"{action} a pending quota request (admin)")
        decide.add_argument("request_id", metavar="REQUEST_ID", help="as gov quota request and list print it")
        decide.add_argument("--comment", default="")
        if action == "approve":
            decide.add_argument(
                "--amount", type=positive_int, help="approve less than asked, at least 1 (default: as asked)"
            )
            decide.add_argument(
                "--until", type=rfc3339_ms, help="RFC 3339 expiry (default: the end of the period asked)"
            )
        retire(decide, "--by", why=_BY.format(who="approver"))
        retire(decide, "--log")
        decide.set_defaults(handler=api_command(decide_request), approve=action == "approve")

    listing = quota_sub.add_parser("list", parents=[common], help="quota requests and their state, oldest first")
    listing.add_argument("--tenant", default="", help="only this tenant's")
    listing.add_argument("--status", default="", choices=("pending", "approved", "rejected"))
    retire(listing, "--log")
    listing.set_defaults(handler=api_command(list_requests))


async def _call(client: Client, method: Any, request: Any) -> Any:
    """``client.call``; an error naming a field names its option too (and a reused key, what to do)."""
    from services.api.client import CallError

    try:
        return await client.call(method, request)
    except CallError as error:
        field = error.field or ""
        option = OPTIONS.get(field)
        if option is None:
            raise
        hint = "; use a new --id" if error.code == "ALREADY_EXISTS" and option == "--id" else ""
        where = "" if field in error.message else f"field {field}, "
        message = f"{error.message} ({where}option {option}){hint}"
        raise CallError(error.code, message, error.field, error.reason) from None


async def request_quota(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import quota_pb2

    ask = quota_pb2.RequestQuotaRequest(
        tenant=args.tenant,
        queue=args.queue,
        resource=args.resource,
        gpu_model=args.gpu_model or "",
        amount=args.amount,
        period_start_ms=args.start or 0,  # 0: now, by the API's clock (a retry then is the same request)
        period_ms=int(args.hours * 3_600_000),
        justification=args.justification,
        client_request_id=args.id,
    )
    response = await _call(client, client.quota.RequestQuota, ask)
    if args.json:
        print(json.dumps(to_dict(response), indent=2, sort_keys=True))
        return 0
    r = response.request
    hours = (r.period_end_ms - r.period_start_ms) / 3_600_000
    again = "" if response.created else " (already recorded)"
    print(f"requested {r.request_id}: {r.amount} {r.resource} for {hours} h from {when(r.period_start_ms)}{again}")
    return 0


async def decide_request(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import quota_pb2

    decide = quota_pb2.DecideQuotaRequestRequest(
        request_id=args.request_id, approve=args.approve, approved_amount=getattr(args, "amount", None) or 0
    )
    decide.comment = args.comment
    if getattr(args, "until", None) is not None:
        decide.expires_ms = args.until
    response = await _call(client, client.quota.DecideQuotaRequest, decide)
    if args.json:
        print(json.dumps(to_dict(response), indent=2, sort_keys=True))
    else:
        print(f"{response.decision} {response.request_id} (by {response.request.decided_by})")
    return 0


async def list_requests(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import quota_pb2

    request = quota_pb2.ListQuotaRequestsRequest(tenant=args.tenant, status=args.status)
    records, _ = await every_page(client, client.quota.ListQuotaRequests, request, "requests")
    rows = [request_row(r) for r in records]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("(no quota requests)")
    else:
        headers = ["REQUEST", "TENANT", "RESOURCE", "GPU MODEL", "ASKED", "GRANTED", "UNIT", "UNTIL", "STATUS", "BY"]
        keys = ("request_id", "tenant", "resource", "gpu_model", "amount", "granted", "unit")
        cells = [
            [
                *(r[k] for k in keys),
                None if r["granted_until_ms"] is None else when(r["granted_until_ms"]),
                r["status"],
                r["by"],
            ]
            for r in rows
        ]
        print(table(headers, cells, blank="-"))
    return 0


def request_row(r: Any) -> dict[str, Any]:
    """A ``QuotaRequestRecord`` as ``gov quota list --json`` prints it: what was asked and, once approved,
    what was granted (the amount and its period; a grant may be less than asked), in the request's unit."""
    from services.cli.quantities import RAW_UNITS

    return {
        "request_id": r.request_id,
        "tenant": r.tenant,
        "resource": r.resource,
        "gpu_model": r.gpu_model or None,
        "amount": r.amount,
        "granted": r.granted_amount if r.HasField("granted_amount") else None,
        "unit": RAW_UNITS.get(r.resource, "units"),
        "granted_from_ms": r.granted_from_ms if r.HasField("granted_from_ms") else None,
        "granted_until_ms": r.granted_until_ms if r.HasField("granted_until_ms") else None,
        "status": r.status,
        "by": f"rule {r.rule}" if r.rule else r.decided_by,
        "requester": r.requester,
    }
