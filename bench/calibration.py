"""How the temperature is chosen, measured on a finished run: one table row per way of choosing.

From a run's output directory (the model the run evaluated, its transform graph and eval split,
and EvaluationSetGen's clean test and corrupted test images) it computes the model's logits once
and then, for each way of choosing T (`trainer_module/calibration/`, never reimplemented
here), the clean test accuracy / NLL / ECE, cA / cNLL / cECE over the corrupted set's
corruption x severity slices (slice means), the NLL / ECE of the validation shift (the eval
images under the 9 validation corruptions, as the Trainer makes them; slice means) and each
corruption family's confidence minus accuracy (the mean over its slices):
- the one-T choices: `validation_corruptions`, raw softmax (T = 1), `clean`, and the
  validation slices pooled into one (a rule on their mean instead of each slice);
- the maps by how far an input is from the training data, z(x) the standardised log of the
  Mahalanobis distance of its penultimate features to the nearest training class mean under
  the classes' shared covariance (Lee et al., NeurIPS 2018): the distance alone, T(x) = exp(a +
  b z(x)), and `distance_detail_curve` (the default), T(x) = exp(a + b z(x) + c s(x)), s the
  input's detail score (trainer_module/calibration/detail.py), both fitted by
  distance_curve.fit_distance_curve.
The test split and the 15 benchmark corruptions are only measured, never used to choose.
For an ensemble the distance score is the one it serves (the mean of its members' scores, each
in the member's own feature space, from its recorded support).

Three more rows are ceilings, not rules: T chosen with the corrupted set's own labels, the best
the default map's form can do (its a, b and c fitted there), the best any function of the
distance score can do (one T per bin of z) and the best one T per slice can do. They say how
much of what is left a better rule could remove. The "cECE floor" column is
the cECE a perfectly calibrated model with the row's confidences would measure on slices of
this size (exact: each bin's accuracy Binomial(n, its mean confidence) / n): ECE over a few
hundred images is biased upward by binomial noise, so no row can go below it.

  make bench-calibration ARGS="--output_dir outputs"
  .venv/bin/python bench/calibration.py --output_dir DIR --model Trainer_trial_1
"""
import dataclasses
import json
import os
import sys
from typing import Callable, Dict, List, Sequence, Tuple, Union

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402

from bench import run_outputs  # noqa: E402
from bench.run_outputs import LabelledSet  # noqa: E402
from components.evaluation_set import CORRUPTED, TEST  # noqa: E402
from trainer_module import ensemble  # noqa: E402
from trainer_module.calibration import (  # noqa: E402
    detail, distance_curve, distances, inputs, maths, model_outputs, record, registry)
from trainer_module.export import ENSEMBLE_FILE, read_record  # noqa: E402
from trainer_module.metrics import confidence_bins, ece_floor  # noqa: E402
from trainer_module.reference_corruptions import FAMILIES, family_of_slice  # noqa: E402

Temperatures = Union[float, np.ndarray]  # One T, or one per example.
FLAGS = (harness.output_dir(),
         harness.Flag("model", None, "the producing component of the model to measure (e.g. "
                      "Trainer_trial_3); default: the model the run evaluated"))


def build_parser():
  return harness.parser(__doc__, *FLAGS)
CEILING_DISTANCE_BINS = 20  # Equal-count bins of the corrupted set's distance scores.

# Table columns: (header, metric key, decimals).
COLUMNS = (("clean test acc.", "test_accuracy", 4), ("clean test NLL", "test_nll", 4),
           ("clean test ECE", "test_ece", 4), ("cA", "cA", 3), ("cNLL", "cNLL", 3),
           ("cECE", "cECE", 3), ("cECE floor", "cECE_floor", 3),
           ("validation shift NLL", "validation_nll", 3),
           ("validation shift ECE", "validation_ece", 3)) + tuple(
               (family, f"gap_{family}", 3) for family in FAMILIES)


@dataclasses.dataclass(frozen=True)
class ModelSets:
  """One model's logits on every set the table reads."""
  eval: LabelledSet
  validation: LabelledSet  # Slices: validation corruption_severity.
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


def family_gaps(labelled: LabelledSet) -> Dict[str, float]:
  """Per corruption family, the mean over its slices of mean confidence minus accuracy (> 0:
  over-confident), as the run report shows it; nan for a family with no slice."""
  logits = np.asarray(labelled.values, np.float64)
  gap = np.exp(maths.log_softmax(logits).max(axis=1)) - (logits.argmax(axis=1) == labelled.labels)
  by_family = {family: [] for family in FAMILIES}
  for name in np.unique(labelled.slices):
    family = family_of_slice(name)
    if family is not None:
      by_family[family].append(gap[labelled.slices == name].mean())
  return {f"gap_{family}": float(np.mean(gaps)) if gaps else float("nan")
          for family, gaps in by_family.items()}


