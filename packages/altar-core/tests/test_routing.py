"""Plans with several named backends (issue 26): the rule, the routed backend, a run."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
from altar.execution.backend import ExecutionBackend
from altar.execution.cli import command as cli
from altar.execution.errors import BackendUnavailableError, PlanError
from altar.execution.plans.plan import parse_plan
from altar.execution.plans.routing import cross_transfers
from altar.execution.run.routed import LABEL_ROUTE, RoutedBackend, named_max_parallel
from altar.execution.state.journal import Journal
from altar.execution.types import (
    ContainerTaskSpec,
    TaskHandle,
    TaskState,
    TaskStatus,
    Transfer,
)

PLAN = """
[backends.cpu]
type = "in-process"
options = {{ data_root = "cpu-root" }}

[backends.gpu]
type = "in-process"
for_gpu = true
options = {{ data_root = "gpu-root", gpus = {gpus} }}

[[tasks]]
id = "make"
kind = "make"
image = "busybox:latest"
command = ["sh", "-c", "printf 'hello routed' > {{altar:mount_root}}/a.txt"]
outputs = [{{ uri = "out/a.txt", logical_path = "a.txt" }}]

[[tasks]]
id = "use"
kind = "use"
image = "busybox:latest"
command = ["sh", "-c", "cat {{altar:mount_root}}/a.txt > {{altar:mount_root}}/b.txt"]
inputs = [{{ uri = "out/a.txt", logical_path = "a.txt" }}]
outputs = [{{ uri = "out/b.txt", logical_path = "b.txt" }}]
resources = {{ gpu = "a100" }}
"""


def _data(**backends: dict[str, object]) -> dict[str, object]:
    tasks: list[dict[str, object]] = [
        {"id": "a", "kind": "k", "image": "i", "command": ["x"]},
        {"id": "g", "kind": "k", "image": "i", "command": ["x"], "resources": {"gpu": "a100"}},
        {"id": "p", "kind": "k", "image": "i", "command": ["x"], "backend": "two"},
    ]
    return {"backends": backends, "tasks": tasks}


def test_the_rule_names_each_tasks_backend() -> None:
    plan = parse_plan(_data(one={"type": "t"}, two={"type": "t", "for_gpu": True}))
    assert plan.routing is not None
    assert plan.routing.routes == {"a": "one", "g": "two", "p": "two"}
    plan = parse_plan(_data(one={"type": "t"}, two={"type": "t", "default": True}))
    assert plan.routing is not None
    assert plan.routing.routes == {"a": "two", "g": "two", "p": "two"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_data(one={"type": "t"}), "no backend 'two'"),
        (_data(one={"type": "t", "default": True}, two={"type": "t", "default": True}), "default"),
        (_data(one={"type": "t"}, two={"type": "t", "gpu": True}), "unknown key"),
        ({**_data(one={"type": "t"}, two={"type": "t"}), "backend": {"type": "t"}}, "either"),
        ({"tasks": _data()["tasks"]}, "declares no [backends]"),
        # a name is a label on every provider object and a word of `--backend NAME`
        (_data(one={"type": "t"}, **{"two $(id)": {"type": "t"}}), "backend's name must"),
        (_data(one={"type": "t"}, two={"type": "t", "fallback": "two"}), "another backend"),
        (_data(one={"type": "t"}, two={"type": "t", "fallback": "gpu"}), "no backend 'gpu'"),
        (
            _data(one={"type": "t", "fallback": "two"}, two={"type": "t", "fallback": "one"}),
            r"backends.one.fallback: fallbacks go round in a cycle \(one -> two -> one\)",
        ),
        (  # a task's own fallback whose backend falls back to the task's route
            {
                "backends": {"one": {"type": "t"}, "two": {"type": "t", "fallback": "one"}},
                "tasks": [{**_data()["tasks"][0], "fallback": "two"}],
            },
            r"tasks\[0\].fallback: fallbacks go round in a cycle \(one -> two -> one\)",
        ),
    ],
)
def test_bad_routing_is_a_plan_error(data: dict[str, object], message: str) -> None:
    escaped = message if "\\" in message else message.replace("[", r"\[")
    with pytest.raises(PlanError, match=escaped):
        parse_plan(data)


def test_a_fallback_chain_that_ends_is_followed_in_turn() -> None:
    from altar.execution.plans.routing import reachable

    backends = {
        "spot": {"type": "t", "fallback": "hpc"},
        "hpc": {"type": "t", "fallback": "cpu"},
        "cpu": {"type": "t"},
    }
    task = {"id": "a", "kind": "k", "image": "i", "command": ["x"]}
    plan = parse_plan({"backends": backends, "tasks": [task]})
    assert plan.routing is not None
    assert reachable(plan.routing, "a") == ["spot", "hpc", "cpu"]
    # a task's own fallback into the chain, ending too
    plan = parse_plan({"backends": backends, "tasks": [{**task, "fallback": "cpu"}]})
    assert plan.routing is not None
    assert reachable(plan.routing, "a") == ["spot", "cpu"]


def test_a_backend_plan_is_unchanged() -> None:
    plan = parse_plan({"backend": {"type": "t"}, "tasks": _data()["tasks"][:2]})
    assert plan.routing is None
    assert plan.backend_type == "t"


def _plan(tmp_path: Path, gpus: int = 1) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(gpus=gpus))
    return path


def test_cross_transfers_only_between_backends(tmp_path: Path) -> None:
    plan = parse_plan(
        {**json.loads(json.dumps(_data())), "backends": {"one": {"type": "t"}}}
        | {"tasks": [t for t in _data()["tasks"] if t["id"] != "p"]}  # type: ignore[attr-defined]
    )
    assert plan.routing is not None
    assert cross_transfers(plan.routing, plan.tasks) == []
    routed = parse_plan(_load(_plan(tmp_path)), base_dir=tmp_path)
    assert routed.routing is not None
    moves = cross_transfers(routed.routing, routed.tasks)
    assert [(m.producer, m.source, m.reader, m.target) for m in moves] == [
        ("make", "cpu", "use", "gpu")
    ]


def _load(path: Path) -> dict[str, object]:
    import tomllib

    return tomllib.loads(path.read_text())


def test_a_routed_run_moves_outputs_and_matches_one_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = _plan(tmp_path)
    assert cli.main(["run", str(plan), "--run-dir", str(tmp_path / "r1"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["transfers"]["files"] == 1
    assert data["transfers"]["bytes"] == len("hello routed")
    assert (tmp_path / "out/b.txt").read_text() == "hello routed"
    assert (tmp_path / "gpu-root/a.txt").read_text() == "hello routed"
    journal = json.loads((tmp_path / "r1/journal.json").read_text())
    assert journal["backend"]["type"] == "routed"
    labels = {t: r["attempts"][-1]["handle"]["labels"] for t, r in journal["tasks"].items()}
    assert {t: label[LABEL_ROUTE] for t, label in labels.items()} == {"make": "cpu", "use": "gpu"}
    # the same plan on one backend gives the same results
    assert cli.main(["run", str(plan), "--backend", "gpu", "--run-dir", str(tmp_path / "r2")]) == 0
    capsys.readouterr()
    assert cli.main(["compare", str(tmp_path / "r1"), str(tmp_path / "r2")]) == 0
    capsys.readouterr()
    # `altar logs` names the backend the attempt ran on, not "routed"
    assert cli.main(["logs", str(tmp_path / "r1"), "use"]) == 1
    assert "backend 'gpu' (in-process) does not give a task's logs" in capsys.readouterr().err


def test_check_refuses_a_gpu_task_on_a_backend_without_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", str(_plan(tmp_path, gpus=0))]) == 2
    assert "tasks[1].resources.gpu" in capsys.readouterr().err


def test_dry_run_prints_the_transfers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(_plan(tmp_path)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "transfer a.txt: make@cpu -> use@gpu" in out
    assert not (tmp_path / "cpu-root/a.txt").exists()  # nothing ran
    assert not (tmp_path / "out").exists()


def test_dry_run_gives_a_transfers_size_when_the_file_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out/a.txt").write_text("hello routed")  # made by an earlier run, say
    assert cli.main(["run", str(_plan(tmp_path)), "--dry-run"]) == 0
    assert "transfer a.txt: make@cpu -> use@gpu (12 bytes)" in capsys.readouterr().out
    assert cli.main(["run", str(_plan(tmp_path)), "--dry-run", "--json"]) == 0
    [move] = json.loads(capsys.readouterr().out)["routing"]["transfers"]
    assert (move["from"], move["to"], move["bytes"]) == ("make@cpu", "use@gpu", 12)


class Counting(ExecutionBackend):
    """A lane that records each call, and can be made unreachable."""

    name = "counting"

    def __init__(self) -> None:
        self.staged: list[Transfer] = []
        self.collected: list[Transfer] = []
        self.down = False
        self.polls = 0

    async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
        return TaskHandle(self.name, spec.labels["altar.task"], dict(spec.labels))

    async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
        self.polls += 1
        if self.down:
            raise BackendUnavailableError("down")
        return [TaskStatus(h, TaskState.RUNNING) for h in handles]

    async def stage_inputs(self, transfers: list[Transfer]) -> None:
        self.staged += transfers

    async def collect_outputs(self, transfers: list[Transfer]) -> None:
        self.collected += transfers


def _routed(
    moves: list[dict[str, str]], producers: dict[str, str]
) -> tuple[RoutedBackend, dict[str, Counting]]:
    lanes = {"one": Counting(), "two": Counting()}
    decls = {name: {"type": "counting"} for name in lanes}
    routed = RoutedBackend(
        backends=decls,
        routes={"a": "one", "b": "two"},
        default="one",
        moves=moves,
        producers=producers,
        built=lanes,
    )
    return routed, lanes


@pytest.mark.asyncio
async def test_a_routing_that_moves_nothing_moves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("x")
    routed, lanes = _routed([], {str(out): "one"})
    await routed.collect_outputs([Transfer(str(out), "a.txt")])
    assert lanes["one"].collected
    assert not lanes["two"].collected
    assert lanes["one"].staged == lanes["two"].staged == []
    assert routed.moved_bytes == 0


@pytest.mark.asyncio
async def test_an_output_read_elsewhere_is_staged_there_with_its_digest(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("abc")
    move = {"uri": str(out), "logical_path": "a.txt", "source": "one", "target": "two"}
    routed, lanes = _routed([move], {str(out): "one"})
    await routed.collect_outputs([Transfer(str(out), "a.txt")])
    assert [t.logical_path for t in lanes["two"].staged] == ["a.txt"]
    assert lanes["two"].staged[0].digest is not None
    assert lanes["one"].staged == []
    assert (routed.moved_files, routed.moved_bytes) == (1, 3)


@pytest.mark.asyncio
async def test_one_backend_down_holds_back_only_its_tasks() -> None:
    routed, lanes = _routed([], {})
    spec = ContainerTaskSpec("k", "i", ["x"])
    a = await routed.submit(ContainerTaskSpec("k", "i", ["x"], labels={"altar.task": "a"}))
    b = await routed.submit(ContainerTaskSpec("k", "i", ["x"], labels={"altar.task": "b"}))
    assert (a.labels[LABEL_ROUTE], b.labels[LABEL_ROUTE]) == ("one", "two")
    del spec
    lanes["two"].down = True
    statuses = await routed.poll([a, b])
    assert [s.state for s in statuses] == [TaskState.RUNNING, TaskState.PENDING]
    lanes["one"].down = True
    with pytest.raises(BackendUnavailableError):
        await routed.poll([b])


@pytest.mark.asyncio
async def test_a_backend_found_down_rests_so_polls_of_the_others_do_not_wait_for_it() -> None:
    """An unreachable slurmctld takes squeue about 18 s to report: asked at every poll, it
    would slow every tick of the run. Found down, a backend is not asked again for 1 s, then
    2 s, ... (up to 30 s); the first poll after it answers again reads it."""
    from altar.execution.run.routed import DOWN_BACKOFF_S

    routed, lanes = _routed([], {})
    now = [100.0]
    routed.clock = lambda: now[0]
    a = await routed.submit(ContainerTaskSpec("k", "i", ["x"], labels={"altar.task": "a"}))
    b = await routed.submit(ContainerTaskSpec("k", "i", ["x"], labels={"altar.task": "b"}))
    lanes["two"].down = True
    for _ in range(3):
        statuses = await routed.poll([a, b])
    assert (lanes["one"].polls, lanes["two"].polls) == (3, 1)
    assert routed.resting("two")
    assert not routed.resting("one")
    assert DOWN_BACKOFF_S[0] == 1.0
    now[0] += 1.5  # its rest is over: asked again, still down, rests 2 s
    await routed.poll([a, b])
    now[0] += 1.5
    await routed.poll([a, b])
    assert lanes["two"].polls == 2
    lanes["two"].down = False
    now[0] += 1.0
    statuses = await routed.poll([a, b])
    assert lanes["two"].polls == 3
    assert [s.state for s in statuses] == [TaskState.RUNNING, TaskState.RUNNING]
    assert not routed.resting("two")
    lanes["two"].down = True
    for _ in range(2):  # polled alone, a backend is always asked: the runner backs off
        with pytest.raises(BackendUnavailableError):
            await routed.poll([b])
    assert lanes["two"].polls == 5


@pytest.mark.asyncio
async def test_one_backend_down_mid_run_the_others_tasks_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lane "gpu" is unreachable: "make" (on "cpu") still succeeds; once "gpu" is back, the
    same run finishes "solo" there."""
    import asyncio

    from altar.conformance.reference import InProcessExecutionBackend
    from altar.execution.run.runner import run_plan

    class Flaky(InProcessExecutionBackend):
        down = True

        async def submit(self, spec: ContainerTaskSpec) -> TaskHandle:
            if self.down:
                raise BackendUnavailableError("gpu pool unreachable")
            return await super().submit(spec)

        async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
            if self.down:
                raise BackendUnavailableError("gpu pool unreachable")
            return await super().poll(handles)

    monkeypatch.chdir(tmp_path)
    text = (
        PLAN.format(gpus=1)
        .replace('inputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]\n', "")
        .replace("cat {altar:mount_root}/a.txt", "echo solo")
    )
    plan = parse_plan(_load_text(text), base_dir=tmp_path)
    assert plan.routing is not None
    assert plan.dependencies.get("use", ()) == ()
    flaky = Flaky(data_root=tmp_path / "gpu-root", gpus=1)
    lanes: dict[str, ExecutionBackend] = {
        "cpu": InProcessExecutionBackend(data_root=tmp_path / "cpu-root"),
        "gpu": flaky,
    }
    from altar.execution.run.routed import routed_options

    routed = RoutedBackend(**routed_options(plan), built=lanes)
    run = asyncio.create_task(
        run_plan(
            plan, routed, run_dir=tmp_path / "run", poll_interval_s=0.01, max_poll_interval_s=0.05
        )
    )
    for _ in range(500):
        if (tmp_path / "out/a.txt").exists():
            break
        await asyncio.sleep(0.01)
    assert (tmp_path / "out/a.txt").read_text() == "hello routed"  # the other lane finished
    assert not run.done()
    assert not (tmp_path / "out/b.txt").exists()
    flaky.down = False
    result = await asyncio.wait_for(run, 30)
    assert result.ok
    assert (tmp_path / "out/b.txt").read_text().strip() == "solo"


