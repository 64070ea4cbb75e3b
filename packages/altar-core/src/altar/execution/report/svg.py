"""Inline SVG for the run report: the attempt timeline, slot usage and staging throughput.

Pure functions from the report model to SVG text. Coordinates are rounded to a tenth of a
pixel to keep a 1,000-task report small; every text is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from altar.execution.report.lanes import lane_order
from altar.execution.report.model import AttemptBar, Report, Staging, thin_steps

__all__ = ["axis_ticks", "slots_svg", "staging_svg", "timeline_svg"]

PLOT_WIDTH = 960.0
LABEL_WIDTH = 180.0
ROW = 14.0
BAR = 10.0
AXIS = 22.0


def _n(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _seconds(value: float) -> str:
    if value < 1 and value != 0:
        return f"{value * 1000:.0f}ms"
    if value < 60:
        return f"{value:.1f}s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def axis_ticks(span: float, *, at_most: int = 10) -> list[float]:
    """Round tick positions (seconds from the start) for an axis ``span`` seconds long."""
    if span <= 0:
        return [0.0]
    raw = span / at_most
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    if span > 120 and step < 60:  # minutes read better than 50 s steps
        step = next(s for s in (60, 120, 300, 600, 900, 1800, 3600, 7200) if s * at_most >= span)
    count = int(span // step)
    return [i * step for i in range(count + 1)]


class _Scale:
    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.span = max(end - start, 1e-6)

    def x(self, at: float) -> float:
        return LABEL_WIDTH + (at - self.start) / self.span * PLOT_WIDTH


def _axis(scale: _Scale, y: float, height: float) -> list[str]:
    parts = []
    for tick in axis_ticks(scale.span):
        x = _n(scale.x(scale.start + tick))
        parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{_n(y)}" y2="{_n(y + height)}"/>')
        parts.append(f'<text class="tick" x="{x}" y="{_n(y - 6)}">{_seconds(tick)}</text>')
    return parts


def _attempt(task_id: str, bar: AttemptBar, scale: _Scale, y: float) -> list[str]:
    parts = []
    note = f" ({bar.interrupted})" if bar.interrupted else ""
    if bar.backend:
        note = f" on {bar.backend}{note}"
    for phase in bar.phases:
        x = scale.x(phase.start)
        width = max(scale.x(phase.end) - x, 0.8)
        title = (
            f"{task_id} attempt {bar.number}: {phase.kind} "
            f"{_seconds(phase.end - phase.start)}{note}"
        )
        parts.append(
            f'<rect class="p-{phase.kind}" x="{_n(x)}" y="{_n(y)}" width="{_n(width)}" '
            f'height="{_n(BAR)}"><title>{escape(title)}</title></rect>'
        )
    if bar.outcome == "failed" and bar.phases:
        mark_x = _n(scale.x(bar.phases[-1].end))
        what = "failed; retried" if bar.retried else "failed"
        title = f"{task_id} attempt {bar.number} {what} ({bar.reason or 'unknown'})" + (
            f": {bar.detail}" if bar.detail else ""
        )
        mark = "retry" if bar.retried else "fail"
        parts.append(
            f'<rect class="m-{mark}" x="{mark_x}" y="{_n(y - 2)}" width="3" height="{_n(BAR + 4)}">'
            f"<title>{escape(title)}</title></rect>"
        )
    return parts


def timeline_svg(report: Report) -> str:
    """One row per task (and one for staging), each attempt's phases along the time axis."""
    scale = _Scale(report.start, report.end)
    # a routed run's tasks in a lane per backend, each under a row naming it
    lanes = lane_order(report.tasks) if report.lanes else [(None, list(report.tasks))]
    headed = len(lanes) if report.lanes else 0
    rows = len(report.tasks) + (1 if report.staging else 0) + headed
    height = AXIS + rows * ROW + 4
    width = LABEL_WIDTH + PLOT_WIDTH + 10
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
        f'height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
        'aria-label="timeline of every attempt per task">'
    ]
    parts += _axis(scale, AXIS, rows * ROW)
    y = AXIS
    if report.staging is not None:
        staging = report.staging
        end = staging.end if staging.end is not None else report.end
        x = scale.x(staging.start)
        parts.append(
            f'<text class="label" x="{_n(LABEL_WIDTH - 6)}" y="{_n(y + BAR)}">inputs</text>'
        )
        parts.append(
            f'<rect class="p-staging" x="{_n(x)}" y="{_n(y + 2)}" '
            f'width="{_n(max(scale.x(end) - x, 0.8))}" height="{_n(BAR)}">'
            f"<title>staging inputs {_seconds(end - staging.start)}</title></rect>"
        )
        y += ROW
    for lane, tasks in lanes:
        if headed:
            name = f"on {lane}" if lane else "not submitted"
            parts.append(
                f'<text class="lane" x="4" y="{_n(y + BAR)}" data-lane="{escape(lane or "")}">'
                f"{escape(name)}</text>"
            )
            y += ROW
        for task in tasks:
            parts.append(
                f'<g class="t s-{escape(task.status)}" data-task="{escape(task.id)}">'
                f'<text class="label" x="{_n(LABEL_WIDTH - 6)}" y="{_n(y + BAR)}">'
                f"{escape(task.id)}</text>"
            )
            for bar in task.attempts:
                parts += _attempt(task.id, bar, scale, y + 2)
            parts.append("</g>")
            y += ROW
    for gap in report.interruptions:  # over the rows, see-through: when no runner drove the run
        x = scale.x(gap.start)
        what = "the run finished; started again" if gap.finished else "runner down"
        parts.append(
            f'<rect class="gap" x="{_n(x)}" y="{_n(AXIS)}" '
            f'width="{_n(max(scale.x(gap.end) - x, 1.5))}" height="{_n(rows * ROW)}">'
            f"<title>{what} for {_seconds(gap.end - gap.start)}</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _step_path(points: Sequence[tuple[float, float]], scale: _Scale, y0: float, ys: float) -> str:
    path = []
    last_y = None
    for at, value in points:
        x = _n(scale.x(at))
        y = _n(y0 - value * ys)
        if last_y is None:
            path.append(f"M{x} {y}")
        else:
            path.append(f"H{x}V{y}")
        last_y = y
    return "".join(path)


def slots_svg(
    report: Report,
    height: float = 120.0,
    *,
    slots: Sequence[tuple[float, int]] | None = None,
    name: str = "slots",
) -> str:
    """Attempts submitted and not finished over time (a step line), with its peak: the run's,
    or ``slots`` (one lane's) on the run's time axis."""
    scale = _Scale(report.start, report.end)
    slots = report.slots if slots is None else slots
    peak = max((count for _, count in slots), default=0)
    total = AXIS + height + 6
    width = LABEL_WIDTH + PLOT_WIDTH + 10
    y0 = AXIS + height
    parts = [
        f'<svg id="{escape(name)}" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
        f'height="{_n(total)}" viewBox="0 0 {_n(width)} {_n(total)}" role="img" '
        'aria-label="slots in use over time">'
    ]
    parts += _axis(scale, AXIS, height)
    parts.append(f'<text class="label" x="{_n(LABEL_WIDTH - 6)}" y="{_n(AXIS + 10)}">{peak}</text>')
    parts.append(f'<text class="label" x="{_n(LABEL_WIDTH - 6)}" y="{_n(y0)}">0</text>')
    if slots and peak:
        steps = thin_steps(slots)  # 100,000 tasks make 200,000 steps
        points = [(report.start, 0), *steps, (report.end, slots[-1][1])]
        path = _step_path(points, scale, y0, height / peak)
        parts.append(f'<path class="slots" d="{path}"><title>peak {peak} in use</title></path>')
    parts.append("</svg>")
    return "".join(parts)


def staging_svg(staging: Staging, height: float = 100.0) -> str:
    """Bytes of the inputs in place over the staging time."""
    end = (
        staging.end
        if staging.end is not None
        else (staging.samples[-1][0] if staging.samples else staging.start)
    )
    scale = _Scale(staging.start, end)
    top = max((done for _, done in staging.samples), default=0)
    total = AXIS + height + 6
    width = LABEL_WIDTH + PLOT_WIDTH + 10
    y0 = AXIS + height
    parts = [
        f'<svg id="staging" xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" '
        f'height="{_n(total)}" viewBox="0 0 {_n(width)} {_n(total)}" role="img" '
        'aria-label="bytes staged over time">'
    ]
    parts += _axis(scale, AXIS, height)
    if top:
        points = " ".join(
            f"{_n(scale.x(at))},{_n(y0 - done / top * height)}" for at, done in staging.samples
        )
        parts.append(f'<polyline class="staged" points="{points}"/>')
    parts.append("</svg>")
    return "".join(parts)
