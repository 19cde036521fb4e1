"""The gate enforces the bounds its flags set and the run report shows: each bound flag, set to
a value of its own, reaches exactly one TFMA threshold and one row of the report's gate table."""
import json

import pytest
import tensorflow_model_analysis as tfma

from components import evaluation_set, tfma_results
from components.calibration_metrics import (ACCURACY_NAME, ECE_NAME, MEAN_SLICE_ECE_NAME,
                                            NLL_NAME)
from pipeline.config import from_flags
from pipeline.evaluation import eval_config, gate_bounds, report_settings
from reporting.sections import gate_section
from trainer_module.features import PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY

EVAL, CORRUPTED = evaluation_set.EVAL, evaluation_set.CORRUPTED

# Each bound flag -> (TFMA metric class, the metric's name, slice, a value bound or a change
# bound). Every flag gets a distinct value below, so a bound read from another flag shows.
GATE_FLAGS = {
    "min_eval_accuracy": ("TopLabelAccuracy", ACCURACY_NAME, EVAL, "value"),
    "max_accuracy_drop": ("TopLabelAccuracy", ACCURACY_NAME, EVAL, "change"),
    "max_eval_ece": ("ExpectedCalibrationError", ECE_NAME, EVAL, "value"),
    "max_ece_increase": ("ExpectedCalibrationError", ECE_NAME, EVAL, "change"),
    "max_eval_nll": ("NegativeLogLikelihood", NLL_NAME, EVAL, "value"),
    "max_nll_increase": ("NegativeLogLikelihood", NLL_NAME, EVAL, "change"),
    "min_corrupted_accuracy": ("TopLabelAccuracy", ACCURACY_NAME, CORRUPTED, "value"),
    "max_corrupted_accuracy_drop": ("TopLabelAccuracy", ACCURACY_NAME, CORRUPTED, "change"),
    "max_corrupted_nll": ("NegativeLogLikelihood", NLL_NAME, CORRUPTED, "value"),
    "max_corrupted_nll_increase": ("NegativeLogLikelihood", NLL_NAME, CORRUPTED, "change"),
    "max_corrupted_mean_ece": ("MeanSliceECE", MEAN_SLICE_ECE_NAME, CORRUPTED, "value"),
    "max_corrupted_mean_ece_increase": ("MeanSliceECE", MEAN_SLICE_ECE_NAME, CORRUPTED,
                                        "change"),
    "max_corrupted_ece": ("ExpectedCalibrationError", ECE_NAME, CORRUPTED, "value"),
    "max_corrupted_ece_increase": ("ExpectedCalibrationError", ECE_NAME, CORRUPTED, "change"),
}
HIGHER_IS_BETTER = {"TopLabelAccuracy"}
# Distinct values, all valid for their flags (accuracies in [0, 1], the rest >= 0).
VALUES = {name: round(0.301 + 0.037 * i, 3) for i, name in enumerate(GATE_FLAGS)}


@pytest.fixture(scope="module")
def config():
  return from_flags([f"--{name}={value}" for name, value in VALUES.items()])


def _slice_value(spec: tfma.SlicingSpec) -> str:
  (column, value), = spec.feature_values.items()
  assert column == evaluation_set.EVAL_SET_KEY
  return value


def _thresholds(metrics_spec):
  """{(metric class, slice, value or change): (bound, direction)} of one output's metrics."""
  found = {}
  for metric in metrics_spec.metrics:
    for per_slice in metric.per_slice_thresholds:
      (spec,) = per_slice.slicing_specs
      value, change = per_slice.threshold.value_threshold, per_slice.threshold.change_threshold
      for kind, bound in (("lower", value.lower_bound), ("upper", value.upper_bound)):
        if value.HasField(f"{kind}_bound"):
          key = (metric.class_name, _slice_value(spec), "value")
          assert key not in found, key
          found[key] = (bound.value, kind)
      if per_slice.threshold.HasField("change_threshold"):
        key = (metric.class_name, _slice_value(spec), "change")
        assert key not in found, key
        found[key] = (change.absolute.value, tfma.MetricDirection.Name(change.direction))
  return found


