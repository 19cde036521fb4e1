"""The run report's content: Markdown sections and PNG charts, from the Evaluator's output, the
served-model check and the calibration record (docs/pipeline.md, "The run report").
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma

from components import evaluation_set
from components.calibration_metrics import (ACCURACY_NAME, BRIER_NAME, ECE_NAME,
                                            MEAN_SLICE_ECE_SD_NAME, MEAN_SLICE_GAP_NAME,
                                            MEAN_SLICE_GAP_SD_NAME, NLL_NAME, RELIABILITY_NAME)
from components import plots, tfma_results
from components.tfma_results import EXAMPLE_COUNT_NAME
from trainer_module import reference_corruptions as corruptions
from trainer_module.calibration import registry
from trainer_module.features import (DETAIL_SCORE_KEY, DISTANCE_SCORE_KEY, LABEL_KEY,
                                     PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.class_names import CLASS_NAMES_FILE
from trainer_module.metrics import ece_floor
from trainer_module.export import ENSEMBLE_FILE, PRECISION_FILE, read_record
from trainer_module.calibration.record import read_calibration_info
from trainer_module.warm_start import TRAINING_INFO_PATH

DISTANCE_CHART = "temperature_by_distance.png"
REPORT_IMAGES_PER_SLICE = 25  # Corrupted images per slice whose distance the report shows.
CALIBRATED, RAW = PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY
EVAL = ((evaluation_set.EVAL_SET_KEY, evaluation_set.EVAL),)
TEST = ((evaluation_set.EVAL_SET_KEY, evaluation_set.TEST),)
CORRUPTED = ((evaluation_set.EVAL_SET_KEY, evaluation_set.CORRUPTED),)
ECE_FLOOR = "ece_floor"  # corrupted_means' key of the cECE floor.
# corrupted_means' and family_means' keys of the bootstrap standard deviations of cECE and of
# the confidence gap (the Evaluator's MeanSliceECE; None when it had no source images).
GAP, ECE_SD, GAP_SD = "gap", "ece_sd", "gap_sd"
SET_NAMES = {EVAL: "clean eval (gated)", TEST: "clean test", CORRUPTED: "corrupted test"}


def _fmt(value: Optional[float], digits: int = 4) -> str:
  return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _mean(values) -> Optional[float]:
  """The mean of every value, or None when any is missing: a mean over some of the slices is
  not the metric the report names."""
  values = list(values)
  return None if not values or any(v is None for v in values) else float(np.mean(values))


def _corruption_slice(name: str, severity: int) -> tfma_results.Slice:
  return ((evaluation_set.CORRUPTION_KEY, name), (evaluation_set.SEVERITY_KEY, severity))


def slice_ece_floor(values: Dict, slice_, output: str) -> Optional[float]:
  """The ECE a perfectly calibrated model would measure on this slice, from its reliability
  diagram's bins (metrics.ece_floor): what the slice's size alone adds to its ECE."""
  bins = tfma_results.metric(values, slice_, output, RELIABILITY_NAME)
  if bins is None or not np.sum(bins[:, 0]):
    return None
  return ece_floor(bins[:, 0], bins[:, 1])


def _finite(values: Dict, slice_, output: str, name: str) -> Optional[float]:
  """A metric's value, None when TFMA has none or it is NaN (MeanSliceECE without a bootstrap,
  or on a slice of no corrupted images)."""
  value = tfma_results.metric(values, slice_, output, name)
  return None if value is None or not np.isfinite(value) else float(value)


def corrupted_means(values: Dict, output: str, names) -> Dict[str, Optional[float]]:
  """cA, cNLL, cECE: each metric's mean over the corruption x severity slices (UB's tables),
  and the cECE floor, the mean of the slices' ECE floors (ECE_FLOOR)."""
  slices = [_corruption_slice(c, s) for c in names for s in corruptions.SEVERITIES]
  result = {name: _mean(tfma_results.metric(values, slice_, output, name) for slice_ in slices)
            for name in (ACCURACY_NAME, NLL_NAME, ECE_NAME)}
  result[ECE_FLOOR] = _mean(slice_ece_floor(values, slice_, output) for slice_ in slices)
  return result


