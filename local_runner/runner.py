"""Runs the pipeline with LocalDagRunner, shows progress, then says where everything is."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import uuid
from typing import Iterator, Optional, Sequence

from absl import logging as absl_logging

from components import tfrecord_check
from configs.flags import name_value_pairs
from configs.kubeflow import CLUSTER_FLAGS
from pipeline import beam_engine
from pipeline import config as config_lib
from local_runner import run_lock

log = logging.getLogger("pipeline")

# TFX's own progress lines worth showing on the console; the log file keeps everything.
_TFX_PROGRESS = ("Component %s is running.", "Component %s is finished.",
                 "A cached execution %d is used.",
                 # A step the span check's decision (a Cond) or a skipped input left out.
                 "Skipping execution for %s")
_OUR_LOGGERS = ("pipeline", "local_runner", "reporting", "trainer_module", "components")


# Loggers whose errors stay in the log file: Beam relays every worker's traceback as an error.
_LOG_ONLY = ("apache_beam",)
LOG_ONLY = {"log_only": True}  # `extra` of a record meant for the log file alone.
# How a Beam worker's error reaches the step: a RuntimeError holding the worker's traceback,
# which ends with the error.
_WORKER_TRACEBACK = "Traceback (most recent call last):"


class _ConsoleFilter(logging.Filter):

  def filter(self, record):
    if getattr(record, "log_only", False) or record.name.split(".")[0] in _LOG_ONLY:
      return False
    return (record.levelno >= logging.ERROR or record.msg in _TFX_PROGRESS
            or record.name.split(".")[0] in _OUR_LOGGERS)


@contextlib.contextmanager
def stray_output_to_log(log_path: str) -> Iterator[None]:
  """Points file descriptor 2 at the log while the run runs: Beam's worker processes and
  TensorFlow's C++ code inherit it and write tracebacks and warnings there. sys.stderr, what the
  runner itself prints to, stays on the console."""
  sys.stderr.flush()
  console_fd = os.dup(2)
  log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
  os.dup2(log_fd, 2)
  os.close(log_fd)
  saved_stderr, sys.stderr = sys.stderr, os.fdopen(os.dup(console_fd), "w", buffering=1)
  try:
    yield
  finally:
    sys.stderr.flush()
    sys.stderr.close()
    sys.stderr = saved_stderr
    os.dup2(console_fd, 2)
    os.close(console_fd)


def new_run_id() -> str:
  """Sortable by start time and unique: two runs started in the same second differ."""
  return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


def configure_logging(log_dir: str, run_id: str) -> str:
  """Progress on the console, the full log (TFX, Beam, TensorFlow) in a file; returns its path."""
  os.makedirs(log_dir, exist_ok=True)
  log_path = os.path.join(log_dir, f"run-{run_id}.log")
  console = logging.StreamHandler(sys.stdout)
  console.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
  console.addFilter(_ConsoleFilter())
  logfile = logging.FileHandler(log_path)
  logfile.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
  root = logging.getLogger()
  root.handlers = [console, logfile]
  root.setLevel(logging.INFO)
  for name in ("absl", "tensorflow", *_OUR_LOGGERS):
    logger = logging.getLogger(name)
    logger.handlers = []
    logger.propagate = True
    logger.setLevel(logging.INFO)
  # Through absl's flag, not the logger: TensorFlow's SavedModel writer silences absl and then
  # restores it from the flag, whose default (WARNING) would hide TFX's progress from then on.
  absl_logging.set_verbosity(absl_logging.INFO)
  return log_path


def local_parts(config: config_lib.PipelineConfig):
  """The graph's runner parts on this machine: files as they are, TFX's Trainer, SQLite MLMD."""
  from tfx import v1 as tfx
  from pipeline.pipeline import TRAINER_RUN_FN, RunnerParts, tfrecord_input_base
  splits = ("train", "eval")
  if config.data.dataset == "tfrecord" and os.path.isdir(
      os.path.join(config.data.local_folder(config.data.tfrecord_dir), "test")):
    splits += ("test",)  # Scored locally after the run (the held-out test accuracy).

  def make_trainer(trial: int, custom_config: dict, **inputs):
    del trial  # Every trial runs the same Trainer; its config is in custom_config.
    return tfx.components.Trainer(run_fn=TRAINER_RUN_FN, custom_config=custom_config, **inputs)

  return RunnerParts(
      schema_file=config.data.schema_path, span=config.data.span,
      tfrecord_input_base=config.data.tfrecord_dir and tfrecord_input_base(
          config.data.tfrecord_dir),
      tfrecord_splits=splits, make_trainer=make_trainer,
      beam_pipeline_args=config.beam_pipeline_args(), beam_step_args=config.beam_step_args,
      metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
          config.runner.metadata_path))


def run(config: config_lib.PipelineConfig, run_id: str) -> None:
  """Runs the pipeline as MLMD's `pipeline_run` context named run_id.

  LocalDagRunner names each run by the time it starts (datetime.now().isoformat(), in
  tfx/orchestration/local/local_dag_runner.py run_with_ir); it substitutes only a run id that
  is still a runtime parameter, so binding ours first in the compiled IR makes it the name.
  """
  from tfx import v1 as tfx
  from tfx.dsl.compiler import constants
  from tfx.orchestration.portable import runtime_parameter_utils, tfx_runner
  from pipeline.pipeline import create_pipeline
  os.makedirs(os.path.dirname(config.runner.metadata_path), exist_ok=True)
  # The compile step LocalDagRunner.run takes (pip dependencies resolved, then compiled).
  ir = tfx_runner._make_pipeline_proto(  # pylint: disable=protected-access
      create_pipeline(config, local_parts(config)))
  runtime_parameter_utils.substitute_runtime_parameter(
      ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
  tfx.orchestration.LocalDagRunner().run_with_ir(ir)


def failure_message(config: config_lib.PipelineConfig, error: Exception) -> str:
  """The failing component's message. For damaged TFRecord input, the user's file and the
  byte offset instead of Beam's traceback; for another error a Beam worker raised, the error
  itself, the traceback Beam wraps it in being in the log."""
  message = f"{type(error).__name__}: {error}"
  if config.data.dataset == "tfrecord" and tfrecord_check.looks_like_corrupted_input(message):
    damaged = tfrecord_check.corrupted_files(config.data.local_folder(config.data.tfrecord_dir))
    if damaged:
      return ("Corrupted input TFRecord file(s); replace or remove them and run again:\n" +
              "\n".join(f"  - {line}" for line in damaged))
  if _WORKER_TRACEBACK in message:
    return f"{_raised_error(message)}\n(raised in a Beam worker; its traceback is in the full log)"
  return message


def _raised_error(traceback_text: str) -> str:
  """The error a traceback ends with, whole: what follows its last frame's source lines."""
  lines = traceback_text.rstrip().splitlines()
  frames = [index for index, line in enumerate(lines) if line.startswith("  File ")]
  start = frames[-1] + 1 if frames else len(lines) - 1
  while start < len(lines) - 1 and lines[start].startswith("    "):
    start += 1
  return "\n".join(lines[start:])


