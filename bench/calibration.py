"""How the temperature is chosen, measured on a finished run: one table row per way of choosing.

From a run's output directory (the model the run evaluated, its transform graph and eval split,
and EvaluationSetGen's clean test and corrupted test images) it computes the model's logits once
and then, for each way of choosing T (`trainer_module/temperature.py`, never reimplemented
here), the clean test accuracy / NLL / ECE, cA / cNLL / cECE over the corrupted set's
corruption x severity slices (slice means), and the NLL / ECE of the validation shift (the eval
images under the 4 validation corruptions, as the Trainer makes them; slice means):
- `validation_corruptions` (the default fit), raw softmax (T = 1), `clean_and_augmix`, `clean`,
  and the validation slices pooled into one (the first version of the default fit);
- two calibration maps richer than one T that depend on how far an input is from the training
  data: the Mahalanobis distance d(x) of its penultimate features to the nearest training class
  mean under the classes' shared covariance (Lee et al., NeurIPS 2018), both chosen by the
  default fit's rule (the clean eval NLL minimum among the maps at which every validation
  slice's NLL and the slices' mean ECE are no worse than the raw softmax's):
  T(x) = exp(a + b z(x)), z the standardised log d(x), (a, b) on a grid (bench only); and
  `in_support` (a temperature_fit): one T for inputs with d(x) no larger than the farthest eval
  image's, the raw softmax beyond.
The test split and the 15 benchmark corruptions are only measured, never used to choose.

  make bench-calibration ARGS="--output_dir outputs"
  .venv/bin/python bench/calibration.py --output_dir /work/runs/mr4
"""
import argparse
import dataclasses
import json
import os
import sys
from typing import Callable, Dict, List, Sequence, Tuple, Union

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402

from bench import run_outputs  # noqa: E402
from bench.run_outputs import LabelledSet  # noqa: E402
from components.evaluation_set import CORRUPTED, TEST  # noqa: E402
from trainer_module import augmix, temperature  # noqa: E402

Temperatures = Union[float, np.ndarray]  # One T, or one per example.
# The log-linear map's grid: log T at the clean eval's mean score, and its slope per standard
# deviation of the score (validation slices lie up to ~10 of them away on the digits, so the
# slopes that matter are small). (0, 0) is the raw softmax: the grid always has a map that
# meets the rule.
LOG_T_GRID = np.linspace(np.log(0.25), np.log(4.0), 41)
SLOPE_GRID = np.linspace(-0.5, 0.5, 101)

# Table columns: (header, metric key, decimals).
COLUMNS = (("clean test acc.", "test_accuracy", 4), ("clean test NLL", "test_nll", 4),
           ("clean test ECE", "test_ece", 4), ("cA", "cA", 3), ("cNLL", "cNLL", 3),
           ("cECE", "cECE", 3), ("validation shift NLL", "validation_nll", 3),
           ("validation shift ECE", "validation_ece", 3))


@dataclasses.dataclass(frozen=True)
class ModelSets:
  """One model's logits on every set the table reads."""
  eval: LabelledSet
  validation: LabelledSet  # Slices: validation corruption_severity.
  augmented: LabelledSet  # One AugMix view of each eval image.
  test: LabelledSet
  corrupted: LabelledSet  # Slices: benchmark corruption_severity.


def scaled(labelled: LabelledSet, temperatures: Temperatures) -> LabelledSet:
  """The logits divided by T (per example when T is an array)."""
  t = np.asarray(temperatures, np.float64)
  divisor = t.reshape(-1, 1) if t.ndim else t
  return LabelledSet(np.asarray(labelled.values, np.float64) / divisor, labelled.labels,
                     labelled.slices)


def _slice_accuracy(labelled: LabelledSet) -> float:
  correct = labelled.values.argmax(axis=1) == labelled.labels
  return float(np.mean([correct[labelled.slices == name].mean()
                        for name in np.unique(labelled.slices)]))


def row_metrics(sets: ModelSets, temperatures: Dict[str, Temperatures],
                num_bins: int) -> Dict[str, float]:
  """The table's metrics with each set's logits divided by temperatures[set]."""
  test = scaled(sets.test, temperatures["test"])
  corrupted = scaled(sets.corrupted, temperatures["corrupted"])
  validation = scaled(sets.validation, temperatures["validation"])
  c_nll, c_ece = temperature.slice_means(corrupted.values, corrupted.labels, corrupted.slices,
                                         1.0, num_bins)
  v_nll, v_ece = temperature.slice_means(validation.values, validation.labels,
                                         validation.slices, 1.0, num_bins)
  return {"test_accuracy": float(np.mean(test.values.argmax(axis=1) == test.labels)),
          "test_nll": temperature.nll(test.values, test.labels),
          "test_ece": temperature.ece(test.values, test.labels, 1.0, num_bins),
          "cA": _slice_accuracy(corrupted), "cNLL": c_nll, "cECE": c_ece,
          "validation_nll": v_nll, "validation_ece": v_ece}


