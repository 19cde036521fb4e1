"""The run lock: one holder per output directory, a clear refusal, dead holders taken over."""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from local_runner import run_lock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Holds the lock on argv[1] as run "child-run", says so on stdout, then sleeps until killed.
_HOLDER = """
import sys, time
from local_runner import run_lock
with run_lock.local_run_lock(sys.argv[1], "child-run"):
  print("held", flush=True)
  time.sleep(600)
"""


# Not a speed bound: how long a lock that waits on its holder is given to show it.
WAIT_SECONDS = 60


def _take_and_release(output_dir, run_id):
  """RunLockHeld if refused; "held" if the lock was taken."""
  try:
    with run_lock.local_run_lock(output_dir, run_id):
      return "held"
  except run_lock.RunLockHeld as error:
    return error


def test_a_second_holder_is_refused_at_once_naming_the_first_and_a_killed_one_is_taken_over(
    tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
      attempt = pool.submit(_take_and_release, str(tmp_path), "second-run")
      try:  # A lock that waited would get the lock only once the holder is killed, below.
        refused = attempt.result(timeout=WAIT_SECONDS)
      except concurrent.futures.TimeoutError:
        pytest.fail(f"still waiting on the holder after {WAIT_SECONDS} s instead of refusing")
      finally:
        holder_alive = holder.poll() is None
        holder.send_signal(signal.SIGKILL)
    assert holder_alive, "the holder ended before the refusal: the test proves nothing"
    assert isinstance(refused, run_lock.RunLockHeld), f"two holders at once: {refused!r}"
    message = str(refused)
    assert f"is in use by run child-run (pid {holder.pid} on host {socket.gethostname()}, " \
           "started 20" in message
    assert f"lock file {tmp_path / '.run.lock'}" in message and "delete" in message
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)

  with run_lock.local_run_lock(str(tmp_path), "third-run") as record:
    assert f"from run child-run (pid {holder.pid} on host" in record["took_over"]
    assert json.loads((tmp_path / ".run.lock").read_text())["run_id"] == "third-run"
  assert (tmp_path / ".run.lock").read_text() == "", "a clean release leaves no holder"
  with run_lock.local_run_lock(str(tmp_path), "fourth-run") as record:
    assert "took_over" not in record
