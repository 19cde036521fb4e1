"""Runs on one output directory: one at a time, each reporting itself, a killed one cleared."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.config import from_flags
from local_runner.interrupted_runs import ABANDONED_BY_KEY
from local_runner.run_record import RunRecord
from tests.conftest import REPO
from test_support.tfrecord_inputs import write_digits_tfrecord_dir

pytestmark = pytest.mark.e2e  # Pipeline runs.


def _wait_for(path, text, process, timeout=600):
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert process.poll() is None, open(path).read()[-3000:]
    if text in open(path).read():
      return
    time.sleep(0.5)
  raise AssertionError(f"{text!r} never appeared in {path}")


def _store(config):
  from tfx.orchestration import metadata
  return metadata_store.MetadataStore(
      metadata.sqlite_metadata_connection_config(config.runner.metadata_path))


def test_a_second_run_is_refused_while_one_runs_and_a_killed_run_is_cleared_by_the_next(
    tmp_path, pipeline_runner):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60)
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--config=tiny",
           "--train_steps=1", "--per_core_batch_size=16", "--corruptions="]
  config = from_flags(flags)
  first_log = tmp_path / "first.out"
  with open(first_log, "w") as out:
    first = subprocess.Popen([sys.executable, "-m", "local_runner", *flags], cwd=REPO, stdout=out,
                             stderr=subprocess.STDOUT)
  try:
    _wait_for(first_log, "Component Transform is running.", first)

    second = pipeline_runner(*flags)
    assert second.returncode == 1
    # Refused while the first still runs: it did not wait for the first to end.
    assert first.poll() is None, "the second run ended only after the first"
    assert "is in use by run " in second.stderr
    assert f"(pid {first.pid} on host {socket.gethostname()}, started " in second.stderr
    assert os.path.join(config.runner.output_dir, ".run.lock") in second.stderr
    assert "delete" in second.stderr, "the message says how to clear a stale lock"
    assert "Component" not in second.stdout, "the refused run ran nothing"
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)

  killed = RunRecord(config)
  assert killed.states["Transform"] == "RUNNING"
  store = _store(config)
  transform = next(e for e in store.get_executions() if
                   e.last_known_state == metadata_store_pb2.Execution.RUNNING)
  transform_dirs = [os.path.join(config.runner.pipeline_root, "Transform", key, str(transform.id))
                    for key in ("transform_graph", "transformed_examples")]
  assert all(os.path.isdir(path) for path in transform_dirs), "the kill left these behind"

  third = pipeline_runner(*flags, timeout=1800)
  assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
  run_id = re.search(r"Pipeline \S+ run (\S+) finished", third.stdout).group(1)
  for run in (run_id, killed.run_id):  # Our ids (start time + random part), not TFX's.
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}", run)
  assert re.search(rf"Took over the run lock .* \(pid {first.pid} on host ", third.stdout)
  name = config.runner.pipeline_name
  assert f"Cleared execution {transform.id} of {name}.Transform" in third.stdout
  [cleared] = store.get_executions_by_id([transform.id])
  assert cleared.last_known_state == metadata_store_pb2.Execution.CANCELED
  assert cleared.custom_properties[ABANDONED_BY_KEY].string_value == run_id
  assert not any(os.path.exists(path) for path in transform_dirs)

  # The summary, log and report are this run's, named by its id.
  assert RunRecord(config, run_id).states["Transform"] == "COMPLETE"
  assert re.search(rf"full log: +\S+/logs/run-{run_id}\.log", third.stdout)
  assert re.search(rf"run report: +\S+/reports/run-{run_id}/", third.stdout)
  assert open(os.path.join(config.runner.output_dir, ".run.lock")).read() == "", "released cleanly"
