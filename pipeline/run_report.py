"""The run report a person reads after `make run`: Markdown with PNG charts.

It holds the gate decision and its reasons, the metric table (clean and corrupted, as
Uncertainty Baselines reports them), temperature scaling's effect, the comparison with the
blessed baseline, a reliability diagram, per-class accuracy and accuracy per corruption and
severity. Everything comes from the Evaluator's TFMA output and the model's calibration record.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow_model_analysis as tfma

from components import corruptions, evaluation_set
from components.calibration_metrics import BRIER_NAME, ECE_NAME, NLL_NAME, RELIABILITY_NAME
from pipeline import gate_report, plots
from pipeline.config import PipelineConfig
from pipeline.evaluation import ACCURACY_NAME, EXAMPLE_COUNT_NAME
from trainer_module.features import (LABEL_KEY, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.export import read_precision_info
from trainer_module.temperature import read_calibration_info

REPORT_FILE = "report.md"
CALIBRATED, RAW = PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY
EVAL = ((evaluation_set.EVAL_SET_KEY, evaluation_set.EVAL),)
TEST = ((evaluation_set.EVAL_SET_KEY, evaluation_set.TEST),)
CORRUPTED = ((evaluation_set.EVAL_SET_KEY, evaluation_set.CORRUPTED),)
SET_NAMES = {EVAL: "clean eval (gated)", TEST: "clean test", CORRUPTED: "corrupted test"}


def _fmt(value: Optional[float], digits: int = 4) -> str:
  return "n/a" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _corruption_slice(name: str, severity: int) -> gate_report.Slice:
  return ((evaluation_set.CORRUPTION_KEY, name), (evaluation_set.SEVERITY_KEY, severity))


def corrupted_means(values: Dict, output: str, names) -> Dict[str, Optional[float]]:
  """cA, cNLL, cECE: each metric's mean over the corruption x severity slices (UB's tables)."""
  result = {}
  for name in (ACCURACY_NAME, NLL_NAME, ECE_NAME):
    per_slice = [gate_report.metric(values, _corruption_slice(c, s), output, name)
                 for c in names for s in corruptions.SEVERITIES]
    per_slice = [v for v in per_slice if v is not None]
    result[name] = float(np.mean(per_slice)) if per_slice else None
  return result


def _bounds(config: PipelineConfig) -> List[Tuple[str, gate_report.Slice, str, bool, float,
                                                   float]]:
  """(label, slice, metric, higher is better, value bound, allowed change) of each gated metric."""
  bounds = [("accuracy", EVAL, ACCURACY_NAME, True, config.min_eval_accuracy,
             config.max_accuracy_drop),
            ("ECE", EVAL, ECE_NAME, False, config.max_eval_ece, config.max_ece_increase),
            ("NLL", EVAL, NLL_NAME, False, config.max_eval_nll, config.max_nll_increase)]
  if config.corruptions:
    bounds.append(("cA (mean corrupted accuracy)", CORRUPTED, ACCURACY_NAME, True,
                   config.min_corrupted_accuracy, config.max_corrupted_accuracy_drop))
  return bounds


def _gate_section(config, values, blessed: bool, validation) -> List[str]:
  lines = ["## Gate", "", f"**{'BLESSED' if blessed else 'NOT BLESSED'}**"
           f"{'' if blessed else ': the Pusher pushes nothing.'}", ""]
  failures = gate_report.failures(validation) if validation is not None else []
  if failures:
    lines += ["Failed:", ""] + [f"- {failure.describe()}" for failure in failures] + [""]
  has_baseline = gate_report.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                                    model=gate_report.BASELINE) is not None
  lines += ["| bound | slice | candidate | needs | vs blessed baseline | allowed change |",
            "| --- | --- | --- | --- | --- | --- |"]
  for label, slice_, name, higher, bound, change in _bounds(config):
    value = gate_report.metric(values, slice_, CALIBRATED, name)
    diff = gate_report.metric(values, slice_, CALIBRATED, name, diff=True)
    needs = f"{'>=' if higher else '<='} {bound}"
    allowed = f"{'>=' if higher else '<='} {-change if higher else change:+}"
    lines.append(f"| {label} | {gate_report.slice_name(slice_)} | {_fmt(value)} | {needs} | "
                 f"{f'{diff:+.4f}' if diff is not None else 'no baseline'} | "
                 f"{allowed if has_baseline else 'n/a (first blessing)'} |")
  return lines + [""]


def _metric_table(config, values) -> List[str]:
  lines = ["## Metrics (calibrated probabilities)", "",
           "| set | examples | accuracy | NLL | ECE | Brier |",
           "| --- | --- | --- | --- | --- | --- |"]
  for slice_ in (EVAL, TEST, CORRUPTED):
    get = lambda name, s=slice_: gate_report.metric(values, s, CALIBRATED, name)  # noqa: E731
    count = get(EXAMPLE_COUNT_NAME)
    if not count:
      continue
    lines.append(f"| {SET_NAMES[slice_]} | {int(count)} | {_fmt(get(ACCURACY_NAME))} | "
                 f"{_fmt(get(NLL_NAME))} | {_fmt(get(ECE_NAME))} | {_fmt(get(BRIER_NAME))} |")
  if config.corruptions:
    means = corrupted_means(values, CALIBRATED, config.corruptions)
    lines += ["", f"Robustness ({len(config.corruptions)} corruptions x "
              f"{len(corruptions.SEVERITIES)} severities, means over the slices as in "
              f"Uncertainty Baselines): **cA {_fmt(means[ACCURACY_NAME])}, cNLL "
              f"{_fmt(means[NLL_NAME])}, cECE {_fmt(means[ECE_NAME])}**."]
  return lines + [""]


def _temperature_section(values, calibration: Optional[dict]) -> List[str]:
  lines = ["## Temperature scaling", ""]
  if calibration:
    lines.append(f"T = {calibration['temperature']:.4f}, fitted on "
                 f"{calibration['eval_examples']} clean eval examples (never on test); served "
                 "probabilities are softmax(logits / T). On the eval split the fit is in-sample; "
                 "the test and corrupted rows are not.")
  lines += ["", "| set | NLL before | NLL after | ECE before | ECE after | Brier before | "
            "Brier after |", "| --- | --- | --- | --- | --- | --- | --- |"]
  for slice_ in (EVAL, TEST, CORRUPTED):
    cells = [_fmt(gate_report.metric(values, slice_, output, name))
             for name in (NLL_NAME, ECE_NAME, BRIER_NAME) for output in (RAW, CALIBRATED)]
    if gate_report.metric(values, slice_, CALIBRATED, EXAMPLE_COUNT_NAME):
      lines.append(f"| {SET_NAMES[slice_]} | " + " | ".join(cells) + " |")
  return lines + [""]


def _baseline_section(config, values) -> List[str]:
  lines = ["## Against the blessed baseline", ""]
  if gate_report.metric(values, EVAL, CALIBRATED, ACCURACY_NAME,
                        model=gate_report.BASELINE) is None:
    return lines + ["No blessed model yet: this candidate is judged on the absolute bounds "
                    "alone.", ""]
  lines += ["| metric | slice | candidate | blessed baseline | change |",
            "| --- | --- | --- | --- | --- |"]
  for label, slice_, name, _, _, _ in _bounds(config) + [
      ("Brier", EVAL, BRIER_NAME, False, 0, 0), ("accuracy", TEST, ACCURACY_NAME, True, 0, 0)]:
    candidate = gate_report.metric(values, slice_, CALIBRATED, name)
    baseline = gate_report.metric(values, slice_, CALIBRATED, name, model=gate_report.BASELINE)
    if candidate is None or baseline is None:
      continue
    lines.append(f"| {label} | {gate_report.slice_name(slice_)} | {_fmt(candidate)} | "
                 f"{_fmt(baseline)} | {candidate - baseline:+.4f} |")
  return lines + [""]


def _charts(report_dir, config, values) -> List[str]:
  lines = ["## Reliability diagrams", ""]
  for slice_, output, file_name, title in [
      (TEST, CALIBRATED, "reliability_test.png", "clean test, temperature-scaled"),
      (TEST, RAW, "reliability_test_uncalibrated.png", "clean test, before temperature scaling"),
      (CORRUPTED, CALIBRATED, "reliability_corrupted.png", "corrupted test, temperature-scaled"),
  ]:
    bins = gate_report.metric(values, slice_, output, RELIABILITY_NAME)
    if bins is None or not np.sum(bins[:, 0]):
      continue
    ece = gate_report.metric(values, slice_, output, ECE_NAME)
    plots.reliability_diagram(os.path.join(report_dir, file_name), bins,
                              f"Reliability: {title} (ECE {_fmt(ece)})")
    lines.append(f"![{title}]({file_name})")
  lines += ["", "## Per-class accuracy", ""]
  classes = list(range(config.trainer.num_classes))
  per_class = {}
  for slice_ in (EVAL, TEST, CORRUPTED):
    accuracies = [gate_report.metric(values, slice_ + ((LABEL_KEY, k),),
                                     CALIBRATED, ACCURACY_NAME) for k in classes]
    if any(a is not None for a in accuracies):
      per_class[SET_NAMES[slice_]] = accuracies
  plots.bar_chart(os.path.join(report_dir, "per_class_accuracy.png"), classes, per_class,
                  "Accuracy per true class", "accuracy")
  lines += ["![per-class accuracy](per_class_accuracy.png)", "",
            "| class | " + " | ".join(per_class) + " |",
            "| --- |" + " --- |" * len(per_class)]
  for k in classes:
    lines.append(f"| {k} | " + " | ".join(_fmt(v[k]) for v in per_class.values()) + " |")
  lines.append("")
  if config.corruptions:
    lines += _corruption_chart(report_dir, config, values)
  return lines


def _corruption_chart(report_dir, config, values) -> List[str]:
  severities = list(corruptions.SEVERITIES)
  series = {name: [gate_report.metric(values, _corruption_slice(name, s), CALIBRATED,
                                      ACCURACY_NAME) for s in severities]
            for name in config.corruptions}
  plots.line_chart(os.path.join(report_dir, "corrupted_accuracy.png"), severities, series,
                   "Accuracy per corruption and severity", "severity", "accuracy")
  lines = ["## Accuracy per corruption and severity", "",
           "![accuracy per corruption and severity](corrupted_accuracy.png)", "",
           "| corruption | " + " | ".join(f"severity {s}" for s in severities) + " | ECE (mean) |",
           "| --- |" + " --- |" * (len(severities) + 1)]
  for name, accuracies in series.items():
    eces = [gate_report.metric(values, _corruption_slice(name, s), CALIBRATED, ECE_NAME)
            for s in severities]
    eces = [e for e in eces if e is not None]
    lines.append(f"| {name} | " + " | ".join(_fmt(a) for a in accuracies) +
                 f" | {_fmt(float(np.mean(eces)) if eces else None)} |")
  return lines + [""]


def write_run_report(config: PipelineConfig, report_dir: str, evaluation_uri: str,
                     blessed: bool, model_dir: Optional[str], pushed: Optional[str]) -> str:
  """Writes report.md and its PNGs into report_dir; returns the report's path."""
  os.makedirs(report_dir, exist_ok=True)
  values = gate_report.load_metrics(evaluation_uri)
  try:
    validation = tfma.load_validation_result(evaluation_uri)
  except Exception:  # No thresholds, no validation file: nothing to explain.
    validation = None
  calibration = None
  if model_dir and os.path.exists(os.path.join(model_dir, "assets.extra", "temperature.json")):
    calibration = read_calibration_info(model_dir)
  precision = read_precision_info(model_dir) if model_dir else None
  lines = [f"# Run report: {config.pipeline_name}", "",
           f"- dataset: `{config.dataset}`, model: WRN-{config.trainer.depth}-"
           f"{config.trainer.width_multiplier}",
           f"- trained in `{precision['policy']}` ({precision['reason']}), served in "
           f"`{precision['serving_policy']}`" if precision else "- precision: not recorded",
           f"- candidate model: `{model_dir}`",
           f"- pushed: `{pushed}`" if pushed else "- pushed: nothing this run",
           f"- TFMA output: `{evaluation_uri}`", ""]
  lines += _gate_section(config, values, blessed, validation)
  lines += _metric_table(config, values)
  lines += _temperature_section(values, calibration)
  lines += _baseline_section(config, values)
  lines += _charts(report_dir, config, values)
  path = os.path.join(report_dir, REPORT_FILE)
  with open(path, "w") as f:
    f.write("\n".join(lines))
  return path
