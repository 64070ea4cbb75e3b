"""The run report as one self-contained HTML page (pure function of the report model).

Everything is inline: CSS, a little JavaScript (filtering the task table) and SVG. A Content
Security Policy forbids every fetch, so the page works offline and cannot leak the run to a
network.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from html import escape

from altar.execution.report.grouped import (
    REPORT_GROUP_THRESHOLD,
    TaskGroup,
    failures_section,
    groups_section,
    report_groups,
    timeline_sample,
)
from altar.execution.report.model import Interruption, Report, TaskRow
from altar.execution.report.svg import slots_svg, staging_svg, timeline_svg

__all__ = ["render_html"]

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;
color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.meta{color:#556;margin:0 0 12px}.meta code{background:#f2f4f8;padding:0 4px;border-radius:3px}
.counts span{display:inline-block;margin-right:12px}
.legend span{display:inline-flex;align-items:center;margin-right:14px}
.legend i{display:inline-block;width:14px;height:10px;margin-right:5px;border-radius:2px}
.scroll{overflow:auto;max-height:70vh;border:1px solid #e3e6ee;border-radius:4px}
svg text{font:11px system-ui,sans-serif;fill:#334}
svg .label{text-anchor:end}svg .tick{text-anchor:middle;fill:#778}
svg .grid{stroke:#eceef3;stroke-width:1}svg .lane{font-weight:600;fill:#1d2330}
.p-queued{fill:#d5d9e2}.p-retry-wait{fill:#f7d3ae}.p-staging{fill:#9b7fd4}.p-pending{fill:#f2c14e}
.p-running{fill:#3f8fd2}.p-collecting{fill:#45b39d}
.m-fail{fill:#d9412b}.m-retry{fill:#f08a24}
.s-failed .label{fill:#b3261e;font-weight:600}
path.slots{fill:none;stroke:#3f8fd2;stroke-width:1.5}
rect.gap{fill:#1d2330;fill-opacity:.12;stroke:#1d2330;stroke-opacity:.55;stroke-dasharray:3 2;
pointer-events:none}
.error{color:#b3261e;font-weight:600}.detail{color:#7a2a20}
polyline.staged{fill:none;stroke:#9b7fd4;stroke-width:1.5}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eceef3;vertical-align:top}
th{background:#f7f8fb;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.st{font-weight:600}.st-succeeded,.st-cached{color:#1e7b34}.st-failed{color:#b3261e}
.st-skipped,.st-cancelled{color:#8a6d00}.st-collecting,.st-running,.st-pending{color:#1f5fa0}
pre{margin:4px 0 0;white-space:pre-wrap;word-break:break-all;font-size:12px;
background:#f7f8fb;padding:6px;border-radius:3px;max-height:18em;overflow:auto}
.filters{margin:0 0 8px}.filters input,.filters select{font:inherit;padding:2px 6px}
.muted{color:#778}
.wide{overflow-x:auto;max-width:100%}.meta,.counts,.legend,#throughput{overflow-wrap:anywhere}
"""

_JS = """
(function(){
  var rows=[].slice.call(document.querySelectorAll('#tasks tbody tr'));
  var text=document.getElementById('filter'),state=document.getElementById('state');
  var shown=document.getElementById('shown');
  function apply(){
    var q=text.value.trim().toLowerCase(),s=state.value,n=0;
    rows.forEach(function(r){
      var ok=(!q||r.dataset.search.indexOf(q)>=0)&&(!s||r.dataset.status===s);
      r.hidden=!ok;if(ok)n++;
    });
    shown.textContent=n+' of '+rows.length;
  }
  text.addEventListener('input',apply);state.addEventListener('change',apply);
  document.querySelectorAll('#timeline g.t').forEach(function(g){
    g.addEventListener('click',function(){
      var row=document.getElementById('task-'+g.dataset.task);
      if(row){row.hidden=false;row.scrollIntoView({block:'center'});}
    });
  });
  apply();
  document.documentElement.dataset.readyMs=String(Math.round(performance.now()));
  document.documentElement.dataset.ready='1';
})();
"""


ANCHOR = ' id="task-{}"'


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at else "-"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TiB"


