"""One crash-consistency run from plan to counts: build, drive through the schedule, inspect.

:func:`run_scenario` builds the plan for a backend, drives ``altar run`` through the seeded
kill schedule (:mod:`crashkit.schedule`), lets it finish, runs it once more (nothing may run
again), then counts from the ledger and the leftovers. The caller asserts on the
:class:`~crashkit.report.Counts`.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashkit.driver import Drive, Driver, Interruption
from crashkit.engine import PrivateEngine
from crashkit.journalview import JournalView
from crashkit.ledger import Executions, read_ledger
from crashkit.leftovers import (
    containers,
    in_process_records,
    journal_handles,
    processes_with,
    temporary_files,
)
from crashkit.plan import CrashPlan, build_plan
from crashkit.report import Counts
from crashkit.schedule import Moment, make_schedule

__all__ = ["Setup", "altar_command", "count", "prepare", "run_engine_scenario", "run_scenario"]

#: failure reasons of attempts that never ran (so a later execution is no double)
NOT_STARTED = frozenset({"submit_rejected", "submit_failed"})


def altar_command() -> str:
    """The installed console script of the venv running the tests."""
    import sys

    candidate = Path(sys.executable).parent / "altar"
    if not candidate.is_file():
        raise FileNotFoundError(f"no altar console script beside {sys.executable}")
    return str(candidate)


@dataclass
class Setup:
    """A prepared scenario: the plan, where it runs, and how."""

    backend: str
    seed: int
    plan: CrashPlan
    run_dir: Path
    env: dict[str, str]
    docker_host: str | None


#: ``routed``: the folds and summaries in containers on the local Docker engine, the merges on
#: the in-process backend, so outputs move both ways between the two (issue 26)
ROUTES = {"fold": "local", "merge": "cpu", "summary": "local"}


def _routed_backends(workdir: Path) -> dict[str, dict[str, Any]]:
    backends: dict[str, dict[str, Any]] = {}
    for name, kind in (("local", "local"), ("cpu", "in-process")):
        root = workdir / f"data-{name}"
        root.mkdir(parents=True, exist_ok=True)
        backends[name] = {"type": kind, "options": {"data_root": str(root), "slots": 4}}
    backends["cpu"]["max_parallel"] = 2  # its own lane's bound, within the run's 4
    return backends


def prepare(workdir: Path, backend: str, seed: int, *, docker_host: str | None = None) -> Setup:
    """Write the plan for ``backend`` (``local``, ``in-process``, or ``routed``: both, see
    :data:`ROUTES`) under ``workdir``."""
    data_root = workdir / "data"
    options: dict[str, object] = {"data_root": str(data_root), "slots": 4}
    mount = "/mnt/volume" if backend == "local" else str(data_root)
    backends = routes = None
    if backend == "routed":
        backends, routes = _routed_backends(workdir), ROUTES
        options, mount = backends["local"]["options"], "{altar:mount_root}"
    else:
        data_root.mkdir(parents=True, exist_ok=True)
    plan = build_plan(
        workdir,
        seed=seed,
        backend=backend,
        mount=mount,
        backend_options=options,
        max_parallel=4,
        backends=backends,
        routes=routes,
    )
    env = dict(os.environ)
    env.pop("ALTAR_LOCAL_DATA_ROOT", None)
    if docker_host is not None:
        env["DOCKER_HOST"] = docker_host
    return Setup(backend, seed, plan, workdir / "run", env, docker_host)


def _retried(snapshot_tasks: dict[str, dict[str, object]]) -> dict[str, int]:
    """Task -> attempts that failed after the provider started them (legitimate re-runs)."""
    found: dict[str, int] = {}
    for task, record in snapshot_tasks.items():
        attempts = record.get("attempts") or []
        assert isinstance(attempts, list)
        for attempt in attempts:
            failure = attempt.get("failure")
            if failure and failure.get("reason") not in NOT_STARTED and attempt.get("handle"):
                found[task] = found.get(task, 0) + 1
    return found


def _charged(snapshot_tasks: dict[str, dict[str, object]]) -> tuple[dict[str, int], Counter[str]]:
    """Task -> failed attempts that used one of its retries (no ``provider_ending``: the
    runner's ``max_retries`` pays for it, a refused submit included), and every failed
    attempt's ``reason`` (``/ending`` when set)."""
    charged: dict[str, int] = {}
    reasons: Counter[str] = Counter()
    for task, record in snapshot_tasks.items():
        attempts = record.get("attempts") or []
        assert isinstance(attempts, list)
        for attempt in attempts:
            failure = attempt.get("failure")
            if not failure:
                continue
            ending = failure.get("provider_ending")
            reasons[failure.get("reason", "?") + (f"/{ending}" if ending else "")] += 1
            if ending is None:
                charged[task] = charged.get(task, 0) + 1
    return charged, reasons


def _lost(setup: Setup, view: JournalView, executions: Executions) -> list[str]:
    lost = []
    for task in setup.plan.task_ids:
        record = view.records.get(task, {})
        output = setup.plan.results / f"{task}.txt"
        why = []
        if not executions.completed.get(task):
            why.append("never completed")
        if record.get("state") != "succeeded" or not record.get("outputs_collected"):
            why.append(f"journal says {record.get('state')}")
        if not output.is_file() or output.read_bytes() != setup.plan.expected[task]:
            why.append("output missing or wrong")
        if why:
            lost.append(f"{task} ({', '.join(why)})")
    return lost


def _reported_attempts(setup: Setup) -> dict[str, int]:
    """Task -> its ATTEMPTS in the results table, as ``altar status --json`` reports it."""
    import json
    import subprocess

    done = subprocess.run(
        [altar_command(), "status", str(setup.run_dir), "--json"],
        capture_output=True,
        text=True,
        env=setup.env,
        check=False,
        timeout=120,
    )
    if done.returncode not in (0, 1):  # 1: some task failed, still a full report
        raise RuntimeError(f"altar status exited {done.returncode}: {done.stderr.strip()}")
    return {task["id"]: int(task["attempts"]) for task in json.loads(done.stdout)["tasks"]}


def _attempts_agree(reported: int, ran: int, record: dict[str, object]) -> bool:
    """ATTEMPTS never hides an execution, and exceeds the ledger only where the journal says
    an attempt's outcome could not be known (it "may have run", or was submitted again)."""
    attempts = record.get("attempts") or []
    assert isinstance(attempts, list)
    uncertain = sum(
        int(a.get("reexecuted") or 0)
        + ("may have run" in str((a.get("failure") or {}).get("detail", "")))
        for a in attempts
    )
    return ran <= reported <= ran + uncertain


def _attempt_story(record: dict[str, object]) -> str:
    """Each attempt's state and failure reason, for a report that must say why counts differ."""
    attempts = record.get("attempts") or []
    assert isinstance(attempts, list)
    parts = []
    for attempt in attempts:
        failure = attempt.get("failure") or {}
        reason = failure.get("reason") if isinstance(failure, dict) else None
        message = str(failure.get("detail", ""))[:160] if isinstance(failure, dict) else ""
        parts.append(
            f"#{attempt.get('number')} {attempt.get('state')}"
            + (f" {reason}: {message}" if reason else "")
            + (f" (reexecuted {attempt['reexecuted']})" if attempt.get("reexecuted") else "")
        )
    return " | ".join(parts)


def count(
    setup: Setup, drive: Drive, rerun_executions: int, *, excuse_retries: bool = False
) -> Counts:
    """Everything the run left, counted (see :class:`~crashkit.report.Counts`).

    ``excuse_retries``: an execution beyond the first that a failed attempt of the task
    explains is no double (when the provider itself may kill tasks: the engine-kill case).
    Otherwise every execution beyond the first is one: only the runner was killed.
    """
    view = JournalView(setup.run_dir)
    view.poll()
    executions = read_ledger(setup.plan.ledgers, setup.plan.marker)
    retried = _retried(view.records)
    counts = Counts(setup.backend, setup.seed, tasks=len(setup.plan.task_ids))
    counts.executions = executions.total
    counts.doubles = executions.doubles(retried if excuse_retries else None)
    counts.retried = sum(retried.values())
    counts.charged, counts.failure_reasons = _charged(view.records)
    counts.succeeded = sum(1 for r in view.records.values() if r.get("state") == "succeeded")
    reported = _reported_attempts(setup)
    counts.reported_attempts = sum(reported.values())
    counts.attempts_mismatch = {
        task: f"ATTEMPTS {n}, ledger {len(executions.started.get(task, []))}; "
        + _attempt_story(view.records[task])
        for task, n in reported.items()
        if not _attempts_agree(n, len(executions.started.get(task, [])), view.records[task])
    }
    counts.lost = _lost(setup, view, executions)
    counts.stuck = drive.stuck
    counts.processes = drive.processes
    counts.final_status = drive.final_status
    counts.rerun_status = drive.rerun_status
    counts.rerun_executions = rerun_executions
    for entry in drive.interruptions:
        name = f"{entry.moment.signal.name} at {entry.moment.phase}"
        if not entry.fired:
            counts.unfired.append(name)
            continue
        counts.by_phase.setdefault(entry.phase, Counter())[entry.moment.signal.name] += 1
        counts.in_flight_kills += bool(entry.submits_in_flight)
        if not entry.status_ok:
            counts.bad_status.append(f"{name}: exit {entry.status}")
        if entry.moment.signal.name != "SIGKILL" and not entry.resume_hint:
            counts.no_resume_hint.append(name)
    counts.processes_left = [f"{pid} {cmd}" for pid, cmd in processes_with(setup.plan.marker)]
    data_roots = setup.plan.data_roots or [setup.plan.data_root]
    roots = [
        setup.run_dir,
        *data_roots,
        setup.plan.results,
        setup.plan.path.parent / "inputs",
    ]
    counts.temporaries_left = [str(p) for p in temporary_files(roots)]
    run_id = view.run_id or "?"
    if setup.docker_host is not None:
        ours = containers(setup.docker_host, {"label": [f"altar.run={run_id}"]})
        marked = containers(setup.docker_host, {"label": [f"crash_test={setup.plan.marker}"]})
        counts.containers_left = sorted(
            {f"{c.id[:12]} {c.state}" for c in ours} | {f"{c.id[:12]} {c.state}" for c in marked}
        )
        owned = journal_handles(view.snapshot) | journal_handles({"tasks": view.records})
        everything = containers(setup.docker_host)
        counts.unlabelled = [
            f"{c.id[:12]} {c.state}"
            for c in everything
            if c.labels.get("crash_test") == setup.plan.marker and "altar.run" not in c.labels
        ]
        counts.unowned = [
            f"{c.id[:12]} {c.state} {c.labels.get('altar.task')}"
            for c in everything
            if c.labels.get("altar.run") == run_id and c.id not in owned
        ]
    counts.records_left = [p.name for root in data_roots for p in in_process_records(root)]
    return counts


def run_scenario(
    workdir: Path,
    backend: str,
    seed: int,
    *,
    docker_host: str | None = None,
    schedule: list[Moment] | None = None,
    log: Callable[[str], None] = print,
    process_bound_s: float = 240.0,
) -> Counts:
    """Build, drive through the seeded schedule, finish, re-run, and count."""
    setup = prepare(workdir, backend, seed, docker_host=docker_host)
    moments = schedule if schedule is not None else make_schedule(seed)
    log(
        f"crash test: backend {backend}, seed {seed}, {len(moments)} moments, "
        f"plan {setup.plan.path}"
    )
    driver = Driver(
        altar_command(),
        setup.plan,
        setup.run_dir,
        setup.env,
        process_bound_s=process_bound_s,
        log=log,
    )
    for moment in moments:
        entry = driver.interrupt(moment) if driver.drive.final_status != 0 else None
        if entry is None:
            driver.drive.interruptions.append(Interruption(moment, driver.drive.processes - 1))
        else:
            driver.drive.interruptions.append(entry)
    if driver.drive.final_status != 0:
        driver.drive.final_status = driver.finish()
    before = read_ledger(setup.plan.ledgers, setup.plan.marker).total
    driver.drive.rerun_status = driver.finish()
    after = read_ledger(setup.plan.ledgers, setup.plan.marker).total
    counts = count(setup, driver.drive, after - before)
    log(counts.format())
    return counts


def run_engine_scenario(
    workdir: Path,
    seed: int,
    engine: PrivateEngine,
    *,
    engine_kills: int = 3,
    log: Callable[[str], None] = print,
    process_bound_s: float = 300.0,
) -> Counts:
    """One ``altar run`` on the local backend while its Docker engine is killed during submits.

    At the n-th submit intent the journal records after each restart (n chosen by the seed),
    ``dockerd`` gets SIGKILL; it is started again a moment later (the runner meanwhile finds
    the engine unavailable and waits). The run is then left to finish, resumed if it stopped,
    and run once more.
    """
    assert engine.docker_host
    setup = prepare(workdir, "local", seed, docker_host=engine.docker_host)
    rng = random.Random(seed)
    log(f"engine-kill test: seed {seed}, {engine_kills} engine kills, plan {setup.plan.path}")
    driver = Driver(
        altar_command(),
        setup.plan,
        setup.run_dir,
        setup.env,
        process_bound_s=process_bound_s,
        log=log,
    )
    driver.view.poll()
    process, _ = driver.spawn()
    born = time.monotonic()
    notes = []
    for _ in range(engine_kills):
        wanted, seen = rng.randint(1, 3), 0
        while seen < wanted and process.poll() is None:
            if time.monotonic() - born > process_bound_s:
                break
            seen += sum(1 for change in driver.view.poll() if change.submitting)
            time.sleep(0.005)
        if process.poll() is not None:
            notes.append("the run ended before every engine kill")
            break
        driver.view.poll()
        in_flight = driver._in_flight()
        pid = engine.kill()
        down_s = rng.uniform(0.2, 1.5)
        notes.append(f"engine killed at submit #{wanted} with {in_flight} submit(s) in flight")
        log(
            f"killed dockerd (pid {pid}) at submit #{wanted}, {in_flight} submit(s) in flight; "
            f"restarting it after {down_s:.1f}s"
        )
        time.sleep(down_s)  # the engine stays down a moment: the runner finds it unavailable
        engine.up()
    status = driver._wait_exit(process, process_bound_s)
    if status is None:
        driver._kill_stuck(process, f"the run did not end within {process_bound_s:.0f}s")
    log(f"[00] ended with status {status}")
    driver.drive.final_status = status
    if status != 0:
        driver.drive.final_status = driver.finish()
    before = read_ledger(setup.plan.ledgers, setup.plan.marker).total
    driver.drive.rerun_status = driver.finish()
    after = read_ledger(setup.plan.ledgers, setup.plan.marker).total
    counts = count(setup, driver.drive, after - before, excuse_retries=True)
    counts.first_status = status
    counts.engine_kills = engine.kills
    counts.notes.extend(notes)
    log(counts.format())
    return counts
