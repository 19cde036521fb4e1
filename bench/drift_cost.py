"""The drift check's cost in a run: `python -m local_runner` (make run's pipeline) with a model in
production, with the DriftCheck step and without it (--drift_check=false), side by side.

One run with the check first pushes the model in production and the drift baseline of its data.
Each timed run then starts from a fresh output directory holding a copy of that serving
directory (the same production model and baseline, an empty step cache) and trains again on the
same data (--force_retrain=true): with the check, which reads the baseline, compares the
statistics with TFDV and runs the production model on both samples (BBSD); and without it. The
variants alternate (A B B A ...), so a change of the machine's load hits both alike. Each run
must end with exit 0 and its summary must show the check's real work (a drift status from a
comparison with the baseline) or its absence ("not checked"). Prints each run's wall and CPU
seconds (the runner's process and its children), the runner's own time, the DriftCheck's MLMD
execution seconds, the drift status and the load average; then the ratios with/without of the
medians and of each round's pair.

  .venv/bin/python bench/drift_cost.py [--config tiny] [--repeats 2] [--pipeline_flags "..."]
"""
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import configs  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITH, WITHOUT = "with the check", "without"
VARIANT_FLAGS = {WITH: ["--drift_check=true"], WITHOUT: ["--drift_check=false"]}
# What the summary says when the check compared nothing (components/drift_baseline.py).
NOTHING_COMPARED = ("no production model", "production has no baseline")
NOT_CHECKED = "not checked"
_FINISHED = re.compile(r"finished in (\d+)s")
_DRIFT = re.compile(r"^  drift: +(.*)$", re.MULTILINE)
FLAGS = (harness.Flag("config", configs.DEFAULT_PRESET, "the preset both variants run "
                      "(default %(default)s, make run's)"),
         harness.repeats(2, "the medians and each round's ratio count"),
         harness.Flag("pipeline_flags", "", "more flags for every run of the pipeline, as one "
                      "string (e.g. \"--train_epochs=2\"; default none)"),
         harness.Flag("work_dir", None, "where the runs' output directories go; the model in "
                      "production that an earlier call left there is reused (default: a new "
                      "temporary directory, deleted at the end)"),
         harness.keep("every run's output directory", "once its figures are read"))


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def run_pipeline(output_dir, flags, log_path):
  """`python -m local_runner` into output_dir; returns its output. A failed run raises with
  the end of its log."""
  command = [sys.executable, "-m", "local_runner", f"--output_dir={output_dir}", *flags]
  with open(log_path, "w") as log:
    status = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
  with open(log_path) as log:
    text = log.read()
  if status != 0:
    raise RuntimeError(f"{' '.join(command[1:])} exited {status}:\n{text[-4000:]}")
  return text


def drift_status(output):
  """The summary's drift line."""
  found = _DRIFT.search(output)
  if found is None:
    raise RuntimeError("The run's summary has no drift line:\n" + output[-3000:])
  return found.group(1).strip()


def check_status(variant, status):
  """Refuses a run that did not do what its variant measures."""
  if variant == WITHOUT and status != NOT_CHECKED:
    raise RuntimeError(f"The run without the check says drift: {status}")
  if variant == WITH and (status == NOT_CHECKED or status in NOTHING_COMPARED):
    raise RuntimeError(f"The run with the check compared nothing (drift: {status}): no model "
                       "with a drift baseline in production")


def paths(output_dir, flags):
  """(serving directory, MLMD connection config) of a run into output_dir with flags."""
  from pipeline.config import from_flags
  config = from_flags([f"--output_dir={output_dir}", *flags])
  from ml_metadata.proto import metadata_store_pb2
  connection = metadata_store_pb2.ConnectionConfig()
  connection.sqlite.filename_uri = config.runner.metadata_path
  connection.sqlite.connection_mode = 1  # READONLY
  return config.runner.serving_model_dir, connection


def median(values):
  return statistics.median(values)


def main():
  args = build_parser().parse_args()
  extra = [f"--config={args.config}", *shlex.split(args.pipeline_flags)]
  work = args.work_dir or tempfile.mkdtemp(prefix="bench-drift-cost-")
  os.makedirs(work, exist_ok=True)
  print(f"before: {harness.load_average()}", flush=True)
  try:
    production = os.path.join(work, "production")
    serving_dir, _ = paths(production, extra)
    if not (os.path.isdir(serving_dir) and os.listdir(serving_dir)):  # Else an earlier call's.
      output = run_pipeline(production, [*extra, *VARIANT_FLAGS[WITH]],
                            os.path.join(work, "production.log"))
      if not (os.path.isdir(serving_dir) and os.listdir(serving_dir)):
        raise RuntimeError("The first run pushed no model:\n" + output[-3000:])
    print(f"model in production: {serving_dir} ({', '.join(sorted(os.listdir(serving_dir)))})",
          flush=True)
    figures = {WITH: [], WITHOUT: []}

    def variant_run(variant):
      number = len(figures[variant]) + 1
      output_dir = os.path.join(work, f"{'with' if variant == WITH else 'without'}-{number}")
      own_serving_dir, connection = paths(output_dir, extra)
      shutil.copytree(serving_dir, own_serving_dir)
      timed = harness.timed(run_pipeline, output_dir,
                            [*extra, "--force_retrain=true", *VARIANT_FLAGS[variant]],
                            output_dir + ".log")
      status = drift_status(timed.value)
      check_status(variant, status)
      runner = _FINISHED.search(timed.value)
      check_seconds = sum(harness.execution_seconds(connection, "DriftCheck").values())
      row = (variant, status, number, timed.wall, timed.cpu,
             int(runner.group(1)) if runner else None, check_seconds, os.getloadavg()[0])
      figures[variant].append(row)
      print("  " + " | ".join(str(cell) for cell in row), flush=True)
      if not args.keep:
        shutil.rmtree(output_dir, ignore_errors=True)

    harness.alternate({name: (lambda name=name: variant_run(name)) for name in (WITH, WITHOUT)},
                      args.repeats)
  finally:
    if not args.keep and not args.work_dir:
      shutil.rmtree(work, ignore_errors=True)
  print(f"after: {harness.load_average()}")
  rows = [(variant, status, number, f"{wall:.1f}", f"{cpu:.1f}", runner, f"{check:.1f}",
           f"{load:.1f}")
          for variant in (WITH, WITHOUT)
          for variant, status, number, wall, cpu, runner, check, load in figures[variant]]
  print(harness.table(["variant", "drift", "run", "wall s", "CPU s", "runner s", "DriftCheck s",
                       "load average"], rows, left=2))
  for column, name in ((3, "wall"), (4, "CPU")):
    with_check = [row[column] for row in figures[WITH]]
    without = [row[column] for row in figures[WITHOUT]]
    pairs = ", ".join(f"{a / b:.3f}" for a, b in zip(with_check, without))
    print(f"{name} with/without: medians {median(with_check):.1f} / {median(without):.1f} s = "
          f"{median(with_check) / median(without):.3f}x (each round: {pairs})")


if __name__ == "__main__":
  main()
