"""Sub-command: ``fedsched audit timeline JOB``, a client of the API's ``AuditService.GetJobTimeline``.

Registered by ``services.cli.audit_cmd`` beside the offline audit tools; unlike them it reads nothing
itself: the API answers with the job's timeline as its job view keeps it (every step with its reason;
of a very long history the first entries and the latest), for a job the caller's token may see. The
options, the token and the exit codes are those of ``services.cli.people_cmd``. Every archived record
of a job, with its place in the log and its hash, is in ``fedsched audit export``.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from services.cli.args import retire
from services.cli.people_cmd import api_command, client_options, to_dict, when

if TYPE_CHECKING:
    from services.api.client import Client


def register(audit_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    timeline = audit_sub.add_parser(
        "timeline", parents=[client_options()], help="a job's history with reasons (through the API, with your token)"
    )
    timeline.add_argument("job_id")
    retire(timeline, "--dsn")
    timeline.set_defaults(handler=api_command(show_timeline))


async def show_timeline(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import audit_pb2

    answer = await client.call(client.audit.GetJobTimeline, audit_pb2.GetJobTimelineRequest(job_id=args.job_id))
    if args.json:
        print(json.dumps(to_dict(answer), indent=2, sort_keys=True))
        return 0
    print(f"{answer.job_id} ({answer.tenant}): {answer.status}")
    for e in answer.entries:
        detail = " ".join(x for x in (e.reason, e.message) if x)
        print(f"{when(e.time_ms)}  {e.event:<24} {e.status:<10} {detail}")
    return 0