def corrupted_ece_sd(values: Dict, output: str) -> Optional[float]:
  """cECE's bootstrap standard deviation over the test images, the Evaluator's MeanSliceECE on
  the whole corrupted set (None without a bootstrap)."""
  return _finite(values, CORRUPTED, output, MEAN_SLICE_ECE_SD_NAME)


def family_means(values: Dict, output: str, names) -> Dict[str, Dict[str, Optional[float]]]:
  """corrupted_means per corruption family (noise, blur, weather, digital) of `names`, the mean
  over its slices of confidence minus accuracy (GAP), and both means' bootstrap standard
  deviations (ECE_SD, GAP_SD), the last three the Evaluator's MeanSliceECE on the family's
  slice; all None when a slice of the family is missing, as its cECE is."""
  families = {}
  for name in names:
    families.setdefault(corruptions.FAMILY_OF[name], []).append(name)
  result = {}
  for family, members in families.items():
    means = corrupted_means(values, output, members)
    family_slice = ((evaluation_set.FAMILY_KEY, family),)
    complete = means[ECE_NAME] is not None
    result[family] = {**means, **{
        key: _finite(values, family_slice, output, name) if complete else None
        for key, name in ((GAP, MEAN_SLICE_GAP_NAME), (ECE_SD, MEAN_SLICE_ECE_SD_NAME),
                          (GAP_SD, MEAN_SLICE_GAP_SD_NAME))}}
  return result


def _with_sd(value: Optional[float], sd: Optional[float], signed: bool = False) -> str:
  """`value (sd x)`, the value alone when there is no bootstrap, n/a when there is no value."""
  if value is None or not np.isfinite(value):
    return "n/a"
  text = f"{value:+.4f}" if signed else _fmt(value)
  return text if sd is None else f"{text} (sd {sd:.4f})"


@dataclasses.dataclass(frozen=True)
class GateBound:
  """One bound of the gate, as the report shows it (pipeline/evaluation.py sets the gate)."""
  label: str  # accuracy, ECE, cA (mean corrupted accuracy), ...
  eval_set: str  # The slice eval_set=<this>: eval or corrupted.
  metric: str  # The TFMA metric name.
  higher_is_better: bool
  bound: float
  max_change: float  # Allowed change against the blessed baseline.


@dataclasses.dataclass(frozen=True)
class ReportSettings:
  """What the report needs of the run's config, as plain values (the report step's execution
  property: components sit below the pipeline config)."""
  pipeline_name: str
  dataset: str
  model: str  # E.g. WRN-28-10.
  num_classes: int
  corruptions: Tuple[str, ...]
  bounds: Tuple[GateBound, ...]

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "ReportSettings":
    values = json.loads(text)
    return cls(**{**values, "corruptions": tuple(values["corruptions"]),
                  "bounds": tuple(GateBound(**bound) for bound in values["bounds"])})


def _bounds(settings: ReportSettings) -> List[Tuple[str, tfma_results.Slice, str, bool, float,
                                                     float]]:
  """(label, slice, metric, higher is better, value bound, allowed change) of each gated metric."""
  return [(b.label, ((evaluation_set.EVAL_SET_KEY, b.eval_set),), b.metric, b.higher_is_better,
           b.bound, b.max_change) for b in settings.bounds]


def _gate_section(settings, values, blessed: bool, validation) -> List[str]:
  lines = ["## Gate", "", f"**{'BLESSED' if blessed else 'NOT BLESSED'}**"
           f"{'' if blessed else ': the Pusher pushes nothing.'}", ""]
  failures = tfma_results.failures(validation) if validation is not None else []
  if failures:
    lines += ["Failed:", ""] + [f"- {failure.describe()}" for failure in failures] + [""]
  has_baseline = tfma_results.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                                    model=tfma_results.BASELINE) is not None
  lines += ["| bound | slice | candidate | needs | vs blessed baseline | allowed change |",
            "| --- | --- | --- | --- | --- | --- |"]
  for label, slice_, name, higher, bound, change in _bounds(settings):
    value = tfma_results.metric(values, slice_, CALIBRATED, name)
    diff = tfma_results.metric(values, slice_, CALIBRATED, name, diff=True)
    needs = f"{'>=' if higher else '<='} {bound}"
    allowed = f"{'>=' if higher else '<='} {-change if higher else change:+}"
    lines.append(f"| {label} | {tfma_results.slice_name(slice_)} | {_fmt(value)} | {needs} | "
                 f"{f'{diff:+.4f}' if diff is not None else 'no baseline'} | "
                 f"{allowed if has_baseline else 'n/a (first blessing)'} |")
  return lines + [""]


