"""Pieces of the SDK runtime that need no server: result decoding and error translation."""

from __future__ import annotations

import grpclib
import modal.exception as modal_errors
import pytest
from altar.backends.modal.runtime import ModalCredentialsError, ResultStatus, SandboxNotFoundError
from altar.backends.modal.sdk_runtime import _modal_errors, result_from_proto
from altar.execution import AltarError, BackendUnavailableError
from grpclib.exceptions import StreamTerminatedError
from modal_proto import api_pb2

G = api_pb2.GenericResult


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (G.GENERIC_STATUS_SUCCESS, ResultStatus.SUCCESS),
        (G.GENERIC_STATUS_FAILURE, ResultStatus.FAILURE),
        (G.GENERIC_STATUS_TERMINATED, ResultStatus.TERMINATED),
        (G.GENERIC_STATUS_TIMEOUT, ResultStatus.TIMEOUT),
        (G.GENERIC_STATUS_INIT_FAILURE, ResultStatus.INIT_FAILURE),
        (G.GENERIC_STATUS_INTERNAL_FAILURE, ResultStatus.INTERNAL_FAILURE),
        (G.GENERIC_STATUS_IDLE_TIMEOUT, ResultStatus.IDLE_TIMEOUT),
        (G.GENERIC_STATUS_MEMORY_MANAGER_EVICTION, ResultStatus.MEMORY_MANAGER_EVICTION),
        (G.GENERIC_STATUS_MEMORY_THRASHING_EVICTION, ResultStatus.MEMORY_THRASHING_EVICTION),
        (G.GENERIC_STATUS_KERNEL_OOM_KILL, ResultStatus.KERNEL_OOM_KILL),
    ],
)
def test_every_generic_status_of_the_installed_proto_is_decoded(
    status: int, expected: ResultStatus
) -> None:
    result = result_from_proto(G(status=status, exitcode=137, exception="why"))
    assert (result.status, result.exit_code, result.message) == (expected, 137, "why")


def test_no_result_or_unspecified_is_running() -> None:
    assert result_from_proto(None).status is ResultStatus.RUNNING
    assert result_from_proto(G()).status is ResultStatus.RUNNING


def test_a_status_newer_than_this_backend_is_unknown_not_success() -> None:
    assert result_from_proto(G(status=99, exitcode=0)).status is ResultStatus.UNKNOWN


def test_the_installed_proto_has_no_status_we_do_not_decode() -> None:
    known = {int(G.GENERIC_STATUS_UNSPECIFIED)} | set(range(1, 11))
    assert set(G.GenericStatus.values()) <= known


@pytest.mark.parametrize(
    "error",
    [
        modal_errors.ConnectionError("Could not connect to the Modal server."),
        modal_errors.ServiceError("upstream connect error"),
        modal_errors.InternalError("internal"),
        modal_errors.ResourceExhaustedError("Insufficient capacity to create sandbox."),
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError("timed out"),
        ConnectionResetError(104, "Connection reset by peer"),
        StreamTerminatedError("Connection lost"),
        grpclib.GRPCError(grpclib.Status.UNAVAILABLE, "unavailable"),
    ],
)
def test_network_and_server_errors_become_backend_unavailable(error: Exception) -> None:
    with pytest.raises(BackendUnavailableError), _modal_errors("sb-x"):
        raise error


def test_not_found_is_a_missing_sandbox_only_for_sandbox_calls() -> None:
    with pytest.raises(SandboxNotFoundError, match="sb-x"), _modal_errors("sb-x"):
        raise modal_errors.NotFoundError("Sandbox sb-x not found")
    with pytest.raises(modal_errors.NotFoundError), _modal_errors():
        raise modal_errors.NotFoundError("App not found")


def test_local_file_errors_are_not_mistaken_for_an_outage() -> None:
    with pytest.raises(FileNotFoundError), _modal_errors():
        raise FileNotFoundError("no such volume file")


def test_invalid_requests_are_not_hidden() -> None:
    with pytest.raises(modal_errors.InvalidError), _modal_errors("sb-x"):
        raise modal_errors.InvalidError("bad gpu")


def test_refused_credentials_are_a_permanent_one_line_error() -> None:
    # Waiting does not make a token appear: `altar run` must stop, not retry forever.
    with (
        pytest.raises(ModalCredentialsError, match="modal token new") as raised,
        _modal_errors("sb-x"),
    ):
        raise modal_errors.AuthError("Token missing. Could not authenticate client.")
    assert not isinstance(raised.value, BackendUnavailableError)
    assert isinstance(raised.value, AltarError)
    assert isinstance(raised.value, ValueError)
