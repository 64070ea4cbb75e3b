"""How long the conformance suite costs a backend's CI, and how fast the reference stages.

Run: ``uv run python conformance/benchmarks/bench_suite.py``. Prints medians of several runs.

1. The whole suite against the in-process reference (a fake provider, as backends run it),
   against a baseline of only the altar 0.3.0 tests: the ratio is what the added checks cost.
   Each run is a fresh ``python -m pytest`` process, so interpreter and import time are included.
2. The reference's staging of a 256 MiB digest-bearing input (``copy_and_verify``: copy and
   hash in one pass), against ``shutil.copyfile`` followed by hashing the copy; the target
   is to be no slower than the baseline.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
SUITE_TARGET_S = 5.0
STAGING_BYTES = 256 << 20

CONSUMER = """
from altar.conformance.reference_contract import InProcessBackendContract


class TestReference(InProcessBackendContract):
    pass
"""

V030_TESTS = [
    "test_name_is_a_nonempty_discriminator",
    "test_submit_returns_handle_stamped_with_name_and_labels",
    "test_poll_empty_returns_empty",
    "test_poll_returns_one_normalized_status_per_handle",
    "test_capacity_and_path_resolver_types",
    "test_zero_exit_succeeds_without_failure",
    "test_nonzero_exit_fails_with_stable_exit_reason",
    "test_poll_preserves_handle_order",
    "test_resubmitting_an_active_spec_does_not_run_it_twice_at_once",
    "test_resubmitting_after_a_terminal_outcome_runs_the_task_again",
    "test_missing_task_is_a_terminal_failure",
    "test_failure_detail_returns_the_end_of_a_failed_tasks_log",
    "test_failure_detail_of_a_missing_task_does_not_raise",
    "test_timeout_reaches_the_platform",
    "test_expired_task_fails_with_timeout_reason",
    "test_input_digest_mismatch_is_rejected_before_compute",
    "test_input_digest_on_a_directory_is_rejected",
]


def _run_suite(directory: Path, *selection: str) -> float:
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection]
    argv += ["-o", "asyncio_default_fixture_loop_scope=function", "test_consumer.py"]
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=directory, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"the suite failed:\n{result.stdout}\n{result.stderr}")
    return elapsed


def bench_suite() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "test_consumer.py").write_text(CONSUMER)
        baseline_k = " or ".join(V030_TESTS)
        full = [_run_suite(directory) for _ in range(REPEATS)]
        base = [_run_suite(directory, "-k", baseline_k) for _ in range(REPEATS)]
    return statistics.median(full), statistics.median(base)


def _staging_times(size: int) -> tuple[float, float]:
    """Reference staging (copy and hash in one pass) against copy, then hash the copy."""
    import hashlib
    import shutil

    from altar.conformance import InProcessExecutionBackend
    from altar.execution import Transfer, sha256_file

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "weights.bin"
        block = hashlib.sha256(b"altar").digest() * (1 << 15)  # 1 MiB
        with open(source, "wb") as handle:
            for _ in range(size >> 20):
                handle.write(block)
        digest = sha256_file(source)
        backend = InProcessExecutionBackend(data_root=Path(tmp) / "data")
        transfer = Transfer(str(source), "models/m/weights.bin", digest=digest)
        started = time.perf_counter()
        asyncio.run(backend.stage_inputs([transfer]))
        staged = time.perf_counter() - started
        copy = Path(tmp) / "copy.bin"
        started = time.perf_counter()
        shutil.copyfile(source, copy)
        assert sha256_file(copy) == digest
        baseline = time.perf_counter() - started
    return staged, baseline


def bench_staging() -> tuple[float, float]:
    runs = [_staging_times(STAGING_BYTES) for _ in range(REPEATS)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _row(name: str, value: float, baseline: float, target: float) -> str:
    verdict = "ok" if value <= target else "MISSED"
    return (
        f"{name:<44} {value:>9.3f} {baseline:>9.3f} {value / baseline:>6.2f} "
        f"{target:>8.3f}  {verdict}"
    )


def main() -> None:
    full, base = bench_suite()
    staged, copied = bench_staging()
    print(f"medians of {REPEATS} runs (seconds)")
    print(f"{'measure':<44} {'value':>9} {'baseline':>9} {'ratio':>6} {'target':>8}")
    print(_row("whole suite vs 0.3.0 tests only (reference)", full, base, SUITE_TARGET_S))
    mib = STAGING_BYTES >> 20
    print(_row(f"stage {mib} MiB vs copyfile + sha256 of the copy", staged, copied, copied))


if __name__ == "__main__":
    main()
