"""The GitHub workflows (which cannot run here) are at least consistent with the repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
DISTRIBUTIONS = [
    "altar-core",
    "altar-backend-local",
    "altar-backend-k8s",
    "altar-backend-modal",
    "altar-conformance",
    "httk-workflow-adapters",
]


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


@pytest.mark.parametrize("name", ["ci.yml", "kind.yml", "slurm.yml", "release.yml"])
def test_workflow_is_well_formed_and_its_scripts_exist(name: str) -> None:
    workflow = _load(name)
    assert workflow["on"], f"{name} has no trigger"
    assert workflow["jobs"], f"{name} has no jobs"
    for step in _steps(workflow):
        assert "uses" in step or "run" in step, f"{name}: step without uses/run: {step}"
        for script in re.findall(r"(?:^|\s)((?:scripts|\.ci)/[\w./-]+)", step.get("run", "")):
            path = ROOT / script
            assert path.is_file(), f"{name} runs {script}, which does not exist"
            assert os.access(path, os.X_OK) or script.endswith(".py"), f"{script} is not executable"


def test_ci_matrix_is_every_distribution_on_every_python() -> None:
    run = next(s["run"] for s in _steps(_load("ci.yml")) if "nox -l --json" in s.get("run", ""))
    selection = re.search(r"-s ([\w ]+?) \|", run.replace("\\\n", " "))
    assert selection, run
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", "-s", *selection.group(1).split()],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    sessions = {s["session"] for s in json.loads(listed.stdout)}
    for dist in DISTRIBUTIONS:
        for python in ("3.11", "3.12", "3.13"):
            assert f"tests-{python}({dist})" in sessions
    for backend in ("local", "kubernetes", "modal", "in-process"):
        assert f"conformance({backend})" in sessions
        assert f"released_core({backend})" in sessions
    assert {"lint", "typecheck", "docs"} <= sessions


def test_kind_workflow_runs_live_kubernetes_tests_on_a_loaded_image() -> None:
    workflow = _load("kind.yml")
    job = workflow["jobs"]["kubernetes-live"]
    assert job["env"]["ALTAR_K8S_LIVE"] == "1"
    uses = [s.get("uses", "") for s in job["steps"]]
    assert any(u.startswith("helm/kind-action@") for u in uses)
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "kind load docker-image busybox:latest" in runs
    assert "KUBECONFIG=" in runs
    assert "-m kubernetes_live" in runs


def test_release_publishes_with_trusted_publishing_after_checking_the_tag() -> None:
    workflow = _load("release.yml")
    assert workflow["on"]["push"]["tags"] == ["*-v*"]
    build = "\n".join(s.get("run", "") for s in workflow["jobs"]["build"]["steps"])
    assert "scripts/release_check.py" in build
    assert "--no-sources" in build
    publish = workflow["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert any(
        s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in publish["steps"]
    )


# --- the workflow checkers (scripts/lint-workflows: zizmor + actionlint) ------------------------

LINT = ROOT / "scripts" / "lint-workflows"
# `owner/repo[/path]@<full commit sha> # vX.Y.Z`: Dependabot rewrites SHA and comment together
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+){2}$")


def _lint(github: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # the checkers come from this venv (the lock), whatever else is on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(
        [str(LINT), str(github)], env=env, capture_output=True, text=True, timeout=300
    )


def _copy_github(tmp_path: Path) -> Path:
    target = tmp_path / ".github"
    shutil.copytree(ROOT / ".github", target)
    return target


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer contains {old!r}; update this test"
    path.write_text(text.replace(old, new))


def test_workflow_checkers_find_nothing_in_the_repository() -> None:
    result = _lint(ROOT / ".github")
    assert result.returncode == 0, result.stdout + result.stderr


CHECKOUT_PIN = "actions/checkout@34e114876b0b11c390a56381ad16ebd13914f8d5 # v4.3.1"


def _unpin_checkout(github: Path) -> None:
    _edit(github / "workflows" / "ci.yml", CHECKOUT_PIN, "actions/checkout@v4")


def _persist_credentials(github: Path) -> None:
    # back to a bare checkout, which leaves the token in .git/config
    kind = github / "workflows" / "kind.yml"
    _edit(kind, "        with:\n          persist-credentials: false\n", "")


def _expand_in_run(github: Path) -> None:
    _edit(
        github / "workflows" / "ci.yml",
        'nox -s "$SESSION"',
        'nox -s "${{ matrix.session }}"',
    )


def _cache_in_release(github: Path) -> None:
    release = github / "workflows" / "release.yml"
    text = release.read_text()
    without = re.sub(r"\n +enable-cache: false[^\n]*", "", text)
    assert without != text, "release.yml no longer disables the uv cache; update this test"
    release.write_text(without.replace("        with:\n      - uses", "      - uses"))


def _no_cooldown(github: Path) -> None:
    _edit(github / "dependabot.yml", "      default-days: 7", "      default-days: 0")


def _broken_job_graph(github: Path) -> None:
    _edit(github / "workflows" / "ci.yml", "needs: [lock, list]", "needs: [lock, lists]")


def _schema_error(github: Path) -> None:
    # zizmor skips a workflow it cannot load unless told to fail (--strict-collection)
    _edit(
        github / "workflows" / "release.yml", "    runs-on: ubuntu-latest\n", "    runs-on: 42.5\n"
    )


def _new_unpinned_workflow(github: Path) -> None:
    (github / "workflows" / "docs.yml").write_text(
        "name: docs\non: push\npermissions: {}\njobs:\n  docs:\n    name: docs\n"
        "    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/setup-python@v5\n"
    )


@pytest.mark.parametrize(
    ("mutate", "finding"),
    [
        (_unpin_checkout, "unpinned-uses"),
        (_new_unpinned_workflow, "unpinned-uses"),
        (_persist_credentials, "artipacked"),
        (_expand_in_run, "template-injection"),
        (_cache_in_release, "cache-poisoning"),
        (_no_cooldown, "dependabot-cooldown"),
        (_broken_job_graph, "[job-needs]"),  # actionlint's part
        (_schema_error, "release.yml"),
    ],
    ids=lambda v: getattr(v, "__name__", v).strip("_"),
)
def test_workflow_checkers_fail_when_a_finding_comes_back(
    tmp_path: Path, mutate: Callable[[Path], None], finding: str
) -> None:
    github = _copy_github(tmp_path)
    mutate(github)
    result = _lint(github)
    assert result.returncode != 0, f"lint-workflows passed despite {finding}:\n{result.stdout}"
    assert finding in result.stdout + result.stderr


@pytest.mark.parametrize("name", ["ci.yml", "kind.yml", "slurm.yml", "release.yml"])
def test_every_action_is_pinned_by_sha_with_its_release_tag(name: str) -> None:
    for step in _steps(_load(name)):
        if "uses" in step and not step["uses"].startswith("./"):
            line = next(
                raw.split("uses:", 1)[1].strip()
                for raw in (WORKFLOWS / name).read_text().splitlines()
                if raw.strip().removeprefix("- ").startswith(f"uses: {step['uses']}")
            )
            assert PINNED.match(line), f"{name}: {line!r} is not '<action>@<sha> # vX.Y.Z'"


@pytest.mark.parametrize("name", ["ci.yml", "kind.yml", "slurm.yml", "release.yml"])
def test_no_expression_is_expanded_inside_a_script(name: str) -> None:
    for step in _steps(_load(name)):
        assert "${{" not in step.get("run", ""), f"{name}: pass it through env: {step['run']!r}"


def _step_shell(workflow: dict, script: Path) -> list[str]:
    """The command GitHub runs a step's script with (no per-step `shell:` is used here)."""
    if workflow.get("defaults", {}).get("run", {}).get("shell") == "bash":
        return ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
    return ["bash", "-e", str(script)]  # the implicit default: a failure before `|` is lost


