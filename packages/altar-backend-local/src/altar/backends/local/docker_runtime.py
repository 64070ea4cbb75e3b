"""Old name of :mod:`altar.backends.local.sdk_runtime`, kept for one release (altar 0.4).

Import from ``altar.backends.local.sdk_runtime`` (or ``altar.backends.local``) instead. No
warning is raised; the module goes away in the release after next. Importing it imports the
docker SDK, as the old module did.
"""

from altar.backends.local.sdk_runtime import DockerSdkRuntime, describe_engine

__all__ = ["DockerSdkRuntime", "describe_engine"]
