"""What the console says when a run fails: the error that stopped it, not Beam's wrapping."""
import os
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from local_runner.runner import failure_message, main
from pipeline.config import from_flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _explode(number):
  raise ValueError(f"example {number} has no label\nfile: digits-{number:04d}.png")


@pytest.fixture(scope="module")
def worker_error():
  """The error a step gets when one of its Beam workers raises (as under multi_processing)."""
  options = PipelineOptions(["--direct_running_mode=multi_threading", "--direct_num_workers=1"])
  with pytest.raises(Exception) as raised:
    with beam.Pipeline(options=options) as pipeline:
      _ = pipeline | beam.Create([7]) | "Label" >> beam.Map(_explode)
  return raised.value


def test_a_beam_workers_error_is_shown_whole_and_its_traceback_left_to_the_log(
    worker_error, tmp_path):
  assert len(str(worker_error).splitlines()) > 10, "Beam wraps it in the worker's traceback"
  message = failure_message(from_flags([f"--output_dir={tmp_path}"]), worker_error)
  assert message.splitlines() == [
      "ValueError: example 7 has no label", "file: digits-0007.png [while running 'Label']",
      "(raised in a Beam worker; its traceback is in the full log)"]


def test_an_error_raised_in_the_step_itself_is_shown_whole(tmp_path):
  error = ValueError("eval split has 3 examples\nfewer than --min_eval_examples=50")
  assert failure_message(from_flags([f"--output_dir={tmp_path}"]), error) == (
      "ValueError: eval split has 3 examples\nfewer than --min_eval_examples=50")


def test_a_reports_path_that_is_not_a_directory_stops_the_run_before_any_step(tmp_path, capsys):
  (tmp_path / "reports").write_text("")
  assert main([f"--output_dir={tmp_path}", "--config=tiny"]) == 2
  assert f"its reports directory {tmp_path / 'reports'} is a file" in capsys.readouterr().err
  assert sorted(os.listdir(tmp_path)) == ["reports"]  # Nothing ran, nothing was written.


def _unreachable_s3(tmp_path):
  from test_support.s3_server import free_port
  return {**os.environ, "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{free_port()}",
          "AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret",
          "AWS_REGION": "us-east-1"}


def test_an_unreachable_s3_image_folder_stops_the_run_at_once_with_its_own_status(tmp_path):
  """Once tensorflow-io's retries ran for 100 s, then 'is not a directory', then the process
  aborted at exit ('pure virtual method called', status 134)."""
  started = time.monotonic()
  result = subprocess.run(
      [sys.executable, "-m", "local_runner", f"--output_dir={tmp_path / 'out'}",
       "--dataset=image_dir", "--image_dir=s3://photos/cats"], cwd=REPO,
      env=_unreachable_s3(tmp_path), capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "image_dir='s3://photos/cats': cannot be reached: the S3 endpoint" in result.stderr
  assert "pure virtual method called" not in result.stderr
  assert time.monotonic() - started < 120  # The interpreter and TFX's imports, mostly.
  assert not (tmp_path / "out").exists()


def test_the_runner_ends_with_its_own_status_after_tensorflow_used_s3(s3_server):
  """tensorflow-io aborts at exit a process that used s3:// (status 134): `python -m
  local_runner` ends through object_storage.exit_after, so a run that used it and failed ends
  with the runner's status, here a refused flag's 2."""
  path = s3_server.create_bucket("runner-exit") + "/file.txt"
  program = ("import runpy, sys\n"
             "from storage import object_storage\n"
             "object_storage.configure()\n"
             "import tensorflow as tf\n"
             f"with tf.io.gfile.GFile({path!r}, 'w') as f:\n"
             "  f.write('used')\n"
             "sys.argv = ['local_runner', '--no_such_flag=1']\n"
             "runpy.run_module('local_runner', run_name='__main__')\n")
  result = subprocess.run([sys.executable, "-c", program], cwd=REPO,
                          env={**os.environ, **s3_server.environ()}, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-3000:]
  assert "no_such_flag" in result.stderr and s3_server.keys("runner-exit") == [("file.txt", 4)]
