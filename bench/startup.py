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
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cli  # noqa: E402

import trainer_module  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS, which the probes inherit.

_PROBE = "import tfx.v1, google.api_core, sys; print(google.api_core.__version__, file=sys.stderr)"


def import_seconds(extra_path: str = "") -> tuple:
  """(wall seconds, google-api-core version) of importing TFX in a fresh interpreter."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  if extra_path:
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, env.get("PYTHONPATH", "")]))
  start = time.perf_counter()
  done = subprocess.run([sys.executable, "-W", "ignore", "-c", _PROBE], env=env, check=True,
                        capture_output=True, text=True)
  return time.perf_counter() - start, done.stderr.strip().splitlines()[-1]


def build_parser() -> argparse.ArgumentParser:
  parser = cli.script_parser(__doc__)
  parser.add_argument("--other_api_core", default="",
                      help="a directory holding another google-api-core (pip install --target); "
                           "without it, only the locked environment is timed")
  parser.add_argument("--repeats", type=int, default=3,
                      help="fresh processes per variant, after one untimed warm-up import; the "
                           "median counts (default %(default)s)")
  return parser


def main():
  args = build_parser().parse_args()
  variants = {"locked": ""}
  if args.other_api_core:
    variants["other"] = args.other_api_core
  times = {name: [] for name in variants}
  versions = {}
  import_seconds()  # Warms the page cache, so the first variant is not charged for it.
  for _ in range(args.repeats):
    for name, path in variants.items():
      seconds, versions[name] = import_seconds(path)
      times[name].append(seconds)
  for name in variants:
    print(f"import tfx.v1, google-api-core {versions[name]:8s} "
          f"{' '.join(f'{s:.2f}' for s in times[name])} s; median "
          f"{statistics.median(times[name]):.2f} s")
  if args.other_api_core:
    locked, other = statistics.median(times["locked"]), statistics.median(times["other"])
    print(f"ratio other / locked: {other / locked:.2f}x ({other - locked:+.2f} s a process); "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
