"""Runs that use the task cache: a second run executes nothing, changes miss (issue 25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from altar.execution import sha256_file
from altar.execution.cache import CacheStore
from altar.execution.plans.plan import parse_plan
from altar.execution.run.progress import format_table
from altar.execution.run.runner import run_plan
from altar.execution.state.journal import Journal

from .runkit import FAST

PINNED = "busybox@sha256:" + "a" * 64


def plan_data(tmp_path: Path, weights: str = "w0", **cache: object) -> dict[str, object]:
    (tmp_path / "weights.bin").write_text(weights)
    task = {"image": PINNED, "kind": "fold"}
    return {
        "backend": {"type": "fake"},
        "cache": {"dir": "store", **cache},
        "tasks": [
            {
                **task,
                "id": "prep",
                "command": ["prep"],
                "labels": {"task": "prep"},
                "inputs": [{"uri": "weights.bin", "logical_path": "jobs/w.bin"}],
                "outputs": [{"uri": "results/prep.txt", "logical_path": "jobs/prep.txt"}],
            },
            {
                **task,
                "id": "score",
                "command": ["score"],
                "labels": {"task": "score"},
                "inputs": [{"uri": "unused", "logical_path": "jobs/prep.txt"}],
                "outputs": [{"uri": "results/score.txt", "logical_path": "jobs/score.txt"}],
            },
        ],
    }


async def run(tmp_path, provider, backend_class, name, data):
    plan = parse_plan(data, source="plan.toml", base_dir=tmp_path)
    events = []
    result = await run_plan(
        plan,
        backend_class(provider=provider),
        run_dir=tmp_path / name,
        on_event=events.append,
        **FAST,
    )
    return result, events


@pytest.fixture
def volume(tmp_path, provider):
    provider.root = tmp_path / "volume"
    return provider


@pytest.mark.asyncio
async def test_a_second_run_executes_nothing_and_ends_with_the_same_results(
    tmp_path, volume, fake_backend_class
):
    first, _ = await run(tmp_path, volume, fake_backend_class, "run1", plan_data(tmp_path))
    assert [t.status for t in first.tasks] == ["succeeded", "succeeded"]
    results = {p.name: p.read_bytes() for p in (tmp_path / "results").iterdir()}
    for path in (tmp_path / "results").iterdir():
        path.unlink()
    second, events = await run(tmp_path, volume, fake_backend_class, "run2", plan_data(tmp_path))
    assert volume.submits == {"prep": 1, "score": 1}  # nothing ran the second time
    assert [(t.status, t.attempts) for t in second.tasks] == [("cached", 0), ("cached", 0)]
    assert second.ok
    assert {p.name: p.read_bytes() for p in (tmp_path / "results").iterdir()} == results
    journal = Journal.load(tmp_path / "run1")
    assert [t.detail for t in second.tasks] == [
        f"cached: from prep of run {journal.run_id}",
        f"cached: from score of run {journal.run_id}",
    ]
    assert "cached" in format_table(second.tasks)
    assert [e.kind for e in events].count("cached") == 2
    # prep's output is read by score on the backend's volume: it was staged there
    staged = [t.logical_path for call in volume.stage_calls for t in call]
    assert "jobs/prep.txt" in staged


@pytest.mark.asyncio
async def test_a_re_run_in_place_serves_its_hits_without_touching_their_files(
    tmp_path, volume, fake_backend_class
):
    await run(tmp_path, volume, fake_backend_class, "run1", plan_data(tmp_path))
    for path in (tmp_path / "results").iterdir():
        path.unlink()
    await run(tmp_path, volume, fake_backend_class, "run2", plan_data(tmp_path))  # linked
    results = sorted((tmp_path / "results").iterdir())
    store = CacheStore(tmp_path / "store")
    objects = [store.object_path(sha256_file(p)) for p in results]
    before = [
        (os.stat(p).st_ino, os.stat(o).st_ctime_ns, os.stat(o).st_nlink)
        for p, o in zip(results, objects, strict=True)
    ]
    again, _ = await run(tmp_path, volume, fake_backend_class, "run3", plan_data(tmp_path))
    assert [t.status for t in again.tasks] == ["cached", "cached"]
    assert volume.submits == {"prep": 1, "score": 1}
    # no link made or removed: each object's ctime and link count are as they were
    after = [
        (os.stat(p).st_ino, os.stat(o).st_ctime_ns, os.stat(o).st_nlink)
        for p, o in zip(results, objects, strict=True)
    ]
    assert after == before
    assert sorted((tmp_path / "results").iterdir()) == results  # nothing left beside them


@pytest.mark.asyncio
async def test_a_changed_input_reruns_its_task_and_what_reads_its_outputs(
    tmp_path, volume, fake_backend_class
):
    await run(tmp_path, volume, fake_backend_class, "run1", plan_data(tmp_path))
    changed, _ = await run(tmp_path, volume, fake_backend_class, "run2", plan_data(tmp_path, "w1"))
    assert [t.status for t in changed.tasks] == ["succeeded", "succeeded"]
    assert volume.submits == {"prep": 2, "score": 2}
    again, _ = await run(tmp_path, volume, fake_backend_class, "run3", plan_data(tmp_path, "w1"))
    assert [t.status for t in again.tasks] == ["cached", "cached"]


@pytest.mark.asyncio
async def test_a_corrupted_cached_output_is_recomputed_never_served(
    tmp_path, volume, fake_backend_class
):
    await run(tmp_path, volume, fake_backend_class, "run1", plan_data(tmp_path))
    store = CacheStore(tmp_path / "store")
    digest = sha256_file(tmp_path / "results" / "score.txt")
    obj = store.object_path(digest)
    obj.chmod(0o644)
    obj.write_text("corrupt")
    result, events = await run(tmp_path, volume, fake_backend_class, "run2", plan_data(tmp_path))
    assert [t.status for t in result.tasks] == ["cached", "succeeded"]
    assert volume.submits["score"] == 2
    assert any(e.kind == "cache_miss" and "score" in e.message for e in events)
    assert (tmp_path / "results" / "score.txt").read_text() != "corrupt"


@pytest.mark.asyncio
async def test_a_tag_image_is_run_not_cached_unless_the_plan_trusts_tags(
    tmp_path, volume, fake_backend_class
):
    data = plan_data(tmp_path)
    for task in data["tasks"]:  # type: ignore[attr-defined]
        task["image"] = "busybox:latest"
    await run(tmp_path, volume, fake_backend_class, "run1", data)
    await run(tmp_path, volume, fake_backend_class, "run2", data)
    assert volume.submits == {"prep": 2, "score": 2}
    trusting = plan_data(tmp_path, trust_tags=True)
    for task in trusting["tasks"]:  # type: ignore[attr-defined]
        task["image"] = "busybox:latest"
    await run(tmp_path, volume, fake_backend_class, "run3", trusting)
    result, _ = await run(tmp_path, volume, fake_backend_class, "run4", trusting)
    assert [t.status for t in result.tasks] == ["cached", "cached"]


@pytest.mark.asyncio
async def test_cache_false_and_no_cache_table_never_look_up(tmp_path, volume, fake_backend_class):
    data = plan_data(tmp_path)
    data["tasks"][1]["cache"] = False  # type: ignore[index]
    await run(tmp_path, volume, fake_backend_class, "run1", data)
    result, _ = await run(tmp_path, volume, fake_backend_class, "run2", data)
    assert [t.status for t in result.tasks] == ["cached", "succeeded"]
    del data["cache"]
    result, _ = await run(tmp_path, volume, fake_backend_class, "run3", data)
    assert [t.status for t in result.tasks] == ["succeeded", "succeeded"]


def test_altar_run_cache_flags_choose_the_store_or_none(tmp_path, fake_registry, capsys):
    from altar.execution.cli import command as cli

    fake_registry.root = tmp_path / "volume"
    data = plan_data(tmp_path)
    del data["cache"]
    plan = tmp_path / "plan.json"
    plan.write_text(__import__("json").dumps(data))
    store = tmp_path / "elsewhere"
    argv = ["run", str(plan), "--json", "--quiet", "--cache", str(store)]
    assert cli.main([*argv, "--run-dir", str(tmp_path / "r1")]) == 0
    assert cli.main([*argv, "--run-dir", str(tmp_path / "r2")]) == 0
    out = capsys.readouterr().out
    second = __import__("json").loads(out[out.rindex('{\n  "run_dir"') :])
    assert [t["status"] for t in second["tasks"]] == ["cached", "cached"]
    assert list(CacheStore(store).entries())
    nocache = [
        "run",
        str(plan),
        "--json",
        "--quiet",
        "--no-cache",
        "--run-dir",
        str(tmp_path / "r3"),
    ]
    assert cli.main(nocache) == 0
    assert fake_registry.submits == {"prep": 2, "score": 2}
    assert cli.main([*argv, "--no-cache"]) == 2  # one or the other


@pytest.mark.asyncio
async def test_altar_cache_explain_names_the_changed_input(
    tmp_path, volume, fake_backend_class, capsys
):
    from altar.execution.cli import command as cli

    await run(tmp_path, volume, fake_backend_class, "run1", plan_data(tmp_path))
    await run(tmp_path, volume, fake_backend_class, "run2", plan_data(tmp_path, "w1"))
    where = ["--cache", str(tmp_path / "store")]
    # run2 stored its own entries too: explain against a store without them
    store = CacheStore(tmp_path / "store")
    run2 = Journal.load(tmp_path / "run2").run_id
    for entry in list(store.entries()):
        if entry.origin["run_id"] == run2:
            store.drop(entry.key)
    assert cli.main(["cache", "explain", *where, str(tmp_path / "run2"), "prep"]) == 0
    out = capsys.readouterr().out
    assert "differs from the nearest entry (prep of run" in out
    assert "input jobs/w.bin digest changed" in out
    assert cli.main(["cache", "explain", *where, str(tmp_path / "run2"), "score"]) == 0
    assert "input jobs/prep.txt digest changed" in capsys.readouterr().out  # prep's key moved
    assert cli.main(["cache", "explain", *where, str(tmp_path / "run1"), "prep"]) == 0
    assert "the store holds an entry" in capsys.readouterr().out
    assert cli.main(["cache", "explain", *where, str(tmp_path / "run1"), "nope"]) == 2
    assert "never keyed" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_two_runs_sharing_a_store_compute_each_task_once(
    tmp_path, volume, fake_backend_class
):
    import asyncio

    data = plan_data(tmp_path)
    plan = parse_plan(data, source="plan.toml", base_dir=tmp_path)
    events: dict[str, list[object]] = {"a": [], "b": []}
    # The runs overlap for sure: the run holding a claim submits only once the other has met it
    # (else, on a loaded machine, one run could store prep before the other even looked it up).
    met = asyncio.Event()

    class AfterTheOtherWaits(fake_backend_class):
        async def submit(self, spec):
            await asyncio.wait_for(met.wait(), 30)
            return await super().submit(spec)

    def on_event(name: str):
        def record(event) -> None:
            events[name].append(event)
            if event.kind == "cache_wait":
                met.set()

        return record

    async def one(name: str):
        return await run_plan(
            plan,
            AfterTheOtherWaits(provider=volume),
            run_dir=tmp_path / name,
            on_event=on_event(name),
            **FAST,
        )

    # the fake provider asserts that one task never runs twice at once, across both runs
    first, second = await asyncio.gather(one("a"), one("b"))
    assert volume.submits == {"prep": 1, "score": 1}
    statuses = sorted([t.status for t in first.tasks] + [t.status for t in second.tasks])
    assert statuses == ["cached", "cached", "succeeded", "succeeded"]
    waited = [e for e in events["a"] + events["b"] if e.kind == "cache_wait"]  # type: ignore[attr-defined]
    assert waited
    assert not list((tmp_path / "store" / "claims").iterdir())  # every claim released


def test_a_dead_holders_claim_is_broken_and_a_live_ones_is_respected(tmp_path):
    import json
    import subprocess
    import sys

    store = CacheStore(tmp_path / "store")
    key = "sha256:" + "9" * 64
    assert store.claim(key, "run-a") is None  # ours
    assert store.claim(key, "run-a") is None  # still ours (a resumed run)
    holder = store.claim(key, "run-b")
    assert holder is not None
    assert holder["run_id"] == "run-a"
    store.release(key, "run-b")  # not b's to release
    assert store.claim_path(key).exists()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    claim = json.loads(store.claim_path(key).read_text())
    store.claim_path(key).write_text(json.dumps({**claim, "pid": int(dead.stdout)}))
    assert store.claim(key, "run-b") is None  # the holder is gone: b takes it
    store.release(key, "run-b")
    assert not store.claim_path(key).exists()


@pytest.mark.asyncio
async def test_a_tick_reads_each_local_input_once_for_all_its_readers(
    tmp_path, volume, fake_backend_class, monkeypatch
):
    from altar.execution.run import caching

    (tmp_path / "weights.bin").write_text("w0")
    tasks = [
        {
            "id": f"score-{n}",
            "image": PINNED,
            "kind": "score",
            "command": ["score", str(n)],
            "labels": {"task": f"score-{n}"},  # the fake provider's name for it
            "inputs": [{"uri": "weights.bin", "logical_path": "jobs/w.bin"}],
            "outputs": [{"uri": f"results/s{n}.txt", "logical_path": f"jobs/s{n}.txt"}],
        }
        for n in range(3)
    ]
    tasks.append({**tasks[0], "id": "lost", "command": ["lost"], "labels": {"task": "lost"}})
    tasks[-1]["outputs"] = []
    tasks[-1]["inputs"] = [{"uri": "missing.bin", "logical_path": "jobs/m.bin"}]
    data = {"backend": {"type": "fake"}, "cache": {"dir": "store"}, "tasks": tasks}
    read: list[str] = []
    real = caching.source_digest
    monkeypatch.setattr(caching, "source_digest", lambda path: read.append(path) or real(path))
    first, _ = await run(tmp_path, volume, fake_backend_class, "run1", data)
    assert [t.status for t in first.tasks] == ["succeeded"] * 4
    assert sorted(Path(p).name for p in read) == ["missing.bin", "weights.bin"]  # once each
    keys = caching.read_keys(tmp_path / "run1")
    assert "missing.bin" in keys["lost"]["uncacheable"]
    read.clear()
    second, _ = await run(tmp_path, volume, fake_backend_class, "run2", data)
    assert [t.status for t in second.tasks] == ["cached"] * 3 + ["succeeded"]
    assert sorted(Path(p).name for p in read) == ["missing.bin", "weights.bin"]
