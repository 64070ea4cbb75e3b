"""The run report: its model (pure), its page (pure), its size, and ``altar report``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from altar.execution import TaskFailure, TaskHandle
from altar.execution.report import build_report, render_html
from altar.execution.report.events import LoggedEvent, read_events
from altar.execution.report.model import log_tail, slot_usage
from altar.execution.state.journal import Attempt, Journal, TaskRecord

T0 = 1_800_000_000.0


def synthetic_journal(run_dir: Path, tasks: int, *, log_lines: int = 60) -> Journal:
    """A finished run of ``tasks`` tasks: every 7th failed once and was retried, every 13th
    failed for good with a long log, every 17th was skipped."""
    records = {}
    for i in range(tasks):
        task_id = f"task-{i:04d}"
        record = TaskRecord(task_id, f"kind-{i % 5}", "sha256:" + "0" * 64)
        start = T0 + (i % 50) * 3.0
        handle = TaskHandle("fake", f"id-{i}", {}, None)
        if i % 17 == 16:
            record.state, record.detail = "skipped", f"dependency task-{i - 1:04d} failed"
        else:
            number = 1
            if i % 7 == 0:
                record.attempts.append(
                    Attempt(
                        1,
                        "failed",
                        handle,
                        TaskFailure("oom_killed", "killed", False, 137),
                        start + 1,
                        start + 2,
                        start + 5,
                    )
                )
                start += 5
                number = 2
            failed = i % 13 == 12
            failure = TaskFailure("exit_1", "exit 1", True, 1) if failed else None
            record.attempts.append(
                Attempt(
                    number,
                    "failed" if failed else "succeeded",
                    handle,
                    failure,
                    start + 1,
                    start + 2,
                    start + 4 + i % 3,
                )
            )
            record.state = "failed" if failed else "succeeded"
            record.outputs_collected = not failed
            if failed:
                record.detail = "\n".join(f"stderr line {n} of {task_id}" for n in range(log_lines))
        records[task_id] = record
    journal = Journal(
        run_dir, "fake", {}, "plan.toml", records, staged=True, finished=True, created_at=T0
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    journal.save()
    return journal


def test_attempts_become_phases_with_retries_marked(tmp_path):
    journal = synthetic_journal(tmp_path / "run", 8)
    events = [
        LoggedEvent(T0 + 0.5, "staging"),
        LoggedEvent(T0 + 0.7, "staging_progress", bytes_done=512, bytes_total=2048),
        LoggedEvent(T0 + 1.0, "staged"),
        LoggedEvent(T0 + 5 + 4 + 0.5, "succeeded", task_id="task-0000"),
    ]
    report = build_report(journal, events)
    first = report.tasks[0]
    assert [bar.outcome for bar in first.attempts] == ["failed", "succeeded"]
    assert first.attempts[0].retried is True
    assert first.attempts[0].reason == "oom_killed"
    assert [(p.kind, p.start - T0, p.end - T0) for p in first.attempts[0].phases] == [
        ("queued", 0.0, 1.0),
        ("pending", 1.0, 2.0),
        ("running", 2.0, 5.0),
    ]
    assert [(p.kind, p.start - T0, p.end - T0) for p in first.attempts[1].phases] == [
        ("retry-wait", 5.0, 6.0),  # issue 23: a retry's wait, not "queued"
        ("pending", 6.0, 7.0),
        ("running", 7.0, 9.0),
        ("collecting", 9.0, 9.5),
    ]
    assert first.status == "succeeded"
    assert first.reason == "attempt 1: oom_killed (retried)"  # issue 23: not hidden
    assert 'class="p-retry-wait"' in render_html(report)
    assert report.staging is not None
    assert report.staging.throughput_bps == 2048 / 0.5
    assert report.counts == {"succeeded": 8}


def test_slot_usage_counts_open_attempts():
    assert slot_usage([(0, 4), (1, 2), (2, 3), (5, 6)]) == (
        (0, 1),
        (1, 2),
        (2, 2),
        (3, 1),
        (4, 0),
        (5, 1),
        (6, 0),
    )


def test_log_tail_keeps_the_last_lines_cut_short():
    text = "\n".join(f"line {i}" for i in range(50)) + "\n" + "x" * 500
    tail = log_tail(text).splitlines()
    assert len(tail) == 20
    assert tail[0] == "line 31"
    assert tail[-1] == "x" * 237 + "..."


def test_the_page_is_self_contained_and_escapes_what_tasks_wrote(tmp_path):
    journal = synthetic_journal(tmp_path / "run", 13)
    record = journal.tasks["task-0012"]
    record.kind = "<script>alert(1)</script>"
    record.detail = "</pre><img src=http://evil.example/x.png>\x1b[31m"
    html = render_html(build_report(journal))
    assert "<script>alert(1)" not in html
    assert "&lt;/pre&gt;&lt;img src=http://evil.example" in html
    # nothing is fetched: no external script, style, image or font, and a CSP forbidding it
    assert not re.search(r"<(link|img|iframe|object|embed)\b", html)
    assert not re.search(r"<[^>]*\b(src|href)\s*=", html)  # no tag loads or links anything
    assert "url(" not in html
    assert "default-src 'none'" in html
    assert html.count("<script>") == 1


def test_a_1000_task_report_stays_under_2_mb(tmp_path):
    journal = synthetic_journal(tmp_path / "run", 1000)
    html = render_html(build_report(journal))
    size = len(html.encode())
    assert size < 2 * 1024 * 1024, size
    assert html.count('<tr id="task-') == 1000


def test_altar_report_writes_the_page_of_a_real_run(fake_registry, plan_file, tmp_path, capsys):
    from altar.execution.cli import command as cli

    fake_registry.script = {"fold-1": ["oom", "ok"], "fold-2": ["exit_3"]}
    run_dir = tmp_path / "run"
    assert cli.main(["run", str(plan_file), "--run-dir", str(run_dir)]) == 1
    kinds = [event.kind for event in read_events(run_dir)]
    assert {"retry", "failed", "succeeded"} <= set(kinds)
    capsys.readouterr()
    assert cli.main(["report", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(run_dir / "report.html")
    assert data["tasks"] == 4
    assert data["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}
    html = (run_dir / "report.html").read_text()
    assert 'class="m-retry"' in html  # fold-1's first attempt
    assert 'class="m-fail"' in html  # fold-2
    assert "log tail of fold-2: it went wrong" in html
    assert cli.main(["report", str(tmp_path / "nowhere")]) == 2


def test_the_event_log_never_stops_a_run_and_skips_torn_lines(tmp_path):
    from altar.execution.report.events import EVENTS_NAME, EventRecorder
    from altar.execution.run.results import RunEvent

    seen = []
    gone = EventRecorder(tmp_path / "missing-dir", seen.append, clock=lambda: T0)
    gone(RunEvent("submitted", "a submitted", task_id="a", attempt=1))
    assert [e.kind for e in seen] == ["submitted"]  # forwarded although the write failed
    # the first clock reading is the process line's, written before the first event
    clock = iter([T0, T0, T0 + 0.1, T0 + 1.0, T0 + 2.0]).__next__
    recorder = EventRecorder(tmp_path, clock=clock)
    for done in (1, 2, 3):  # throttled: the second comes 0.1 s after the first
        recorder(RunEvent("staging_progress", "", bytes_done=done, bytes_total=3))
    recorder(RunEvent("state", "a running", task_id="a"))  # in the journal already: not kept
    recorder(RunEvent("retry", "a attempt 1 failed (oom_killed); retrying", task_id="a"))
    with (tmp_path / EVENTS_NAME).open("a") as log:
        log.write('{"at": 1, "kind": "sta')  # torn by a crash
    events = read_events(tmp_path)
    assert [(e.kind, e.bytes_done) for e in events] == [
        ("process", None),
        ("staging_progress", 1),
        ("staging_progress", 3),
        ("retry", None),
    ]
    assert events[3].message == "a attempt 1 failed (oom_killed); retrying"


def test_report_output_to_a_directory_or_unwritable_path_is_one_line(
    fake_registry, plan_file, tmp_path, capsys
):
    """Issue 23: `altar report --output DIR` (or a path that cannot be written) was a traceback."""
    from altar.execution.cli import command as cli

    run_dir = tmp_path / "run"
    assert cli.main(["run", str(plan_file), "--run-dir", str(run_dir)]) == 0
    (tmp_path / "a-file").write_text("x")
    cases = {
        tmp_path: f"--output {tmp_path} is a directory; name a file, e.g. {tmp_path}/report.html",
        tmp_path / "a-file" / "r.html": f"cannot write the report to --output {tmp_path}/a-file/"
        "r.html: Not a directory; name a writable file with --output",
        tmp_path / "no dir" / "r.html": f"cannot write the report to --output {tmp_path}/no dir/"
        "r.html: No such file or directory; name a writable file with --output",
    }
    for output, message in cases.items():
        capsys.readouterr()
        assert cli.main(["report", str(run_dir), "--output", str(output)]) == 2
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", f"altar: error: {message}\n")


def test_staging_a_backend_does_not_measure_is_not_shown_as_0_bytes(tmp_path):
    """Issue 23: the report said "0 B" staged on Slurm, whose stager reports no bytes."""
    journal = synthetic_journal(tmp_path / "run", 2)
    events = [LoggedEvent(T0 + 0.5, "staging"), LoggedEvent(T0 + 3.0, "staged")]
    html = render_html(build_report(journal, events))
    throughput = re.search(r'<p id="throughput">([^<]*)</p>', html)
    assert throughput is not None
    assert throughput.group(1) == (
        "staged in 2.5s; bytes not measured (backend fake does not report staged bytes)"
    )
    measured = [*events[:1], LoggedEvent(T0 + 1, "staging_progress", bytes_done=0, bytes_total=0)]
    assert "0 B in" in render_html(build_report(journal, [*measured, events[1]]))


def test_provider_endings_and_cache_hits_are_named_in_the_report(tmp_path):
    handle = TaskHandle("fake", "id-1", {}, None)
    preempted = TaskFailure("job_failed", "PREEMPTED", provider_ending="preempted")
    ran = TaskRecord("ran", "k", "sha256:" + "0" * 64, state="succeeded", outputs_collected=True)
    ran.attempts = [
        Attempt(1, "failed", handle, preempted, T0 + 1, T0 + 2, T0 + 3),
        Attempt(2, "succeeded", handle, None, T0 + 4, T0 + 5, T0 + 6),
    ]
    hit = TaskRecord("hit", "k", "sha256:" + "0" * 64, state="succeeded", outputs_collected=True)
    hit.cached = {"run_id": "r-earlier", "task_id": "hit", "key": "sha256:" + "1" * 64}
    journal = Journal(
        tmp_path / "run", "fake", {}, "plan.toml", {"ran": ran, "hit": hit}, created_at=T0
    )
    report = build_report(journal, [])
    ran_row, hit_row = report.tasks
    assert ran_row.attempts[0].reason == "preempted (job_failed)"
    assert ran_row.reason == "attempt 1: preempted (job_failed) (retried)"
    assert (hit_row.status, hit_row.reason, hit_row.attempts) == (
        "cached",
        "from hit of run r-earlier",
        (),
    )
    page = render_html(report)
    assert "st-cached" in page
    assert "from hit of run r-earlier" in page
