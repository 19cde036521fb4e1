"""The Beam engine of a local run: the cluster's choice, checked the same way before any step."""
import socket

import pytest

from configs.flags import over_defaults
from local_runner import runner as local_runner
from pipeline.config import LOCAL_BEAM_REQUIREMENTS, from_flags

EXTERNAL = ["--beam_runner=portable", "--beam_job_endpoint=127.0.0.1:8099",
            "--beam_environment_type=EXTERNAL", "--beam_environment_config=127.0.0.1:50000"]


def test_a_local_run_submits_every_beam_step_to_the_portable_job_server(tmp_path):
  config = from_flags([f"--output_dir={tmp_path}"] + EXTERNAL)
  assert config.beam_pipeline_args(10) == [
      "--runner=PortableRunner", "--job_endpoint=127.0.0.1:8099", "--environment_type=EXTERNAL",
      "--environment_config=127.0.0.1:50000", "--job_server_timeout=604800",
      f"--requirements_file={LOCAL_BEAM_REQUIREMENTS}", "--requirements_cache=skip"]
  assert config.beam_step_args(10) == []  # No DirectRunner mode overrides the engine.
  assert from_flags([f"--output_dir={tmp_path}"]).beam.beam_runner == "direct"  # The default.


@pytest.mark.parametrize("flags, message", [
    (["--beam_runner=flink"], "beam_runner='flink': must be one of"),
    (["--beam_runner=portable"], "beam_job_endpoint='': must be host:port of the job server"),
    (EXTERNAL[:3], "beam_environment_config='': must be host:port of the SDK worker pool"),
    (EXTERNAL[:2], "beam_environment_config='': is required with beam_environment_type=DOCKER "
     "on a local run"),
    (EXTERNAL + ["--beam_workers=2"], "beam_workers=2: is for the direct runner"),
    (["--beam_job_endpoint=127.0.0.1:8099"], "beam_job_endpoint='127.0.0.1:8099': is not "
     "used with beam_runner=direct"),
    (["--beam_runner=dataflow"], "beam_runner='dataflow': is for Kubeflow runs"),
])
def test_a_bad_engine_stops_the_local_run_with_one_line_and_nothing_written(
    tmp_path, capsys, flags, message):
  output_dir = tmp_path / "out"
  assert local_runner.main([f"--output_dir={output_dir}"] + flags) == 2
  error = capsys.readouterr().err
  assert error.count("\n") == 1 and message in error, error
  assert not output_dir.exists()


def test_a_job_server_that_does_not_answer_stops_the_local_run_before_any_step(tmp_path, capsys):
  with socket.socket() as unused:  # Bound, never listening: connections are refused.
    unused.bind(("127.0.0.1", 0))
    endpoint = f"127.0.0.1:{unused.getsockname()[1]}"
    output_dir = tmp_path / "out"
    flags = [f"--output_dir={output_dir}",
             *over_defaults(EXTERNAL, [f"--beam_job_endpoint={endpoint}"])]
    assert local_runner.main(flags) == 2
  error = capsys.readouterr().err
  assert f"beam_job_endpoint='{endpoint}': no job server answers there" in error
  assert error.count("\n") == 1 and not output_dir.exists()
