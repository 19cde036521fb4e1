"""`python -m local_runner history [--output_dir=...] [--pipeline_name=...] [--history_dir=...]
[--history_runs=N]`: prints the pipeline's run history (components/run_history.py), the table
the run report's History section shows, from the history folder every runner writes (local, or
gs:// / s3:// where a Kubeflow run keeps it)."""
from __future__ import annotations

import sys
from typing import Sequence

from components import run_history
from configs.flags import describe_flags, name_value_pairs
from pipeline import config as config_lib
from storage import object_storage
from storage.object_storage import is_object_store_uri

FLAGS = ("output_dir", "pipeline_name", "history_dir", "history_runs")
USAGE = "usage: python -m local_runner history [--flag=value ...]\n" + describe_flags([(
    "history", [("output_dir", "outputs", "The run's output directory (--output_dir of its runs)."),
                ("pipeline_name", "wrn_image_classifier", "The pipeline whose runs are shown."),
                ("history_dir", "", "The history folder; empty: <output_dir>/history/"
                 "<pipeline_name>."),
                ("history_runs", 10, "How many of the last runs to show.")])])


def main(argv: Sequence[str]) -> int:
  if any(arg in ("-h", "--help") for arg in argv):
    print(USAGE)
    return 0
  try:
    unknown = sorted({name for name, _ in name_value_pairs(argv)} - set(FLAGS))
    if unknown:
      raise ValueError(f"unknown flag(s) --{', --'.join(unknown)} for `history`; it takes "
                       f"--{', --'.join(FLAGS)}")
    runner = config_lib.from_flags(argv).runner
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  if is_object_store_uri(runner.history_directory):
    object_storage.configure()
  entries = run_history.read(runner.history_directory, runner.history_runs)
  if not entries:
    print(f"No runs recorded in {run_history.printable(runner.history_directory)}.")
    return 0
  print(f"The last {len(entries)} run(s) of {runner.pipeline_name}, oldest first "
        f"({run_history.printable(runner.history_directory)}):")
  print(run_history.text_table(entries))
  return 0
