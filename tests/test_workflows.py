"""The GitHub workflows (which cannot run here) are at least consistent with the repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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