def calibrated_ece_floor(labelled: LabelledSet, num_bins: int) -> float:
  """The slices' mean ECE that a perfectly calibrated model with these logits would measure
  (trainer_module.metrics.ece_floor of each slice's reliability bins, as the run report
  computes it): the ECE's sampling bias on slices of this size."""
  logits = np.asarray(labelled.values, np.float64)
  confidence = np.exp(maths.log_softmax(logits).max(axis=1))
  bins = confidence_bins(confidence, num_bins)
  floors = []
  for name in np.unique(labelled.slices):
    inside = labelled.slices == name
    counts = np.bincount(bins[inside], minlength=num_bins)
    sums = np.bincount(bins[inside], weights=confidence[inside], minlength=num_bins)
    floors.append(ece_floor(counts, np.divide(sums, counts, out=np.zeros(num_bins),
                                              where=counts > 0)))
  return float(np.mean(floors))


def row_metrics(sets: ModelSets, temperatures: Dict[str, Temperatures],
                num_bins: int) -> Dict[str, float]:
  """The table's metrics with each set's logits divided by temperatures[set]."""
  test = scaled(sets.test, temperatures["test"])
  corrupted = scaled(sets.corrupted, temperatures["corrupted"])
  validation = scaled(sets.validation, temperatures["validation"])
  c_nll, c_ece = maths.slice_means(corrupted.values, corrupted.labels, corrupted.slices,
                                   1.0, num_bins)
  v_nll, v_ece = maths.slice_means(validation.values, validation.labels,
                                   validation.slices, 1.0, num_bins)
  return {"test_accuracy": float(np.mean(test.values.argmax(axis=1) == test.labels)),
          "test_nll": maths.nll(test.values, test.labels),
          "test_ece": maths.ece(test.values, test.labels, 1.0, num_bins),
          "cA": _slice_accuracy(corrupted), "cNLL": c_nll, "cECE": c_ece,
          "cECE_floor": calibrated_ece_floor(corrupted, num_bins),
          "validation_nll": v_nll, "validation_ece": v_ece, **family_gaps(corrupted)}


def table(rows: Sequence[Tuple[str, str, Dict[str, float]]]) -> str:
  """A Markdown table: one row per (how T is chosen, T, row_metrics)."""
  return harness.table(["how T is chosen", "T"] + [header for header, _, _ in COLUMNS], [
      (name, t, *(f"{metrics[key]:.{digits}f}" for _, key, digits in COLUMNS))
      for name, t, metrics in rows], left=2)


def scalar_rows(sets: ModelSets, num_bins: int) -> List[Tuple[str, float]]:
  """(name, T) of each scalar way of choosing T."""
  pooled = np.full(len(sets.validation.labels), "pooled")
  return [
      ("`validation_corruptions`", maths.select_temperature_under_shift(
          sets.eval.values, sets.eval.labels, sets.validation.values, sets.validation.labels,
          sets.validation.slices, num_bins)),
      ("raw softmax", 1.0),
      ("`clean`", maths.fit_temperature(sets.eval.values, sets.eval.labels)),
      ("validation slices pooled into one", maths.select_temperature_under_shift(
          sets.eval.values, sets.eval.labels, sets.validation.values, sets.validation.labels,
          pooled, num_bins)),
  ]


def feature_support(features: Callable[[str], LabelledSet]) -> distances.FeatureSupport:
  """A single model's feature support as the Trainer computes it: the train split's classes."""
  train = features("train")
  return distances.support_from_features(train.values, train.labels, features("eval").values)


def distance_scores(support: distances.FeatureSupport,
                    features: Callable[[str], LabelledSet]) -> Dict[str, np.ndarray]:
  """Each set's distance score z, as the served model computes it."""
  return {name: distances.distance_scores(features(name).values, support)
          for name in ("eval", "validation", TEST, CORRUPTED)}


