"""What the Evaluator measures and what a model must reach to be blessed (the TFMA EvalConfig;
docs/pipeline.md, "Evaluation and the gate").
"""
from __future__ import annotations

import json
from typing import List, Tuple

import tensorflow_model_analysis as tfma

from components import evaluation_set
from components.calibration_metrics import ACCURACY_NAME, ECE_NAME, MEAN_SLICE_ECE_NAME, NLL_NAME
from reporting.figures import GateBound, ReportSettings
from pipeline.config import PipelineConfig
from trainer_module.features import (LABEL_KEY, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)

_CALIBRATION_MODULE = "components.calibration_metrics"

# The slices the gate reads.
CLEAN_EVAL_SLICE = tfma.SlicingSpec(
    feature_values={evaluation_set.EVAL_SET_KEY: evaluation_set.EVAL})
CORRUPTED_SLICE = tfma.SlicingSpec(
    feature_values={evaluation_set.EVAL_SET_KEY: evaluation_set.CORRUPTED})

SLICING_SPECS = [
    tfma.SlicingSpec(feature_keys=[evaluation_set.EVAL_SET_KEY]),  # eval, test, corrupted.
    tfma.SlicingSpec(feature_keys=[evaluation_set.EVAL_SET_KEY, LABEL_KEY]),  # Per true class.
    # Only corrupted examples carry these features, so these slices hold corrupted images only.
    # Not by corruption or by severity alone: Uncertainty Baselines' figures per corruption
    # are means over these slices (the report's), and each slice more costs every corrupted
    # example another pass through the metrics (bench/README.md).
    tfma.SlicingSpec(feature_keys=[evaluation_set.CORRUPTION_KEY, evaluation_set.SEVERITY_KEY]),
    # Each family's cECE and confidence gap with their bootstrap deviations (MeanSliceECE).
    tfma.SlicingSpec(feature_keys=[evaluation_set.FAMILY_KEY]),
]


def _bounds(slice_spec: tfma.SlicingSpec, lower=None, upper=None, higher_is_better=True,
            max_change=None) -> List[tfma.PerSliceMetricThreshold]:
  """A value bound and a change bound (against the baseline) on one slice."""
  value = tfma.GenericValueThreshold(
      **({"lower_bound": {"value": lower}} if lower is not None else {}),
      **({"upper_bound": {"value": upper}} if upper is not None else {}))
  direction = (tfma.MetricDirection.HIGHER_IS_BETTER if higher_is_better
               else tfma.MetricDirection.LOWER_IS_BETTER)
  change = tfma.GenericChangeThreshold(
      direction=direction, absolute={"value": -max_change if higher_is_better else max_change})
  return [tfma.PerSliceMetricThreshold(
      slicing_specs=[slice_spec],
      threshold=tfma.MetricThreshold(value_threshold=value, change_threshold=change))]


def _accuracy_and_calibration_metrics(num_bins: int) -> List[tfma.MetricConfig]:
  """Accuracy, ECE, NLL and Brier score: one shared pass per output (same `num_bins`)."""
  return [tfma.MetricConfig(class_name=name, module=_CALIBRATION_MODULE,
                            config=json.dumps({"num_bins": num_bins}))
          for name in ("TopLabelAccuracy", "ExpectedCalibrationError", "NegativeLogLikelihood",
                       "BrierScore")]


def _mean_slice_ece(num_bins: int) -> tfma.MetricConfig:
  """cECE: the mean ECE of the corruption x severity slices, on every slice of corrupted
  images, and the mean confidence gap, each with its standard deviation over a bootstrap of
  the test images (components/calibration_metrics.py)."""
  return tfma.MetricConfig(class_name="MeanSliceECE", module=_CALIBRATION_MODULE,
                           config=json.dumps({"num_bins": num_bins, "sub_slice_keys": [
                               evaluation_set.CORRUPTION_KEY, evaluation_set.SEVERITY_KEY],
                               "resample_key": evaluation_set.SOURCE_IMAGE_KEY}))


