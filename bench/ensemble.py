"""A hyper-deep ensemble against its best single member, with paired bootstrap 95% intervals.

From a finished ensemble run (`--ensemble_size=K --hyper_trials=N`) it scores the ensemble and
every trial through their served signatures (whatever their calibration map: one T, or T within
a feature support) on the clean held-out test split and the corrupted set, and gives ensemble -
best member for accuracy, NLL, ECE, cA, cNLL and cECE. The best member is the one a plain sweep
would deploy, as the selector sees it: the lowest shift_nll alone under that objective, else
the lowest served eval NLL (trainer_module.ensemble.best_single). The intervals resample whole
test images (a corrupted image's slices go with its clean test image, as they share it):
paired, since both models are scored on every resample, and seeded. It also splits each test
NLL into what the correctly and wrongly classified images contribute, served and uncalibrated.
`--ensemble_dir` scores another ensemble of the same trials (e.g. `python -m trainer_module
ensemble` with other settings).

  make bench-ensemble ARGS="--output_dir outputs"
  .venv/bin/python bench/ensemble.py --output_dir DIR --ensemble_dir ENSEMBLE/serving_model
"""
import dataclasses
import os
import sys
from typing import Dict, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import run_outputs  # noqa: E402
from bench.calibration import family_gaps  # noqa: E402
from bench.run_outputs import LabelledSet  # noqa: E402
from components.evaluation_set import CORRUPTED, TEST  # noqa: E402
from trainer_module import ensemble, metrics  # noqa: E402
from trainer_module.calibration import maths  # noqa: E402
from trainer_module.calibration.record import read_calibration_info  # noqa: E402
from trainer_module.export import ENSEMBLE_FILE, read_record  # noqa: E402
from trainer_module.features import (PROBABILITIES_KEY,  # noqa: E402
                                     UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.reference_corruptions import FAMILIES  # noqa: E402

_BATCH = 256


@dataclasses.dataclass(frozen=True)
class Scored:
  """Per-example terms of one model's served probabilities: the NLL, whether the top class is
  right, its confidence and its confidence bin (the trainer's ECE bins)."""
  nll: np.ndarray
  correct: np.ndarray
  confidence: np.ndarray
  bins: np.ndarray


def scored(labelled: LabelledSet, num_bins: int) -> Scored:
  """labelled.values: served logits (softmax gives the served probabilities)."""
  log_p = maths.log_softmax(np.asarray(labelled.values, np.float64))
  confidence = np.exp(log_p.max(axis=1))
  return Scored(-log_p[np.arange(len(labelled.labels)), labelled.labels],
                (log_p.argmax(axis=1) == labelled.labels).astype(np.float64), confidence,
                metrics.confidence_bins(confidence, num_bins))


def weighted_metrics(s: Scored, slices: np.ndarray, weights: np.ndarray,
                     num_bins: int) -> Dict[str, np.ndarray]:
  """Accuracy, NLL and ECE under example weights [replicates, examples], each the mean over
  slices of its weighted value on the slice (one slice: the plain value). Weights of 1 give
  maths.nll / ece / slice_means."""
  out = {"accuracy": [], "nll": [], "ece": []}
  for name in np.unique(slices):
    mask = slices == name
    w = weights[:, mask]
    total = w.sum(axis=1)
    out["accuracy"].append(w @ s.correct[mask] / total)
    out["nll"].append(w @ s.nll[mask] / total)
    gap = np.zeros((mask.sum(), num_bins))
    gap[np.arange(mask.sum()), s.bins[mask]] = s.correct[mask] - s.confidence[mask]
    out["ece"].append(np.abs(w @ gap).sum(axis=1) / total)
  return {key: np.mean(values, axis=0) for key, values in out.items()}


def bootstrap_weights(groups: np.ndarray, replicates: int, seed: int) -> np.ndarray:
  """[replicates, examples]: each example's count in a resample of the groups (with
  replacement, as many groups as there are); examples of a group are drawn together."""
  names, index = np.unique(groups, return_inverse=True)
  rng = np.random.default_rng(seed)
  drawn = rng.integers(0, len(names), (replicates, len(names)))
  counts = np.stack([np.bincount(row, minlength=len(names)) for row in drawn])
  return counts[:, index].astype(np.float64)


def paired_difference(a: Scored, b: Scored, slices: np.ndarray, groups: np.ndarray,
                      num_bins: int, replicates: int, seed: int
                      ) -> Dict[str, Tuple[float, float, float]]:
  """metric(a) - metric(b): (value, 2.5% and 97.5% bootstrap percentiles) per metric."""
  ones = np.ones((1, len(slices)))
  weights = bootstrap_weights(groups, replicates, seed)
  point = {k: weighted_metrics(a, slices, ones, num_bins)[k] -
           weighted_metrics(b, slices, ones, num_bins)[k] for k in ("accuracy", "nll", "ece")}
  a_boot = weighted_metrics(a, slices, weights, num_bins)
  b_boot = weighted_metrics(b, slices, weights, num_bins)
  return {k: (float(point[k][0]),) + tuple(float(q) for q in np.percentile(
      a_boot[k] - b_boot[k], [2.5, 97.5])) for k in point}


def nll_split(s: Scored) -> Tuple[float, float, int]:
  """(NLL share of the right, NLL share of the wrong, number wrong): the two add to the NLL."""
  n = len(s.nll)
  return (float(s.nll[s.correct == 1].sum() / n), float(s.nll[s.correct == 0].sum() / n),
          int((s.correct == 0).sum()))


def compare(label: str, a: Dict[str, LabelledSet], b: Dict[str, LabelledSet],
            groups: Dict[str, np.ndarray], num_bins: int, replicates: int, seed: int) -> None:
  """Prints metric(a) - metric(b) on test and the corrupted set with bootstrap intervals, and
  how each test NLL splits between the right and the wrong images."""
  print(f"\n{label}, paired bootstrap over test images ({replicates} replicates, seed {seed}): "
        "value [95% interval]")
  for split, names in ((TEST, ("accuracy", "NLL", "ECE")), (CORRUPTED, ("cA", "cNLL", "cECE"))):
    difference = paired_difference(scored(a[split], num_bins), scored(b[split], num_bins),
                                   a[split].slices, groups[split], num_bins, replicates, seed)
    for name, key in zip(names, ("accuracy", "nll", "ece")):
      value, low, high = difference[key]
      verdict = "distinguishable from 0" if low > 0 or high < 0 else "includes 0"
      print(f"  {split:9s} {name:8s} {value:+.4f} [{low:+.4f}, {high:+.4f}]  {verdict}")


def _row(name: str, t: str, eval_nll: float, sets: Dict[str, LabelledSet],
         num_bins: int) -> str:
  test = weighted_metrics(scored(sets[TEST], num_bins), sets[TEST].slices,
                          np.ones((1, len(sets[TEST].labels))), num_bins)
  corrupted = weighted_metrics(scored(sets[CORRUPTED], num_bins), sets[CORRUPTED].slices,
                               np.ones((1, len(sets[CORRUPTED].labels))), num_bins)
  gaps = family_gaps(sets[CORRUPTED])
  return (f"| {name} | {t} | {eval_nll:.4f} | {test['accuracy'][0]:.4f} | {test['nll'][0]:.4f} "
          f"| {test['ece'][0]:.4f} | {corrupted['accuracy'][0]:.4f} | {corrupted['nll'][0]:.4f} "
          f"| {corrupted['ece'][0]:.4f} | " + " | ".join(f"{gaps[f'gap_{family}']:+.3f}"
                                                      for family in FAMILIES) + " |")


def served_sets(model_dir: str, examples: run_outputs.EvaluationSet,
                batch_size: int) -> Tuple[Dict[str, LabelledSet], Dict[str, LabelledSet]]:
  """A model's served and uncalibrated probabilities (as log probabilities) on the test and
  corrupted sets, through its `serving_images` signature: whatever its calibration map (one
  T, or T within a feature support), this is what users get."""
  serve = tf.saved_model.load(model_dir).signatures["serving_images"]
  served, raw = {}, {}
  for split in (TEST, CORRUPTED):
    rows = examples.eval_sets == split
    pngs = examples.pngs[rows]
    outputs = [serve(images=tf.constant(pngs[start:start + batch_size]))
               for start in range(0, len(pngs), batch_size)]
    for into, key in ((served, PROBABILITIES_KEY), (raw, UNCALIBRATED_PROBABILITIES_KEY)):
      probabilities = np.concatenate([o[key].numpy() for o in outputs]).astype(np.float64)
      into[split] = LabelledSet(np.log(np.maximum(probabilities, 1e-12)),
                                examples.labels[rows], examples.slices[rows])
  return served, raw


FLAGS = (harness.output_dir("a finished ensemble run's output directory"),
         harness.Flag("ensemble_dir", "", "an ensemble serving_model to score instead of the "
                      "run's (e.g. from `python -m trainer_module ensemble` over the run's "
                      "trials)"),
         harness.Flag("bootstrap", 2000, "paired bootstrap replicates of each 95%% interval "
                      "(default %(default)s)"),
         harness.Flag("seed", 0, "the bootstrap's random seed (default %(default)s)"))


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main():
  args = build_parser().parse_args()
  run = run_outputs.Run(args.output_dir)
  ensemble_dir = args.ensemble_dir or run.model_dir("EnsembleSelector")
  record = read_record(ensemble_dir, ENSEMBLE_FILE)
  best = ensemble.best_single(record)
  num_bins = run.trainer_config(run.model_dir("EnsembleSelector")).calibration.num_bins
  examples = run.evaluation_set()
  groups = {name: examples.source_keys[examples.eval_sets == name] for name in (TEST, CORRUPTED)}
  models = {"ensemble": ensemble_dir}
  models.update({trial["name"]: run_outputs.local_uri(trial["model_dir"], run.config)
                 for trial in record["trials"]})
  eval_nll = {"ensemble": record["eval"]["nll"]}
  eval_nll.update({trial["name"]: trial["eval"]["nll"] for trial in record["trials"]})
  served, raw, fits = {}, {}, {}
  for name, model_dir in models.items():
    served[name], raw[name] = served_sets(model_dir, examples, _BATCH)
    info = read_calibration_info(model_dir) or {}
    fits[name] = f"{info.get('temperature_fit', 'none')} {info.get('temperature', 1.0):.3f}"
    print(f"scored {name} ({fits[name]})", flush=True)

  print(f"\nselected: {record['picks']} (weights "
        f"{[(m['name'], m['weight']) for m in record['members']]}; calibrated selection "
        f"{record.get('calibrated_selection', False)}); best single as selection judges one: "
        f"{best['name']}\n")
  print("| model | calibration, T | eval NLL | test acc. | test NLL | test ECE | cA | cNLL | "
        "cECE | " + " | ".join(FAMILIES) + " |")
  print("| --- |" + " ---: |" * (8 + len(FAMILIES)))
  for name in models:
    print(_row(name, fits[name], eval_nll[name], served[name], num_bins))
  compare(f"ensemble - {best['name']}, as served", served["ensemble"], served[best["name"]],
          groups, num_bins, args.bootstrap, args.seed)
  print("\ntest NLL = share of the right + share of the wrong (number wrong):")
  for label, sets in (("ensemble, served", served["ensemble"]),
                      ("ensemble, uncalibrated", raw["ensemble"]),
                      (f"{best['name']}, served", served[best["name"]]),
                      (f"{best['name']}, uncalibrated", raw[best["name"]])):
    s_ = scored(sets[TEST], num_bins)
    right, wrong, count = nll_split(s_)
    print(f"  {label:30s} {right + wrong:.4f} = {right:.4f} + {wrong:.4f} ({count}); mean "
          f"confidence on the right {s_.confidence[s_.correct == 1].mean():.4f}")


if __name__ == "__main__":
  main()
