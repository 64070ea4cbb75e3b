"""The remote-adapter protocol, under its documented public name.

One bundle, one executable: a bundle holds ``remote.json`` and a single ``adapter``
program that is run as ``adapter REQUEST.json`` for every operation; the operation is
the request's ``operation`` member, never the file that was executed. The maintained
implementation is chosen by the bundle's ``kind`` (``local``, ``local-slurm``,
``ssh-slurm``); any other kind is refused rather than run in the wrong place.

No shell, ever: every subprocess is an argument vector. ssh is the one exception the
protocol cannot avoid, because it joins its command words for a login shell on the far
side; that string, and the one ``exec`` line of a generated batch script, are built only
by :func:`httk.workflow.adapter_runtime.quoting.shell_command`, which quotes element-wise.

The names below are the same objects as in :mod:`httk.workflow.adapter_runtime`.
"""

from __future__ import annotations

from httk.workflow.adapter_runtime import BATCH_DIRECTIVES, BATCH_DIRECTORY, SUPPORTED_KINDS, main

__all__ = ["BATCH_DIRECTIVES", "BATCH_DIRECTORY", "SUPPORTED_KINDS", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
