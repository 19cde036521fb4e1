"""What the console says when a run fails: the error that stopped it, not Beam's wrapping."""
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from local_runner.runner import failure_message, main
from pipeline.config import from_flags


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