def _row(task: TaskRow, *, anchor: bool = True) -> str:
    reasons = [bar.reason for bar in task.attempts if bar.reason]
    search = " ".join([task.id, task.kind, task.status, *reasons]).lower()
    tail = (
        f"<details><summary>log tail</summary><pre>{escape(task.log_tail)}</pre></details>"
        if task.log_tail
        else ""
    )
    history = ", ".join(
        f"{bar.number}: {bar.outcome}{f' ({bar.reason})' if bar.reason else ''}"
        + (f" [{bar.interrupted}]" if bar.interrupted else "")
        for bar in task.attempts
    )
    doubt = f' <span class="muted">({task.in_doubt} in doubt)</span>' if task.in_doubt else ""
    hit = sum(1 for bar in task.attempts if bar.interrupted)
    if hit:
        doubt += f' <span class="muted">({hit} interrupted)</span>'
    code = f" (exit code {task.exit_code})" if task.exit_code is not None else ""
    detail = (
        f'<br><span class="detail">{escape(task.detail)}</span>'
        if task.detail and task.detail != task.reason
        else ""
    )
    return (
        f"<tr{ANCHOR.format(escape(task.id)) if anchor else ''} "
        f'data-status="{escape(task.status)}" '
        f'data-search="{escape(search)}"><td>{escape(task.id)}</td><td>{escape(task.kind)}</td>'
        f'<td class="st st-{escape(task.status)}">{escape(task.status)}</td>'
        f'<td class="num" title="{escape(history)}">{len(task.attempts)}{doubt}</td>'
        f'<td class="num">{_duration(task.duration_s)}</td>'
        f"<td>{escape(task.reason or '')}{code if task.reason else ''}{detail}{tail}</td></tr>"
    )


def _staging_section(report: Report) -> str:
    staging = report.staging
    if staging is None:
        return '<p class="muted">No inputs were staged by this run (or it kept no event log).</p>'
    moved = staging.samples[-1][1] if staging.samples else 0
    seconds = (staging.end - staging.start) if staging.end is not None else None
    rate = staging.throughput_bps
    if not staging.measured:  # "0 B" would read as nothing staged
        summary = (
            f"staged in {_duration(seconds)}; bytes not measured (backend "
            f"{report.backend} does not report staged bytes)"
            + ("" if staging.end is not None else " (staging did not finish)")
        )
        return f'<p id="throughput">{escape(summary)}</p>'
    summary = (
        f"{_bytes(moved)} in {_duration(seconds)}"
        + (f" ({_bytes(rate)}/s)" if rate else "")
        + ("" if staging.end is not None else " (staging did not finish)")
    )
    return (
        f'<p id="throughput">{escape(summary)}</p><div class="scroll">{staging_svg(staging)}</div>'
    )


def _lanes_section(report: Report) -> str:
    """A routed run's backends: a row and a slot line per lane (nothing for one backend)."""
    if not report.lanes:
        return ""
    rows = []
    for lane in report.lanes:
        counts = ", ".join(f"{n} {escape(state)}" for state, n in sorted(lane.counts.items()))
        ended = lane.provider_endings
        endings = f" ({ended} ended by the provider)" if ended else ""
        rows.append(
            f'<tr data-lane="{escape(lane.name)}"><td><code>{escape(lane.name)}</code></td>'
            f'<td class="num">{lane.tasks}</td><td>{counts}</td>'
            f'<td class="num">{lane.attempts}{endings}</td><td class="num">{lane.peak}</td></tr>'
        )
    plots = "".join(
        f"<p>slots in use on <code>{escape(lane.name)}</code></p>"
        f'<div class="wide">{slots_svg(report, 60.0, slots=lane.slots, name="slots-" + lane.name)}'
        "</div>"
        for lane in report.lanes
    )
    return (
        '<h2>Backends</h2><div class="wide"><table id="lanes"><thead><tr><th>backend</th>'
        "<th>tasks</th><th>outcomes (by the last attempt's backend)</th><th>attempts</th>"
        f"<th>peak slots</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>{plots}"
    )


def _interruption(gap: Interruption) -> str:
    took = _duration(gap.end - gap.start)
    if gap.finished:
        return (
            f"<li>the run finished at {_utc(gap.start)} and was started again {took} later "
            "(<code>altar run --retry-failed</code> or the same run directory again)</li>"
        )
    flying = ", ".join(gap.in_flight[:10]) + (", ..." if len(gap.in_flight) > 10 else "")
    what = (
        f"; {len(gap.in_flight)} task(s) were in flight and kept running: {escape(flying)}"
        if gap.in_flight
        else "; no task was in flight"
    )
    return (
        f"<li>the runner stopped after {_utc(gap.start)} (its last sign of life; it was "
        f"killed, crashed or stopped) and was resumed {took} later{what}</li>"
    )


def _interruptions_section(report: Report) -> str:
    if not report.interruptions:
        return '<p class="muted">None logged: one process drove the run.</p>'
    items = "".join(_interruption(gap) for gap in report.interruptions)
    return f'<ul id="interruptions">{items}</ul>'


