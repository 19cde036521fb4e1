"""The run lock: one holder per output directory, a clear refusal, dead holders taken over."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from pipeline import run_lock

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Holds the lock on argv[1] as run "child-run", says so on stdout, then sleeps until killed.
_HOLDER = """
import sys, time
from pipeline import run_lock
with run_lock.local_run_lock(sys.argv[1], "child-run"):
  print("held", flush=True)
  time.sleep(600)
"""


def test_a_second_holder_is_refused_at_once_naming_the_first_and_a_killed_one_is_taken_over(
    tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    started = time.time()
    with pytest.raises(run_lock.RunLockHeld) as refused:
      with run_lock.local_run_lock(str(tmp_path), "second-run"):
        pytest.fail("two holders at once")
    assert time.time() - started < 1
    message = str(refused.value)
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


# The lock object is written through tf.io.gfile, as on gs:// or s3://; tests use a local path
# (TensorFlow's ram:// appends on rewrite, unlike an object store).
def test_the_object_store_lock_refuses_while_held_and_is_removed_on_release(tmp_path):
  root = str(tmp_path / "pipeline_root")
  with run_lock.object_store_run_lock(root, "first", settle_seconds=0.01):
    with pytest.raises(run_lock.RunLockHeld, match=r"in use by run first \(pid \d+ on host .*"
                                                   r"gsutil rm "):
      with run_lock.object_store_run_lock(root, "second", settle_seconds=0.01):
        pytest.fail("two holders at once")
  assert not tf.io.gfile.exists(f"{root}/.run.lock")
  ram_root = f"ram://locks-{os.getpid()}/pipeline_root"
  with run_lock.run_lock(ram_root, "third"):  # Any URI with a scheme gets the lock object.
    assert tf.io.gfile.exists(f"{ram_root}/.run.lock")
  assert not tf.io.gfile.exists(f"{ram_root}/.run.lock")


def test_of_two_object_store_writers_within_the_settling_delay_the_earlier_backs_off(tmp_path):
  root = str(tmp_path / "pipeline_root")
  path = f"{root}/.run.lock"

  def later_writer():  # Passed the existence check too, and writes while we settle.
    time.sleep(0.05)
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(json.dumps(run_lock.holder_record("later")))

  writer = threading.Thread(target=later_writer)
  writer.start()
  with pytest.raises(run_lock.RunLockHeld, match="in use by run later"):
    with run_lock.object_store_run_lock(root, "earlier", settle_seconds=5.0):
      pytest.fail("the earlier writer must see the later one's token")
  writer.join()
