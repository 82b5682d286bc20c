"""The governance report crosses the API as typed tables: what ``fedsched gov report`` renders from the
answer is what it rendered from the report computed in its own process, in every format; a report too
large for one answer loses the last rows of its largest table, and says so."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from services.api.report_tables import cell, report_message
from services.cli.gov_render import render
from services.cli.gov_report_cmd import report_of
from tests.governance.test_report import a_report

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_the_answer_renders_as_the_report_itself_did(fmt: str) -> None:
    report = a_report()
    assert render(report_of(report_message(report, None)), fmt) == render(report, fmt)


def test_the_html_page_has_the_same_tables_and_its_three_charts() -> None:
    report = a_report()
    page, again = render(report, "html"), render(report_of(report_message(report, None)), "html")
    assert again.count("<svg") == page.count("<svg") == 3

    def tables(text: str) -> list[str]:
        return re.findall(r"<table>.*?</table>", text)

    assert tables(again) == tables(page) and tables(page)


@pytest.mark.parametrize(
    ("value", "kind"),
    [(None, None), (0, "integer"), (12_000_000, "integer"), (2.5, "number"), (4.0, "number"), ("x", "text")],
)
def test_a_cell_keeps_its_type(value: object, kind: str | None) -> None:
    assert cell(value).WhichOneof("value") == kind


def test_an_integer_beyond_64_bits_is_sent_as_a_number() -> None:
    assert cell(2**70).number == float(2**70)


def test_a_report_too_large_for_one_answer_loses_the_last_rows_of_its_largest_table_and_says_so() -> None:
    row = {"time_ms": 1_796_083_200_000, "kind": "crash_loop", "subject": "j", "message": "m" * 4000}
    report = replace(a_report(), findings=[{**row, "subject": f"j-{i}"} for i in range(100)])
    message = report_message(report, ("team-a",), max_bytes=100_000)
    assert message.ByteSize() <= 100_000
    [findings] = [t for t in message.tables if t.name == "findings"]
    assert findings.omitted_rows > 0 and len(findings.rows) + findings.omitted_rows == 100
    assert [r.cells[2].text for r in findings.rows] == [f"j-{i}" for i in range(len(findings.rows))]
    assert any(f"The last {findings.omitted_rows} rows of findings are left out" in n for n in message.notes)
    others = {t.name: len(t.rows) for t in message.tables if t.name != "findings"}
    assert others == {name: len(rows) for name, rows in report.tables() if name != "findings"}
    assert list(message.tenants) == ["team-a"]
