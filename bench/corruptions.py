"""What the generated robustness set costs: each reference corruption per image, and
EvaluationSetGen's corrupted split made in one process against the process pool, in one run.

1. ms per image of each corruption (trainer_module/reference_corruptions.py, tfds' code), over
   `--images` digits at every severity, one process; the three at 224x224 dominate.
2. components.evaluation_set.generated_corruptions over the same `--per_corruption` test
   images under `--corruptions` (default: the pipeline's 15) with workers=1 and with the pool
   (`--workers`, 0 = auto), their wall times and ratio, and whether every image is
   byte-identical.

  .venv/bin/python bench/corruptions.py                       # the default make run's set
  .venv/bin/python bench/corruptions.py --per_corruption 20 --workers 2
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cli  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from components import evaluation_set, image_sources  # noqa: E402
from configs.flags import field_help  # noqa: E402
from pipeline.config import EvaluationConfig  # noqa: E402
from trainer_module import reference_corruptions as corruptions  # noqa: E402


def per_image_ms(images, names):
  corruptions.corrupt(images[0], "frost", 1, "warm-up")  # tfds' frost imports TensorFlow.
  costs = {}
  for name in names:
    start = time.perf_counter()
    for severity in corruptions.SEVERITIES:
      for index, image in enumerate(images):
        corruptions.corrupt(image, name, severity, f"bench-{index}")
    costs[name] = 1000 * (time.perf_counter() - start) / (len(images) * len(corruptions.SEVERITIES))
  return costs


def timed_set(records, names, per_corruption, workers):
  start = time.perf_counter()
  pngs = [example.features.feature["image"].bytes_list.value[0] for example in
          evaluation_set.generated_corruptions(records, names, per_corruption, workers)]
  return time.perf_counter() - start, pngs


def build_parser() -> argparse.ArgumentParser:
  parser = cli.script_parser(__doc__)
  parser.add_argument("--images", type=int, default=4,
                      help="digits each corruption's ms per image is timed over, at every "
                           "severity (default %(default)s)")
  parser.add_argument("--per_corruption", type=int, default=100,
                      help=field_help(EvaluationConfig)["examples_per_corruption"])
  parser.add_argument("--corruptions", default=",".join(corruptions.BENCHMARK_CORRUPTIONS),
                      help="comma-separated corruptions of the corrupted split (default: the "
                           "pipeline's 15 benchmark corruptions)")
  parser.add_argument("--workers", type=int, default=0,
                      help=field_help(EvaluationConfig)["corruption_workers"]
                      + " The pooled run's; the other has 1.")
  return parser


def main(argv=None):
  args = build_parser().parse_args(argv)
  names = [name for name in args.corruptions.split(",") if name]
  records = list(image_sources.digits_records("test", 0.15, 0.15))
  images = [image_sources.decode_png(png) for _, png, _ in records[:args.images]]

  costs = per_image_ms(images, names)
  print(f"load average {os.getloadavg()[0]:.2f}; ms per image, one process:")
  for name, cost in sorted(costs.items(), key=lambda item: -item[1]):
    print(f"  {name:20s} {cost:8.1f}")

  requests = [(None, name, 1, "") for name in names
              for _ in range(len(corruptions.SEVERITIES) * args.per_corruption)]
  pool = corruptions.pool_size(requests, args.workers)
  alone_s, alone = timed_set(records, names, args.per_corruption, 1)
  pooled_s, pooled = timed_set(records, names, args.per_corruption, args.workers)
  print(f"corrupted split, {len(alone)} images: 1 process {alone_s:.1f} s, {pool} processes "
        f"{pooled_s:.1f} s (x{alone_s / pooled_s:.2f}); byte-identical: {alone == pooled}; "
        f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