def _load_text(text: str) -> dict[str, object]:
    import tomllib

    return tomllib.loads(text)


def test_check_refuses_a_fallback_without_the_tasks_gpu_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _plan(tmp_path)
    path.write_text(
        path.read_text().replace(
            'resources = { gpu = "a100" }', 'resources = { gpu = "a100" }\nfallback = "cpu"'
        )
    )
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tasks[1].resources.gpu: backend backends.cpu refuses it" in err
    assert "backends.gpu refuses" not in err  # its own backend has the pool


def test_a_fallback_plans_the_moves_either_backend_may_need(tmp_path: Path) -> None:
    text = (
        _plan(tmp_path)
        .read_text()
        .replace(
            'outputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]',
            'outputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]\nfallback = "gpu"',
            1,
        )
    )
    plan = parse_plan(_load_text(text), base_dir=tmp_path)
    assert plan.routing is not None
    moves = {(m.source, m.target, m.fallback) for m in cross_transfers(plan.routing, plan.tasks)}
    assert moves == {("cpu", "gpu", False)}  # "make" on its fallback "gpu" moves nothing
    text = text.replace(
        'resources = { gpu = "a100" }', 'resources = { gpu = "a100" }\nfallback = "cpu"'
    )
    plan = parse_plan(_load_text(text), base_dir=tmp_path)
    assert plan.routing is not None
    moves = {(m.source, m.target, m.fallback) for m in cross_transfers(plan.routing, plan.tasks)}
    assert moves == {("cpu", "gpu", False), ("gpu", "cpu", True)}
    from altar.execution.plans.routing import routing_lines

    lines = routing_lines(plan)
    assert "transfer a.txt: make@cpu -> use@gpu (size known after the run)" in lines
    assert (
        "transfer a.txt: make@gpu -> use@cpu (size known after the run, only on a fallback)"
        in lines
    )


