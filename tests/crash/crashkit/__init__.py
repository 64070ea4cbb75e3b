"""The crash-consistency harness (issue 13): plan, kill schedule, driver, ledger and leftovers.

Used by ``tests/crash/test_crash_consistency.py`` and by ``scripts/crash-test`` for a run by
hand with a chosen seed.
"""