def main(argv: Sequence[str]) -> int:
  if any(arg in ("-h", "--help") for arg in argv):
    try:  # The defaults of the preset --config picks.
      print(config_lib.usage(config_lib.preset_named(argv)))
    except ValueError as error:
      print(f"error: {error}", file=sys.stderr)
      return 2
    return 0
  try:
    cluster_flags = [name for name, _ in name_value_pairs(argv) if name in CLUSTER_FLAGS]
    if cluster_flags:
      raise ValueError(f"cluster flags (--{', --'.join(cluster_flags)}) are for Kubeflow runs: "
                       "python -m kubeflow compile|run|schedule ...")
    config = config_lib.from_flags(argv)
    config.check_output_dir()
    config_lib.check_runs_here(config)
    if config.beam.beam_runner == "portable":
      beam_engine.check_job_server_answers(config.beam.beam_job_endpoint)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  run_id = new_run_id()
  try:
    with run_lock.local_run_lock(config.runner.output_dir, run_id) as holder:
      return _run_locked(config, run_id, holder.get("took_over"))
  except run_lock.RunLockHeld as error:
    print(f"error: {error}", file=sys.stderr)
    return 1


def _run_locked(config: config_lib.PipelineConfig, run_id: str, took_over: Optional[str]) -> int:
  from tfx import v1 as tfx  # noqa: F401  Imported first: it installs log handlers we replace.
  from local_runner import interrupted_runs
  from local_runner import run_summary
  log_path = configure_logging(config.runner.logs_dir, run_id)
  log.info("Running pipeline %s (run %s) on dataset %s; outputs under %s",
           config.runner.pipeline_name, run_id, config.data.dataset, config.runner.output_dir)
  if took_over:
    log.info(took_over)
  interrupted_runs.abandon_interrupted_executions(config, run_id)
  start = time.time()
  try:
    with stray_output_to_log(log_path):
      run(config, run_id)
  except Exception as error:  # The failing component's message is what the user needs.
    log.error("The run failed: %s: %s", type(error).__name__, error, exc_info=True,
              extra=LOG_ONLY)
    print(f"\nPipeline failed after {time.time() - start:.0f}s: "
          f"{failure_message(config, error)}\nFull log: {log_path}", file=sys.stderr)
    return 1
  summary = run_summary.summarize_run(config, run_id, elapsed_seconds=time.time() - start,
                                 log_path=log_path)
  print(summary)
  with open(log_path, "a") as log_file:  # The log keeps the gate's decision and reasons too.
    log_file.write(summary + "\n")
  return 0
