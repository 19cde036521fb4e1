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
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from tfx import v1 as tfx  # noqa: E402

from pipeline.config import from_preset  # noqa: E402
from local_runner.runner import local_parts  # noqa: E402
from pipeline.pipeline import example_gen, input_steps, trainer_module_fingerprint  # noqa: E402

BEAM_STEPS = ("ImageDatasetExampleGen", "StatisticsGen", "ValidationGate", "Transform")
MODES = ("in_memory", "multi_processing")
FLAGS = (harness.repeats(1, "each step's best wall time counts"),
         harness.Flag("augmix_view_sets", 0, "AugMix view sets Transform writes (default 0: the "
                      "preset's); more sets, more TensorFlow work for the same examples"))


def run_steps(mode: str, **overrides) -> dict:
  """{step: wall seconds} of the input steps under `mode`, each from MLMD."""
  work_dir = tempfile.mkdtemp(prefix=f"bench-beam-{mode}-")
  config = from_preset().replace(output_dir=work_dir, beam_running_mode=mode,
                                 enable_cache=False, **overrides)
  parts = local_parts(config)
  connection = parts.metadata_connection_config
  os.makedirs(os.path.dirname(config.runner.metadata_path), exist_ok=True)
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name=config.runner.pipeline_name, pipeline_root=config.runner.pipeline_root,
      components=input_steps(config, parts, trainer_module_fingerprint(),
                             example_gen(config, parts)), enable_cache=False,
      metadata_connection_config=connection,
      beam_pipeline_args=config.beam_pipeline_args()))  # The running mode: as the pipeline.
  return {step: seconds for step in BEAM_STEPS
          for seconds in harness.execution_seconds(connection, step).values()}


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main(argv=None) -> None:
  args = build_parser().parse_args(argv)
  overrides = {"augmix_view_sets": args.augmix_view_sets} if args.augmix_view_sets else {}
  start_load = harness.load_average()
  runs = harness.alternate({mode: lambda mode=mode: run_steps(mode, **overrides)
                            for mode in MODES}, args.repeats)
  best = {mode: {step: min(run.value[step] for run in timed if step in run.value)
                 for step in BEAM_STEPS if any(step in run.value for run in timed)}
          for mode, timed in runs.items()}
  print(f"{start_load} at the start, {harness.load_average()} at the end; wall seconds per step "
        f"(best of {args.repeats}), the digits (1,797 examples), AugMix view sets: "
        f"{overrides.get('augmix_view_sets', 'as the preset')}")
  print(harness.table(["step", "in_memory", "multi_processing", "ratio"], [
      (step, f"{best['in_memory'][step]:.1f}", f"{best['multi_processing'][step]:.1f}",
       f"{best['multi_processing'][step] / best['in_memory'][step]:.2f}x")
      for step in BEAM_STEPS if step in best["in_memory"] and step in best["multi_processing"]]))
  for mode, timed in runs.items():
    print(f"  {mode}: whole run {min(run.wall for run in timed):.1f} s wall, "
          f"{min(run.cpu for run in timed):.1f} CPU s")


if __name__ == "__main__":
  main()
