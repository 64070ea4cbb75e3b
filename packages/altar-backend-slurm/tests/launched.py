"""Reading what a rendered batch script launches (shared by the fake and real-Slurm suites)."""

from __future__ import annotations

from altar.backends.slurm.fake import ReadScript
from altar.backends.slurm.render import parse_comment
from altar.conformance import LaunchedTask, ProviderTask

# docker/podman run options that take the next word as their value
_VALUED = {"--name", "--volume", "--user", "--gpus", "--env", "-H", "--host"}


def launched_task(script: ReadScript) -> LaunchedTask:
    argv = script.argv
    index = argv.index("run") + 1
    passed: list[str] = []
    cpu: float | None = None
    memory: int | None = None
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        if word in _VALUED:
            if word == "--env":
                passed.append(argv[index + 1])
            index += 2
            continue
        if word.startswith("--cpus="):
            cpu = float(word.partition("=")[2])
        if word.startswith("--memory="):
            memory = int(word.partition("=")[2].removesuffix("b"))
        index += 1
    comment = parse_comment(script.directives.get("--comment") or "")
    gres = script.directives.get("--gres")
    return LaunchedTask(
        image=argv[index],
        command=argv[index + 1 :],
        env={name: script.env[name] for name in passed},
        labels=comment[1] if comment else {},
        cpu=cpu,
        memory_bytes=memory,
        gpu_count=int(gres.rsplit(":", 1)[1]) if gres else 0,
    )


def provider_task(script: ReadScript) -> ProviderTask:
    """The job as Slurm holds it: its allocation (``--cpus-per-task`` is whole cores, ``--mem``
    MiB) and the image its container runs."""
    cpus = script.directives.get("--cpus-per-task")
    mem = script.directives.get("--mem")
    assert mem is None or mem.endswith("M"), f"unexpected --mem {mem!r}"
    return ProviderTask(
        image=launched_task(script).image,
        cpu=float(cpus) if cpus else None,
        memory_bytes=int(mem.removesuffix("M")) << 20 if mem else None,
    )