def distance_curve_row(sets: ModelSets, scores: Dict[str, np.ndarray],
                       num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  """The distance alone: T(x) = exp(a + b z(x)), fitted as the Trainer fits the default map."""
  curve = distance_curve.fit_distance_curve(
      sets.eval.values, sets.eval.labels, scores["eval"], sets.validation.values,
      sets.validation.labels, sets.validation.slices, scores["validation"], num_bins)
  temperatures = {name: curve.temperatures(z) for name, z in scores.items()}
  label = (f"exp({curve.log_temperature:.3f} + {curve.slope:.3f} z); median T: test "
           f"{np.median(temperatures[TEST]):.3f}, corrupted "
           f"{np.median(temperatures[CORRUPTED]):.3f}")
  return "the distance alone", label, row_metrics(sets, temperatures, num_bins)


def detail_scores(images: Callable[[str], np.ndarray]) -> Dict[str, np.ndarray]:
  """Each set's detail score s, as the served model computes it (its unit: the eval images')."""
  scale = detail.detail_scale(images("eval"))
  return {name: detail.detail_scores(images(name), scale)
          for name in ("eval", "validation", TEST, CORRUPTED)}


def distance_detail_curve_row(sets: ModelSets, scores: Dict[str, np.ndarray],
                              details: Dict[str, np.ndarray],
                              num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  """`distance_detail_curve`: T(x) = exp(a + b z(x) + c s(x)), fitted as the Trainer fits it."""
  curve = distance_curve.fit_distance_curve(
      sets.eval.values, sets.eval.labels, scores["eval"], sets.validation.values,
      sets.validation.labels, sets.validation.slices, scores["validation"], num_bins,
      details["eval"], details["validation"])
  temperatures = {name: curve.temperatures(z, details[name]) for name, z in scores.items()}
  label = (f"exp({curve.log_temperature:.3f} + {curve.slope:.3f} z {curve.detail_slope:+.3f} s); "
           f"median T: test {np.median(temperatures[TEST]):.3f}, corrupted "
           f"{np.median(temperatures[CORRUPTED]):.3f}")
  return "`distance_detail_curve` (default)", label, row_metrics(sets, temperatures, num_bins)


def map_ceiling_row(sets: ModelSets, scores: Dict[str, np.ndarray],
                    details: Dict[str, np.ndarray],
                    num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  """The best the default map's form, T(x) = exp(a + b z(x) + c s(x)), can do on the corrupted
  set: (a, b, c) minimising its cNLL on its own labels. How near the served map, fitted on the
  validation shift, comes to its family's best."""
  corrupted = sets.corrupted
  curve = distance_curve.curve_minimising_slice_nll(
      np.asarray(corrupted.values, np.float64), corrupted.labels, corrupted.slices,
      scores[CORRUPTED], details[CORRUPTED],
      float(np.log(maths.fit_temperature(corrupted.values, corrupted.labels))))
  temperatures = {name: curve.temperatures(z, details[name]) for name, z in scores.items()}
  label = f"exp({curve.log_temperature:.3f} + {curve.slope:.3f} z {curve.detail_slope:+.3f} s)"
  return ("ceiling: the default map's form (corrupted labels)", label,
          row_metrics(sets, temperatures, num_bins))


def distance_ceiling_row(sets: ModelSets, scores: Dict[str, np.ndarray], num_bins: int,
                         bins: int = CEILING_DISTANCE_BINS) -> Tuple[str, str, Dict[str, float]]:
  """The best any function of z can do on the corrupted set: z cut into `bins` equal-count
  bins of the corrupted images' scores, each bin's T fitted on its images' labels (the NLL is a
  sum over bins, and the slices are equal in size, so this minimises cNLL over every function
  of z that is constant on the bins). Other sets get the T of the bin their z falls in."""
  edges = np.quantile(scores[CORRUPTED], np.linspace(0.0, 1.0, bins + 1))[1:-1]
  corrupted_bins = np.searchsorted(edges, scores[CORRUPTED], side="right")
  per_bin = np.array([maths.fit_temperature(sets.corrupted.values[corrupted_bins == b],
                                            sets.corrupted.labels[corrupted_bins == b])
                      for b in range(bins)])
  temperatures = {name: per_bin[np.searchsorted(edges, scores[name], side="right")]
                  for name in (TEST, CORRUPTED, "validation")}
  label = (f"{bins} bins of z, T {per_bin.min():.2f} ... {per_bin.max():.2f} "
           f"(non-monotone: {bool(np.any(np.diff(per_bin) < 0))})")
  return ("ceiling: any function of z (corrupted labels)", label,
          row_metrics(sets, temperatures, num_bins))


def slice_ceiling_row(sets: ModelSets, num_bins: int) -> Tuple[str, str, Dict[str, float]]:
  """The best one T per slice can do: each slice of each set fitted on its own labels."""
  def per_slice(labelled: LabelledSet) -> np.ndarray:
    t = np.ones(len(labelled.labels))
    for name in np.unique(labelled.slices):
      mask = labelled.slices == name
      t[mask] = maths.fit_temperature(labelled.values[mask], labelled.labels[mask])
    return t
  temperatures = {TEST: per_slice(sets.test), CORRUPTED: per_slice(sets.corrupted),
                  "validation": per_slice(sets.validation)}
  label = (f"median {np.median(temperatures[CORRUPTED]):.2f}, "
           f"{temperatures[CORRUPTED].min():.2f} ... {temperatures[CORRUPTED].max():.2f}")
  return ("ceiling: one T per slice (each slice's labels)", label,
          row_metrics(sets, temperatures, num_bins))


def model_sets(run: run_outputs.Run,
               model_dir: str) -> Tuple[ModelSets, Callable, Callable, dict]:
  """The model's logits on every set; a function giving its penultimate features on them (an
  ensemble's: its members', side by side; only a single model's on "train"); one giving the
  transformed images of a set; its config."""
  config = run.trainer_config(model_dir)
  tft_output = run.tft_output()
  network = run_outputs.load_network(model_dir)
  eval_batches = run.split_batches(tft_output, config.training.eval_batch_size)
  mean, std = inputs.channel_statistics(tft_output)
  validation = inputs.validation_corrupted_set(eval_batches, mean, std,
                                               config.calibration.validation_corruption_examples,
                                               config.training.eval_batch_size)
  examples = run.evaluation_set()
  batches = {"eval": (eval_batches, np.full(0, "")),
             "validation": (validation.batches, validation.slices)}
  for name in (TEST, CORRUPTED):
    mask = examples.eval_sets == name
    batches[name] = (run_outputs.transformed_batches(tft_output, examples.pngs[mask],
                                                     examples.labels[mask],
                                                     config.training.eval_batch_size),
                     examples.slices[mask])

  def on(model, name):
    labelled = run_outputs.labelled(model, batches[name][0], batches[name][1])
    if not len(batches[name][1]):
      labelled = dataclasses.replace(labelled, slices=np.full(len(labelled.labels), ""))
    return labelled

  sets = ModelSets(**{name: on(network, name) for name in
                      ("eval", "validation", TEST, CORRUPTED)})
  try:
    feature_model = model_outputs.penultimate_model(network)
    batches["train"] = (run.split_batches(tft_output, config.training.eval_batch_size, "train"),
                        np.full(0, ""))
  except maths.TemperatureFitError:  # An ensemble: its members' features side by side.
    feature_model = ensemble.member_features_model(network)
  computed: Dict[str, LabelledSet] = {}

  def features(name):  # Each set through the network once, however many rows read it.
    if name not in computed:
      computed[name] = on(feature_model, name)
    return computed[name]

  def images(name):
    return model_outputs.batch_images(batches[name][0])
  return sets, features, images, config


def main():
  args = build_parser().parse_args()
  run = run_outputs.Run(args.output_dir)
  model_dir = run.model_dir(args.model)
  sets, features, images, config = model_sets(run, model_dir)
  num_bins = config.calibration.num_bins
  recorded = record.read_calibration_info(model_dir)
  rows = [(name, f"{t:.3f}", row_metrics(sets, {s: t for s in ("test", "corrupted",
                                                                 "validation")}, num_bins))
          for name, t in scalar_rows(sets, num_bins)]
  if read_record(model_dir, ENSEMBLE_FILE) is None:
    support = feature_support(features)
  elif registry.recorded(recorded).needs_feature_distances:
    support = record.read_feature_support(model_dir)  # Its members' parts, as served.
  else:
    support = None
    print("An ensemble calibrated without its members' feature distances: no distance rows.")
  if support is not None:
    scores = distance_scores(support, features)
    rows.append(distance_curve_row(sets, scores, num_bins))
    details = detail_scores(images)
    rows.append(distance_detail_curve_row(sets, scores, details, num_bins))
    rows.append(map_ceiling_row(sets, scores, details, num_bins))
    rows.append(distance_ceiling_row(sets, scores, num_bins))
  rows.append(slice_ceiling_row(sets, num_bins))
  print(f"model: {model_dir}\n{len(sets.eval.labels)} eval, {len(sets.validation.labels)} "
        f"validation-shift, {len(sets.test.labels)} test, {len(sets.corrupted.labels)} corrupted "
        f"examples ({len(np.unique(sets.corrupted.slices))} slices)")
  print("recorded at export: " + json.dumps({key: recorded.get(key) for key in (
      "temperature_fit", "temperature", "validation_nll_before", "validation_ece_before")}))
  print(table(rows))


if __name__ == "__main__":
  main()
