"""Start-up: the seconds a fresh process takes to import TFX (`import tfx.v1`), as every local
run, Beam worker that loads TFX, Kubeflow pod and test process pays it, with the locked
google-api-core against another copy of it put first on the path, alternating in one run.

google-api-core 2.28-2.43 scans every installed distribution's file list
(`importlib.metadata.packages_distributions()`) once for each Google Cloud client package that
TFX's imports load (googleapis/python-api-core#878); the lock keeps 2.27, which has no such
check. To measure what that costs here:

  .venv/bin/pip install --no-deps --target /tmp/api-core-2.29 google-api-core==2.29.0
  .venv/bin/python bench/startup.py --other_api_core /tmp/api-core-2.29
"""
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import trainer_module  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS, which the probes inherit.

_PROBE = "import tfx.v1, google.api_core, sys; print(google.api_core.__version__, file=sys.stderr)"
FLAGS = (harness.Flag("other_api_core", "", "a directory holding another google-api-core (pip "
                      "install --target); without it, only the locked environment is timed"),
         harness.repeats(3, "after one untimed warm-up import, the median counts"))


def import_version(extra_path: str = "") -> str:
  """The google-api-core version a fresh interpreter imports with TFX, `extra_path` first."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  if extra_path:
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, env.get("PYTHONPATH", "")]))
  done = subprocess.run([sys.executable, "-W", "ignore", "-c", _PROBE], env=env, check=True,
                        capture_output=True, text=True)
  return done.stderr.strip().splitlines()[-1]


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main():
  args = build_parser().parse_args()
  paths = {"locked": ""}
  if args.other_api_core:
    paths["other"] = args.other_api_core
  import_version()  # Warms the page cache, so the first variant is not charged for it.
  runs = harness.alternate({name: lambda path=path: import_version(path)
                            for name, path in paths.items()}, args.repeats)
  medians = {name: statistics.median(run.wall for run in timed) for name, timed in runs.items()}
  print(harness.table(["variant", "google-api-core", "import tfx.v1, s", "median, s"], [
      (name, timed[0].value, " ".join(f"{run.wall:.2f}" for run in timed), f"{medians[name]:.2f}")
      for name, timed in runs.items()]))
  if args.other_api_core:
    print(f"ratio other / locked: {medians['other'] / medians['locked']:.2f}x "
          f"({medians['other'] - medians['locked']:+.2f} s a process); {harness.load_average()}")


if __name__ == "__main__":
  main()
