"""Beam steps over the input data in_memory (one process) against multi_processing (a worker
process per core), in one run, alternating, on the pipeline's own components.

Runs ExampleGen -> ImportSchemaGen -> StatisticsGen -> ExampleValidator -> ValidationGate ->
Transform (the default config: the digits, AugMix views) with LocalDagRunner `--repeats` times
per running mode, and prints each Beam step's wall time from MLMD (best of the repeats) for
both modes, their ratio, and the CPU seconds each whole run used (this process and its Beam
worker processes): on a shared machine the CPU seconds say what a mode costs, the wall times
what it buys.

  .venv/bin/python bench/beam_modes.py                  # --repeats 1
  .venv/bin/python bench/beam_modes.py --repeats 2
  .venv/bin/python bench/beam_modes.py --repeats 2 --augmix_view_sets 16   # 4x the views
"""
import argparse
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cli  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from ml_metadata.metadata_store import metadata_store  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from pipeline.config import from_preset  # noqa: E402
from local_runner.runner import local_parts  # noqa: E402
from pipeline.pipeline import input_steps, trainer_module_fingerprint  # noqa: E402

BEAM_STEPS = ("ImageDatasetExampleGen", "StatisticsGen", "ValidationGate", "Transform")
MODES = ("in_memory", "multi_processing")


def _cpu_seconds() -> float:
  usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
  return sum(u.ru_utime + u.ru_stime for u in usage)


def run_steps(mode: str, work_dir: str, **overrides) -> tuple:
  """({step: wall seconds}, CPU seconds, wall seconds) of the input steps under `mode`."""
  config = from_preset().replace(output_dir=work_dir, beam_running_mode=mode,
                                 enable_cache=False, **overrides)
  parts = local_parts(config)
  components = input_steps(config, parts, trainer_module_fingerprint())
  connection = parts.metadata_connection_config
  os.makedirs(os.path.dirname(config.runner.metadata_path), exist_ok=True)
  cpu, wall = _cpu_seconds(), time.perf_counter()
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name=config.runner.pipeline_name, pipeline_root=config.runner.pipeline_root,
      components=components, enable_cache=False, metadata_connection_config=connection,
      beam_pipeline_args=config.beam_pipeline_args()))  # The running mode: as the pipeline.
  cpu, wall = _cpu_seconds() - cpu, time.perf_counter() - wall
  store = metadata_store.MetadataStore(connection)
  seconds = {}
  for execution in store.get_executions():
    name = store.get_execution_types_by_id([execution.type_id])[0].name.split(".")[-1]
    seconds[name] = (execution.last_update_time_since_epoch -
                     execution.create_time_since_epoch) / 1000.0
  return {step: seconds[step] for step in BEAM_STEPS if step in seconds}, cpu, wall


def build_parser() -> argparse.ArgumentParser:
  parser = cli.script_parser(__doc__)
  parser.add_argument("--repeats", type=int, default=1,
                      help="runs per running mode, the modes alternating; each step's best "
                           "wall time counts (default %(default)s)")
  parser.add_argument("--augmix_view_sets", type=int, default=0,
                      help="AugMix view sets Transform writes (default 0: the preset's); more "
                           "sets, more TensorFlow work for the same examples")
  return parser


def main(argv=None) -> None:
  args = build_parser().parse_args(argv)
  overrides = {"augmix_view_sets": args.augmix_view_sets} if args.augmix_view_sets else {}
  best = {mode: {} for mode in MODES}
  cpu = {mode: [] for mode in MODES}
  wall = {mode: [] for mode in MODES}
  loads = [os.getloadavg()[0]]
  for repeat in range(args.repeats):
    for mode in MODES if repeat % 2 == 0 else reversed(MODES):
      steps, cpu_s, wall_s = run_steps(mode, tempfile.mkdtemp(prefix=f"bench-beam-{mode}-"),
                                       **overrides)
      for step, seconds in steps.items():
        best[mode][step] = min(seconds, best[mode].get(step, float("inf")))
      cpu[mode].append(cpu_s)
      wall[mode].append(wall_s)
      loads.append(os.getloadavg()[0])
  print(f"load average {min(loads):.1f}-{max(loads):.1f}; wall seconds per step (best of "
        f"{args.repeats}), the digits (1,797 examples), "
        f"AugMix view sets: {overrides.get('augmix_view_sets', 'as the preset')}")
  print(f"  {'step':24s} {'in_memory':>10s} {'multi_processing':>17s} {'ratio':>7s}")
  for step in BEAM_STEPS:
    one, many = best["in_memory"].get(step), best["multi_processing"].get(step)
    if one is not None and many is not None:
      print(f"  {step:24s} {one:10.1f} {many:17.1f} {many / one:6.2f}x")
  for mode in MODES:
    print(f"  {mode}: whole run {min(wall[mode]):.1f} s wall, {min(cpu[mode]):.1f} CPU s")


if __name__ == "__main__":
  main()