def table(rows: Sequence[Tuple[str, str, Dict[str, float]]]) -> str:
  """A Markdown table: one row per (how T is chosen, T, row_metrics)."""
  lines = ["| how T is chosen | T | " + " | ".join(h for h, _, _ in COLUMNS) + " |",
           "| --- | --- |" + " ---: |" * len(COLUMNS)]
  for name, t, metrics in rows:
    lines.append(f"| {name} | {t} | " + " | ".join(f"{metrics[key]:.{digits}f}"
                                                    for _, key, digits in COLUMNS) + " |")
  return "\n".join(lines)


def shift_temperatures(z: np.ndarray, log_t: float, slope: float) -> np.ndarray:
  """T(x) = exp(log_t + slope * z(x)), within temperature.py's range."""
  return np.clip(np.exp(log_t + slope * np.asarray(z, np.float64)),
                 temperature.MIN_TEMPERATURE, temperature.MAX_TEMPERATURE)


def fit_shift_map(clean: LabelledSet, clean_z: np.ndarray, shifted: LabelledSet,
                  shifted_z: np.ndarray, num_bins: int) -> Tuple[float, float]:
  """(log_t, slope) on the grid minimising the clean NLL among the maps at which each shifted
  slice's NLL, and the slices' mean ECE, are no worse than the raw softmax's: the default
  fit's rule (temperature.select_temperature_under_shift) over a two-parameter family."""
  names = np.unique(shifted.slices)
  masks = [shifted.slices == name for name in names]
  raw_nll = [temperature.nll(shifted.values[m], shifted.labels[m]) for m in masks]
  raw_ece = temperature.slice_means(shifted.values, shifted.labels, shifted.slices, 1.0,
                                    num_bins)[1]
  admissible = []
  for log_t in LOG_T_GRID:
    for slope in SLOPE_GRID:
      moved = scaled(shifted, shift_temperatures(shifted_z, log_t, slope)).values
      if all(temperature.nll(moved[m], shifted.labels[m]) <= raw + 1e-12
             for m, raw in zip(masks, raw_nll)):
        clean_nll = temperature.nll(scaled(clean, shift_temperatures(clean_z, log_t,
                                                                     slope)).values,
                                    clean.labels)
        admissible.append((clean_nll, abs(slope), float(log_t), float(slope)))
  for _, _, log_t, slope in sorted(admissible):  # Best clean NLL first; ties: flatter map.
    moved = scaled(shifted, shift_temperatures(shifted_z, log_t, slope))
    if temperature.slice_means(moved.values, moved.labels, moved.slices, 1.0,
                               num_bins)[1] <= raw_ece:
      return log_t, slope
  return 0.0, 0.0


