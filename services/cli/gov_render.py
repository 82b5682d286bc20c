"""Writing a governance ``Report`` as a text table, CSV, JSON or a self-contained HTML page with charts.

Called by ``fedsched gov report`` and tests. The HTML page embeds its charts (utilisation over time,
cost by tenant, business impact) as SVG drawn by matplotlib, imported only when HTML is asked for.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING

from events.wire.envelope import format_time
from services.governance.core.figures import Report

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: (section title, report attribute): the order every format uses.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("Business impact beside utilisation (per tenant)", "impact"),
    ("Utilisation per cluster x GPU model", "utilisation"),
    ("NPU utilisation, NPU-hours and cost per cluster x NPU model", "npu_usage"),
    ("GPU-hours, NPU-hours and cost per tenant", "cost_by_tenant"),
    ("GPU-hours, NPU-hours and cost per project", "cost_by_project"),
    ("Idle allocated GPU-hours", "idle"),
    ("Idle allocated NPU-hours", "npu_idle"),
    ("Queueing delay per priority class", "waiting"),
    ("Top reasons jobs waited", "wait_reasons"),
    ("Preemptions and interruptions per tenant", "interruptions"),
    ("Inference disruption", "inference"),
    ("Quota usage against quota", "quota"),
    ("GPU-hour budgets (current window)", "budgets"),
    ("Governance findings", "findings"),
)


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(asdict(report), indent=2, sort_keys=True) + "\n"
    if fmt == "csv":
        return _csv(report)
    if fmt == "html":
        return _html(report)
    return _table(report)


def _rows(report: Report, attr: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = getattr(report, attr)
    if attr == "findings":
        return [
            {"time": format_time(int(str(r["time_ms"])))} | {k: v for k, v in r.items() if k != "time_ms"} for r in rows
        ]
    return rows


def _table(report: Report) -> str:
    out = [f"Governance report {format_time(report.since_ms)} .. {format_time(report.until_ms)}{_hours(report)}", ""]
    for title, attr in SECTIONS:
        out.append(f"== {title}")
        out += _text_table(_rows(report, attr)) or ["(none)"]
        out.append("")
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out) + "\n"


def _hours(report: Report) -> str:
    """Said beside the period when the usage figures' whole hours reach past it, so no one reads them as
    the period's own."""
    hours = (report.usage_since_ms, report.usage_until_ms)
    if hours == (report.since_ms, report.until_ms) or hours == (0, 0):
        return ""
    return f" (usage figures: whole hours {format_time(hours[0])} .. {format_time(hours[1])})"


def _text_table(rows: Sequence[dict[str, object]]) -> list[str]:
    if not rows:
        return []
    headers = list(rows[0])
    cells = [[_cell(r.get(h)) for h in headers] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = [
        "  ".join(c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells
    ]
    return [line, "  ".join("-" * w for w in widths), *body]


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    return str(value)


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("-", "").isdigit()


def _csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["section", "field", "value", "row"])
    for _title, attr in SECTIONS:
        for index, row in enumerate(_rows(report, attr)):
            for key, value in row.items():
                writer.writerow([attr, key, "" if value is None else value, index])
    return buffer.getvalue()


def _html(report: Report) -> str:
    charts = [
        ("GPU-hours allocated and used, per hour", _utilisation_chart(report)),
        ("Cost by tenant", _cost_chart(report)),
        ("Business impact: used share vs waiting and interruptions", _impact_chart(report)),
    ]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>fedsched governance report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
        "margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f0f0f0}"
        "td.n{text-align:right}</style></head><body>",
        f"<h1>GPU governance report</h1><p>{format_time(report.since_ms)} to {format_time(report.until_ms)}"
        f"{html.escape(_hours(report))}</p>",
    ]
    for title, svg in charts:
        parts.append(f"<h2>{html.escape(title)}</h2>{svg}")
    for title, attr in SECTIONS:
        parts.append(f"<h2>{html.escape(title)}</h2>{_html_table(_rows(report, attr))}")
    parts += [f"<p><em>{html.escape(n)}</em></p>" for n in report.notes]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_table(rows: Sequence[dict[str, object]]) -> str:
    if not rows:
        return "<p>(none)</p>"
    headers = list(rows[0])
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='{'n' if _numeric(_cell(r.get(h))) else ''}'>{html.escape(_cell(r.get(h)))}</td>"
            for h in headers
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _svg(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure(width: float = 8.0, height: float = 3.2) -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def _utilisation_chart(report: Report) -> str:
    if not report.hourly:
        return "<p>(no usage in the period)</p>"
    fig, ax = _figure()
    positions = list(range(len(report.hourly)))
    labels = [format_time(int(str(r["hour_ms"])))[5:16].replace("T", " ") for r in report.hourly]
    allocated = [float(str(r["allocated_gpu_h"])) for r in report.hourly]
    used = [float(str(r["used_gpu_h"])) for r in report.hourly]
    ax.bar(positions, allocated, width=0.8, label="allocated", color="#9ecae1")
    ax.plot(positions, used, marker="o", color="#08519c", label="used")
    ax.set_ylabel("GPU-hours")
    step = max(1, len(positions) // 12)
    ax.set_xticks(positions[::step], labels[::step], rotation=30, ha="right")
    ax.legend()
    return _svg(fig)


def _cost_chart(report: Report) -> str:
    rows = report.cost_by_tenant
    if not rows:
        return "<p>(no cost in the period)</p>"
    fig, ax = _figure(8.0, 0.5 + 0.4 * len(rows))
    labels = [f"{r['tenant']} ({r['currency']})" for r in rows]
    values = [float(str(r["cost"])) for r in rows]
    ax.barh(labels, values, color="#31a354")
    ax.set_xlabel("cost")
    ax.invert_yaxis()
    return _svg(fig)


def _measured_pct(value: object) -> float:
    """A used share as a bar's length; "no usage data" draws no bar (NaN), not an empty one."""
    return float(value) if isinstance(value, int | float) else math.nan


def _impact_chart(report: Report) -> str:
    """One small panel per measure, tenants on the same rows: fuller is not better if users wait or break."""
    rows = report.impact
    if not rows:
        return "<p>(no jobs in the period)</p>"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tenants = [str(r["tenant"]) for r in rows]
    panels = (
        ("Used % of allocated GPU", [_measured_pct(r["used_pct"]) for r in rows], "#3182bd"),
        ("p90 wait (minutes)", [float(str(r["wait_p90_min"])) for r in rows], "#e6550d"),
        ("Training interruptions", [float(str(r["training_interruptions"])) for r in rows], "#756bb1"),
        ("Inference below minimum (minutes)", [float(str(r["inference_down_min"])) for r in rows], "#de2d26"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(11.0, 0.6 + 0.35 * len(rows)), sharey=True)
    for ax, (title, values, colour) in zip(axes, panels, strict=True):
        ax.barh(tenants, values, color=colour)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].invert_yaxis()
    return _svg(fig)
