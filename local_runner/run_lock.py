"""One local run at a time per output directory: a `flock` taken before anything is written, so
two runs never share MLMD or push each other's model (docs/pipeline.md, "One run at a time").
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
from typing import Iterator, Optional

LOCK_NAME = ".run.lock"


class RunLockHeld(RuntimeError):
  """Another run holds the output directory."""


def holder_record(run_id: str) -> dict:
  return {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
          "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def describe(holder: dict) -> str:
  if not holder:
    return "another run (its lock record is empty or unreadable)"
  return (f"run {holder.get('run_id')} (pid {holder.get('pid')} on host {holder.get('host')}, "
          f"started {holder.get('started')})")


def _read_holder(text: str) -> Optional[dict]:
  try:
    holder = json.loads(text)
  except ValueError:
    return None
  return holder if isinstance(holder, dict) else None


@contextlib.contextmanager
def local_run_lock(output_dir: str, run_id: str) -> Iterator[dict]:
  """Holds `<output_dir>/.run.lock` for the block; RunLockHeld at once if a live run has it.
  Yields the holder record; its "took_over" line, if any, is for the run's log."""
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, LOCK_NAME)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _read_holder(os.pread(fd, 65536, 0).decode("utf-8", "replace")) or {}
      raise RunLockHeld(
          f"{output_dir} is in use by {describe(holder)}; lock file {path}. Wait for that run "
          "to finish, or use another --output_dir. The lock is released when its process "
          "ends; if that process is gone and the lock remains (a file system without working "
          f"flock, such as some network mounts), delete {path}.") from None
    previous = _read_holder(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
    holder = holder_record(run_id)
    if previous:  # A clean release empties the file: this holder died holding the lock.
      holder["took_over"] = (f"Took over the run lock {path} from {describe(previous)}, which "
                             "ended without releasing it (killed?).")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({k: v for k, v in holder.items() if k != "took_over"}).encode(), 0)
    os.fsync(fd)
    try:
      yield holder
    finally:
      os.ftruncate(fd, 0)  # Released cleanly: no holder to report or take over from.
  finally:
    os.close(fd)  # Closing drops the flock.
