"""Credentials kept out of the audit archive: a record's authorization headers replaced before chaining.

Called by the archiver's sink (``events.audit.archive.ArchiveSink``) on every record it copies. Pure.

Callers' bearer tokens ride in the ``ce_authorization`` header of the records MLOps clients publish on
the intake topic (``fedsched.intake``). The archive keeps records for years and is read by auditors, so a
token there would outlive its purpose and reach people it was never meant for. The archive redacts
rather than refuses such a record: the intake topic is written by clients outside fedsched, so refusing
would lose the request from the audit trail without keeping the token off the log, and the intake
already authenticates each request and records who asked in the answer it publishes (``submitted_by``,
``requester``), which the archive keeps in full. So the archive equals the log record for record, byte
for byte, except that the value of any header named ``ce_authorization`` or ``authorization`` (in any
case) reads ``redacted``; the hash chain covers the redacted bytes, so verifying the archive never needs
a token.
"""

from __future__ import annotations

REDACTED = b"redacted"
SECRET_HEADERS = frozenset({"ce_authorization", "authorization"})
"""Header names (compared in lower case) whose values never reach the archive."""

Headers = tuple[tuple[str, bytes], ...]


def redact_headers(headers: Headers) -> Headers:
    """``headers`` with every credential's value replaced by ``redacted`` (names and order kept)."""
    if not any(name.lower() in SECRET_HEADERS for name, _ in headers):
        return headers
    return tuple((name, REDACTED if name.lower() in SECRET_HEADERS else value) for name, value in headers)
