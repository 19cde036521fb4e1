"""The drift check's detection rate for each shift it must catch, and its rate of false alarms,
at the default bounds, on the embedded digits.

A tiny model (logistic regression on the 32x32 grey pixels) is trained once on a fixed 20% of
the 1,797 digits: it stands in for the production model whose softmax outputs BBSD compares.
Each draw splits the other 80% at random into a baseline half (what production was trained on)
and a new half, applies the shift to the new half, and runs the drift computation the DriftCheck
step runs (components/drift.py compare, components/drift_check.py's class-set check): a draw is
a detection when any feature moved or the class set changed. The no-shift rows are fresh random
splits with nothing applied: each detection there is a false alarm.

  .venv/bin/python bench/drift.py                 # 20 draws per shift
  .venv/bin/python bench/drift.py --draws 5
"""
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import numpy as np  # noqa: E402

from components import drift, image_sources  # noqa: E402
from pipeline.config import DriftConfig  # noqa: E402

SHIFTS = ("none", "brightness x0.8", "contrast x0.6", "Gaussian noise sigma 0.08",
          "class balance 3:1 on two classes", "one class removed")
MODEL_FRACTION = 0.2


def _table(images, labels):
  rows = [drift.image_statistics(image_sources.encode_png(image)) for image in images]
  table = {name: np.asarray([row[name] for row in rows])
           for name in drift.NUMERIC_IMAGE_STATISTICS + (drift.FORMAT,)}
  table[drift.LABEL] = np.asarray(labels)
  return table


def _grey(images):
  return images.astype(np.float64).mean(axis=3).reshape(len(images), -1) / 255.0


def shifted(shift, images, labels, rng):
  """The new half after `shift`: (images, labels)."""
  pixels = images.astype(np.float64) / 255.0
  if shift == "brightness x0.8":
    pixels = pixels * 0.8
  elif shift == "contrast x0.6":
    mean = pixels.mean(axis=(1, 2, 3), keepdims=True)
    pixels = (pixels - mean) * 0.6 + mean
  elif shift == "Gaussian noise sigma 0.08":
    pixels = pixels + rng.normal(0.0, 0.08, pixels.shape)
  elif shift == "class balance 3:1 on two classes":
    major, minor = rng.choice(np.unique(labels), 2, replace=False)
    minors = np.flatnonzero(labels == minor)
    keep_minor = rng.choice(minors, int(np.ceil(np.sum(labels == major) / 3)), replace=False)
    keep = np.flatnonzero(labels != minor).tolist() + keep_minor.tolist()
    keep = np.sort(np.asarray(keep))
    return images[keep], labels[keep]
  elif shift == "one class removed":
    keep = labels != rng.choice(np.unique(labels))
    return images[keep], labels[keep]
  return np.clip(np.round(pixels * 255.0), 0, 255).astype(np.uint8), labels


def build_parser():
  return harness.parser(__doc__, harness.Flag("draws", 20, "draws per shift (default "
                                                           "%(default)s)"),
                        harness.Flag("seed", 0, "random seed (default %(default)s)"))


def main() -> int:
  args = build_parser().parse_args()
  from sklearn.datasets import load_digits
  from sklearn.linear_model import LogisticRegression
  digits = load_digits()
  images, labels = image_sources.digits_to_images(digits.images), digits.target
  rng = np.random.default_rng(args.seed)
  order = rng.permutation(len(labels))
  model_part = order[:int(MODEL_FRACTION * len(labels))]
  rest = order[len(model_part):]
  model = LogisticRegression(max_iter=2000, C=0.1).fit(_grey(images[model_part]),
                                                       labels[model_part])
  defaults = DriftConfig()
  limits = drift.Limits(defaults.max_category_distance, defaults.max_image_divergence,
                        defaults.drift_p_value)
  unshifted = _table(images, labels)
  rows, seconds = [], []
  for shift in SHIFTS:
    detected, fired = 0, Counter()
    for _ in range(args.draws):
      halves = rng.permutation(rest)
      base, new = halves[:len(halves) // 2], halves[len(halves) // 2:]
      baseline_table = {name: values[base] for name, values in unshifted.items()}
      new_images, new_labels = shifted(shift, images[new], labels[new], rng)
      started = time.perf_counter()
      new_table = _table(new_images, new_labels)
      vanished, appeared = drift.class_set_change(drift.counts(baseline_table[drift.LABEL]),
                                                  drift.counts(new_labels))
      comparisons = drift.compare(baseline_table, new_table, limits,
                                  model.predict_proba(_grey(images[base])),
                                  model.predict_proba(_grey(new_images)))
      seconds.append(time.perf_counter() - started)
      moved = [c.feature for c in comparisons if c.moved]
      if vanished or appeared:
        moved.append("class set")
      fired.update(moved)
      detected += bool(moved)
    what = ", ".join(f"{name} {count}" for name, count in fired.most_common())
    rows.append((shift, "false alarms" if shift == "none" else "detected",
                 f"{detected}/{args.draws}", what or "-"))
    print(f"{shift}: {detected}/{args.draws} ({what or 'nothing moved'})", flush=True)
  print()
  print(f"Defaults: max_category_distance={limits.max_category_distance}, "
        f"max_image_divergence={limits.max_image_divergence}, drift_p_value={limits.p_value}; "
        f"{len(rest) // 2} baseline and {len(rest) - len(rest) // 2} new images per draw; BBSD "
        f"model trained on {len(model_part)} others; {np.median(seconds):.2f} s per comparison "
        f"(median, image statistics of the new half included); {harness.load_average()}.")
  print(harness.table(["shift", "counted", "draws", "features that moved (draws)"], rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