@pytest.mark.asyncio
async def test_outputs_are_collected_where_the_attempt_ran_and_moved_from_there(
    tmp_path: Path,
) -> None:
    out = tmp_path / "a.txt"
    out.write_text("abcd")
    moves = [
        {"uri": str(out), "logical_path": "a.txt", "source": "one", "target": "two"},
        {"uri": str(out), "logical_path": "a.txt", "source": "two", "target": "one"},
    ]
    routed, lanes = _routed(moves, {str(out): "one"})
    routed.owners = {str(out): "a"}
    routed.note(TaskHandle("counting", "a", {"altar.task": "a", LABEL_ROUTE: "two"}))
    await routed.collect_outputs([Transfer(str(out), "a.txt")])
    assert (lanes["one"].collected, [t.uri for t in lanes["two"].collected]) == ([], [str(out)])
    assert [t.logical_path for t in lanes["one"].staged] == ["a.txt"]
    assert lanes["two"].staged == []


def _sweep(**keys: object) -> dict[str, object]:
    sweep = {"id": "score-{fold}", "kind": "k", "image": "i", "command": ["x"], **keys}
    return {"backends": {"cpu": {"type": "t"}, "hpc": {"type": "t"}}, "tasks": [sweep]}


def test_a_sweeps_tasks_name_their_backend() -> None:
    plan = parse_plan(_sweep(matrix={"fold": [0, 1]}, backend="hpc", fallback="cpu"))
    assert plan.routing is not None
    assert plan.routing.routes == {"score-0": "hpc", "score-1": "hpc"}
    assert plan.routing.fallbacks == {"score-0": "cpu", "score-1": "cpu"}
    # the key is filled in like any other string of the sweep
    plan = parse_plan(
        _sweep(id="score-{fold}-{on}", matrix={"fold": [0], "on": ["cpu", "hpc"]}, backend="{on}")
    )
    assert plan.routing is not None
    assert plan.routing.routes == {"score-0-cpu": "cpu", "score-0-hpc": "hpc"}
    with pytest.raises(PlanError, match=r"tasks\[0\]\[fold=1\]\.backend: no backend 'gpu'"):
        parse_plan(_sweep(matrix={"fold": [1]}, backend="gpu"))