_JS_GROUPED = """
(function(){
  document.querySelectorAll('#timeline g.t').forEach(function(g){
    g.addEventListener('click',function(){
      var row=document.getElementById('task-'+g.dataset.task);
      if(row){var d=row.closest('details');if(d)d.open=true;row.scrollIntoView({block:'center'});}
    });
  });
  document.documentElement.dataset.readyMs=String(Math.round(performance.now()));
  document.documentElement.dataset.ready='1';
})();
"""


def _flat_tasks(report: Report, options: str) -> str:
    rows = "".join(_row(task) for task in report.tasks)
    return (
        "<h2>Tasks</h2>"
        '<p class="filters"><input id="filter" type="search" placeholder="filter by id, kind, '
        'reason" aria-label="filter tasks"> <select id="state" aria-label="status">'
        f'<option value="">every status</option>{options}</select> '
        '<span id="shown" class="muted"></span></p>'
        '<div class="wide"><table id="tasks"><thead><tr><th>task</th><th>kind</th><th>status</th>'
        "<th>attempts</th><th>time</th><th>reason and log tail</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def _grouped_tasks(report: Report, groups: Sequence[TaskGroup]) -> str:
    failures = failures_section(report.tasks, lambda task: _row(task, anchor=False))
    return (
        f'<h2>Failed tasks</h2><div id="failures">{failures}</div>'
        f'<h2>Groups</h2><p class="muted">{len(groups)} groups of tasks by kind and the '
        "labels that split the run; open one to see its first rows.</p>"
        f'<div id="groups">{groups_section(report, groups, _row)}</div>'
    )


def render_html(report: Report, *, group_above: int = REPORT_GROUP_THRESHOLD) -> str:
    """The whole page for ``report``: a row per task, or groups above ``group_above`` tasks."""
    counts = "".join(
        f'<span class="st st-{escape(state)}">{n} {escape(state)}</span>'
        for state, n in report.counts.items()
    )
    options = "".join(
        f'<option value="{escape(state)}">{escape(state)}</option>' for state in report.counts
    )
    legend = "".join(
        f'<span><i class="{cls}" style="background:{colour}"></i>{name}</span>'
        for name, cls, colour in (
            ("queued", "q", "#d5d9e2"),
            ("waiting to retry", "rw", "#f7d3ae"),
            ("staging", "st", "#9b7fd4"),
            ("pending", "p", "#f2c14e"),
            ("running", "r", "#3f8fd2"),
            ("collecting", "c", "#45b39d"),
            ("failed", "f", "#d9412b"),
            ("failed, retried", "rt", "#f08a24"),
            ("runner down", "gap", "rgba(29,35,48,.12);border:1px dashed #5d6675"),
        )
    )
    staging_error = (
        f'<p class="error" id="staging-error">staging failed: {escape(report.staging_error)}</p>'
        if report.staging_error
        else ""
    )
    state = "finished" if report.finished else "not finished"
    timeline, note = report, ""
    if len(report.tasks) > group_above:
        groups = report_groups(report.tasks)
        timeline = replace(report, tasks=timeline_sample(groups, report.tasks))
        note = (
            f'<p class="muted">{len(timeline.tasks)} of {len(report.tasks)} tasks: the failed '
            "ones and the first of each group.</p>"
        )
        tasks, script = _grouped_tasks(report, groups), _JS_GROUPED
    else:
        tasks, script = _flat_tasks(report, options), _JS
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>altar report: {escape(report.run_dir)}</title><style>{_CSS}</style></head>"
        "<body>"
        f"<h1>altar run report</h1>"
        f'<p class="meta">run <code>{escape(report.run_dir)}</code> · plan '
        f"<code>{escape(report.plan)}</code> · backend <code>{escape(report.backend)}</code> · "
        f"{_utc(report.start)} · {_duration(report.end - report.start)} · {state}</p>"
        f'<p class="counts">{len(report.tasks)} tasks: {counts}</p>{staging_error}'
        f'<h2>Timeline</h2>{note}<p class="legend">{legend}</p>'
        f'<div class="scroll">{timeline_svg(timeline)}</div>'
        f'<h2>Slots in use</h2><div class="wide">{slots_svg(report)}</div>'
        f"{_lanes_section(report)}"
        f"<h2>Staging throughput</h2>{_staging_section(report)}"
        f"<h2>Interruptions</h2>{_interruptions_section(report)}"
        f"{tasks}<script>{script}</script></body></html>\n"
    )