def _run_check_step(tmp_path: Path, tag: str, repository: str) -> tuple[int, str]:
    """Run the release workflow's check step as Actions would; (exit status, $GITHUB_OUTPUT)."""
    workflow = _load("release.yml")
    step = next(s for s in workflow["jobs"]["build"]["steps"] if s.get("id") == "check")
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        "GITHUB_REF_NAME": tag,
        "GITHUB_REPOSITORY": repository,
        "GITHUB_OUTPUT": str(output),
    }
    result = subprocess.run(
        _step_shell(workflow, script), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    return result.returncode, output.read_text() if output.exists() else ""


def _home_repository() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return str(config["tool"]["altar"]["home"]).removeprefix("https://github.com/")


def _core_tag() -> str:
    about = (ROOT / "packages/altar-core/src/altar/execution/__about__.py").read_text()
    match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", about)
    assert match
    return f"altar-core-v{match.group(1)}"


def test_release_stops_when_the_tag_does_not_match_a_distribution(tmp_path: Path) -> None:
    status, _ = _run_check_step(tmp_path, "no-such-dist-v9.9.9", _home_repository())
    assert status != 0, "a tag naming no distribution would go on to build and publish"


def test_release_stops_unless_the_source_url_is_the_workflows_repository(tmp_path: Path) -> None:
    """A fork running this workflow must not publish metadata that points at another home."""
    (tmp_path / "fork").mkdir()
    status, _ = _run_check_step(tmp_path / "fork", _core_tag(), "someone/fork")
    assert status != 0, "a release whose Source URL is another repository would be published"
    (tmp_path / "home").mkdir()
    status, output = _run_check_step(tmp_path / "home", _core_tag(), _home_repository())
    assert status == 0
    assert "dist=altar-core\n" in output


def test_dependabot_keeps_the_action_pins_and_the_lock_current() -> None:
    config = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text())
    ecosystems = {u["package-ecosystem"]: u for u in config["updates"]}
    assert ecosystems["github-actions"]["directory"] == "/"
    assert ecosystems["uv"]["directory"] == "/"


def test_slurm_workflow_runs_the_slurm_integration_session() -> None:
    job = _load("slurm.yml")["jobs"]["slurm-ssh"]
    assert "slurm" in job["strategy"]["matrix"]["provider"]
    step = next(s for s in job["steps"] if "nox -s" in s.get("run", ""))
    assert step["env"]["PROVIDER"] == "${{ matrix.provider }}"
    assert 'nox -s "integration($PROVIDER)"' in step["run"]
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "scripts/services up --only docker,podman,slurm,ssh" in runs


def test_kind_workflow_covers_several_kubernetes_versions() -> None:
    images = _load("kind.yml")["jobs"]["kubernetes-live"]["strategy"]["matrix"]["node_image"]
    assert len(images) >= 2
    assert all(re.fullmatch(r"kindest/node:v1\.\d+\.\d+", image) for image in images)
