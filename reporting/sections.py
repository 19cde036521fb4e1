"""The run report's sections, from the Evaluator's output, the served-model check, the model's
records and the input's skipped files (docs/pipeline.md, "The run report").

Adding a section: write a function that takes plain values (numbers, names, the figures of
reporting/figures.py) and returns a `document.Section`, then add its call to `run_report` below
where the section belongs. A section holds text, never markup: give every string as it is, a
class name, a file name or a message quoting them included; render.py escapes it for HTML and
Markdown alike. For example:

    def history_section(runs: Sequence[PastRun]) -> Section:
      return Section(
          "History of runs",
          Paragraph("The gated figures of the last ", str(len(runs)), " runs."),
          Chart("cECE by run", plots.line_chart(...)),  # PNG bytes: reporting/plots.py.
          Table(["run", "cECE"], [(Code(run.run_id), _fmt(run.cece)) for run in runs]))

Blocks: Paragraph(*parts), BulletList(items), Table(header, rows), Chart(title, png); a part,
item or cell is a str, a Strong or a Code, or a tuple of them. A chart is a PNG's bytes from a
function of reporting/plots.py (add one there for a new kind of chart). What the section needs
from the run arrives as an input of the RunReport step (reporting/run_report.py), read there
into plain values and handed to `run_report`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma

from components import evaluation_set, run_history, tfma_results
from components.calibration_metrics import (ACCURACY_NAME, BRIER_NAME, ECE_NAME, NLL_NAME,
                                            RELIABILITY_NAME)
from components.tfma_results import EXAMPLE_COUNT_NAME
from reporting import plots
from reporting.document import (BulletList, Chart, Code, Paragraph, Report, Section, Strong,
                                Table)
from reporting.figures import (CALIBRATED, CORRUPTED, ECE_FLOOR, ECE_SD, EVAL, GAP, GAP_SD, RAW,
                               TEST, ReportSettings, corrupted_ece_sd, corrupted_means,
                               corruption_slice, family_means, mean)
from trainer_module import reference_corruptions as corruptions
from trainer_module.calibration import registry
from trainer_module.calibration.record import read_calibration_info
from trainer_module.class_names import CLASS_NAMES_FILE
from trainer_module.export import ENSEMBLE_FILE, PRECISION_FILE, read_record
from trainer_module.features import DETAIL_SCORE_KEY, DISTANCE_SCORE_KEY, LABEL_KEY, \
    PROBABILITIES_KEY
from trainer_module.warm_start import TRAINING_INFO_PATH

REPORT_IMAGES_PER_SLICE = 25  # Corrupted images per slice whose distance the report shows.
SET_NAMES = {EVAL: "clean eval (gated)", TEST: "clean test", CORRUPTED: "corrupted test"}
FIT_REACH_QUANTILE = 0.95  # Beyond this quantile of the validation shift's z, few fit images.


def _fmt(value: Optional[float], digits: int = 4) -> str:
  return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _with_sd(value: Optional[float], sd: Optional[float], signed: bool = False) -> str:
  """`value (sd x)`, the value alone when there is no bootstrap, n/a when there is no value."""
  if value is None or not np.isfinite(value):
    return "n/a"
  text = f"{value:+.4f}" if signed else _fmt(value)
  return text if sd is None else f"{text} (sd {sd:.4f})"


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


class ServedImages(NamedTuple):
  """A set's images as the candidate serves them: distance score, confidence (the top served
  probability), whether the top class is the label, and the detail score when the candidate's
  map reads it (None otherwise)."""
  scores: np.ndarray
  confidence: np.ndarray
  correct: np.ndarray
  details: Optional[np.ndarray] = None


def gate_section(settings: ReportSettings, values: Dict, blessed: bool, validation) -> Section:
  blocks = [Paragraph(Strong("BLESSED" if blessed else "NOT BLESSED"),
                      "" if blessed else ": the Pusher pushes nothing.")]
  failures = tfma_results.failures(validation) if validation is not None else []
  if failures:
    blocks += [Paragraph("Failed:"), BulletList([failure.describe() for failure in failures])]
  has_baseline = tfma_results.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                                    model=tfma_results.BASELINE) is not None
  rows = []
  for bound in settings.bounds:
    value = tfma_results.metric(values, bound.slice, CALIBRATED, bound.metric)
    diff = tfma_results.metric(values, bound.slice, CALIBRATED, bound.metric, diff=True)
    higher, change = bound.higher_is_better, bound.max_change
    rows.append((bound.label, tfma_results.slice_name(bound.slice), _fmt(value),
                 f"{'>=' if higher else '<='} {bound.bound}",
                 f"{diff:+.4f}" if diff is not None else "no baseline",
                 f"{'>=' if higher else '<='} {-change if higher else change:+}" if has_baseline
                 else "n/a (first blessing)"))
  return Section("Gate", *blocks, Table(
      ["bound", "slice", "candidate", "needs", "vs blessed baseline", "allowed change"], rows))


def metric_section(settings: ReportSettings, values: Dict) -> Section:
  rows = []
  for slice_ in (EVAL, TEST, CORRUPTED):
    get = lambda name, s=slice_: tfma_results.metric(values, s, CALIBRATED, name)  # noqa: E731
    count = get(EXAMPLE_COUNT_NAME)
    if count:
      rows.append((SET_NAMES[slice_], str(int(count)), _fmt(get(ACCURACY_NAME)),
                   _fmt(get(NLL_NAME)), _fmt(get(ECE_NAME)), _fmt(get(BRIER_NAME))))
  blocks = [Table(["set", "examples", "accuracy", "NLL", "ECE", "Brier"], rows)]
  if settings.corruptions:
    means = corrupted_means(values, CALIBRATED, settings.corruptions)
    ece_sd = corrupted_ece_sd(values, CALIBRATED)
    bootstrap = ((f"; cECE's bootstrap standard deviation {ece_sd:.4f}: how far it would move "
                  "on another draw of as many test images",) if ece_sd is not None else (
        "; no bootstrap deviation: a corrupted example names no source image (an evaluation "
        "set made before the ", Code("source_image"), " feature), or the slices are too small "
        "to resample"))
    blocks.append(Paragraph(
        f"Robustness ({len(settings.corruptions)} corruptions x "
        f"{len(corruptions.SEVERITIES)} severities, means over the slices as in "
        "Uncertainty Baselines): ",
        Strong(f"cA {_fmt(means[ACCURACY_NAME])}, cNLL {_fmt(means[NLL_NAME])}, cECE "
               f"{_fmt(means[ECE_NAME])}"),
        f" (cECE floor {_fmt(means[ECE_FLOOR])}: what a perfectly calibrated model with these "
        "confidences would measure on slices of this size", *bootstrap, ")."))
    rows = []
    for family, family_values in family_means(values, CALIBRATED, settings.corruptions).items():
      members = [name for name in settings.corruptions if corruptions.FAMILY_OF[name] == family]
      rows.append((family, ", ".join(members), _fmt(family_values[ACCURACY_NAME]),
                   _fmt(family_values[NLL_NAME]),
                   _with_sd(family_values[ECE_NAME], family_values[ECE_SD]),
                   _fmt(family_values[ECE_FLOOR]),
                   _with_sd(family_values[GAP], family_values[GAP_SD], signed=True)))
    blocks += [
        Table(["corruption family", "corruptions", "cA", "cNLL", "cECE", "cECE floor",
               "confidence - accuracy"], rows),
        Paragraph("Confidence - accuracy: the mean over the family's slices of the mean "
                  "top-label probability minus the accuracy (> 0 over-confident, < 0 "
                  "under-confident). sd: the figure's standard deviation over a bootstrap of the "
                  "test images, each drawn with all its corrupted versions (the Evaluator's "
                  "MeanSliceECE): how far this figure would move on another draw of as many "
                  "test images. It is not the spread of a difference between two models on the "
                  "same images, which is usually smaller.")]
  return Section("Metrics (calibrated probabilities)", *blocks)


def _temperature_description(calibration: Optional[dict]) -> str:
  if not calibration:
    return "No calibration record in the model."
  return registry.recorded(calibration).describe(calibration)


def temperature_section(settings: ReportSettings, values: Dict,
                        calibration: Optional[dict]) -> Section:
  rows = []
  for slice_ in (EVAL, TEST, CORRUPTED):
    if tfma_results.metric(values, slice_, CALIBRATED, EXAMPLE_COUNT_NAME):
      rows.append((SET_NAMES[slice_], *(
          _fmt(tfma_results.metric(values, slice_, output, name))
          for name in (NLL_NAME, ECE_NAME, BRIER_NAME) for output in (RAW, CALIBRATED))))
  if settings.corruptions:
    raw, calibrated = (corrupted_means(values, output, settings.corruptions)
                       for output in (RAW, CALIBRATED))
    rows.append(("corrupted, mean over slices (cNLL, cECE)", *(
        _fmt(means[name]) for name in (NLL_NAME, ECE_NAME) for means in (raw, calibrated)),
                 "", ""))
  if calibration and registry.recorded(calibration).needs_validation_corruptions:
    rows.append(("validation shift (eval images, validation corruptions; chose T)", *(
        _fmt(calibration[f"validation_{name}_{when}"]) for name in ("nll", "ece")
        for when in ("before", "after")), "", ""))
  return Section("Temperature scaling", Paragraph(_temperature_description(calibration)), Table(
      ["set", "NLL before", "NLL after", "ECE before", "ECE after", "Brier before",
       "Brier after"], rows))


def distance_section(calibration: Optional[dict],
                     served: Optional[Dict[str, ServedImages]]) -> Optional[Section]:
  """For a T that follows the distance score (distance_curve, distance_detail_curve): the fitted
  T against the score (at a typical detail), over histograms of the scores of the clean eval
  images and the validation shift (recorded by the fit) and of the clean and corrupted test
  images per family (served by the candidate); and how the test images beyond the fit's reach
  fare, where the curve extrapolates. None for any other T."""
  temperature_of_score = (registry.recorded(calibration).temperature_of_score(calibration)
                          if calibration else None)
  if temperature_of_score is None:
    return None
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
  chart = plots.distance_chart(temperature_of_score,
                               {name: scores for name, (scores, _) in sets.items()},
                               "Temperature against distance from the training data" +
                               (" (an image of typical detail)" if reads_details else ""))
  reach = float(np.quantile(validation, FIT_REACH_QUANTILE)) if len(validation) else np.inf
  rows = []
  for name, (scores, details) in sets.items():
    if len(scores):
      t = temperature_of_score(scores, details)
      beyond = scores > reach
      outcome = ["", ""]
      if name in (served or {}) and beyond.any():
        images = served[name]
        accuracy = float(np.mean(images.correct[beyond]))
        outcome = [f"{accuracy:.2f}", f"{np.mean(images.confidence[beyond]) - accuracy:+.2f}"]
      rows.append((name, str(len(scores)), f"{np.median(scores):.2f}", f"{np.median(t):.3f}",
                   f"{np.mean(t < 1):.0%}", f"{np.mean(beyond):.0%}", *outcome))
  return Section(
      "Where the calibrator sharpens and where it softens",
      Chart("temperature and distance", chart),
      Paragraph(
          "Top: the fitted T (below 1 sharpens, above 1 softens)" +
          (", for an image of typical detail (s = 0); the table's median T reads each "
           "image's own detail" if reads_details else "") + ". Bottom: how the distance "
          "scores z of each set are distributed (the corrupted test images: the candidate's "
          "served ", Code("distance_score"), f" on up to {REPORT_IMAGES_PER_SLICE} images per "
          f"corruption x severity slice). Beyond z = {reach:.2f} lie the farthest "
          f"{1 - FIT_REACH_QUANTILE:.0%} of the validation shift: there the curve rests on few "
          "of the images it was fitted on, and the last two columns say how the candidate's "
          "served test images fare (confidence minus accuracy > 0: over-confident)."),
      Table(["set", "images", "median z", "median T", "T < 1 (sharpened)",
             f"beyond z = {reach:.2f}", "accuracy there", "confidence - accuracy there"], rows))


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


def baseline_section(settings: ReportSettings, values: Dict) -> Section:
  if tfma_results.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                        model=tfma_results.BASELINE) is None:
    return Section("Against the blessed baseline", Paragraph(
        "No blessed model yet: this candidate is judged on the absolute bounds alone."))
  rows = []
  for label, slice_, name in [(bound.label, bound.slice, bound.metric)
                              for bound in settings.bounds] + [
                                  ("Brier", EVAL, BRIER_NAME), ("accuracy", TEST, ACCURACY_NAME)]:
    candidate = tfma_results.metric(values, slice_, CALIBRATED, name)
    baseline = tfma_results.metric(values, slice_, CALIBRATED, name, model=tfma_results.BASELINE)
    if candidate is not None and baseline is not None:
      rows.append((label, tfma_results.slice_name(slice_), _fmt(candidate), _fmt(baseline),
                   f"{candidate - baseline:+.4f}"))
  return Section("Against the blessed baseline", Table(
      ["metric", "slice", "candidate", "blessed baseline", "change"], rows))


def model_class_names(settings: ReportSettings, model_dir: Optional[str]) -> List[str]:
  """The class names the model serves (its record), else the label indices."""
  record = read_record(model_dir, CLASS_NAMES_FILE) if model_dir else None
  return record["class_names"] if record else [str(k) for k in range(settings.num_classes)]


def skipped_section(skipped_files: Sequence[Tuple[str, str]]) -> Optional[Section]:
  """The input files an image_dir run left out, with why; None when none were."""
  if not skipped_files:
    return None
  return Section(
      "Skipped input files",
      Paragraph(f"{len(skipped_files)} bad file(s) or folder(s) of the image folder were left "
                "out (--skip_bad_images):"),
      Table(["path", "reason"], [(Code(path), reason) for path, reason in skipped_files]))


def reliability_section(values: Dict) -> Section:
  charts = []
  for slice_, output, title in [
      (TEST, CALIBRATED, "clean test, temperature-scaled"),
      (TEST, RAW, "clean test, before temperature scaling"),
      (CORRUPTED, CALIBRATED, "corrupted test, temperature-scaled"),
      (CORRUPTED, RAW, "corrupted test, before temperature scaling")]:
    bins = tfma_results.metric(values, slice_, output, RELIABILITY_NAME)
    if bins is not None and np.sum(bins[:, 0]):
      ece = tfma_results.metric(values, slice_, output, ECE_NAME)
      charts.append(Chart(title, plots.reliability_diagram(
          bins, f"Reliability: {title} (ECE {_fmt(ece)})")))
  return Section("Reliability diagrams", *charts)


def per_class_section(values: Dict, class_names: Sequence[str]) -> Section:
  classes = range(len(class_names))
  per_class = {}
  for slice_ in (EVAL, TEST, CORRUPTED):
    accuracies = [tfma_results.metric(values, slice_ + ((LABEL_KEY, k),),
                                     CALIBRATED, ACCURACY_NAME) for k in classes]
    if any(a is not None for a in accuracies):
      per_class[SET_NAMES[slice_]] = accuracies
  chart = plots.bar_chart([name[:12] for name in class_names], per_class,
                          "Accuracy per true class", "accuracy")
  return Section("Per-class accuracy", Chart("per-class accuracy", chart), Table(
      ["class", *per_class],
      [(f"{class_names[k]} ({k})", *(_fmt(v[k]) for v in per_class.values())) for k in classes]))


def corruption_section(settings: ReportSettings, values: Dict) -> Section:
  severities = list(corruptions.SEVERITIES)
  metric = lambda name, s, output, metric_name: tfma_results.metric(  # noqa: E731
      values, corruption_slice(name, s), output, metric_name)
  family_series = {}  # Each family's mean accuracy at each severity.
  for name in settings.corruptions:
    family_series.setdefault(corruptions.FAMILY_OF[name], []).append(
        [metric(name, s, CALIBRATED, ACCURACY_NAME) for s in severities])
  family_series = {family: [mean(column) for column in zip(*members)]
                   for family, members in family_series.items()}
  by_severity = plots.line_chart(severities, family_series,
                                 "Accuracy per corruption family and severity", "severity",
                                 "accuracy")
  rows = {}
  for name in settings.corruptions:
    rows[name] = {
        "accuracy": [metric(name, s, CALIBRATED, ACCURACY_NAME) for s in severities],
        "ece": corrupted_means(values, CALIBRATED, [name])[ECE_NAME],
        "ece_raw": corrupted_means(values, RAW, [name])[ECE_NAME],
        "mean": corrupted_means(values, CALIBRATED, [name])[ACCURACY_NAME]}
  by_corruption = plots.bar_chart(
      [name[:7] for name in rows],
      {"accuracy": [r["mean"] for r in rows.values()], "ECE": [r["ece"] for r in rows.values()],
       "ECE before temperature scaling": [r["ece_raw"] for r in rows.values()]},
      "Per corruption (mean over severities)", "")
  return Section(
      "Accuracy and ECE per corruption and severity",
      Chart("accuracy per family and severity", by_severity),
      Chart("accuracy and ECE per corruption", by_corruption),
      Table(["corruption", "family", *(f"acc. sev. {s}" for s in severities),
             "accuracy (mean)", "ECE (mean)", "ECE before T (mean)"],
            [(name, corruptions.FAMILY_OF[name], *(_fmt(a) for a in row["accuracy"]),
              _fmt(row["mean"]), _fmt(row["ece"]), _fmt(row["ece_raw"]))
             for name, row in rows.items()]))


def ensemble_section(record: dict) -> Section:
  """Hyper-deep ensemble: the trials, the selection, and the ensemble against the best single
  trial, both as served (each temperature-scaled), on the same examples."""
  weights = {m["name"]: m["weight"] for m in record["members"]}
  after_t = (", each candidate after its own temperature"
             if record.get("calibrated_selection") else "")
  blocks = [Paragraph(
      f"Greedy selection with replacement on {record.get('selected_on', 'the eval split')} "
      f"({record['objective']}{after_t}): picks {record['picks']}, {len(weights)} distinct of at "
      f"most {record['ensemble_size']}; diversity (mean pairwise disagreement of the members on "
      f"eval) {_fmt(record['diversity'])}.")]
  comparison = record.get("comparison")
  if comparison:
    best, ensemble = comparison["best_single"], comparison["ensemble"]
    rows = []
    for split in ("eval", "test", "corrupted"):
      for name in ("accuracy", "nll", "ece"):
        if split not in best or split not in ensemble:
          continue
        label = {"corrupted": {"accuracy": "cA", "nll": "cNLL", "ece": "cECE"}}.get(
            split, {}).get(name, f"{split} {name}")
        single, joint = best[split][name], ensemble[split][name]
        rows.append((label, _fmt(single), _fmt(joint), f"{joint - single:+.4f}"))
    blocks.append(Table(["metric", f"best single trial ({best['name']})", "ensemble", "change"],
                        rows))
  l2_names = [name for name in record["trials"][0]["hyperparameters"] if name.endswith("_l2")]
  rows = []
  for trial in record["trials"]:
    hyper = trial["hyperparameters"]
    rows.append((trial["name"], _fmt(weights.get(trial["name"], 0.0), 3), str(hyper.get("seed")),
                 _fmt(hyper.get("label_smoothing"), 5),
                 *(f"{hyper[name] if hyper[name] is not None else hyper['l2']:.2e}"
                   for name in l2_names),
                 _fmt(trial["temperature"], 3), _fmt(trial["eval"]["accuracy"]),
                 _fmt(trial["eval"]["nll"]), _fmt(trial["eval"]["ece"]),
                 _fmt(trial.get("objective_value"))))
  blocks += [Paragraph("Trials (eval metrics of each served, temperature-scaled model):"),
             Table(["trial", "weight", "seed", "label smoothing", *l2_names, "T",
                    "eval accuracy", "eval NLL", "eval ECE", f"{record['objective']} alone"],
                   rows)]
  return Section("Ensemble", *blocks)


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


def served_check_section(check: Optional[ServedCheck]) -> Section:
  if check is None:
    return Section("Served-model check", Paragraph(
        "Not run: the candidate was not checked as a serving client sees it."))
  blocks = [Paragraph(
      Strong("PASSED" if check.passed else "FAILED"),
      f"{'' if check.passed else ': the Pusher pushes nothing.'} A fresh process loaded the "
      "candidate SavedModel and sent it the raw serialized tf.Examples of the ",
      Code(check.split), " split through its ", Code("serving_default"), " signature, as a "
      "serving client would (TFX's InfraValidator does this with TF Serving).")]
  items = []
  if check.accuracy is not None:
    items.append(f"served accuracy: {_fmt(check.accuracy)} ({check.correct}/{check.examples} "
                 f"{check.split} examples); the Evaluator's on the same split: "
                 f"{_fmt(check.evaluator_accuracy)} (tolerance {check.tolerance})")
  items += check.problems
  if items:
    blocks.append(BulletList(items))
  return Section("Served-model check", *blocks)


def history_section(entries: Sequence[run_history.Entry]) -> Section:
  """The last runs of this pipeline (components/run_history.py), oldest first: what each read,
  what became of it, and the gated figures of those that trained."""
  trained = [entry for entry in entries if entry.accuracy is not None]
  blocks = [Paragraph(
      f"The last {len(entries)} run(s) of this pipeline, oldest first: the span each read, "
      "whether it trained, what the gate decided and why, the version that serves its model, "
      "and the clean eval accuracy, NLL and ECE and the corrupted cA, cNLL and cECE "
      "(temperature-scaled) of those that trained.")]
  if trained:
    labels = [f"{index + 1}: {entry.span}" for index, entry in enumerate(entries)]
    blocks.append(Chart("Accuracy and calibration error by run", plots.history_chart(
        labels, {"accuracy": [entry.accuracy for entry in entries],
                 "ECE": [entry.ece for entry in entries],
                 "cA": [entry.corrupted_accuracy for entry in entries],
                 "cECE": [entry.corrupted_ece for entry in entries]},
        "Accuracy and calibration error by run", "value")))
  blocks.append(Table(list(run_history.HEADER),
                      [tuple(run_history.row(entry)) for entry in entries]))
  return Section("History", *blocks)


def span_summary(span: Optional[int], version: Optional[int],
                 train_window: Sequence[dict] = ()) -> Optional[str]:
  """The span (and version) ExampleGen read, as its Examples artifact records them, and the
  spans whose train splits the train split holds; None for a source without spans (TFX
  records span 0 and no version there)."""
  if not train_window and not span and version is None:
    return None
  line = f"span {span}" + (f", version {version}" if version is not None else "")
  if train_window:
    line += f" ({train_window[0]['folder']})"
    if len(train_window) > 1:
      line += f"; train split from {len(train_window)} spans: " + ", ".join(
          f"{entry['span']} ({entry['train_examples']} examples)" for entry in train_window)
  return line


DRIFT_STATUS_TEXT = {
    "no production model": "No model in production: nothing to compare the new data with; the "
                           "check passed.",
    "production has no baseline": "The model in production was pushed without a drift baseline "
                                  "(before the check existed): nothing to compare with; the "
                                  "check passed.",
    "no drift": "No feature moved beyond its bound with a significant two-sample test.",
}


def drift_section(result: Optional[dict]) -> Section:
  """What moved between the data the model in production was trained on and the new data: each
  feature's distance against its bound, its two-sample p-value, and a chart per moved one."""
  if result is None:
    return Section("Drift", Paragraph("Not checked: the run recorded no drift result."))
  status = result["status"]
  blocks: list = []
  production = result.get("production_version") or ""
  if status == "drift":
    moved = result.get("moved", [])
    blocks.append(Paragraph(
        Strong("DRIFT"), f": {len(moved)} feature(s) moved from the data the model in "
        "production was trained on", *((" (", Code(production), ")") if production else ()),
        ". " + ("--block_on_drift: the Pusher refuses the candidate." if result.get(
            "blocks_push") else "A warning only: the gate decides the push "
            "(--block_on_drift would refuse it).")))
    blocks.append(BulletList(moved))
  else:
    blocks.append(Paragraph(DRIFT_STATUS_TEXT.get(status, status), *(
        (" Baseline: ", Code(production), ".") if production else ())))
  if result.get("bbsd_not_run"):
    blocks.append(Paragraph("Model outputs (BBSD) not compared: ", result["bbsd_not_run"]))
  comparisons = result.get("comparisons", [])
  if comparisons:
    limits = result.get("limits", {})
    threshold = comparisons[0]["threshold"]
    tests = round(limits["p_value"] / threshold) if limits.get("p_value") else None
    blocks.append(Paragraph(
        "A feature moved when TFDV's distance exceeds its bound and its two-sample test "
        f"rejects at p < {threshold:.3g}", (f" (drift_p_value {limits['p_value']:g} over the "
                                            f"{tests} tests that can reject, Bonferroni)"
                                            if tests else ""),
        ". Label and image statistics: the new train split "
        "against the production model's; model outputs (BBSD): the production model's softmax "
        "on the new eval split against its own held-out eval images."))
    blocks.append(Table(
        ["feature", "measure", "distance", "bound", "test", "p-value", "moved"],
        [(c["feature"], c["measure"], _fmt(c["distance"]),
          "n/a" if c["bound"] is None else f"{c['bound']:g}", c["test"],
          f"{c['p_value']:.3g}", Strong("yes") if c["moved"] else "no")
         for c in comparisons]))
  for comparison in comparisons:
    if not comparison["moved"]:
      continue
    chart = comparison["chart"]
    title = f"{comparison['feature']}: baseline and new"
    if "categories" in chart:
      top = max(chart["baseline"] + chart["new"] + [0.01])
      png = plots.bar_chart([str(c) for c in chart["categories"]],
                            {"baseline": chart["baseline"], "new": chart["new"]}, title,
                            "share of images", (0.0, min(1.0, top * 1.2)))
    else:
      xlabel = (f"softmax output of class {chart['class_index']}" if "class_index" in chart
                else comparison["feature"])
      png = plots.distribution_chart(chart["edges"], {"baseline": chart["baseline"],
                                                      "new": chart["new"]}, title, xlabel)
    blocks.append(Chart(title, png))
  return Section("Drift", *blocks)


