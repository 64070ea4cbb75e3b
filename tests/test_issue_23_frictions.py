# ruff: noqa: E501 (a table: one test per line)
"""Issue 23's friction list, each item mapped to the tests that name it, and a check that they exist.

"Every item of the friction list has a named test": ``FRICTIONS`` below is the table. Each key
is one friction the issue lists (its "Why" bullets and its list of smaller frictions, in the
issue's words), each value the tests (file, function) that fail on the old behaviour.
``test_every_named_test_exists`` reads each file and finds the ``def``, so a renamed or deleted
test breaks this module instead of leaving the table stale. Frictions no test in this tree
covers yet are listed in ``UNCOVERED``, so the gap is visible, not hidden.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = "packages/altar-core/tests"
SLURM = "packages/altar-backend-slurm/tests"
LOCAL = "packages/altar-backend-local/tests"
K8S = "packages/altar-backend-k8s/tests"
MODAL = "packages/altar-backend-modal/tests"
HTTK = "adapters/httk-workflow-adapters/tests"

#: friction -> the tests (file, name) that fail on the old behaviour.
FRICTIONS: dict[str, list[tuple[str, str]]] = {
    "a retried task ran on stale input bytes (fixed file; edited uri and digest)": [
        (f"{CORE}/test_restaging.py", "test_a_fixed_input_without_digest_is_staged_again_by_retry_failed"),
        (f"{CORE}/test_restaging.py", "test_an_edited_uri_and_digest_are_staged_before_the_retry"),
        (f"{CORE}/test_restaging.py", "test_a_replaced_source_under_the_same_digest_is_refused"),
        (f"{LOCAL}/test_restaging_docker.py", "test_a_fixed_input_file_reaches_the_retried_container"),
        (f"{LOCAL}/test_restaging_docker.py", "test_an_edited_digest_reaches_the_retried_container_or_is_refused"),
        (f"{SLURM}/test_restaging_slurm.py", "test_a_fixed_input_file_reaches_the_retried_job"),
        (f"{SLURM}/test_restaging_slurm.py", "test_an_edited_digest_reaches_the_retried_job_or_is_refused"),
        ("conformance/tests/test_reference_restaging.py", "test_an_edited_uri_and_digest_reach_the_retried_task"),
        ("conformance/tests/test_reference_restaging_kill.py", "test_a_run_killed_while_staging_again_resumes_on_the_new_bytes"),
    ],
    "a staging digest mismatch: status shows the reason; a corrected digest resumes": [
        (f"{CORE}/test_restaging.py", "test_a_staging_failure_is_journaled_and_a_corrected_digest_resumes"),
        (f"{CORE}/test_restaging.py", "test_status_shows_a_staging_failure_and_its_fix"),
        (f"{CORE}/test_cli_commands.py", "test_retry_failed_accepts_an_edit_of_the_failed_task_only"),
    ],
    "the resume command after Ctrl-C/SIGTERM and in altar status omits --option values": [
        (f"{CORE}/test_cli.py", "test_the_resume_hint_after_a_signal_resumes_with_the_runs_options"),
        (f"{CORE}/test_cli_status.py", "test_the_printed_resume_command_resumes_a_run_started_with_options"),
    ],
    "the resume command omits --max-retries/--max-parallel (the journal records them)": [
        (f"{CORE}/test_cli_status.py", "test_the_resume_line_repeats_the_runs_max_retries_and_max_parallel"),
    ],
    "check on Slurm accepts an unknown partition and an unreachable ssh host (rc 0)": [
        (f"{SLURM}/test_demo_plan.py", "test_check_reports_a_wrong_partition_an_unreachable_host_and_a_huge_timeout_at_once"),
        (f"{SLURM}/test_demo_plan.py", "test_check_reports_every_slurm_problem_at_once"),
        (f"{SLURM}/test_demo_plan.py", "test_check_names_an_unreachable_login_node_and_still_checks_the_tasks"),
    ],
    "check on Slurm: a GPU request on a partition without such GRES": [
        (f"{SLURM}/test_demo_plan.py", "test_check_refuses_a_gpu_task_on_a_partition_without_gres"),
        (f"{SLURM}/test_preflight.py", "test_check_spec_refuses_a_gpu_request_the_partition_has_no_gres_for"),
    ],
    "a run against an unreachable or DNS-failing login node retries for ever": [
        (f"{SLURM}/test_unreachable.py", "test_run_against_an_unreachable_login_node_stops_with_the_reason_and_the_resume_command"),
        (f"{SLURM}/test_unreachable.py", "test_the_login_node_is_lost_after_unreachable_after_s_and_found_again"),
    ],
    "Ctrl-C says 'submitted tasks keep running' with none submitted": [
        (f"{SLURM}/test_unreachable.py", "test_ctrl_c_while_the_login_node_is_unreachable_says_nothing_was_submitted"),
        (f"{CORE}/test_cli.py", "test_a_signal_stops_altar_run_with_a_resume_hint"),
    ],
    "check on local accepts a directory or FIFO input that staging refuses": [
        (f"{LOCAL}/test_check_inputs.py", "test_check_on_local_refuses_a_directory_or_fifo_input_that_staging_refuses"),
    ],
    "timeouts of 1e12 s reach Slurm": [
        (f"{SLURM}/test_demo_plan.py", "test_check_reports_every_slurm_problem_at_once"),
        (f"{SLURM}/test_real_slurm.py", "test_check_spec_refuses_what_submit_refuses"),
    ],
    "Kubernetes pre-flight: namespace, PVC, RBAC create jobs (SelfSubjectAccessReview)": [
        (f"{K8S}/test_preflight.py", "test_each_problem_is_one_line_naming_its_option"),
        (f"{K8S}/test_preflight.py", "test_altar_check_reports_the_kubernetes_problems"),
    ],
    "Modal pre-flight: credentials and the volume": [
        (f"{MODAL}/test_preflight.py", "test_missing_or_refused_credentials_are_one_problem"),
        (f"{MODAL}/test_preflight.py", "test_altar_check_prints_each_modal_problem_as_one_line"),
    ],
    "on Slurm, altar logs prints nothing for a succeeded task; --follow": [
        (f"{SLURM}/test_logs_cli.py", "test_logs_follow_a_running_slurm_job_until_it_ends_then_serve_its_stdout"),
        (f"{SLURM}/test_real_slurm.py", "test_logs_of_a_succeeded_job_are_served_after_cleanup"),
        (f"{CORE}/test_cli_logs.py", "test_follow_waits_for_a_queued_attempt_to_write"),
    ],
    "TIME and the report use the runner's view, not Slurm's start and end": [
        (f"{SLURM}/test_real_slurm.py", "test_logs_of_a_succeeded_job_are_served_after_cleanup"),
        (f"{CORE}/test_provider_times.py", "test_a_backend_that_reports_times_gives_the_tasks_own_duration"),
    ],
    "altar report --output to a directory or unwritable path prints a traceback": [
        (f"{CORE}/test_report.py", "test_report_output_to_a_directory_or_unwritable_path_is_one_line"),
    ],
    "plan errors reported one per run instead of all at once": [
        (f"{CORE}/test_cli_commands.py", "test_every_plan_error_is_reported_at_once"),
    ],
    "tasks[0].memory named instead of resources.memory_gb": [
        (f"{CORE}/test_cli_commands.py", "test_a_refused_resource_names_the_plan_field"),
    ],
    "a bad --option blamed on plan.toml: backend.options": [
        (f"{CORE}/test_cli.py", "test_a_bad_option_value_is_blamed_on_the_command_line"),
    ],
    "status --watch RUN_DIR parses the path as the interval": [
        (f"{CORE}/test_cli_status.py", "test_watch_before_the_run_dir_is_not_read_as_the_interval"),
    ],
    "--quiet still prints resume lines": [
        (f"{CORE}/test_cli_commands.py", "test_quiet_prints_no_banner_or_resume_lines"),
    ],
    "check --json prints no JSON on a plan error": [
        (f"{CORE}/test_cli_commands.py", "test_check_json_prints_the_plan_errors_as_json"),
    ],
    "runs on a missing directory exits 0": [
        (f"{CORE}/test_cli_commands.py", "test_runs_on_a_missing_directory_is_an_error"),
    ],
    "--run-dir naming a file says 'File exists' after the banner": [
        (f"{CORE}/test_cli_commands.py", "test_a_run_dir_that_is_a_file_is_refused_before_the_banner"),
    ],
    "ETA and total time after a resume count only the current process": [
        (f"{CORE}/test_cli_status.py", "test_a_resumed_runs_total_time_and_eta_count_its_whole_history"),
    ],
    "the report draws a retry as a long 'queued' bar and hides the failure reason": [
        (f"{CORE}/test_report.py", "test_attempts_become_phases_with_retries_marked"),
    ],
    "the report overflows at 420 px": [
        (f"{CORE}/test_report_browser.py", "test_the_report_fits_a_420_px_wide_window"),
    ],
    "the report says '0 B' staged on Slurm": [
        (f"{CORE}/test_report.py", "test_staging_a_backend_does_not_measure_is_not_shown_as_0_bytes"),
    ],
    "httk remote doctor says 'ok workspace' for a path it cannot create": [
        (f"{HTTK}/test_operator_commands.py", "test_doctor_tells_a_creatable_workspace_from_one_it_cannot_create"),
        (f"{HTTK}/test_operator_commands.py", "test_the_workspace_check_refuses_a_parent_this_user_may_not_write"),
    ],
    "httk remote doctor omits later checks on an unreachable host instead of skip lines": [
        (f"{HTTK}/test_operator_commands.py", "test_doctor_passes_and_names_each_failure"),
    ],
    "httk remote add gives no hint how to create the project": [
        (f"{HTTK}/test_cli.py", "test_remote_add_says_what_to_run_next"),
        (f"{HTTK}/test_cli.py", "test_remote_add_outside_a_project_says_how_to_make_one"),
    ],
    "httk push of a missing source prints raw rsync output": [
        (f"{HTTK}/test_runtime_ssh_fake.py", "test_a_push_of_a_missing_source_is_one_clear_line"),
    ],
}  # fmt: skip

#: Frictions of the list no test in this tree covers yet (built elsewhere, or still to do).
UNCOVERED = {
    "the report hides interruptions": "no test names it yet",
    "compare cannot compare two existing runs": "no test names it yet",
    "compare shows no log tail for a failing side": "no test names it yet",
    "3 folds x 10 batches is 500 lines of TOML (no sweeps)": "the sweeps work (plan.py)",
    "two runs of a plan write the same results/": "the per-run outputs work (plan.py)",
}


def _defined(path: Path) -> set[str]:
    return set(re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.MULTILINE))


@pytest.mark.parametrize("friction", sorted(FRICTIONS))
def test_every_named_test_exists(friction: str) -> None:
    for file, name in FRICTIONS[friction]:
        path = ROOT / file
        assert path.is_file(), f"{friction}: {file} is gone"
        assert name in _defined(path), f"{friction}: {file} has no {name}"


def test_no_friction_is_both_covered_and_listed_as_uncovered() -> None:
    assert not set(FRICTIONS) & set(UNCOVERED)
    assert all(FRICTIONS.values())
