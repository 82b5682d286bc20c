"""A governance report as its message: each table as columns and rows of typed cells, bounded in size.

Called by ``services.api.governance`` (``GetReport``). Pure: from the figures governance computed
(``services.api.governance_reads.ReportFigures``) to ``fedsched.v1.GovernanceReport``. Integers stay
integers and numbers numbers, so ``fedsched gov report`` renders them as a report computed in the same
process would be. The answer stays under ``MAX_REPORT_BYTES`` (gRPC refuses more than 4 MiB): the
largest tables lose their last rows, and the notes say how many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.api.governance_reads import ReportFigures
from services.api.pb import governance_pb2

MAX_REPORT_BYTES = 3 * 1024 * 1024
_INT64 = range(-(2**63), 2**63)


def report_message(
    figures: ReportFigures, tenants: Sequence[str] | None, max_bytes: int = MAX_REPORT_BYTES
) -> governance_pb2.GovernanceReport:
    message = governance_pb2.GovernanceReport(
        since_ms=figures.since_ms,
        until_ms=figures.until_ms,
        usage_since_ms=figures.usage_since_ms,
        usage_until_ms=figures.usage_until_ms,
        tables=[table(name, rows) for name, rows in figures.tables()],
        notes=list(figures.notes),
        tenants=sorted(tenants or ()),
    )
    _bounded(message, max_bytes)
    return message


def table(name: str, rows: Sequence[Mapping[str, object]]) -> governance_pb2.ReportTable:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return governance_pb2.ReportTable(
        name=name,
        columns=columns,
        rows=[governance_pb2.ReportRow(cells=[cell(row.get(c)) for c in columns]) for row in rows],
    )


def cell(value: object) -> governance_pb2.ReportCell:
    if value is None:
        return governance_pb2.ReportCell()
    if isinstance(value, int) and not isinstance(value, bool) and value in _INT64:
        return governance_pb2.ReportCell(integer=value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return governance_pb2.ReportCell(number=float(value))
    return governance_pb2.ReportCell(text=str(value))


def _bounded(message: governance_pb2.GovernanceReport, max_bytes: int) -> None:
    """Drop the last rows of the largest table until the message fits in ``max_bytes``, the notes that
    say which rows were left out included (they are counted before the size is judged)."""
    notes = list(message.notes)
    while True:
        message.ClearField("notes")
        message.notes.extend(notes + _omissions(message))
        excess = message.ByteSize() - max_bytes
        if excess <= 0:
            return
        largest = max(message.tables, key=lambda t: t.ByteSize())
        if not largest.rows:
            return  # nothing left to drop: the rest is the period and the notes
        each = max(1, largest.ByteSize() // len(largest.rows))
        drop = min(len(largest.rows), excess // each + 1)
        del largest.rows[len(largest.rows) - drop :]
        largest.omitted_rows += drop


def _omissions(message: governance_pb2.GovernanceReport) -> list[str]:
    return [
        f"The last {t.omitted_rows} rows of {t.name} are left out to keep the report within one"
        " answer of the API: ask for a shorter period, or one tenant."
        for t in message.tables
        if t.omitted_rows
    ]