def test_each_flag_sets_exactly_its_own_tfma_threshold(config):
  specs = {tuple(spec.output_names): spec for spec in eval_config(config).metrics_specs}
  expected = {}
  for flag, (metric, _, slice_value, kind) in GATE_FLAGS.items():
    higher = metric in HIGHER_IS_BETTER
    if kind == "value":
      expected[(metric, slice_value, kind)] = (VALUES[flag], "lower" if higher else "upper")
    else:  # A drop of an accuracy is a negative change; a rise of ECE or NLL a positive one.
      expected[(metric, slice_value, kind)] = (
          -VALUES[flag] if higher else VALUES[flag],
          "HIGHER_IS_BETTER" if higher else "LOWER_IS_BETTER")
  assert _thresholds(specs[(PROBABILITIES_KEY,)]) == expected
  # The raw probabilities are measured, not gated.
  assert _thresholds(specs[(UNCALIBRATED_PROBABILITIES_KEY,)]) == {}


def test_the_report_names_the_run_the_data_the_network_and_the_corruptions():
  config = from_flags(["--pipeline_name=nightly-7", "--dataset=cifar10", "--depth=16",
                       "--width_multiplier=4", "--corruptions=fog,snow"])
  settings = report_settings(config)
  assert (settings.pipeline_name, settings.dataset, settings.model, settings.num_classes,
          settings.corruptions) == ("nightly-7", "cifar10", "WRN-16-4", 10, ("fog", "snow"))


def test_the_reports_bounds_are_the_flags(config):
  shown = {(b.metric, b.eval_set): b for b in gate_bounds(config)}
  assert report_settings(config).bounds == gate_bounds(config)
  assert len(shown) == len(gate_bounds(config)) == len(GATE_FLAGS) // 2
  assert [b.label for b in gate_bounds(config)] == [
      "accuracy", "ECE", "NLL", "cA (mean corrupted accuracy)", "cNLL (corrupted NLL)",
      "cECE (mean ECE of the corruption x severity slices)", "ECE of the corrupted set"]
  for flag, (metric_class, name, slice_value, kind) in GATE_FLAGS.items():
    bound = shown[(name, slice_value)]
    assert bound.higher_is_better == (metric_class in HIGHER_IS_BETTER), flag
    assert (bound.bound if kind == "value" else bound.max_change) == VALUES[flag], flag


def _values_with_a_baseline():
  """TFMA values with a blessed baseline on the eval slice: the table then shows the change
  bounds."""
  return {((evaluation_set.EVAL_SET_KEY, EVAL),): {
      (tfma_results.CANDIDATE, PROBABILITIES_KEY, ACCURACY_NAME, False): 0.9,
      (tfma_results.BASELINE, PROBABILITIES_KEY, ACCURACY_NAME, False): 0.9}}


def test_the_reports_gate_table_shows_each_flags_bound(config):
  section = gate_section(report_settings(config), _values_with_a_baseline(), True, None)
  (table,) = [block for block in section.blocks if hasattr(block, "rows")]
  rows = {(row[0], row[1]): row for row in
          [tuple("".join(getattr(part, "text", part) for part in cell) for cell in row)
           for row in table.rows]}
  labels = {(b.metric, b.eval_set): b.label for b in gate_bounds(config)}
  for flag, (metric_class, name, slice_value, kind) in GATE_FLAGS.items():
    row = rows[(labels[(name, slice_value)],
                tfma_results.slice_name(((evaluation_set.EVAL_SET_KEY, slice_value),)))]
    higher = metric_class in HIGHER_IS_BETTER
    if kind == "value":
      assert row[3] == f"{'>=' if higher else '<='} {VALUES[flag]}", flag
    else:
      assert row[5] == (f">= -{VALUES[flag]}" if higher else f"<= +{VALUES[flag]}"), flag


def test_without_corruptions_only_the_clean_bounds_are_set_and_shown():
  config = from_flags(["--corruptions="] + [f"--{name}={value}" for name, value in
                                             VALUES.items()])
  clean = {(m, s, k) for m, _, s, k in GATE_FLAGS.values() if s == EVAL}
  specs = {tuple(spec.output_names): spec for spec in eval_config(config).metrics_specs}
  assert set(_thresholds(specs[(PROBABILITIES_KEY,)])) == clean
  assert {(b.metric, b.eval_set) for b in gate_bounds(config)} == {
      (name, s) for _, name, s, _ in GATE_FLAGS.values() if s == EVAL}


