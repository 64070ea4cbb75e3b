"""What a test that fills the shared Slurm queue uses, so it holds back no other test.

The test node starts about one job a second (docs/backends/slurm.md, Start rate), and Slurm's
``priority/basic`` starts pending jobs in submit order: a test that queues a hundred jobs made
every test that submitted after it wait its turn (an ``altar logs --follow`` test once waited
228 s behind the 300-task QOS test). Such a test's jobs ask for a lower priority (``--nice``:
``priority/basic`` subtracts it from the submit-order priority), so a one-job test's job starts
at the next scheduling pass, and the tests that fill the queue share one xdist group: they run
one after the other on one worker (two at once would not start jobs any faster, and would keep
both workers waiting), while the other worker runs everything else.
"""

from __future__ import annotations

import pytest

#: Behind the jobs of the next 200 submits (priority/basic counts one per submit): any job
#: submitted while the 20 or 100 queued jobs wait goes first, yet a stream from elsewhere (a
#: benchmark's 1,000 jobs) holds them back by at most 200 jobs, not for as long as it lasts
#: (at 100,000 such a stream kept the 100-task array past its 900 s deadline).
NICE = "200"
#: ``extra_directives`` for a backend (or a plan's ``[backend.options]``) whose jobs fill the queue.
LOW_PRIORITY = {"--nice": NICE}
#: The xdist group of the tests that fill the queue.
QUEUE_FILLING = pytest.mark.xdist_group("slurm-queue")