def gated_metrics(config: PipelineConfig) -> List[tfma.MetricConfig]:
  """Accuracy, ECE and NLL of the calibrated probabilities, with the gate's thresholds: on the
  clean eval set, and on the corrupted set (cA, cNLL, cECE and the corrupted set's ECE)."""
  num_bins, gate = config.trainer.calibration.num_bins, config.gate
  metrics = {m.class_name: m for m in _accuracy_and_calibration_metrics(num_bins)}
  if config.evaluation.corruptions:
    metrics["MeanSliceECE"] = _mean_slice_ece(num_bins)
  accuracy = metrics["TopLabelAccuracy"]
  accuracy.per_slice_thresholds.extend(_bounds(
      CLEAN_EVAL_SLICE, lower=gate.min_eval_accuracy, max_change=gate.max_accuracy_drop))
  if config.evaluation.corruptions:
    accuracy.per_slice_thresholds.extend(_bounds(
        CORRUPTED_SLICE, lower=gate.min_corrupted_accuracy,
        max_change=gate.max_corrupted_accuracy_drop))
  # (slice, metric, upper bound, largest rise): calibration, clean and under shift.
  calibration_bounds = [
      (CLEAN_EVAL_SLICE, "ExpectedCalibrationError", gate.max_eval_ece, gate.max_ece_increase),
      (CLEAN_EVAL_SLICE, "NegativeLogLikelihood", gate.max_eval_nll, gate.max_nll_increase)]
  if config.evaluation.corruptions:
    calibration_bounds += [
        (CORRUPTED_SLICE, "MeanSliceECE", gate.max_corrupted_mean_ece,
         gate.max_corrupted_mean_ece_increase),
        (CORRUPTED_SLICE, "ExpectedCalibrationError", gate.max_corrupted_ece,
         gate.max_corrupted_ece_increase),
        (CORRUPTED_SLICE, "NegativeLogLikelihood", gate.max_corrupted_nll,
         gate.max_corrupted_nll_increase)]
  for slice_spec, metric, upper, max_rise in calibration_bounds:
    metrics[metric].per_slice_thresholds.extend(_bounds(
        slice_spec, upper=upper, higher_is_better=False, max_change=max_rise))
  return [tfma.MetricConfig(class_name="ExampleCount"), *metrics.values()]


def eval_config(config: PipelineConfig) -> tfma.EvalConfig:
  """The gate: absolute bounds, and no regression beyond a tolerance against the last blessed
  model (TFX drops the change bounds on a first run, which has no baseline)."""
  return tfma.EvalConfig(
      # TF_GENERIC: the serving signature is all TFMA calls. Left unset, TFMA loads the model
      # with Keras once to guess its type and again to look for compiled metrics (it has none),
      # which cost more than scoring the evaluation set (bench/evaluator.py).
      # inference_batch_size: what components/evaluator.py regroups the input batches to.
      model_specs=[tfma.ModelSpec(
          signature_name="serving_default", label_key=LABEL_KEY, model_type=tfma.TF_GENERIC,
          inference_batch_size=config.trainer.training.eval_batch_size,
          prediction_keys={PROBABILITIES_KEY: PROBABILITIES_KEY,
                           UNCALIBRATED_PROBABILITIES_KEY: UNCALIBRATED_PROBABILITIES_KEY})],
      slicing_specs=SLICING_SPECS,
      metrics_specs=[
          tfma.MetricsSpec(output_names=[PROBABILITIES_KEY], metrics=gated_metrics(config)),
          tfma.MetricsSpec(output_names=[UNCALIBRATED_PROBABILITIES_KEY],
                           metrics=_accuracy_and_calibration_metrics(
                               config.trainer.calibration.num_bins)),
      ])


def gate_bounds(config: PipelineConfig) -> Tuple[GateBound, ...]:
  """The bounds gated_metrics sets, as the run report lists them."""
  eval_, corrupted = evaluation_set.EVAL, evaluation_set.CORRUPTED
  bounds = [GateBound("accuracy", eval_, ACCURACY_NAME, True, config.gate.min_eval_accuracy,
                      config.gate.max_accuracy_drop),
            GateBound("ECE", eval_, ECE_NAME, False, config.gate.max_eval_ece,
                      config.gate.max_ece_increase),
            GateBound("NLL", eval_, NLL_NAME, False, config.gate.max_eval_nll,
                      config.gate.max_nll_increase)]
  if config.evaluation.corruptions:
    bounds += [
        GateBound("cA (mean corrupted accuracy)", corrupted, ACCURACY_NAME, True,
                  config.gate.min_corrupted_accuracy, config.gate.max_corrupted_accuracy_drop),
        GateBound("cNLL (corrupted NLL)", corrupted, NLL_NAME, False, config.gate.max_corrupted_nll,
                  config.gate.max_corrupted_nll_increase),
        GateBound("cECE (mean ECE of the corruption x severity slices)", corrupted,
                  MEAN_SLICE_ECE_NAME, False, config.gate.max_corrupted_mean_ece,
                  config.gate.max_corrupted_mean_ece_increase),
        GateBound("ECE of the corrupted set", corrupted, ECE_NAME, False,
                  config.gate.max_corrupted_ece, config.gate.max_corrupted_ece_increase)]
  return tuple(bounds)


def report_settings(config: PipelineConfig) -> ReportSettings:
  """What the report step needs of the config."""
  return ReportSettings(
      pipeline_name=config.runner.pipeline_name, dataset=config.data.dataset,
      model=f"WRN-{config.trainer.model.depth}-{config.trainer.model.width_multiplier}",
      num_classes=config.trainer.model.num_classes,
      corruptions=tuple(config.evaluation.corruptions),
      bounds=gate_bounds(config))