def test_the_evaluator_scores_the_serving_signature_with_the_configs_bins_and_batch():
  import json
  config = from_flags(["--num_bins=7", "--eval_batch_size=48"])
  evaluation = eval_config(config)
  (spec,) = evaluation.model_specs
  assert (spec.signature_name, spec.label_key, spec.model_type, spec.inference_batch_size) == (
      "serving_default", "label", tfma.TF_GENERIC, 48)
  assert dict(spec.prediction_keys) == {PROBABILITIES_KEY: PROBABILITIES_KEY,
                                        UNCALIBRATED_PROBABILITIES_KEY:
                                            UNCALIBRATED_PROBABILITIES_KEY}
  for metrics_spec in evaluation.metrics_specs:
    names = [metric.class_name for metric in metrics_spec.metrics]
    assert "" not in names
    for metric in metrics_spec.metrics:
      if metric.config:
        assert json.loads(metric.config)["num_bins"] == 7, metric.class_name
  gated = [metric.class_name for metric in evaluation.metrics_specs[0].metrics]
  assert gated == ["ExampleCount", "TopLabelAccuracy", "ExpectedCalibrationError",
                   "NegativeLogLikelihood", "BrierScore", "MeanSliceECE"]


def test_each_calibration_metric_is_built_from_its_module_with_the_configs_settings():
  """As a Beam worker builds them: TFMA imports the module the MetricConfig names (a worker
  need not have imported it) and passes the JSON config as arguments."""
  from tensorflow_model_analysis.metrics import metric_specs
  evaluation = eval_config(from_flags(["--num_bins=7"]))
  built = {}
  for metrics_spec in evaluation.metrics_specs:
    for metric in metrics_spec.metrics:
      if metric.class_name != "ExampleCount":
        assert metric.module == "components.calibration_metrics", metric.class_name
        built[metric.class_name] = metric_specs.metric_instance(metric, {}).get_config()
  assert set(built) == {"TopLabelAccuracy", "ExpectedCalibrationError",
                        "NegativeLogLikelihood", "BrierScore", "MeanSliceECE"}
  assert {name: config["num_bins"] for name, config in built.items()} == dict.fromkeys(built, 7)
  assert built["MeanSliceECE"]["sub_slice_keys"] == [evaluation_set.CORRUPTION_KEY,
                                                     evaluation_set.SEVERITY_KEY]
  assert built["MeanSliceECE"]["resample_key"] == evaluation_set.SOURCE_IMAGE_KEY


def test_the_uncalibrated_output_is_measured_ungated_with_the_configs_bins():
  """What the report sets beside the served (temperature-scaled) figures: the raw output's
  accuracy, ECE, NLL and Brier score, with no bound on them."""
  (spec,) = [spec for spec in eval_config(from_flags(["--num_bins=7"])).metrics_specs
             if list(spec.output_names) == [UNCALIBRATED_PROBABILITIES_KEY]]
  assert [(metric.class_name, json.loads(metric.config)) for metric in spec.metrics] == [
      (name, {"num_bins": 7}) for name in ("TopLabelAccuracy", "ExpectedCalibrationError",
                                           "NegativeLogLikelihood", "BrierScore")]
  assert not any(metric.HasField("threshold") for metric in spec.metrics)


def test_every_slice_a_bound_gates_is_a_slice_the_evaluator_computes(config):
  """TFMA computes only the slices EvalConfig.slicing_specs lists: a bound on another slice
  would never be checked."""
  evaluation = eval_config(config)
  computed = [sorted(spec.feature_keys) for spec in evaluation.slicing_specs]
  gated = [sorted(spec.feature_values) for metrics_spec in evaluation.metrics_specs
           for metric in metrics_spec.metrics for per_slice in metric.per_slice_thresholds
           for spec in per_slice.slicing_specs]
  assert gated and all(keys in computed for keys in gated), (gated, computed)