def about_run(settings: ReportSettings, model_dir: Optional[str], pushed: Optional[str],
              evaluation_uri: str, input_span: Optional[str] = None,
              span_check: Optional[str] = None) -> BulletList:
  """The lines under the title: the data (and its span), the span check's decision, the model,
  its precision, start, push and metrics."""
  precision = read_record(model_dir, PRECISION_FILE) if model_dir else None
  return BulletList([
      ("dataset: ", Code(settings.dataset), f", model: {settings.model}"),
      *([f"data read: {input_span}"] if input_span else []),
      *([f"span check: {span_check}"] if span_check else []),
      ("trained in ", Code(precision["policy"]), f" ({precision['reason']}), served in ",
       Code(precision["serving_policy"])) if precision else "precision: not recorded",
      ("candidate model: ", Code(str(model_dir))),
      f"warm-started from: {warm_start_summary(model_dir) if model_dir else 'n/a'}",
      ("pushed: ", Code(pushed)) if pushed else "pushed: nothing this run",
      ("TFMA output: ", Code(evaluation_uri))])


def run_report(settings: ReportSettings, evaluation_uri: str, blessed: bool,
               model_dir: Optional[str], pushed: Optional[str],
               evaluation_set_uri: Optional[str] = None,
               served_check: Optional[ServedCheck] = None,
               skipped_files: Sequence[Tuple[str, str]] = (),
               input_span: Optional[str] = None,
               history: Sequence[run_history.Entry] = (),
               span_check: Optional[str] = None,
               drift: Optional[dict] = None) -> Report:
  """The report of a run. evaluation_set_uri: EvaluationSetGen's examples, whose served distance
  scores the report shows for a model calibrated by distance. skipped_files: (path, reason) of
  the input files an image_dir run left out (skip_bad_images). input_span: span_summary of the
  Examples read. history: the pipeline's last runs, this one last. span_check: why the span
  check let this run train. drift: the DriftCheck's result (components/drift_check.py)."""
  values = tfma_results.load_metrics(evaluation_uri)
  try:
    validation = tfma.load_validation_result(evaluation_uri)
  except Exception:  # No thresholds, no validation file: nothing to explain.
    validation = None
  calibration = None
  if model_dir and tf.io.gfile.exists(os.path.join(model_dir, "assets.extra",
                                                   "temperature.json")):
    calibration = read_calibration_info(model_dir)
  ensemble = read_record(model_dir, ENSEMBLE_FILE) if model_dir else None
  reads_distance = bool(calibration) and registry.recorded(
      calibration).temperature_of_score(calibration) is not None
  sections = [
      gate_section(settings, values, blessed, validation),
      served_check_section(served_check),
      drift_section(drift),
      metric_section(settings, values),
      ensemble_section(ensemble) if ensemble else None,
      temperature_section(settings, values, calibration),
      distance_section(calibration, candidate_served_images(
          model_dir, evaluation_set_uri, REPORT_IMAGES_PER_SLICE) if evaluation_set_uri else None)
      if reads_distance else None,
      baseline_section(settings, values),
      reliability_section(values),
      per_class_section(values, model_class_names(settings, model_dir)),
      corruption_section(settings, values) if settings.corruptions else None,
      skipped_section(skipped_files),
      history_section(history) if history else None]
  return Report(f"Run report: {settings.pipeline_name}",
                about_run(settings, model_dir, pushed, evaluation_uri, input_span, span_check),
                tuple(section for section in sections if section is not None))