def _metric_table(settings, values) -> List[str]:
  lines = ["## Metrics (calibrated probabilities)", "",
           "| set | examples | accuracy | NLL | ECE | Brier |",
           "| --- | --- | --- | --- | --- | --- |"]
  for slice_ in (EVAL, TEST, CORRUPTED):
    get = lambda name, s=slice_: tfma_results.metric(values, s, CALIBRATED, name)  # noqa: E731
    count = get(EXAMPLE_COUNT_NAME)
    if not count:
      continue
    lines.append(f"| {SET_NAMES[slice_]} | {int(count)} | {_fmt(get(ACCURACY_NAME))} | "
                 f"{_fmt(get(NLL_NAME))} | {_fmt(get(ECE_NAME))} | {_fmt(get(BRIER_NAME))} |")
  if settings.corruptions:
    means = corrupted_means(values, CALIBRATED, settings.corruptions)
    ece_sd = corrupted_ece_sd(values, CALIBRATED)
    lines += ["", f"Robustness ({len(settings.corruptions)} corruptions x "
              f"{len(corruptions.SEVERITIES)} severities, means over the slices as in "
              f"Uncertainty Baselines): **cA {_fmt(means[ACCURACY_NAME])}, cNLL "
              f"{_fmt(means[NLL_NAME])}, cECE {_fmt(means[ECE_NAME])}** (cECE floor "
              f"{_fmt(means[ECE_FLOOR])}: what a perfectly calibrated model with these "
              f"confidences would measure on slices of this size" +
              (f"; cECE's bootstrap standard deviation {ece_sd:.4f}: how far it would move on "
               "another draw of as many test images" if ece_sd is not None else "; no bootstrap "
               "deviation: a corrupted example names no source image (an evaluation set made "
               "before the `source_image` feature), or the slices are too small to resample")
              + ").", "",
              "| corruption family | corruptions | cA | cNLL | cECE | cECE floor | "
              "confidence - accuracy |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for family, family_values in family_means(values, CALIBRATED, settings.corruptions).items():
      members = [name for name in settings.corruptions if corruptions.FAMILY_OF[name] == family]
      lines.append(f"| {family} | {', '.join(members)} | {_fmt(family_values[ACCURACY_NAME])} "
                   f"| {_fmt(family_values[NLL_NAME])} | "
                   f"{_with_sd(family_values[ECE_NAME], family_values[ECE_SD])} | "
                   f"{_fmt(family_values[ECE_FLOOR])} | "
                   f"{_with_sd(family_values[GAP], family_values[GAP_SD], signed=True)} |")
    lines += ["", "Confidence - accuracy: the mean over the family's slices of the mean "
              "top-label probability minus the accuracy (> 0 over-confident, < 0 "
              "under-confident). sd: the figure's standard deviation over a bootstrap of the "
              "test images, each drawn with all its corrupted versions (the Evaluator's "
              "MeanSliceECE): how far this figure would move on another draw of as many test "
              "images. It is not the spread of a difference between two models on the same "
              "images, which is usually smaller."]
  return lines + [""]


def _temperature_description(calibration: Optional[dict]) -> str:
  if not calibration:
    return "No calibration record in the model."
  return registry.recorded(calibration).describe(calibration)


def _temperature_section(settings, values, calibration: Optional[dict]) -> List[str]:
  lines = ["## Temperature scaling", "", _temperature_description(calibration)]
  lines += ["", "| set | NLL before | NLL after | ECE before | ECE after | Brier before | "
            "Brier after |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for slice_ in (EVAL, TEST, CORRUPTED):
    cells = [_fmt(tfma_results.metric(values, slice_, output, name))
             for name in (NLL_NAME, ECE_NAME, BRIER_NAME) for output in (RAW, CALIBRATED)]
    if tfma_results.metric(values, slice_, CALIBRATED, EXAMPLE_COUNT_NAME):
      lines.append(f"| {SET_NAMES[slice_]} | " + " | ".join(cells) + " |")
  if settings.corruptions:
    raw, calibrated = (corrupted_means(values, output, settings.corruptions)
                       for output in (RAW, CALIBRATED))
    lines.append("| corrupted, mean over slices (cNLL, cECE) | " + " | ".join(
        _fmt(means[name]) for name in (NLL_NAME, ECE_NAME) for means in (raw, calibrated))
                 + " | | |")
  if calibration and registry.recorded(calibration).needs_validation_corruptions:
    lines.append("| validation shift (eval images, validation corruptions; chose T) | " +
                 " | ".join(_fmt(calibration[f"validation_{name}_{when}"]) for name in
                            ("nll", "ece") for when in ("before", "after")) + " | | |")
  return lines + [""]


class ServedImages(NamedTuple):
  """A set's images as the candidate serves them: distance score, confidence (the top served
  probability), whether the top class is the label, and the detail score when the candidate's
  map reads it (None otherwise)."""
  scores: np.ndarray
  confidence: np.ndarray
  correct: np.ndarray
  details: Optional[np.ndarray] = None


FIT_REACH_QUANTILE = 0.95  # Beyond this quantile of the validation shift's z, few fit images.


def _distance_section(report_dir: str, calibration: Optional[dict],
                      served: Optional[Dict[str, ServedImages]]) -> List[str]:
  """For a T that follows the distance score (distance_detail_curve): the fitted
  T against the score (at a typical detail), over histograms of the scores of the clean eval
  images and the validation shift (recorded by the fit) and of the clean and corrupted test
  images per family (served by the candidate); and how the test images beyond the fit's reach
  fare, where the curve extrapolates."""
  temperature_of_score = (registry.recorded(calibration).temperature_of_score(calibration)
                          if calibration else None)
  if temperature_of_score is None:
    return []
  validation = np.asarray(calibration["validation_distance_scores"])
  slices = np.asarray(calibration["validation_slices"])
  mild = np.char.endswith(slices, "_1") | np.char.endswith(slices, "_2")
  reads_details = "eval_detail_scores" in calibration
  eval_details, validation_details = (
      (np.asarray(calibration["eval_detail_scores"]),
       np.asarray(calibration["validation_detail_scores"])) if reads_details else (None, None))
  # Each set's (distance scores, detail scores or None).
  sets = {"clean eval (fit)": (np.asarray(calibration["eval_distance_scores"]), eval_details),
          "validation shift, severities 1-2 (fit)": (
              validation[mild], validation_details[mild] if reads_details else None),
          "validation shift, severities 3-5 (fit)": (
              validation[~mild], validation_details[~mild] if reads_details else None),
          **{name: (images.scores, images.details) for name, images in (served or {}).items()}}
  groups = {name: scores for name, (scores, _) in sets.items()}
  plots.distance_chart(os.path.join(report_dir, DISTANCE_CHART), temperature_of_score, groups,
                       "Temperature against distance from the training data" +
                       (" (an image of typical detail)" if reads_details else ""))
  reach = float(np.quantile(validation, FIT_REACH_QUANTILE)) if len(validation) else np.inf
  lines = ["## Where the calibrator sharpens and where it softens", "",
           f"![temperature and distance]({DISTANCE_CHART})", "",
           "Top: the fitted T (below 1 sharpens, above 1 softens)" +
           (", for an image of typical detail (s = 0); the table's median T reads each "
            "image's own detail" if reads_details else "") + ". Bottom: how the distance "
           "scores z of each set are distributed (the corrupted test images: the candidate's "
           f"served `distance_score` on up to {REPORT_IMAGES_PER_SLICE} images per corruption x "
           f"severity slice). Beyond z = {reach:.2f} lie the farthest "
           f"{1 - FIT_REACH_QUANTILE:.0%} of the validation shift: there the curve rests on few "
           "of the images it was fitted on, and the last two columns say how the candidate's "
           "served test images fare (confidence minus accuracy > 0: over-confident).", "",
           f"| set | images | median z | median T | T < 1 (sharpened) | beyond z = {reach:.2f} "
           "| accuracy there | confidence - accuracy there |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for name, (scores, details) in sets.items():
    if len(scores):
      t = temperature_of_score(scores, details)
      beyond = scores > reach
      outcome = ["", ""]
      if name in (served or {}) and beyond.any():
        images = served[name]
        accuracy = float(np.mean(images.correct[beyond]))
        outcome = [f"{accuracy:.2f}", f"{np.mean(images.confidence[beyond]) - accuracy:+.2f}"]
      lines.append(f"| {name} | {len(scores)} | {np.median(scores):.2f} | {np.median(t):.3f} "
                   f"| {np.mean(t < 1):.0%} | {np.mean(beyond):.0%} | " + " | ".join(outcome)
                   + " |")
  return lines + [""]


def candidate_served_images(model_dir: str, evaluation_set_uri: str,
                            per_slice: int = 0) -> Dict[str, ServedImages]:
  """How the candidate serves the clean test images and the corrupted ones by family
  (`per_slice` > 0: the first that many of each corruption x severity slice)."""
  examples = evaluation_set.read_evaluation_set(evaluation_set_uri)
  keep = examples.eval_sets == evaluation_set.TEST
  if per_slice:
    for name in np.unique(examples.slices[examples.eval_sets == evaluation_set.CORRUPTED]):
      keep[np.flatnonzero(examples.slices == name)[:per_slice]] = True
  else:
    keep |= examples.eval_sets == evaluation_set.CORRUPTED
  serve = tf.saved_model.load(model_dir).signatures["serving_images"]
  pngs = examples.pngs[keep]
  outputs = [serve(images=tf.constant(pngs[start:start + 256]))
             for start in range(0, len(pngs), 256)]
  probabilities = np.concatenate([output[PROBABILITIES_KEY].numpy() for output in outputs])
  images = ServedImages(np.concatenate([output[DISTANCE_SCORE_KEY].numpy()
                                        for output in outputs]),
                        probabilities.max(axis=1),
                        probabilities.argmax(axis=1) == examples.labels[keep],
                        np.concatenate([output[DETAIL_SCORE_KEY].numpy() for output in outputs])
                        if DETAIL_SCORE_KEY in outputs[0] else None)
  groups = {"clean test": examples.eval_sets[keep] == evaluation_set.TEST}
  families = np.array([corruptions.family_of_slice(name) or "" for name in examples.slices[keep]])
  for family in corruptions.FAMILIES:
    if np.any(families == family):
      groups[f"corrupted test: {family}"] = families == family
  return {name: ServedImages(*(None if field is None else field[chosen] for field in images))
          for name, chosen in groups.items()}


def _baseline_section(settings, values) -> List[str]:
  lines = ["## Against the blessed baseline", ""]
  if tfma_results.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                        model=tfma_results.BASELINE) is None:
    return lines + ["No blessed model yet: this candidate is judged on the absolute bounds "
                    "alone.", ""]
  lines += ["| metric | slice | candidate | blessed baseline | change |",
            "| --- | --- | --- | --- | --- |"]
  for label, slice_, name, _, _, _ in _bounds(settings) + [
      ("Brier", EVAL, BRIER_NAME, False, 0, 0), ("accuracy", TEST, ACCURACY_NAME, True, 0, 0)]:
    candidate = tfma_results.metric(values, slice_, CALIBRATED, name)
    baseline = tfma_results.metric(values, slice_, CALIBRATED, name, model=tfma_results.BASELINE)
    if candidate is None or baseline is None:
      continue
    lines.append(f"| {label} | {tfma_results.slice_name(slice_)} | {_fmt(candidate)} | "
                 f"{_fmt(baseline)} | {candidate - baseline:+.4f} |")
  return lines + [""]


def model_class_names(settings: "ReportSettings", model_dir: Optional[str]) -> List[str]:
  """The class names the model serves (its record), else the label indices."""
  record = read_record(model_dir, CLASS_NAMES_FILE) if model_dir else None
  return record["class_names"] if record else [str(k) for k in range(settings.num_classes)]


def skipped_section(skipped_files: Sequence[Tuple[str, str]]) -> List[str]:
  if not skipped_files:
    return []
  lines = ["## Skipped input files", "",
           f"{len(skipped_files)} bad file(s) or folder(s) of the image folder were left out "
           "(--skip_bad_images):", "", "| path | reason |", "| --- | --- |"]
  lines += [f"| `{path}` | {reason.replace('|', '/')} |" for path, reason in skipped_files]
  return lines + [""]


def _charts(report_dir, settings, values, class_names: Sequence[str]) -> List[str]:
  lines = ["## Reliability diagrams", ""]
  for slice_, output, file_name, title in [
      (TEST, CALIBRATED, "reliability_test.png", "clean test, temperature-scaled"),
      (TEST, RAW, "reliability_test_uncalibrated.png", "clean test, before temperature scaling"),
      (CORRUPTED, CALIBRATED, "reliability_corrupted.png", "corrupted test, temperature-scaled"),
      (CORRUPTED, RAW, "reliability_corrupted_uncalibrated.png",
       "corrupted test, before temperature scaling"),
  ]:
    bins = tfma_results.metric(values, slice_, output, RELIABILITY_NAME)
    if bins is None or not np.sum(bins[:, 0]):
      continue
    ece = tfma_results.metric(values, slice_, output, ECE_NAME)
    plots.reliability_diagram(os.path.join(report_dir, file_name), bins,
                              f"Reliability: {title} (ECE {_fmt(ece)})")
    lines.append(f"![{title}]({file_name})")
  lines += ["", "## Per-class accuracy", ""]
  classes = list(range(len(class_names)))
  per_class = {}
  for slice_ in (EVAL, TEST, CORRUPTED):
    accuracies = [tfma_results.metric(values, slice_ + ((LABEL_KEY, k),),
                                     CALIBRATED, ACCURACY_NAME) for k in classes]
    if any(a is not None for a in accuracies):
      per_class[SET_NAMES[slice_]] = accuracies
  plots.bar_chart(os.path.join(report_dir, "per_class_accuracy.png"),
                  [name[:12] for name in class_names], per_class, "Accuracy per true class",
                  "accuracy")
  lines += ["![per-class accuracy](per_class_accuracy.png)", "",
            "| class | " + " | ".join(per_class) + " |",
            "| --- |" + " --- |" * len(per_class)]
  for k in classes:
    lines.append(f"| {class_names[k]} ({k}) | " +
                 " | ".join(_fmt(v[k]) for v in per_class.values()) + " |")
  lines.append("")
  if settings.corruptions:
    lines += _corruption_chart(report_dir, settings, values)
  return lines


def _corruption_chart(report_dir, settings, values) -> List[str]:
  severities = list(corruptions.SEVERITIES)
  metric = lambda name, s, output, metric_name: tfma_results.metric(  # noqa: E731
      values, _corruption_slice(name, s), output, metric_name)
  family_series = {}  # Each family's mean accuracy at each severity.
  for name in settings.corruptions:
    family_series.setdefault(corruptions.FAMILY_OF[name], []).append(
        [metric(name, s, CALIBRATED, ACCURACY_NAME) for s in severities])
  family_series = {family: [_mean(column) for column in zip(*members)]
                   for family, members in family_series.items()}
  plots.line_chart(os.path.join(report_dir, "corrupted_accuracy.png"), severities,
                   family_series, "Accuracy per corruption family and severity", "severity",
                   "accuracy")
  rows = {}
  for name in settings.corruptions:
    rows[name] = {
        "accuracy": [metric(name, s, CALIBRATED, ACCURACY_NAME) for s in severities],
        "ece": corrupted_means(values, CALIBRATED, [name])[ECE_NAME],
        "ece_raw": corrupted_means(values, RAW, [name])[ECE_NAME],
        "mean": corrupted_means(values, CALIBRATED, [name])[ACCURACY_NAME]}
  plots.bar_chart(os.path.join(report_dir, "corruption_accuracy_ece.png"),
                  [name[:7] for name in rows],
                  {"accuracy": [r["mean"] for r in rows.values()],
                   "ECE": [r["ece"] for r in rows.values()],
                   "ECE before temperature scaling": [r["ece_raw"] for r in rows.values()]},
                  "Per corruption (mean over severities)", "")
  lines = ["## Accuracy and ECE per corruption and severity", "",
           "![accuracy per family and severity](corrupted_accuracy.png)", "",
           "![accuracy and ECE per corruption](corruption_accuracy_ece.png)", "",
           "| corruption | family | " + " | ".join(f"acc. sev. {s}" for s in severities) +
           " | accuracy (mean) | ECE (mean) | ECE before T (mean) |",
           "| --- | --- |" + " --- |" * (len(severities) + 3)]
  for name, row in rows.items():
    lines.append(f"| {name} | {corruptions.FAMILY_OF[name]} | " +
                 " | ".join(_fmt(a) for a in row["accuracy"]) +
                 f" | {_fmt(row['mean'])} | {_fmt(row['ece'])} | {_fmt(row['ece_raw'])} |")
  return lines + [""]


def _ensemble_section(record: dict) -> List[str]:
  """Hyper-deep ensemble: the trials, the selection, and the ensemble against the best single
  trial, both as served (each temperature-scaled), on the same examples."""
  weights = {m["name"]: m["weight"] for m in record["members"]}
  after_t = (", each candidate after its own temperature"
             if record.get("calibrated_selection") else "")
  lines = ["## Ensemble", "",
           f"Greedy selection with replacement on "
           f"{record.get('selected_on', 'the eval split')} ({record['objective']}{after_t}): "
           f"picks {record['picks']}, {len(weights)} distinct of at most "
           f"{record['ensemble_size']}; "
           f"diversity (mean pairwise disagreement of the members on eval) "
           f"{_fmt(record['diversity'])}.", ""]
  comparison = record.get("comparison")
  if comparison:
    best, ensemble = comparison["best_single"], comparison["ensemble"]
    lines += [f"| metric | best single trial ({best['name']}) | ensemble | change |",
              "| --- | --- | --- | --- |"]
    for split, metric_names in (("eval", ("accuracy", "nll", "ece")),
                                ("test", ("accuracy", "nll", "ece")),
                                ("corrupted", ("accuracy", "nll", "ece"))):
      for name in metric_names:
        if split not in best or split not in ensemble:
          continue
        label = {"corrupted": {"accuracy": "cA", "nll": "cNLL", "ece": "cECE"}}.get(
            split, {}).get(name, f"{split} {name}")
        single, joint = best[split][name], ensemble[split][name]
        lines.append(f"| {label} | {_fmt(single)} | {_fmt(joint)} | {joint - single:+.4f} |")
    lines.append("")
  l2_names = [name for name in record["trials"][0]["hyperparameters"] if name.endswith("_l2")]
  lines += ["Trials (eval metrics of each served, temperature-scaled model):", "",
            "| trial | weight | seed | label smoothing | " + " | ".join(l2_names) +
            f" | T | eval accuracy | eval NLL | eval ECE | {record['objective']} alone |",
            "| --- " * (len(l2_names) + 9) + "|"]
  for trial in record["trials"]:
    hyper = trial["hyperparameters"]
    lines.append(
        f"| {trial['name']} | {_fmt(weights.get(trial['name'], 0.0), 3)} | {hyper.get('seed')} | "
        f"{_fmt(hyper.get('label_smoothing'), 5)} | " +
        " | ".join(f"{hyper[name] if hyper[name] is not None else hyper['l2']:.2e}"
                   for name in l2_names) +
        f" | {_fmt(trial['temperature'], 3)} | {_fmt(trial['eval']['accuracy'])} | "
        f"{_fmt(trial['eval']['nll'])} | {_fmt(trial['eval']['ece'])} | "
        f"{_fmt(trial.get('objective_value'))} |")
  return lines + [""]


def warm_start_summary(model_dir: str) -> str:
  """What the model was warm-started from, as its assets (training.json) record it."""
  path = os.path.join(model_dir, TRAINING_INFO_PATH)
  if not tf.io.gfile.exists(path):
    if read_record(model_dir, ENSEMBLE_FILE):
      return "per member: an ensemble (each trial's Trainer output records its own start)"
    return "not recorded"
  with tf.io.gfile.GFile(path) as f:
    record = json.load(f).get("warm_start")
  if not record:
    return "no, trained from scratch"
  excluded = record["excluded_variables"]
  return (f"{record['source']} (step {record['source_step']} of its run): "
          f"{record['restored_variables']} variables restored"
          f"{f', {len(excluded)} freshly initialised' if excluded else ''}")


@dataclasses.dataclass(frozen=True)
class ServedCheck:
  """What the served-model check found (components/served_model_check.py)."""
  passed: bool
  split: str  # The split scored: test, or eval when the input has no test split.
  accuracy: Optional[float]
  correct: int
  examples: int
  evaluator_accuracy: Optional[float]
  tolerance: float
  problems: Tuple[str, ...]


def headline(settings: ReportSettings, values: Dict) -> Dict[str, float]:
  """The figures the report's artifact records: the gated clean eval numbers and cA, cNLL,
  cECE (calibrated probabilities); a figure TFMA did not produce is left out."""
  get = lambda slice_, name: tfma_results.metric(values, slice_, CALIBRATED, name)  # noqa: E731
  figures = {"eval_accuracy": get(EVAL, ACCURACY_NAME), "eval_nll": get(EVAL, NLL_NAME),
             "eval_ece": get(EVAL, ECE_NAME), "test_accuracy": get(TEST, ACCURACY_NAME)}
  if settings.corruptions:
    means = corrupted_means(values, CALIBRATED, settings.corruptions)
    figures.update(corrupted_accuracy=means[ACCURACY_NAME], corrupted_nll=means[NLL_NAME],
                   corrupted_ece=means[ECE_NAME], corrupted_ece_floor=means[ECE_FLOOR],
                   corrupted_ece_sd=corrupted_ece_sd(values, CALIBRATED))
  return {name: float(value) for name, value in figures.items() if value is not None}


def _served_check_section(check: Optional[ServedCheck]) -> List[str]:
  lines = ["## Served-model check", ""]
  if check is None:
    return lines + ["Not run: the candidate was not checked as a serving client sees it.", ""]
  lines.append(f"**{'PASSED' if check.passed else 'FAILED'}**"
               f"{'' if check.passed else ': the Pusher pushes nothing.'} A fresh process loaded "
               "the candidate SavedModel and sent it the raw serialized tf.Examples of the "
               f"`{check.split}` split through its `serving_default` signature, as a serving "
               "client would (TFX's InfraValidator does this with TF Serving).")
  lines.append("")
  if check.accuracy is not None:
    lines.append(f"- served accuracy: {_fmt(check.accuracy)} ({check.correct}/{check.examples} "
                 f"{check.split} examples); the Evaluator's on the same split: "
                 f"{_fmt(check.evaluator_accuracy)} (tolerance {check.tolerance})")
  lines += [f"- {problem}" for problem in check.problems]
  return lines + [""]


def run_report_markdown(settings: ReportSettings, report_dir: str, evaluation_uri: str,
                        blessed: bool, model_dir: Optional[str], pushed: Optional[str],
                        evaluation_set_uri: Optional[str] = None,
                        served_check: Optional[ServedCheck] = None,
                        skipped_files: Sequence[Tuple[str, str]] = ()) -> List[str]:
  """The report's Markdown lines; its PNG charts are written into report_dir and referenced
  by file name. evaluation_set_uri: EvaluationSetGen's examples, whose served distance scores
  the report shows for a model calibrated by distance. skipped_files: (path, reason) of
  the input files an image_dir run left out (skip_bad_images)."""
  os.makedirs(report_dir, exist_ok=True)
  values = tfma_results.load_metrics(evaluation_uri)
  try:
    validation = tfma.load_validation_result(evaluation_uri)
  except Exception:  # No thresholds, no validation file: nothing to explain.
    validation = None
  calibration = None
  if model_dir and tf.io.gfile.exists(os.path.join(model_dir, "assets.extra",
                                                   "temperature.json")):
    calibration = read_calibration_info(model_dir)
  precision = read_record(model_dir, PRECISION_FILE) if model_dir else None
  lines = [f"# Run report: {settings.pipeline_name}", "",
           f"- dataset: `{settings.dataset}`, model: {settings.model}",
           f"- trained in `{precision['policy']}` ({precision['reason']}), served in "
           f"`{precision['serving_policy']}`" if precision else "- precision: not recorded",
           f"- candidate model: `{model_dir}`",
           f"- warm-started from: {warm_start_summary(model_dir) if model_dir else 'n/a'}",
           f"- pushed: `{pushed}`" if pushed else "- pushed: nothing this run",
           f"- TFMA output: `{evaluation_uri}`", ""]
  lines += _gate_section(settings, values, blessed, validation)
  lines += _served_check_section(served_check)
  lines += _metric_table(settings, values)
  ensemble = read_record(model_dir, ENSEMBLE_FILE) if model_dir else None
  if ensemble:
    lines += _ensemble_section(ensemble)
  lines += _temperature_section(settings, values, calibration)
  if calibration and registry.recorded(calibration).temperature_of_score(calibration):
    lines += _distance_section(report_dir, calibration, candidate_served_images(
        model_dir, evaluation_set_uri, REPORT_IMAGES_PER_SLICE) if evaluation_set_uri else None)
  lines += _baseline_section(settings, values)
  lines += _charts(report_dir, settings, values, model_class_names(settings, model_dir))
  lines += skipped_section(skipped_files)
  return lines
