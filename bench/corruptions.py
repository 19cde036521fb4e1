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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from components import evaluation_set, image_sources  # noqa: E402
from configs.flags import field_help  # noqa: E402
from pipeline.config import EvaluationConfig  # noqa: E402
from trainer_module import reference_corruptions as corruptions  # noqa: E402

_EVALUATION = field_help(EvaluationConfig)
FLAGS = (harness.Flag("images", 4, "digits each corruption's ms per image is timed over, at "
                      "every severity (default %(default)s)"),
         harness.Flag("per_corruption", 100, _EVALUATION["examples_per_corruption"]),
         harness.Flag("corruptions", ",".join(corruptions.BENCHMARK_CORRUPTIONS),
                      "comma-separated corruptions of the corrupted split (default: the "
                      "pipeline's 15 benchmark corruptions)"),
         harness.Flag("workers", 0, _EVALUATION["corruption_workers"]
                      + " The pooled run's; the other has 1."))


def per_image_ms(images, name) -> float:
  """ms per image of one corruption, over `images` at every severity."""
  timed = harness.timed(lambda: [corruptions.corrupt(image, name, severity, f"bench-{index}")
                                 for severity in corruptions.SEVERITIES
                                 for index, image in enumerate(images)])
  return 1000 * timed.wall / (len(images) * len(corruptions.SEVERITIES))


def corrupted_pngs(records, names, per_corruption, workers):
  return [example.features.feature["image"].bytes_list.value[0] for example in
          evaluation_set.generated_corruptions(records, names, per_corruption, workers)]


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main(argv=None):
  args = build_parser().parse_args(argv)
  names = [name for name in args.corruptions.split(",") if name]
  records = list(image_sources.digits_records("test", 0.15, 0.15))
  images = [image_sources.decode_png(png) for _, png, _ in records[:args.images]]

  corruptions.corrupt(images[0], "frost", 1, "warm-up")  # tfds' frost imports TensorFlow.
  costs = {name: per_image_ms(images, name) for name in names}
  print(f"{harness.load_average()}; ms per image, one process:")
  print(harness.table(["corruption", "ms per image"], [
      (name, f"{cost:.1f}") for name, cost in sorted(costs.items(), key=lambda item: -item[1])]))

  requests = [(None, name, 1, "") for name in names
              for _ in range(len(corruptions.SEVERITIES) * args.per_corruption)]
  pool = corruptions.pool_size(requests, args.workers)
  alone = harness.timed(corrupted_pngs, records, names, args.per_corruption, 1)
  pooled = harness.timed(corrupted_pngs, records, names, args.per_corruption, args.workers)
  print(f"corrupted split, {len(alone.value)} images: 1 process {alone.wall:.1f} s, {pool} "
        f"processes {pooled.wall:.1f} s (x{alone.wall / pooled.wall:.2f}); byte-identical: "
        f"{alone.value == pooled.value}; {harness.load_average()}")


if __name__ == "__main__":
  main()
