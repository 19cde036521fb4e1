"""The Trainer's start-up: its first training step (tracing the step's graph) as trainer_module
traces it, without AutoGraph, against the same step traced with AutoGraph (tf.function's
default, what it did before), on a finished run's transformed train split and Trainer config
(AugMix views included when the run has them).

Each measurement runs in a fresh process (TensorFlow caches conversions within a process), the
two alternate `--repeats` times, and the script prints each first step, the steady step time
after it, their medians, the ratio, and whether both traces give the same losses.

  .venv/bin/python bench/first_step.py --output_dir outputs
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

_STEADY_STEPS = 5
FLAGS = (harness.output_dir("a finished single-model run's output directory"),
         harness.repeats(2),
         harness.Flag("child", None, "the variant this process measures", hidden=True,
                      choices=("autograph", "plain")))


def measure(output_dir: str, autograph: bool) -> dict:
  """In this process: the first step's and the mean steady step's seconds, and the losses."""
  import tempfile
  import pipeline  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
  import tensorflow as tf
  from bench import run_outputs
  from trainer_module import data, distribution, training_loop

  run = run_outputs.Run(output_dir)
  config = run.trainer_config(run.model_dir("Trainer"))
  distribution.set_precision_policy(config)
  files = tf.io.gfile.glob(os.path.join(run.uri("transformed_examples"), "Split-train", "*"))
  spec = run.tft_output().transformed_feature_spec()
  strategy = tf.distribute.get_strategy()
  training = training_loop.Training(config, strategy, steps_per_epoch=10_000,
                                    checkpoint_dir=tempfile.mkdtemp())
  # pylint: disable-next=protected-access
  step = (training.train_step if not autograph else tf.function(training._train_step))
  batches = iter(
      strategy.distribute_datasets_from_function(lambda context: data.training_batches(
          files, spec, config, config.training.per_core_batch_size, 0, context)))
  first = harness.timed(lambda: [float(step(batches))])
  steady = harness.timed(lambda: [float(step(batches)) for _ in range(_STEADY_STEPS)])
  return {"first": first.wall, "steady": steady.wall / _STEADY_STEPS,
          "losses": first.value + steady.value, "policy": training.precision_policy}


def in_child(output_dir: str, variant: str) -> dict:
  """measure() in a fresh process (TensorFlow caches conversions within a process)."""
  output = subprocess.run([sys.executable, __file__, "--output_dir", output_dir, "--child",
                           variant], capture_output=True, text=True, check=True)
  result = json.loads(output.stdout.strip().splitlines()[-1])
  print(f"{variant:>9}: first step {result['first']:.2f} s, then {result['steady']:.3f} s per "
        f"step ({result['policy']}; {harness.load_average()})", flush=True)
  return result


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main():
  args = build_parser().parse_args()
  if args.child:
    print(json.dumps(measure(args.output_dir, args.child == "autograph")))
    return
  runs = harness.alternate({variant: lambda variant=variant: in_child(args.output_dir, variant)
                            for variant in ("autograph", "plain")}, args.repeats)
  results = {variant: [run.value for run in timed] for variant, timed in runs.items()}
  first = {k: statistics.median(r["first"] for r in v) for k, v in results.items()}
  steady = {k: statistics.median(r["steady"] for r in v) for k, v in results.items()}
  same = all(r["losses"] == results["plain"][0]["losses"] for v in results.values() for r in v)
  print(f"\nmedian first step: AutoGraph {first['autograph']:.2f} s, without "
        f"{first['plain']:.2f} s: {first['autograph'] / first['plain']:.1f}x; tracing alone "
        f"(first - steady) {first['autograph'] - steady['autograph']:.2f} s -> "
        f"{first['plain'] - steady['plain']:.2f} s; steady step {steady['autograph']:.3f} / "
        f"{steady['plain']:.3f} s; the same {1 + _STEADY_STEPS} losses in every run: "
        f"{'yes' if same else 'NO'}")


if __name__ == "__main__":
  main()
