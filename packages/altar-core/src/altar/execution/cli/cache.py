"""``altar cache ls|verify|prune|explain``: look after a task cache store.

See ``docs/guide/cache.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from altar.execution.cache.key import explain
from altar.execution.cache.store import CacheEntry, CacheStore, default_store_dir
from altar.execution.errors import AltarError
from altar.execution.run.caching import read_keys
from altar.execution.run.progress import format_duration, terminal_safe

__all__ = ["add_arguments", "cmd_cache", "parse_age", "parse_size"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """``500M``, ``20G``, ``1.5T`` or a number of bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size like 500M or 20G, got {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``2w`` or a number of seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"expected an age like 30d or 12h, got {text!r}")
    return float(match.group(1)) * _AGES[(match.group(2) or "s").lower()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    for name, help_text in (
        ("ls", "list the entries, newest first"),
        ("verify", "check every entry's outputs against their digests"),
        ("prune", "drop old entries, or the oldest until the store fits a size"),
        ("explain", "why a run's task missed the cache: what differs from the nearest entry"),
    ):
        q = actions.add_parser(name, help=help_text)
        q.add_argument("--cache", metavar="DIR", help=f"the store (default: {default_store_dir()})")
        q.add_argument("--json", action="store_true", help="print JSON")
        if name == "verify":
            q.add_argument("--drop", action="store_true", help="drop the entries that fail")
            q.add_argument(
                "--rehash",
                action="store_true",
                help="read every object whose record its links have voided (slow, thorough)",
            )
        if name == "explain":
            q.add_argument("run_dir", metavar="RUN_DIR")
            q.add_argument("task", metavar="TASK")
        if name == "prune":
            q.add_argument("--older-than", metavar="AGE", type=parse_age, help="e.g. 30d")
            q.add_argument("--max-size", metavar="SIZE", type=parse_size, help="e.g. 50G")


def cmd_cache(args: argparse.Namespace, out: TextIO) -> int:
    root = Path(args.cache) if args.cache else default_store_dir()
    if args.cache and not root.is_dir():
        raise AltarError(f"--cache {args.cache}: no such directory; name a task cache store")
    store = CacheStore(root)
    if args.cache_command == "ls":
        return _ls(store, args.json, out)
    if args.cache_command == "verify":
        return _verify(store, args.json, args.drop, args.rehash, out)
    if args.cache_command == "explain":
        return _explain(store, Path(args.run_dir), args.task, args.json, out)
    if args.older_than is None and args.max_size is None:
        raise AltarError("altar cache prune: say what to drop: --older-than AGE, --max-size SIZE")
    pruned = store.prune(older_than_s=args.older_than, max_bytes=args.max_size)
    if args.json:
        out.write(json.dumps(pruned.__dict__) + "\n")
    else:
        out.write(
            f"dropped {pruned.entries} entr{'y' if pruned.entries == 1 else 'ies'}, removed "
            f"{pruned.objects} object(s), {pruned.bytes_freed} bytes freed\n"
        )
    return 0


def _ls(store: CacheStore, as_json: bool, out: TextIO) -> int:
    entries = sorted(store.entries(), key=lambda e: e.created_at, reverse=True)
    if as_json:
        rows = [{**e.to_dict(), "bytes": store.size_of(e)} for e in entries]
        out.write(json.dumps(rows, indent=2) + "\n")
        return 0
    if not entries:
        out.write(f"no entries in {store.root}\n")
        return 0
    now = time.time()
    for entry in entries:
        origin = entry.origin
        where = f"{origin.get('task_id', '?')} of run {origin.get('run_id', '?')}"
        age = format_duration(max(0.0, now - entry.created_at))
        out.write(
            f"{entry.key.removeprefix('sha256:')[:12]}  {terminal_safe(where)}  "
            f"{len(entry.outputs)} output(s), {store.size_of(entry)} bytes, {age} ago\n"
        )
    return 0


def _verify(store: CacheStore, as_json: bool, drop: bool, rehash: bool, out: TextIO) -> int:
    checked: list[tuple[str, list[str]]] = []
    for entry in store.entries():
        problems = store.problems(entry, rehash=rehash)
        if problems and drop:
            store.drop(entry.key)
        checked.append((entry.key, problems))
    store.flush_index()  # the dropped entries' index rows
    bad = [(key, problems) for key, problems in checked if problems]
    if as_json:
        rows = [{"key": k, "ok": not p, "problems": p} for k, p in checked]
        out.write(json.dumps(rows, indent=2) + "\n")
    else:
        for key, problems in bad:
            for problem in problems:
                out.write(f"{key.removeprefix('sha256:')[:12]}: {problem}\n")
        dropped = " (dropped)" if drop and bad else ""
        out.write(f"{len(checked) - len(bad)} of {len(checked)} entries ok{dropped}\n")
    return 1 if bad else 0


def nearest_entry(store: CacheStore, fields: Mapping[str, Any], task_id: str) -> CacheEntry | None:
    """The stored entry closest to ``fields``: of the same task id if any, fewest differences."""
    entries = list(store.entries())
    same = [e for e in entries if e.origin.get("task_id") == task_id] or entries
    return min(same, key=lambda e: len(explain(fields, e.fields)), default=None)


def _explain(store: CacheStore, run_dir: Path, task_id: str, as_json: bool, out: TextIO) -> int:
    keys = read_keys(run_dir)
    if not run_dir.is_dir():
        raise AltarError(f"{run_dir} is not a run directory")
    line = keys.get(task_id)
    if line is None:
        known = ", ".join(sorted(keys)[:5]) or "none: the run used no cache"
        raise AltarError(f"{run_dir}: task {task_id!r} was never keyed (keyed: {known})")
    result: dict[str, Any] = {"task": task_id}
    if "uncacheable" in line:
        result.update(outcome="uncacheable", why=line["uncacheable"])
        text = f"{task_id} is not cacheable: {line['uncacheable']}"
    elif store.get(line["key"]) is not None:
        result.update(outcome="stored", key=line["key"])
        text = f"{task_id}: the store holds an entry for its key; a run looks it up and serves it"
    else:
        nearest = nearest_entry(store, line["fields"], task_id)
        if nearest is None:
            result.update(outcome="empty", key=line["key"])
            text = f"{task_id}: no entry in {store.root} to compare with"
        else:
            differences = explain(line["fields"], nearest.fields)
            result.update(
                outcome="differs", key=line["key"], nearest=nearest.key, differences=differences
            )
            origin = nearest.origin
            text = (
                f"{task_id} differs from the nearest entry ({origin.get('task_id', '?')} of run "
                f"{origin.get('run_id', '?')}):\n" + "\n".join(f"  {d}" for d in differences)
            )
    out.write(json.dumps(result, indent=2) + "\n" if as_json else terminal_safe(text) + "\n")
    return 0
