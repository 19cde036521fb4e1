"""Runs the pipeline with LocalDagRunner, shows progress, then says where everything is."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Sequence

from absl import logging as absl_logging

from pipeline import config as config_lib

log = logging.getLogger("pipeline")

# TFX's own progress lines worth showing on the console; the log file keeps everything.
_TFX_PROGRESS = ("Component %s is running.", "Component %s is finished.",
                 "A cached execution %d is used.")
_OUR_LOGGERS = ("pipeline", "trainer_module", "components")


class _ConsoleFilter(logging.Filter):

  def filter(self, record):
    return (record.levelno >= logging.ERROR or record.msg in _TFX_PROGRESS
            or record.name.split(".")[0] in _OUR_LOGGERS)


def configure_logging(log_dir: str) -> str:
  """Progress on the console, the full log (TFX, Beam, TensorFlow) in a file; returns its path."""
  os.makedirs(log_dir, exist_ok=True)
  log_path = os.path.join(log_dir, time.strftime("run-%Y%m%d-%H%M%S.log"))
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


def run(config: config_lib.PipelineConfig) -> None:
  from tfx import v1 as tfx
  from pipeline.pipeline import create_pipeline
  os.makedirs(os.path.dirname(config.metadata_path), exist_ok=True)
  tfx.orchestration.LocalDagRunner().run(create_pipeline(config))


def main(argv: Sequence[str]) -> int:
  if any(arg in ("-h", "--help") for arg in argv):
    print(config_lib.usage())
    return 0
  try:
    config = config_lib.from_flags(argv)
    if config.kubeflow is None:
      config_lib.check_runs_here(config)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  if config.kubeflow is not None:
    print("error: cluster flags (--image, --vertex_project, ...) are for Kubeflow runs: "
          "python -m kubeflow compile|run|schedule ...", file=sys.stderr)
    return 2
  from tfx import v1 as tfx  # noqa: F401  Imported first: it installs log handlers we replace.
  from pipeline import report
  log_path = configure_logging(os.path.join(config.output_dir, "logs"))
  log.info("Running pipeline %s on dataset %s; outputs under %s", config.pipeline_name,
           config.dataset, config.output_dir)
  start = time.time()
  try:
    run(config)
  except Exception as error:  # The failing component's message is what the user needs.
    print(f"\nPipeline failed after {time.time() - start:.0f}s: "
          f"{type(error).__name__}: {error}\nFull log: {log_path}", file=sys.stderr)
    return 1
  summary = report.summarize_latest_run(config, elapsed_seconds=time.time() - start,
                                        log_path=log_path)
  print(summary)
  with open(log_path, "a") as log_file:  # The log keeps the gate's decision and reasons too.
    log_file.write(summary + "\n")
  return 0
