"""Runs `altar` in this process and SIGKILLs it at one step of serving a cache hit.

Used by tests/test_cache_kill.py: `python cache_kill_driver.py STEP NTH altar-args...` kills
the process the NTH time STEP is reached (patched in this process only, never in the code).
"""

import os
import signal
import sys

from altar.execution.cache import store
from altar.execution.cli.command import main
from altar.execution.run import caching
from altar.execution.run.ledger import Ledger

STEP, NTH = sys.argv[1], int(sys.argv[2])
seen = 0


def reached() -> None:
    global seen
    seen += 1
    if seen == NTH:
        os.kill(os.getpid(), signal.SIGKILL)


if STEP == "linked":  # an output linked (in place, or beside it before a rename), the next not
    real_link = os.link

    def link(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        if os.sep + "objects" + os.sep in os.fspath(src):
            reached()

    os.link = link
elif STEP == "materialized":  # every output in place, not staged nor journaled
    real_materialize = store.CacheStore.materialize

    def materialize(self, *args):
        real_materialize(self, *args)
        reached()

    store.CacheStore.materialize = materialize
elif STEP == "staged":  # outputs staged for readers, the hit not yet journaled
    real_set_state = Ledger.set_state

    def set_state(self, record, *args, **kwargs):
        if record.cached:
            reached()
        return real_set_state(self, record, *args, **kwargs)

    Ledger.set_state = set_state
elif STEP == "journaled":  # a tick's hits journaled (one flush) and said
    real_serve = caching.RunCache.serve

    async def serve(self, ready):
        rest = await real_serve(self, ready)
        if any(record.cached for record in ready):
            reached()
        return rest

    caching.RunCache.serve = serve
elif STEP == "indexed":  # an index shard half written beside the store, not yet renamed
    from altar.execution.cache import index

    real_replace = index._replace

    def replace(target, data, tmp_dir):
        if seen + 1 == NTH:
            os.makedirs(tmp_dir, exist_ok=True)
            with open(os.path.join(tmp_dir, "index-torn"), "wb") as handle:
                handle.write(data[: len(data) // 2])
        reached()
        real_replace(target, data, tmp_dir)

    index._replace = replace
else:
    raise SystemExit(f"unknown step {STEP}")

sys.exit(main(sys.argv[3:]))
