"""The names and identifiers of the adapter contract (format and adapter version 1)."""

from __future__ import annotations

ADAPTER_OPERATIONS: tuple[str, ...] = (
    "configure",
    "install",
    "invoke",
    "push",
    "pull",
    "start-manager",
    "status",
)
ADAPTER_EXECUTABLE = "adapter"
CREDENTIALS_FILE = "credentials.json"
METADATA_FILE = "remote.json"
# The historical "computer" spelling is protocol: bundles and adapters written for
# earlier releases carry it, so it is kept verbatim.
ADAPTER_FORMAT = "httk-computer-adapter"
REQUEST_FORMAT = "httk-computer-request"
RESULT_FORMAT = "httk-computer-result"
FORMAT_VERSION = 1
ADAPTER_VERSION = 1

#: Queue settings stored in the shareable ``remote.json``; every other key is a credential.
#: ``ssh_multiplex`` and ``ssh_agent`` are this distribution's additions to the release it follows.
PERSISTABLE_QUEUE_SETTINGS: frozenset[str] = frozenset(
    {
        "account",
        "bootstrap",
        "check_connectivity",
        "cpus_per_task",
        "host",
        "httk_command",
        "legacy_settings",
        "nodes",
        "partition",
        "port",
        "reservation",
        "ssh_agent",
        "ssh_multiplex",
        "time_limit",
        "username",
        "workers",
        "workspace",
    }
)

MAINTAINED_TEMPLATES: tuple[str, ...] = ("local", "local-slurm", "ssh-slurm")
DEFAULT_TIMEOUT_SECONDS = 60.0