@pytest.mark.parametrize(
    ("backend", "given", "whole", "expected"),
    [
        ("hpc", None, None, 1),  # the named backend's own bound
        ("hpc", None, 4, 1),  # the tighter of the plan's and the backend's
        ("wide", None, 2, None),  # a backend without its own: the plan's (None: run_plan's)
        ("hpc", 3, None, 3),  # --max-parallel wins
        (None, None, 4, None),  # routed: each lane bounds itself
        ("local", None, 4, None),  # a type, not a name
    ],
)
def test_backend_name_brings_its_max_parallel(
    backend: str | None, given: int | None, whole: int | None, expected: int | None
) -> None:
    data = {
        "max_parallel": whole,
        "backends": {"hpc": {"type": "t", "max_parallel": 1}, "wide": {"type": "t"}},
        "tasks": [{"id": "a", "kind": "k", "image": "i", "command": ["x"]}],
    }
    if whole is None:
        del data["max_parallel"]
    assert named_max_parallel(parse_plan(data), backend, given) == expected


def test_altar_run_backend_name_keeps_that_backends_max_parallel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tasks = "".join(
        f'[[tasks]]\nid = "t{n}"\nkind = "k"\nimage = "busybox:latest"\n'
        'command = ["sh", "-c", "sleep 0.3"]\n\n'
        for n in range(3)
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[backends.cpu]\ntype = "in-process"\n\n'
        '[backends.hpc]\ntype = "in-process"\nmax_parallel = 1\n\n' + tasks
    )
    run_dir = tmp_path / "r"
    assert cli.main(["run", str(plan), "--backend", "hpc", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    spans = sorted(
        (a.submitted_at, a.finished_at)
        for record in Journal.load(run_dir).tasks.values()
        for a in record.attempts
    )
    assert len(spans) == 3
    # one at a time: each submit after the one before it finished
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


@pytest.mark.asyncio
async def test_a_resumed_run_removes_the_litter_a_killed_move_left_on_the_readers_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed while staging an output on the reader's backend leaves its temporary
    file in that backend's data root (a verification record half written: the crash harness
    found one). The resumed run's move of that output removes it, and nothing else."""
    import asyncio

    from altar.conformance.reference import InProcessExecutionBackend
    from altar.execution.run.routed import routed_options
    from altar.execution.run.runner import run_plan

    monkeypatch.chdir(tmp_path)
    text = PLAN.format(gpus=1).replace("printf 'hello routed'", "sleep 0.3; printf 'hello routed'")
    plan = parse_plan(_load_text(text), base_dir=tmp_path)

    def routed() -> RoutedBackend:
        lanes: dict[str, ExecutionBackend] = {
            "cpu": InProcessExecutionBackend(data_root=tmp_path / "cpu-root"),
            "gpu": InProcessExecutionBackend(data_root=tmp_path / "gpu-root", gpus=1),
        }
        return RoutedBackend(**routed_options(plan), built=lanes)

    run_dir = tmp_path / "run"
    first = asyncio.create_task(run_plan(plan, routed(), run_dir=run_dir, poll_interval_s=0.01))
    for _ in range(500):
        if Journal.exists(run_dir) and Journal.load(run_dir).tasks["make"].attempts:
            break
        await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    killed = 4_000_001  # an earlier process of this run, as the journal names it
    journal = Journal.load(run_dir)
    journal.pids = [killed, *journal.pids]
    journal.save()
    (tmp_path / "gpu-root").mkdir(exist_ok=True)
    litter = tmp_path / f"gpu-root/.a.txt.sha256-verified.altar-tmp-{killed}-{'0' * 16}"
    stranger = tmp_path / f"gpu-root/.a.txt.altar-tmp-{killed + 1}-{'0' * 16}"  # not this run's
    litter.write_text("half")
    stranger.write_text("other")
    result = await run_plan(plan, routed(), run_dir=run_dir, poll_interval_s=0.01)
    assert result.ok
    assert (tmp_path / "gpu-root/a.txt").read_text() == "hello routed"
    assert not litter.exists()
    assert stranger.exists()


NOTHING_MOVES = """
[backends.cpu]
type = "in-process"
options = { data_root = "cpu-root" }

[backends.gpu]
type = "in-process"
options = { data_root = "gpu-root" }

[[tasks]]
id = "a"
kind = "k"
image = "busybox:latest"
command = ["sh", "-c", "cat {altar:mount_root}/ref.txt > {altar:mount_root}/a.txt"]
inputs = [{ uri = "ref.txt", logical_path = "ref.txt" }]
outputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]

[[tasks]]
id = "b"
kind = "k"
image = "busybox:latest"
command = ["sh", "-c", "cat {altar:mount_root}/a.txt > {altar:mount_root}/b.txt"]
inputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]
outputs = [{ uri = "out/b.txt", logical_path = "b.txt" }]

[[tasks]]
id = "c"
kind = "k"
backend = "gpu"
image = "busybox:latest"
command = ["sh", "-c", "echo c > {altar:mount_root}/c.txt"]
outputs = [{ uri = "out/c.txt", logical_path = "c.txt" }]
"""


@pytest.mark.asyncio
async def test_a_plan_whose_routing_moves_nothing_stages_nothing_on_the_other_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every reader runs on its producer's backend and the plan input is read on "cpu" only:
    the counting stagers see the input staged on "cpu" once and nothing at all on "gpu"."""
    from altar.conformance.reference import InProcessExecutionBackend
    from altar.execution.run.routed import routed_options, transfer_summary
    from altar.execution.run.runner import run_plan

    class CountingInProcess(InProcessExecutionBackend):
        def __init__(self, **options: object) -> None:
            super().__init__(**options)  # type: ignore[arg-type]
            self.staged: list[str] = []

        async def stage_inputs(self, transfers: list[Transfer]) -> None:
            self.staged += [t.logical_path for t in transfers]
            await super().stage_inputs(transfers)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref.txt").write_text("reference")
    plan = parse_plan(_load_text(NOTHING_MOVES), base_dir=tmp_path)
    assert plan.routing is not None
    assert cross_transfers(plan.routing, plan.tasks) == []
    lanes = {
        "cpu": CountingInProcess(data_root=tmp_path / "cpu-root"),
        "gpu": CountingInProcess(data_root=tmp_path / "gpu-root"),
    }
    routed = RoutedBackend(**routed_options(plan), built=lanes)
    result = await run_plan(plan, routed, run_dir=tmp_path / "run", poll_interval_s=0.01)
    assert result.ok
    assert (tmp_path / "out/b.txt").read_text() == "reference"
    assert (lanes["cpu"].staged, lanes["gpu"].staged) == (["ref.txt"], [])
    assert not (tmp_path / "gpu-root/ref.txt").exists()
    assert transfer_summary(routed) == {"files": 0, "bytes": 0, "planned": []}


def test_altar_run_of_a_routing_that_moves_nothing_says_zero_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ref.txt").write_text("reference")
    plan = tmp_path / "plan.toml"
    plan.write_text(NOTHING_MOVES)
    assert cli.main(["run", str(plan), "--dry-run"]) == 0
    assert "transfers: none" in capsys.readouterr().out
    assert cli.main(["run", str(plan), "--run-dir", str(tmp_path / "r")]) == 0
    assert "moved 0 byte(s) in 0 file(s) between backends" in capsys.readouterr().out
    assert cli.main(["run", str(plan), "--run-dir", str(tmp_path / "r2"), "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)["transfers"]
    assert (moved["files"], moved["bytes"], moved["planned"]) == (0, 0, [])


@pytest.mark.asyncio
async def test_listing_for_the_orphan_sweep_asks_every_backend_or_none() -> None:
    """The orphan sweep lists every backend's objects of the run, each labelled with its
    route; if one backend cannot list, nobody may sweep on a partial list."""

    class Listing(Counting):
        def __init__(self, found: list[TaskHandle] | None) -> None:
            super().__init__()
            self.found = found
            self.cancelled: list[str] = []

        async def list_submissions(self, run: str) -> list[TaskHandle] | None:
            return self.found

        async def cancel(self, handle: TaskHandle) -> None:
            self.cancelled.append(handle.external_id)

    one = TaskHandle("counting", "x1", {"altar.task": "a"})
    two = TaskHandle("counting", "x2", {"altar.task": "gone"})  # no task of the plan: orphan
    lanes = {"one": Listing([one]), "two": Listing([two])}
    routed = RoutedBackend(
        backends={name: {"type": "counting"} for name in lanes},
        routes={"a": "one"},
        default="one",
        built=lanes,
    )
    listed = await routed.list_submissions("run")
    assert listed is not None
    assert [(h.external_id, h.labels[LABEL_ROUTE]) for h in listed] == [
        ("x1", "one"),
        ("x2", "two"),
    ]
    await routed.cancel(listed[1])  # goes to the backend that listed it, not the default
    assert (lanes["one"].cancelled, lanes["two"].cancelled) == ([], ["x2"])
    lanes["two"].found = None
    assert await routed.list_submissions("run") is None


@pytest.mark.asyncio
async def test_resumed_while_one_backend_is_down_its_running_task_stays_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh process (a resume, ``altar status``) has seen no status of the down backend's
    tasks: it keeps the journal's state for them (running, not "pending"), while the other
    backend's task finishes; once the backend is back the task finishes too."""
    import asyncio

    from altar.conformance.reference import InProcessExecutionBackend
    from altar.execution.cli.status import _poll as status_poll
    from altar.execution.run.routed import routed_options
    from altar.execution.run.runner import run_plan

    class Flaky(InProcessExecutionBackend):
        down = False

        async def poll(self, handles: list[TaskHandle]) -> list[TaskStatus]:
            if self.down:
                raise BackendUnavailableError("gpu pool unreachable")
            return await super().poll(handles)

    monkeypatch.chdir(tmp_path)
    text = (
        PLAN.format(gpus=1)
        .replace('inputs = [{ uri = "out/a.txt", logical_path = "a.txt" }]\n', "")
        .replace("cat {altar:mount_root}/a.txt", "sleep 1.5; echo solo")
        .replace("printf 'hello routed'", "sleep 0.5; printf 'hello routed'")
    )
    plan = parse_plan(_load_text(text), base_dir=tmp_path)
    flaky = Flaky(data_root=tmp_path / "gpu-root", gpus=1)

    def routed() -> RoutedBackend:
        lanes: dict[str, ExecutionBackend] = {
            "cpu": InProcessExecutionBackend(data_root=tmp_path / "cpu-root"),
            "gpu": flaky,
        }
        return RoutedBackend(**routed_options(plan), built=lanes)

    run_dir = tmp_path / "run"
    first = asyncio.create_task(run_plan(plan, routed(), run_dir=run_dir, poll_interval_s=0.01))
    for _ in range(500):
        if Journal.exists(run_dir) and Journal.load(run_dir).tasks["use"].state == "running":
            break
        await asyncio.sleep(0.01)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert Journal.load(run_dir).tasks["use"].state == "running"
    flaky.down = True
    # what `altar status` shows: the journal's state for "use", and says why
    err = io.StringIO()
    polled = await status_poll(routed(), Journal.load(run_dir), err, warn=True)
    assert "use" not in polled
    assert "1 task(s) are on a backend that did not answer" in err.getvalue()
    states: list[str] = []
    second = asyncio.create_task(
        run_plan(
            plan,
            routed(),
            run_dir=run_dir,
            poll_interval_s=0.01,
            on_event=lambda e: states.append(e.message),
        )
    )
    for _ in range(500):
        if (tmp_path / "out/a.txt").exists():
            break
        await asyncio.sleep(0.01)
    assert (tmp_path / "out/a.txt").read_text() == "hello routed"  # the other backend's
    await asyncio.sleep(0.2)
    assert Journal.load(run_dir).tasks["use"].state == "running"
    assert "use pending" not in states
    flaky.down = False
    result = await asyncio.wait_for(second, 30)
    assert result.ok
    assert (tmp_path / "out/b.txt").read_text().strip() == "solo"