def standardised(scores: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Each set's scores in standard deviations from the clean eval mean."""
  mean, std = scores["eval"].mean(), scores["eval"].std() + 1e-12
  return {name: (s - mean) / std for name, s in scores.items()}


def scalar_rows(sets: ModelSets, num_bins: int) -> List[Tuple[str, float]]:
  """(name, T) of each scalar way of choosing T."""
  pooled = np.full(len(sets.validation.labels), "pooled")
  return [
      ("`validation_corruptions` (default)", temperature.select_temperature_under_shift(
          sets.eval.values, sets.eval.labels, sets.validation.values, sets.validation.labels,
          sets.validation.slices, num_bins)),
      ("raw softmax", 1.0),
      ("`clean_and_augmix`", temperature.select_temperature(
          sets.eval.values, sets.eval.labels, sets.augmented.values, sets.augmented.labels)),
      ("`clean`", temperature.fit_temperature(sets.eval.values, sets.eval.labels)),
      ("validation slices pooled into one", temperature.select_temperature_under_shift(
          sets.eval.values, sets.eval.labels, sets.validation.values, sets.validation.labels,
          pooled, num_bins)),
  ]


def shift_map_row(name: str, sets: ModelSets, scores: Dict[str, np.ndarray],
                  num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  z = standardised(scores)
  log_t, slope = fit_shift_map(sets.eval, z["eval"], sets.validation, z["validation"],
                               num_bins)
  temperatures = {s: shift_temperatures(z[s], log_t, slope) for s in z}
  t = temperatures["test"]
  label = (f"exp({log_t:.3f} {slope:+.2f} z); test median {np.median(t):.3f}, corrupted "
           f"median {np.median(temperatures['corrupted']):.3f}")
  return name, label, row_metrics(sets, temperatures, num_bins)


def feature_distances(features: Callable[[str], LabelledSet]
                      ) -> Tuple[temperature.FeatureSupport, Dict[str, np.ndarray]]:
  """The feature support as `in_support` computes it, and each set's Mahalanobis distances to
  the nearest training class mean."""
  train = features("train")
  support = temperature.support_from_features(train.values, train.labels,
                                              features("eval").values)
  return support, {name: temperature.mahalanobis_distance(
      features(name).values, support.class_means, support.precision)
                   for name in ("eval", "validation", TEST, CORRUPTED)}


def in_support_row(sets: ModelSets, support: temperature.FeatureSupport,
                   distances: Dict[str, np.ndarray],
                   num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  """`in_support`: T for inputs no farther from the training classes than the farthest eval
  image (the data T is fitted on), the raw softmax beyond; T chosen by the default fit's rule."""
  inside = {name: d <= support.radius for name, d in distances.items()}
  t = temperature.select_temperature_under_shift(
      sets.eval.values, sets.eval.labels, sets.validation.values, sets.validation.labels,
      sets.validation.slices, num_bins, shifted_applies=inside["validation"])
  label = (f"{t:.3f} inside, 1 outside (inside: test {inside[TEST].mean():.2f}, corrupted "
           f"{inside[CORRUPTED].mean():.2f}, validation {inside['validation'].mean():.2f})")
  return ("`in_support`", label,
          row_metrics(sets, {name: np.where(inside[name], t, 1.0) for name in inside},
                      num_bins))


def model_sets(run: run_outputs.Run, model_dir: str) -> Tuple[ModelSets, Callable, dict]:
  """The model's logits on every set; a function giving its penultimate features on them (None
  for an ensemble); and the sets' batches for it."""
  config = run.trainer_config(model_dir)
  tft_output = run.tft_output()
  network = run_outputs.load_network(model_dir)
  eval_batches = run.split_batches(tft_output, config.eval_batch_size)
  mean, std = temperature.channel_statistics(tft_output)
  validation = temperature.validation_corrupted_set(eval_batches, mean, std,
                                                    config.validation_corruption_examples,
                                                    config.eval_batch_size)
  augmented = temperature.augmented_eval_batches(
      eval_batches, mean, std, config.seed,
      augmix.params_from_options(config.transform_options()))
  examples = run.evaluation_set()
  batches = {"eval": (eval_batches, np.full(0, "")),
             "validation": (validation.batches, validation.slices),
             "augmented": (augmented, np.full(0, ""))}
  for name in (TEST, CORRUPTED):
    mask = examples.eval_sets == name
    batches[name] = (run_outputs.transformed_batches(tft_output, examples.pngs[mask],
                                                     examples.labels[mask],
                                                     config.eval_batch_size),
                     examples.slices[mask])

  def on(model, name):
    labelled = run_outputs.labelled(model, batches[name][0], batches[name][1])
    if not len(batches[name][1]):
      labelled = dataclasses.replace(labelled, slices=np.full(len(labelled.labels), ""))
    return labelled

  sets = ModelSets(**{name: on(network, name) for name in
                      ("eval", "validation", "augmented", TEST, CORRUPTED)})
  try:
    feature_model = temperature.penultimate_model(network)
  except temperature.TemperatureFitError:  # An ensemble: several poolings, no one feature space.
    return sets, None, config
  batches["train"] = (run.split_batches(tft_output, config.eval_batch_size, "train"),
                      np.full(0, ""))
  return sets, lambda name: on(feature_model, name), config


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", default="outputs", help="a finished run's output directory")
  parser.add_argument("--model", default=None,
                      help="the producing component of the model to measure (e.g. "
                           "Trainer_trial_3); default: the model the run evaluated")
  args = parser.parse_args()
  run = run_outputs.Run(args.output_dir)
  model_dir = run.model_dir(args.model)
  sets, features, config = model_sets(run, model_dir)
  num_bins = config.num_bins
  recorded = temperature.read_calibration_info(model_dir)
  rows = [(name, f"{t:.3f}", row_metrics(sets, {s: t for s in ("test", "corrupted",
                                                                 "validation")}, num_bins))
          for name, t in scalar_rows(sets, num_bins)]
  if features is None:
    print("The model has no single penultimate layer (an ensemble): no feature-distance rows.")
  else:
    support, distances = feature_distances(features)
    rows.append(shift_map_row("T(feature distance) = exp(a + b z), bench only", sets,
                              {name: np.log(d) for name, d in distances.items()}, num_bins))
    rows.append(in_support_row(sets, support, distances, num_bins))
  print(f"model: {model_dir}\n{len(sets.eval.labels)} eval, {len(sets.validation.labels)} "
        f"validation-shift, {len(sets.test.labels)} test, {len(sets.corrupted.labels)} corrupted "
        f"examples ({len(np.unique(sets.corrupted.slices))} slices)")
  print("recorded at export: " + json.dumps({key: recorded.get(key) for key in (
      "temperature_fit", "temperature", "validation_nll_before", "validation_ece_before")}))
  print(table(rows))


if __name__ == "__main__":
  main()
