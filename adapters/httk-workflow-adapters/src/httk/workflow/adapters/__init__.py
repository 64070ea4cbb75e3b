"""Versioned JSON remote-adapter bundles.

A bundle is a directory holding ``remote.json`` and one executable named ``adapter``;
every operation httk-workflow performs on another machine is one JSON request to that
executable and one JSON result back. This package validates and resolves bundles,
keeps queue settings apart from credentials, and runs operations (:func:`run_adapter`).
What can go wrong is drawn in :mod:`httk.workflow.adapters.errors`.
"""

from __future__ import annotations

from .__about__ import __version__
from .bundles import (
    RemoteTarget,
    add_remote,
    config_home,
    discover_project,
    list_remotes,
    metadata_path,
    project_remote_roots,
    read_metadata,
    remotes_home,
    resolve_remote,
    split_remote,
    validate_adapter_bundle,
)
from .constants import (
    ADAPTER_EXECUTABLE,
    ADAPTER_FORMAT,
    ADAPTER_OPERATIONS,
    CREDENTIALS_FILE,
    METADATA_FILE,
    PERSISTABLE_QUEUE_SETTINGS,
    REQUEST_FORMAT,
    RESULT_FORMAT,
)
from .describe import describe_remote, remove_remote
from .errors import (
    AdapterCrashed,
    AdapterError,
    AdapterRefused,
    AdapterResultError,
    AdapterTimeout,
    BundleError,
    InsecureCredentialsWarning,
    InvalidRemoteName,
    RemoteUnreachable,
    UnknownRemote,
)
from .legacy import import_v1_remote
from .run import run_adapter
from .settings import queue_settings, read_credentials, split_settings, store_credentials

__all__ = [
    "ADAPTER_EXECUTABLE",
    "ADAPTER_FORMAT",
    "ADAPTER_OPERATIONS",
    "CREDENTIALS_FILE",
    "METADATA_FILE",
    "PERSISTABLE_QUEUE_SETTINGS",
    "REQUEST_FORMAT",
    "RESULT_FORMAT",
    "AdapterCrashed",
    "AdapterError",
    "AdapterRefused",
    "AdapterResultError",
    "AdapterTimeout",
    "BundleError",
    "InsecureCredentialsWarning",
    "InvalidRemoteName",
    "RemoteTarget",
    "RemoteUnreachable",
    "UnknownRemote",
    "__version__",
    "add_remote",
    "config_home",
    "describe_remote",
    "discover_project",
    "import_v1_remote",
    "list_remotes",
    "metadata_path",
    "project_remote_roots",
    "queue_settings",
    "read_credentials",
    "read_metadata",
    "remotes_home",
    "remove_remote",
    "resolve_remote",
    "run_adapter",
    "split_remote",
    "split_settings",
    "store_credentials",
    "validate_adapter_bundle",
]
