"""The Evaluator's metrics and gate: TFMA's numbers equal numpy's on the same predictions, on
every slice; partial results merge exactly; a model below the bounds is not blessed."""
import hashlib
import math
import os
import pickle

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_model_analysis.metrics import metric_types
from tfx_bsl.public import tfxio

from components import calibration_metrics, evaluation_set, evaluator
from pipeline import evaluation
from components import tfma_results
from pipeline.config import PipelineConfig
from test_support import reference_metrics
from trainer_module.features import PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY

NUM_CLASSES = 10
TEMPERATURE = 1.7
LOGITS_KEY = "fake_logits"


def _inputs(probabilities, labels):
  return [metric_types.StandardMetricInputs(labels=np.array([label]), predictions=p,
                                            example_weights=np.array([1.0]))
          for p, label in zip(probabilities, labels)]


def _random_predictions(rng, count, sharpness=3.0):
  logits = rng.normal(0, sharpness, (count, NUM_CLASSES))
  labels = np.where(rng.random(count) < 0.7, logits.argmax(1), rng.integers(0, NUM_CLASSES, count))
  return logits, labels


def _softmax(logits, temperature=1.0):
  z = logits / temperature
  e = np.exp(z - z.max(axis=1, keepdims=True))
  return e / e.sum(axis=1, keepdims=True)


def _added(combiner, probabilities, labels):
  accumulator = combiner.create_accumulator()
  for element in _inputs(probabilities, labels):
    accumulator = combiner.add_input(accumulator, element)
  return accumulator


def _computed(metric, probabilities, labels, workers=4):
  """The metric's values as TFMA computes them: the shared statistics pass over `workers`
  partial results, merged, then the metric's derived computation."""
  statistics, derived = metric.computations()
  combiner = statistics.combiner
  parts = [_added(combiner, probabilities[chunk], labels[chunk])
           for chunk in np.array_split(np.arange(len(labels)), workers)]
  return derived.result(combiner.extract_output(combiner.merge_accumulators(parts)))


def test_each_metric_matches_numpy_from_partial_results_merged_exactly():
  rng = np.random.default_rng(0)
  logits, labels = _random_predictions(rng, 300)
  probabilities = _softmax(logits)
  probabilities[0] = np.eye(NUM_CLASSES)[labels[0]]  # Confidence exactly 1: the last bin.
  expected = reference_metrics.metrics(probabilities, labels, num_bins=7)
  for metric, name in [(calibration_metrics.TopLabelAccuracy(num_bins=7), "accuracy"),
                       (calibration_metrics.ExpectedCalibrationError(num_bins=7), "ece"),
                       (calibration_metrics.NegativeLogLikelihood(num_bins=7), "nll"),
                       (calibration_metrics.BrierScore(num_bins=7), "brier_score")]:
    values = _computed(metric, probabilities, labels)
    assert values[metric_types.MetricKey(name=name)] == pytest.approx(expected[name], abs=1e-9)
  reliability = _computed(calibration_metrics.ExpectedCalibrationError(num_bins=7),
                          probabilities, labels)[
      metric_types.MetricKey(name=calibration_metrics.RELIABILITY_NAME)]
  # Per bin: examples, mean confidence, accuracy; an empty bin reads 0, a bin of one its example.
  np.testing.assert_allclose(reliability, expected["reliability"], rtol=0, atol=1e-12)
  assert reliability[-1, 1] > 6 / 7
  # Empty bins and a bin of one example (confidences 0.5; 0.9 and 0.95 in bins 3 and 6 of 7).
  few = np.array([[0.5, 0.5] + [0.0] * (NUM_CLASSES - 2), [0.1, 0.9] + [0.0] * (NUM_CLASSES - 2),
                  [0.95, 0.05] + [0.0] * (NUM_CLASSES - 2)])
  few_labels = np.array([0, 0, 0])
  few_reliability = _computed(calibration_metrics.ExpectedCalibrationError(num_bins=7), few,
                              few_labels, workers=2)[
      metric_types.MetricKey(name=calibration_metrics.RELIABILITY_NAME)]
  assert list(few_reliability[:, 0]) == [0, 0, 0, 1, 0, 0, 2]
  np.testing.assert_allclose(few_reliability, reference_metrics.metrics(
      few, few_labels, num_bins=7)["reliability"], rtol=0, atol=1e-12)


def test_one_example_is_measured_not_nan():
  probabilities, labels = np.array([[0.2, 0.8] + [0.0] * (NUM_CLASSES - 2)]), np.array([1])
  values = _computed(calibration_metrics.ExpectedCalibrationError(num_bins=5), probabilities,
                     labels, workers=1)
  assert values[metric_types.MetricKey(name="ece")] == pytest.approx(0.2)


def test_the_metrics_of_one_output_share_one_pass_over_the_examples():
  """TFMA de-duplicates equal computations: four metrics, one statistics combiner."""
  statistics = {metric(num_bins=15).computations()[0] for metric in (
      calibration_metrics.TopLabelAccuracy, calibration_metrics.ExpectedCalibrationError,
      calibration_metrics.NegativeLogLikelihood, calibration_metrics.BrierScore)}
  assert len(statistics) == 1
  assert calibration_metrics.BrierScore(num_bins=7).computations()[0] not in statistics


def _weighted_inputs(probabilities, labels, weights):
  return [metric_types.StandardMetricInputs(labels=np.array([label]), predictions=p,
                                            example_weights=np.array([weight]))
          for p, label, weight in zip(probabilities, labels, weights)]


def _statistics_combiner(flush_size, num_bins=15):
  key = metric_types.MetricKey(name="_calibration_statistics", example_weighted=True)
  return calibration_metrics._StatisticsCombiner(key, num_bins, "", "", True,
                                                 flush_size=flush_size), key


def test_buffered_statistics_equal_numpy_across_flushes_weights_and_merged_workers():
  """Integer example weights count an example that many times, so the weighted metrics equal
  numpy's on the examples repeated; the examples reach the statistics in batches of 7 (on add
  and on merge), from uneven workers (one with nothing), some shipped pickled as Beam does."""
  rng = np.random.default_rng(2)
  logits, labels = _random_predictions(rng, 1000)
  probabilities = _softmax(logits).astype(np.float32)  # The model's dtype.
  probabilities[:3] = np.eye(NUM_CLASSES)[labels[:3]]  # Confidence exactly 1: the last bin.
  weights = rng.integers(0, 4, len(labels))  # 0 drops an example.
  combiner, key = _statistics_combiner(flush_size=7)
  inputs = _weighted_inputs(probabilities, labels, weights.astype(np.float64))
  parts = []
  for worker, chunk in enumerate(np.split(np.arange(len(labels)), [0, 5, 333, 334, 700])):
    accumulator = combiner.create_accumulator()
    for index in chunk:
      accumulator = combiner.add_input(accumulator, inputs[index])
    # Added in batches of 7, not one by one: the remainder waits, the rest is counted.
    waiting = len(chunk) % 7
    assert len(accumulator.pending) == waiting
    assert accumulator.count == weights[chunk[:len(chunk) - waiting]].sum()
    if worker % 2:
      accumulator = pickle.loads(pickle.dumps(combiner.compact(accumulator)))
    parts.append(accumulator)
  statistics = combiner.extract_output(combiner.merge_accumulators(parts))[key]
  repeated = np.repeat(np.arange(len(labels)), weights)
  expected = reference_metrics.metrics(probabilities[repeated], labels[repeated], num_bins=15)
  values = calibration_metrics._values(statistics)
  assert statistics.count == weights.sum() and not statistics.pending
  for name in ("accuracy", "ece", "nll", "brier_score"):
    assert values[name] == pytest.approx(expected[name], rel=1e-12), name
  assert values[calibration_metrics.RELIABILITY_NAME][:, 0].sum() == weights.sum()


def test_statistics_of_nothing_are_nan_not_an_error():
  combiner, key = _statistics_combiner(flush_size=7)
  merged = combiner.merge_accumulators([combiner.create_accumulator() for _ in range(3)])
  values = calibration_metrics._values(combiner.extract_output(merged)[key])
  assert np.isnan(values["ece"]) and np.isnan(values["nll"])
  # The reliability table keeps its shape, every bin empty: one row a bin, as when measured.
  np.testing.assert_array_equal(values[calibration_metrics.RELIABILITY_NAME], np.zeros((15, 3)))


@pytest.mark.parametrize("label", [NUM_CLASSES, -1])
def test_a_label_outside_the_classes_is_refused_with_the_label_named(label):
  combiner, key = _statistics_combiner(flush_size=1024)
  probabilities = _softmax(np.zeros((3, NUM_CLASSES)))
  accumulator = combiner.create_accumulator()
  for element in _inputs(probabilities, [0, label, 1]):
    accumulator = combiner.add_input(accumulator, element)
  with pytest.raises(ValueError, match=rf"Label {label} is outside \[0, {NUM_CLASSES}\)"):
    combiner.extract_output(accumulator)


def test_each_output_of_a_multi_output_model_is_read_by_its_name_with_its_weights():
  """Predictions, labels and example weights keyed by output name, as TFMA gives them for a
  multi-output model: each output's statistics hold its own probabilities, labels and weights."""
  rng = np.random.default_rng(5)
  logits, labels = _random_predictions(rng, 40)
  raw_labels = (labels + 1) % NUM_CLASSES  # Another label per output: a mix-up would show.
  calibrated, raw = _softmax(logits, TEMPERATURE), _softmax(logits)
  weights = rng.integers(1, 4, len(labels)).astype(np.float64)
  inputs = [metric_types.StandardMetricInputs(
      labels={"calibrated": np.array([y]), "raw": np.array([z])},
      predictions={"calibrated": c, "raw": r},
      example_weights={"calibrated": np.array([w]), "raw": np.array([1.0])})
      for y, z, c, r, w in zip(labels, raw_labels, calibrated, raw, weights)]
  repeated = np.repeat(np.arange(len(labels)), weights.astype(int))
  for output, probabilities, truth, rows in (
      ("calibrated", calibrated, labels, repeated),
      ("raw", raw, raw_labels, np.arange(len(labels)))):
    key = metric_types.MetricKey(name="_calibration_statistics", output_name=output,
                                 example_weighted=True)
    combiner = calibration_metrics._StatisticsCombiner(key, 15, "", output, True)
    accumulator = combiner.create_accumulator()
    for element in inputs:
      accumulator = combiner.add_input(accumulator, element)
    values = calibration_metrics._values(combiner.extract_output(accumulator)[key])
    expected = reference_metrics.metrics(probabilities[rows], truth[rows], num_bins=15)
    for name in ("accuracy", "ece", "nll", "brier_score"):
      assert values[name] == pytest.approx(expected[name], rel=1e-12), (output, name)


_SHARED = [calibration_metrics.TopLabelAccuracy, calibration_metrics.ExpectedCalibrationError,
           calibration_metrics.NegativeLogLikelihood, calibration_metrics.BrierScore]


@pytest.mark.parametrize("metric", _SHARED, ids=lambda metric: metric.__name__)
def test_each_metric_is_reported_under_the_model_output_and_weighting_tfma_asks_for(metric):
  """TFMA looks a value up by its full key: the model, the output and whether examples were
  weighted; the shared pass is keyed the same way, so two outputs never share statistics."""
  statistics, derived = metric(num_bins=7).computations(
      model_names=["candidate"], output_names=["calibrated"], example_weighted=True)
  (key,) = [key for key in derived.keys if key.name == metric.REPORTS]
  assert key == metric_types.MetricKey(name=metric.REPORTS, model_name="candidate",
                                       output_name="calibrated", example_weighted=True)
  (statistics_key,) = statistics.keys
  assert (statistics_key.model_name, statistics_key.output_name,
          statistics_key.example_weighted) == ("candidate", "calibrated", True)
  # And the value is of that model's output, weighted: the other model, the other output and
  # the weights all differ.
  rng = np.random.default_rng(9)
  logits, labels = _random_predictions(rng, 30)
  calibrated, raw = _softmax(logits, TEMPERATURE), _softmax(logits)
  weights = rng.integers(1, 4, len(labels)).astype(np.float64)
  combiner = statistics.combiner
  accumulator = combiner.create_accumulator()
  for y, c, r, w in zip(labels, calibrated, raw, weights):
    accumulator = combiner.add_input(accumulator, metric_types.StandardMetricInputs(
        labels={"candidate": {"calibrated": np.array([y]), "raw": np.array([(y + 1) % 10])},
                "baseline": {"calibrated": np.array([(y + 2) % 10])}},
        predictions={"candidate": {"calibrated": c, "raw": r}, "baseline": {"calibrated": r}},
        example_weights={"candidate": {"calibrated": np.array([w]), "raw": np.array([1.0])},
                         "baseline": {"calibrated": np.array([1.0])}}))
  rows = np.repeat(np.arange(len(labels)), weights.astype(int))
  expected = reference_metrics.metrics(calibrated[rows], labels[rows], num_bins=7)
  value = derived.result(combiner.extract_output(accumulator))[key]
  assert value == pytest.approx(expected[metric.REPORTS], rel=1e-12)


@pytest.mark.parametrize("option", [{"sub_keys": [metric_types.SubKey(top_k=2)]},
                                    {"aggregation_type": metric_types.AggregationType(
                                        macro_average=True)},
                                    {"class_weights": {0: 1.0}}],
                         ids=["top-k", "macro-average", "class-weights"])
def test_binarization_top_k_and_aggregation_are_refused_naming_the_metric(option):
  """These metrics read the whole probability vector: an option that would binarize it or
  average per class is an error, not a silently different number."""
  with pytest.raises(ValueError, match=r"^Metric 'ece' is computed over the full probability "
                     r"vector; binarization, top-k and aggregation options do not apply\.$"):
    calibration_metrics.ExpectedCalibrationError(num_bins=7).computations(**option)


_PROBABILITIES = _softmax(np.zeros((1, 3)))[0]


@pytest.mark.parametrize("output_name, labels, predictions, weights, refused, needs", [
    ("", np.array([1]), {"calibrated": _PROBABILITIES}, None, "prediction",
     "the output named in MetricsSpec.output_names"),
    ("calibrated", None, {"calibrated": _PROBABILITIES}, None, "label",
     r"a label feature named in ModelSpec\.label_key\.$"),
    ("", {"calibrated": np.array([1])}, _PROBABILITIES, None, "label", "a label feature"),
    ("calibrated", np.array([1]), {"raw": _PROBABILITIES}, None, "prediction", "the output"),
    ("", np.array([1, 2]), _PROBABILITIES, None, "label", "a label feature"),
    ("", np.array([1]), np.array([]), None, "prediction",
     r"the output named in MetricsSpec.output_names\.$"),
    ("", np.array([1]), _PROBABILITIES, {"calibrated": np.array([2.0])}, "example weight",
     r"one weight per example \(ModelSpec\.example_weight_key\)\.$"),
    ("", np.array([1]), _PROBABILITIES, np.array([1.0, 2.0]), "example weight",
     "one weight per example"),
], ids=["prediction-dict", "no-label", "label-dict", "output-not-there", "two-labels",
        "empty-prediction", "weight-dict", "two-weights"])
def test_an_example_without_one_label_prediction_or_weight_is_refused_naming_what_is_needed(
    output_name, labels, predictions, weights, refused, needs):
  """A multi-output model's values read without an output name (a dict, not one value), a
  value missing or empty for the output, or two where one belongs: an error naming the output
  and what the configuration needs, not a wrong figure."""
  element = metric_types.StandardMetricInputs(labels=labels, predictions=predictions,
                                              example_weights=weights)
  combiner = calibration_metrics._StatisticsCombiner(
      metric_types.MetricKey(name="_calibration_statistics", output_name=output_name,
                             example_weighted=True), 15, "", output_name, True)
  with pytest.raises(ValueError, match=rf"No single {refused} for model '' and output "
                                       rf"'{output_name}': .* This metric needs {needs}"):
    combiner.add_input(combiner.create_accumulator(), element)


def test_predictions_of_different_class_counts_in_one_slice_are_refused():
  combiner, _ = _statistics_combiner(flush_size=2)
  accumulator = combiner.add_input(combiner.create_accumulator(),
                                   _inputs(_softmax(np.zeros((1, 3))), [0])[0])
  with pytest.raises(ValueError, match=r"different numbers of class probabilities \[3, 4\]"):
    combiner.add_input(accumulator, _inputs(_softmax(np.zeros((1, 4))), [0])[0])


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_num_bins_must_be_a_positive_integer(bad):
  with pytest.raises(ValueError, match=f"num_bins must be a positive integer, got {bad!r}"):
    calibration_metrics.ExpectedCalibrationError(num_bins=bad)


def test_one_bin_is_a_valid_choice_and_gives_mean_confidence_minus_accuracy_in_size():
  """num_bins=1, the smallest positive one: every example in one bin, so the ECE is
  |mean confidence - accuracy| over all of them."""
  rng = np.random.default_rng(12)
  logits, labels = _random_predictions(rng, 50)
  probabilities = _softmax(logits)
  values = _computed(calibration_metrics.ExpectedCalibrationError(num_bins=1), probabilities,
                     labels, workers=2)
  expected = abs(probabilities.max(axis=1).mean() - np.mean(probabilities.argmax(1) == labels))
  assert values[metric_types.MetricKey(name="ece")] == pytest.approx(expected, rel=1e-12)
  reliability = values[metric_types.MetricKey(name=calibration_metrics.RELIABILITY_NAME)]
  assert reliability.shape == (1, 3) and reliability[0, 0] == len(labels)


def test_a_label_or_weight_is_read_as_its_number_and_a_prediction_as_a_flat_array():
  """However TFMA shapes them ([1], [1, 1] or a scalar): one number for a label or a weight,
  a flat vector of the class probabilities for a prediction."""
  read = calibration_metrics._read
  for value in (np.array([3]), np.array([[3]]), np.int64(3)):
    label = read(value, "label", "", "", "a label")
    assert np.ndim(label) == 0 and label == 3
  weight = read(np.array([[2.5]]), "example weight", "", "", "a weight")
  assert np.ndim(weight) == 0 and weight == 2.5
  prediction = read(np.array([[0.2, 0.8]]), "prediction", "", "", "a prediction", scalar=False)
  np.testing.assert_array_equal(prediction, [0.2, 0.8])


def _slice_inputs(probabilities, labels, sub_slices, sources):
  """MeanSliceECE's inputs: each example with its (corruption, severity) and, unless None, the
  source image it was made from."""
  inputs = []
  for p, label, (corruption, severity), source in zip(probabilities, labels, sub_slices,
                                                      sources):
    features = {"corruption": np.array([corruption.encode()]), "severity": np.array([severity])}
    if source is not None:
      features["source_image"] = np.array([source.encode()])
    inputs.append(metric_types.StandardMetricInputs(
        labels=np.array([label]), predictions=p, example_weights=np.array([1.0]),
        features=features))
  return inputs


def _mean_slice_values(metric, inputs, workers=3):
  """MeanSliceECE's outputs by name, from `workers` partial results (the odd ones shipped
  pickled, as Beam does) merged."""
  (computation,) = metric.computations()
  combiner = computation.combiner
  parts = []
  for worker, chunk in enumerate(np.array_split(np.arange(len(inputs)), workers)):
    accumulator = combiner.create_accumulator()
    for index in chunk:
      accumulator = combiner.add_input(accumulator, inputs[index])
    if worker % 2:
      accumulator = pickle.loads(pickle.dumps(combiner.compact(accumulator)))
    parts.append(accumulator)
  output = combiner.extract_output(combiner.merge_accumulators(parts))
  return {key.name: value for key, value in output.items()}


def _numpy_slice_means(probabilities, labels, slice_ids, num_bins):
  """The mean over slices of their ECE and of their mean confidence minus accuracy."""
  eces, gaps = [], []
  for slice_id in np.unique(slice_ids):
    mask = slice_ids == slice_id
    expected = reference_metrics.metrics(probabilities[mask], labels[mask], num_bins)
    eces.append(expected["ece"])
    gaps.append(probabilities[mask].max(axis=1).mean() - expected["accuracy"])
  return np.mean(eces), np.mean(gaps)


def test_sub_slice_and_source_image_values_are_read_as_plain_python_values():
  """A sub-slice's key and a source image's name are plain Python values, whatever carried
  them: bytes decoded, a numpy scalar as the Python number it holds, a Python value in an
  object array (as Arrow gives string columns) as it is; no features, no such feature or an
  empty one read as None (the example has no sub-slice)."""
  value_of = calibration_metrics._feature_value
  assert value_of({"corruption": np.array([b"fog"], dtype=object)}, "corruption") == "fog"
  assert value_of({"corruption": np.array(["fog"], dtype=object)}, "corruption") == "fog"
  assert value_of({"corruption": np.array(["fog"])}, "corruption") == "fog"
  severity = value_of({"severity": np.array([[3]])}, "severity")
  assert type(severity) is int and severity == 3
  source = value_of({"source_image": np.array([0.1], np.float32)}, "source_image")
  assert type(source) is float and source == float(np.float32(0.1))
  assert value_of(None, "corruption") is None
  assert value_of({"severity": np.array([3])}, "corruption") is None
  assert value_of({"corruption": np.array([], dtype=object)}, "corruption") is None


def _slice_arrays(rows):
  """_correlated_slices' rows as (probabilities, labels, slice ids, sub-slices, sources)."""
  return (np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]),
          np.array([f"{c}_{v}" for _, _, (c, v), _ in rows]), [r[2] for r in rows],
          np.array([r[3] for r in rows]))


def _replicate_means(probabilities, labels, slice_ids, counts, num_bins, replicates):
  """numpy's (mean slice ECE, gap) of each replicate r, example i repeated counts[r, i] times."""
  return np.array([_numpy_slice_means(*(
      array[np.repeat(np.arange(len(labels)), counts[r])]
      for array in (probabilities, labels, slice_ids)), num_bins) for r in replicates])


def _correlated_slices(rng, images, corruptions, severities):
  """Each source image under every (corruption, severity): an image the model gets wrong in one
  slice it tends to get wrong in all, as real corrupted images are."""
  hard = rng.random(images) < 0.4
  rows = []  # (probabilities, label, (corruption, severity), source)
  for corruption in corruptions:
    for severity in severities:
      logits, labels = _random_predictions(rng, images, sharpness=1.0 + severity)
      wrong = hard & (rng.random(images) < 0.9)
      labels = np.where(wrong, (logits.argmax(1) + 1) % NUM_CLASSES, logits.argmax(1))
      rows += [(p, y, (corruption, severity), f"test-{i:03d}")
               for i, (p, y) in enumerate(zip(_softmax(logits), labels))]
  return rows


def test_mean_slice_ece_its_gap_and_their_bootstrap_deviations_equal_numpy_repeating_images():
  """Replicate r keeps each source image poisson_weights(...)[r] times, with all its corrupted
  versions: numpy on the examples repeated that many times gives each replicate's cECE and gap,
  and their standard deviations are the metric's, from merged partial results."""
  rng = np.random.default_rng(5)
  rows = _correlated_slices(rng, 60, ("fog", "contrast"), (1, 5))
  probabilities, labels, slice_ids, sub_slices, sources = _slice_arrays(rows)
  replicates = 30
  values = _mean_slice_values(
      calibration_metrics.MeanSliceECE(num_bins=10, bootstrap_replicates=replicates),
      _slice_inputs(probabilities, labels, sub_slices, sources))
  ece, gap = _numpy_slice_means(probabilities, labels, slice_ids, 10)
  assert values["mean_slice_ece"] == pytest.approx(ece, abs=1e-12)
  assert values["mean_slice_confidence_gap"] == pytest.approx(gap, abs=1e-12)
  counts = calibration_metrics.poisson_weights(sources, replicates).astype(int)
  replicate_means = _replicate_means(probabilities, labels, slice_ids, counts, 10,
                                     range(replicates))
  assert values["mean_slice_ece_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 0], ddof=1), rel=1e-9)
  assert values["mean_slice_confidence_gap_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 1], ddof=1), rel=1e-9)


def test_the_bootstrap_resamples_each_source_image_with_all_its_slices():
  """Half the images wrong in all ten slices, half right, all at confidence 0.9: the mean gap
  is 0.9 minus the share of right images, whose standard deviation over draws of 400 images is
  sqrt(0.25 / 400) = 0.025. Resampling each slice's examples on their own would give about
  sqrt(10) times less."""
  images, slices = 400, 10
  right = np.arange(images) % 2 == 0
  probabilities, labels, sub_slices, sources = [], [], [], []
  for slice_index in range(slices):
    for image in range(images):
      row = np.full(NUM_CLASSES, 0.1 / (NUM_CLASSES - 1))
      row[0] = 0.9
      probabilities.append(row)
      labels.append(0 if right[image] else 1)
      sub_slices.append(("fog", slice_index))
      sources.append(f"test-{image:03d}")
  values = _mean_slice_values(calibration_metrics.MeanSliceECE(bootstrap_replicates=200),
                              _slice_inputs(probabilities, labels, sub_slices, sources))
  assert values["mean_slice_confidence_gap"] == pytest.approx(0.4)
  # 200 replicates estimate a standard deviation within about 5% (1 / sqrt(2 x 200)).
  assert values["mean_slice_confidence_gap_bootstrap_sd"] == pytest.approx(0.025, rel=0.2)
  assert values["mean_slice_ece_bootstrap_sd"] == pytest.approx(0.025, rel=0.2)


def test_poisson_weights_depend_on_the_image_alone_and_are_poisson_one():
  """The same image draws the same counts whatever else is drawn and in whatever order, so
  every slice, worker and run agrees; over many images the counts are Poisson(1)."""
  names = [f"cifar10_corrupted-{i:05d}" for i in range(4000)]
  weights = calibration_metrics.poisson_weights(names, 50)
  assert weights.shape == (50, 4000)
  np.testing.assert_array_equal(
      calibration_metrics.poisson_weights([names[7], names[3]], 50), weights[:, [7, 3]])
  assert not np.array_equal(weights[:, 0], weights[:, 1])
  for k, probability in enumerate(np.exp(-1.0) / np.array([1, 1, 2, 6])):
    assert np.mean(weights == k) == pytest.approx(probability, abs=0.005), k
  assert weights.mean() == pytest.approx(1.0, abs=0.01)
  assert weights.var() == pytest.approx(1.0, abs=0.02)
  assert abs(np.corrcoef(weights[0], weights[1])[0, 1]) < 0.05  # Replicates independent.


def _splitmix64_poisson(group: str, replicate: int) -> int:
  """poisson_weights' count for one image and replicate, from its definition in plain Python
  integers: splitmix64 of (blake2b-64 of the name + replicate x golden gamma), its top 53 bits
  a uniform u, and the smallest k with P(Poisson(1) <= k) > u."""
  mask = 2 ** 64 - 1
  z = (int.from_bytes(hashlib.blake2b(group.encode(), digest_size=8).digest(), "little")
       + replicate * 0x9E3779B97F4A7C15) & mask
  z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
  z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
  u = ((z ^ (z >> 31)) >> 11) / 2 ** 53
  k, cumulative = 0, math.exp(-1.0)
  while u >= cumulative:
    k += 1
    cumulative += math.exp(-1.0) / math.factorial(k)
  return k


def test_poisson_weights_follow_their_definition_so_every_process_draws_the_same():
  """Computed from the image's name alone with a hash that does not change between processes
  (Python's hash() of a string does: Beam workers would then disagree)."""
  names = ["test-000", "cifar10_corrupted-00042", "test/cat/7.jpg"]
  weights = calibration_metrics.poisson_weights(names, 40)
  assert [[_splitmix64_poisson(name, r + 1) for name in names] for r in range(40)] == \
      weights.astype(int).tolist()


def test_poisson_weights_follow_their_definition_to_the_last_bit_of_the_hash():
  """A draw whose uniform lies within 2**-31 of a step of the Poisson CDF: only there does the
  last xor-shift of splitmix64's finalizer (by 31) decide the count, so an almost-right hash
  would draw the same counts nearly everywhere (found by a search over image names)."""
  weights = calibration_metrics.poisson_weights(["test-04837510"], 64)
  assert weights[63, 0] == _splitmix64_poisson("test-04837510", 64) == 4


def test_a_replicate_that_drew_none_of_a_slices_images_is_left_out_of_the_deviation():
  """Two images per slice: about e^-2 = 14% of replicates draw neither, and have no mean."""
  rng = np.random.default_rng(8)
  rows = _correlated_slices(rng, 2, ("fog",), (1, 2))
  probabilities, labels, slice_ids, sub_slices, sources = _slice_arrays(rows)
  values = _mean_slice_values(calibration_metrics.MeanSliceECE(bootstrap_replicates=50),
                              _slice_inputs(probabilities, labels, sub_slices, sources),
                              workers=2)
  counts = calibration_metrics.poisson_weights(sources, 50).astype(int)
  drawn = [r for r in range(50) if counts[r].sum()]
  assert 30 < len(drawn) < 50
  replicate_means = _replicate_means(probabilities, labels, slice_ids, counts, 15,
                                     drawn)
  assert values["mean_slice_ece_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 0], ddof=1), rel=1e-9)


def test_two_bootstrap_replicates_the_fewest_allowed_give_a_deviation():
  """With bootstrap_replicates=2 (both replicates draw images of every sub-slice) the
  deviations are those of the two replicates' means, as numpy computes them."""
  rng = np.random.default_rng(13)
  rows = _correlated_slices(rng, 20, ("fog",), (1, 2))
  probabilities, labels, slice_ids, sub_slices, sources = _slice_arrays(rows)
  values = _mean_slice_values(calibration_metrics.MeanSliceECE(bootstrap_replicates=2),
                              _slice_inputs(probabilities, labels, sub_slices, sources),
                              workers=2)
  counts = calibration_metrics.poisson_weights(sources, 2).astype(int)
  replicate_means = _replicate_means(probabilities, labels, slice_ids, counts, 15,
                                     range(2))
  assert np.all(np.isfinite(replicate_means))
  assert values["mean_slice_ece_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 0], ddof=1), rel=1e-9)
  assert values["mean_slice_confidence_gap_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 1], ddof=1), rel=1e-9)
  assert values["mean_slice_ece_bootstrap_sd"] > 0


def test_each_replicate_sums_the_slice_with_each_example_counted_its_draws_times_its_weight():
  """The sums behind the deviations: replicate r's weight, confidence and correct predictions
  per bin are the slice's, each example counted poisson_weights(...)[r] times its weight."""
  rng = np.random.default_rng(14)
  logits, labels = _random_predictions(rng, 60)
  probabilities = _softmax(logits)
  weights = rng.integers(1, 4, len(labels)).astype(np.float64)
  sources = [f"test-{i:03d}" for i in range(len(labels))]
  accumulator = calibration_metrics._Accumulator(num_bins=5, replicates=7)
  for element, source in zip(_weighted_inputs(probabilities, labels, weights), sources):
    accumulator.add(element, "", "", True, source)
  accumulator.flush()
  confidence = probabilities.max(axis=1)
  correct = (probabilities.argmax(axis=1) == labels).astype(np.float64)
  replicate_weights = calibration_metrics.poisson_weights(sources, 7) * weights
  for r in range(7):
    for sums, values in ((accumulator.replicate_count, 1.0),
                         (accumulator.replicate_confidence, confidence),
                         (accumulator.replicate_correct, correct)):
      expected, _ = np.histogram(confidence, bins=5, range=(0.0, 1.0),
                                 weights=replicate_weights[r] * values)
      np.testing.assert_allclose(sums[r], expected, rtol=1e-12, atol=0)
  assert accumulator.bootstrap_complete


def test_no_bootstrap_is_kept_where_none_is_asked_for():
  """The plain metrics' statistics, and MeanSliceECE's with bootstrap_replicates=0, sum
  nothing per replicate (nothing of the kind travels between workers) and read their
  bootstrap as unavailable, before examples arrive and after."""
  combiner, key = _statistics_combiner(flush_size=2)
  accumulator = combiner.create_accumulator()
  assert accumulator.replicate_count.shape == (0, 15) and not accumulator.bootstrap_complete
  probabilities = _softmax(np.zeros((3, NUM_CLASSES)))
  for element in _inputs(probabilities, [0, 1, 2]):
    accumulator = combiner.add_input(accumulator, element)
  statistics = combiner.extract_output(accumulator)[key]
  assert statistics.replicate_count.shape == (0, 15) and not statistics.bootstrap_complete
  (computation,) = calibration_metrics.MeanSliceECE(bootstrap_replicates=0).computations()
  sub_slices = computation.combiner.create_accumulator()
  for element in _slice_inputs(probabilities, [0, 1, 2], [("fog", 1)] * 3,
                               ["test-0", "test-1", "test-2"]):
    sub_slices = computation.combiner.add_input(sub_slices, element)
  for statistics in computation.combiner.compact(sub_slices).values():
    assert statistics.replicate_count.shape == (0, 15) and not statistics.bootstrap_complete


def test_mean_slice_ece_reads_its_model_and_output_and_weights_examples_when_asked():
  """TFMA hands a metric of a multi-model, multi-output EvalConfig every model's and output's
  values: MeanSliceECE reads those of the model and output it is keyed by and, example
  weighted, counts each example its weight times in the means and in every bootstrap
  replicate (numpy on the examples repeated weight x poisson count times)."""
  rng = np.random.default_rng(15)
  rows = _correlated_slices(rng, 40, ("fog", "contrast"), (1, 3))
  probabilities, labels, slice_ids, sub_slices, sources = _slice_arrays(rows)
  other = _softmax(rng.normal(0, 3, probabilities.shape))  # Another output's, another model's.
  weights = rng.integers(1, 4, len(labels)).astype(np.float64)
  metric = calibration_metrics.MeanSliceECE(num_bins=10, bootstrap_replicates=20)
  (computation,) = metric.computations(model_names=["candidate"], output_names=["calibrated"],
                                       example_weighted=True)
  assert {(key.model_name, key.output_name, key.example_weighted)
          for key in computation.keys} == {("candidate", "calibrated", True)}
  inputs = []
  for element, p, q, y, w in zip(
      _slice_inputs(probabilities, labels, sub_slices, sources), probabilities, other,
      labels, weights):
    inputs.append(metric_types.StandardMetricInputs(
        labels={"candidate": {"calibrated": np.array([y]), "raw": np.array([(y + 1) % 10])},
                "baseline": {"calibrated": np.array([(y + 2) % 10])}},
        predictions={"candidate": {"calibrated": p, "raw": q}, "baseline": {"calibrated": q}},
        example_weights={"candidate": {"calibrated": np.array([w]), "raw": np.array([1.0])},
                         "baseline": {"calibrated": np.array([1.0])}},
        features=element.features))
  combiner = computation.combiner
  accumulator = combiner.create_accumulator()
  for element in inputs:
    accumulator = combiner.add_input(accumulator, element)
  values = {key.name: value for key, value in combiner.extract_output(accumulator).items()}
  rows_weighted = np.repeat(np.arange(len(labels)), weights.astype(int))
  ece, gap = _numpy_slice_means(*(array[rows_weighted]
                                  for array in (probabilities, labels, slice_ids)), 10)
  assert values["mean_slice_ece"] == pytest.approx(ece, rel=1e-9)
  assert values["mean_slice_confidence_gap"] == pytest.approx(gap, rel=1e-9)
  counts = calibration_metrics.poisson_weights(sources, 20).astype(int) * weights.astype(int)
  replicate_means = _replicate_means(probabilities, labels, slice_ids, counts, 10,
                                     range(20))
  assert values["mean_slice_ece_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 0], ddof=1), rel=1e-9)
  assert values["mean_slice_confidence_gap_bootstrap_sd"] == pytest.approx(
      np.std(replicate_means[:, 1], ddof=1), rel=1e-9)


def test_mean_slice_ece_holds_at_most_flush_size_examples_waiting_in_a_sub_slice():
  """The FLUSH_SIZE-th example of a sub-slice adds the waiting ones to its statistics (memory
  stays bounded on a large slice); another sub-slice's keep waiting."""
  size = calibration_metrics.FLUSH_SIZE
  probabilities = _softmax(np.zeros((size + 3, NUM_CLASSES)))
  (computation,) = calibration_metrics.MeanSliceECE(bootstrap_replicates=0).computations()
  accumulator = computation.combiner.create_accumulator()
  for element in _slice_inputs(probabilities, [0] * (size + 3),
                               [("fog", 1)] * size + [("fog", 2)] * 3, [None] * (size + 3)):
    accumulator = computation.combiner.add_input(accumulator, element)
  assert not accumulator[("fog", 1)].pending and accumulator[("fog", 1)].count == size
  assert len(accumulator[("fog", 2)].pending) == 3 and accumulator[("fog", 2)].count == 0


@pytest.mark.parametrize("missing", [25, 35, 45])
def test_without_source_images_the_bootstrap_is_unavailable_and_the_means_still_computed(
    missing):
  """One example without a source image makes the deviations NaN (not a bootstrap over part of
  the slices), also when its worker's statistics were compacted before the merge: example 25
  (fog_1) on the middle worker, merged into the first worker's fog_1; example 35 (fog_2) on
  the middle worker, which holds fog_2 first, the last worker's complete ones merged into it;
  example 45 (fog_2) on the last worker, after the middle worker's fog_2 reached the
  replicate sums: fog_2's sums are then partial, and fog_1's complete. cECE and the gap do not
  need it."""
  rng = np.random.default_rng(6)
  rows = _correlated_slices(rng, 30, ("fog",), (1, 2))
  probabilities = np.stack([r[0] for r in rows])
  labels = np.array([r[1] for r in rows])
  sources = [r[3] for r in rows]
  sources[missing] = None
  values = _mean_slice_values(calibration_metrics.MeanSliceECE(),
                              _slice_inputs(probabilities, labels, [r[2] for r in rows], sources))
  ece, gap = _numpy_slice_means(probabilities, labels,
                                np.array([f"{c}_{v}" for _, _, (c, v), _ in rows]), 15)
  assert values["mean_slice_ece"] == pytest.approx(ece, abs=1e-12)
  assert values["mean_slice_confidence_gap"] == pytest.approx(gap, abs=1e-12)
  assert np.isnan(values["mean_slice_ece_bootstrap_sd"])
  assert np.isnan(values["mean_slice_confidence_gap_bootstrap_sd"])
  without = _mean_slice_values(calibration_metrics.MeanSliceECE(bootstrap_replicates=0),
                               _slice_inputs(probabilities, labels, [r[2] for r in rows],
                                             [r[3] for r in rows]))
  assert set(without) == {"mean_slice_ece", "mean_slice_confidence_gap"}


@pytest.mark.parametrize("bad", [1, -2, 2.5])
def test_bootstrap_replicates_must_be_zero_or_at_least_two(bad):
  with pytest.raises(ValueError, match=r"bootstrap_replicates must be 0 \(no bootstrap\) or at "
                     f"least 2, got {bad!r}"):
    calibration_metrics.MeanSliceECE(bootstrap_replicates=bad)


class _FakeModel(tf.Module):
  """Serves probabilities computed from logits stored in each tf.Example, like the exported
  model's signature (serialized examples in, calibrated and raw probabilities out)."""

  def __init__(self, temperature=TEMPERATURE, corrupted_temperature=None):
    super().__init__()
    self.temperature = temperature
    self.corrupted_temperature = corrupted_temperature or temperature

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(self, serialized):
    features = tf.io.parse_example(serialized, {
        LOGITS_KEY: tf.io.FixedLenFeature([NUM_CLASSES], tf.float32),
        evaluation_set.EVAL_SET_KEY: tf.io.FixedLenFeature([], tf.string)})
    logits = features[LOGITS_KEY]
    corrupted = tf.equal(features[evaluation_set.EVAL_SET_KEY], evaluation_set.CORRUPTED)
    temperature = tf.where(corrupted, self.corrupted_temperature, self.temperature)
    probabilities = tf.nn.softmax(logits / temperature[:, tf.newaxis])
    return {PROBABILITIES_KEY: probabilities, "class_ids": tf.argmax(probabilities, -1),
            UNCALIBRATED_PROBABILITIES_KEY: tf.nn.softmax(logits)}


def _write_evaluation_set(path, rng):
  """Clean eval examples (70% right) and corrupted ones (2 corruptions x 2 severities)."""
  rows = []  # (eval_set, corruption, severity, logits, label[, source image when corrupted])
  for eval_set in (evaluation_set.EVAL, evaluation_set.TEST):
    logits, labels = _random_predictions(rng, 120)
    rows += [(eval_set, None, None, z, y) for z, y in zip(logits, labels)]
  for corruption in ("contrast", "gaussian_noise"):
    for severity in (1, 5):
      logits, labels = _random_predictions(rng, 40, sharpness=1.0 + severity)
      rows += [(evaluation_set.CORRUPTED, corruption, severity, z, y, f"test-{image}")
               for image, (z, y) in enumerate(zip(logits, labels))]
  with tf.io.TFRecordWriter(path) as writer:
    for index, (eval_set, corruption, severity, z, y, *source) in enumerate(rows):
      example = evaluation_set.make_evaluation_example(
          source[0] if source else f"k{index}", b"", int(y), eval_set, corruption, severity)
      example.features.feature[LOGITS_KEY].float_list.value.extend(z.astype(np.float32))
      writer.write(example.SerializeToString())
  return rows


def _save(model, model_dir):
  tf.saved_model.save(model, model_dir, signatures={"serving_default": model.serve})
  return model_dir


# The metrics are computed by two Beam workers, the input partitioned between them and their
# partial results encoded and merged as on a cluster (threads: the same partitioning and merging
# as worker processes, without a TensorFlow import per process); the gate's decisions on the
# metrics need one worker.
TWO_WORKERS = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]
IN_MEMORY = ["--direct_running_mode=in_memory"]


def _evaluate(work, config, candidate_dir, baseline_dir=None, beam_args=IN_MEMORY):
  """TFMA as TFX's Evaluator runs it: change bounds only with a baseline."""
  eval_config = tfma.utils.update_eval_config_with_defaults(
      evaluation.eval_config(config), has_baseline=baseline_dir is not None, rubber_stamp=True)
  models = [tfma.default_eval_shared_model(baseline_dir if spec.is_baseline else candidate_dir,
                                           eval_config=eval_config, model_name=spec.name)
            for spec in eval_config.model_specs]
  output = str(work / "evaluation")
  with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
    _ = (pipeline  # Read as TFX's Evaluator reads examples without a schema.
         | tfxio.TFExampleRecord(str(work / "data.tfrecord"),
                                 raw_record_column_name=tfma.ARROW_INPUT_COLUMN).BeamSource()
         | tfma.ExtractEvaluateAndWriteResults(
             eval_shared_model=models[0] if len(models) == 1 else models,
             eval_config=eval_config, output_path=output,
             extractors=evaluator.custom_extractors(  # The pipeline's (regrouped inputs).
                 models[0] if len(models) == 1 else models, eval_config, None)))
  return output


_LOOSE_SHIFT_BOUNDS = dict(max_corrupted_nll=100.0, max_corrupted_ece=1.0,
                           max_corrupted_mean_ece=1.0)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
  work = tmp_path_factory.mktemp("tfma")
  rows = _write_evaluation_set(str(work / "data.tfrecord"), np.random.default_rng(1))
  config = PipelineConfig().replace(min_eval_accuracy=0.95, max_eval_ece=1.0, max_eval_nll=10.0,
                          min_corrupted_accuracy=0.0, **_LOOSE_SHIFT_BOUNDS)
  output = _evaluate(work, config, _save(_FakeModel(), str(work / "model")),
                     beam_args=TWO_WORKERS)
  return rows, output, config


def test_tfma_numbers_equal_numpy_on_every_slice(evaluated):
  rows, output, _ = evaluated
  values = tfma_results.load_metrics(output)
  eval_set_of = np.array([r[0] for r in rows])
  corruption_of = np.array([r[1] or "" for r in rows])
  severity_of = np.array([r[2] or 0 for r in rows])
  logits = np.stack([r[3] for r in rows]).astype(np.float32).astype(np.float64)
  labels = np.array([r[4] for r in rows])
  slices = {
      (("eval_set", "eval"),): eval_set_of == "eval",
      (("eval_set", "corrupted"),): eval_set_of == "corrupted",
      (("eval_set", "test"), ("label", 3)): (eval_set_of == "test") & (labels == 3),
      (("corruption_family", "digital"),): corruption_of == "contrast",
      (("corruption", "gaussian_noise"), ("severity", 1)):
          (corruption_of == "gaussian_noise") & (severity_of == 1),
  }
  # Not by corruption or severity alone: the report's figures per corruption are means over
  # its severities' slices, and each slice more costs every corrupted example a pass.
  assert not {(("corruption", "contrast"),), (("severity", 5),)} & set(values)
  for slice_key, mask in slices.items():
    for output_name, temperature in ((PROBABILITIES_KEY, TEMPERATURE),
                                     (UNCALIBRATED_PROBABILITIES_KEY, 1.0)):
      expected = reference_metrics.metrics(_softmax(logits[mask], temperature), labels[mask])
      got = values[slice_key]
      assert got[("candidate", PROBABILITIES_KEY, "example_count", False)] == mask.sum()
      assert got[("candidate", output_name, evaluation.ACCURACY_NAME, False)] == \
          pytest.approx(expected["accuracy"], abs=1e-6), (slice_key, output_name)
      for name in ("nll", "ece", "brier_score"):
        assert got[("candidate", output_name, name, False)] == pytest.approx(
            expected[name], abs=1e-4), (slice_key, output_name, name)
  # cECE: the mean over the corruption x severity slices of their ECE, on the corrupted slice.
  corrupted = eval_set_of == "corrupted"
  expected = np.mean([reference_metrics.metrics(
      _softmax(logits[mask], TEMPERATURE), labels[mask])["ece"]
      for mask in [(corruption_of == c) & (severity_of == v)
                   for c in ("contrast", "gaussian_noise") for v in (1, 5)]])
  got = values[(("eval_set", "corrupted"),)][("candidate", PROBABILITIES_KEY,
                                             calibration_metrics.MEAN_SLICE_ECE_NAME, False)]
  assert got == pytest.approx(expected, abs=1e-4)
  assert abs(got - reference_metrics.metrics(_softmax(logits[corrupted], TEMPERATURE),
                                             labels[corrupted])["ece"]) > 1e-3
  assert np.isnan(values[(("eval_set", "eval"),)][(
      "candidate", PROBABILITIES_KEY, calibration_metrics.MEAN_SLICE_ECE_NAME, False)])
  reliability = tfma_results.metric(values, (("eval_set", "eval"),), PROBABILITIES_KEY,
                                   "reliability_diagram")
  assert reliability.shape == (PipelineConfig().trainer.calibration.num_bins, 3)
  assert reliability[:, 0].sum() == np.sum(eval_set_of == "eval")


def test_tfma_gives_cece_and_each_familys_gap_with_deviations_over_a_bootstrap_of_test_images(
    evaluated):
  """On the corrupted slice and on each family's, as numpy computes them on the same
  predictions with each test image kept poisson_weights times in every corruption x severity
  slice it is in (the default 200 replicates)."""
  rows, output, _ = evaluated
  values = tfma_results.load_metrics(output)
  corrupted = [r for r in rows if r[0] == "corrupted"]
  probabilities = _softmax(np.stack([r[3] for r in corrupted]).astype(np.float32)
                           .astype(np.float64), TEMPERATURE)
  labels = np.array([r[4] for r in corrupted])
  slice_ids = np.array([f"{r[1]}_{r[2]}" for r in corrupted])
  sources = np.array([r[5] for r in corrupted])
  families = np.array([{"contrast": "digital", "gaussian_noise": "noise"}[r[1]]
                       for r in corrupted])
  for slice_key, mask in [((("eval_set", "corrupted"),), np.ones(len(labels), bool)),
                          ((("corruption_family", "digital"),), families == "digital"),
                          ((("corruption_family", "noise"),), families == "noise")]:
    chosen = [array[mask] for array in (probabilities, labels, slice_ids)]
    counts = calibration_metrics.poisson_weights(sources[mask], 200).astype(int)
    replicates = np.array([_numpy_slice_means(*(
        array[np.repeat(np.arange(mask.sum()), counts[r])] for array in chosen), 15)
                           for r in range(200)])
    expected = dict(zip(
        ["mean_slice_ece", "mean_slice_confidence_gap", "mean_slice_ece_bootstrap_sd",
         "mean_slice_confidence_gap_bootstrap_sd"],
        [*_numpy_slice_means(*chosen, 15), *np.std(replicates, axis=0, ddof=1)]))
    for name, value in expected.items():
      assert values[slice_key][("candidate", PROBABILITIES_KEY, name, False)] == pytest.approx(
          value, abs=1e-4), (slice_key, name)
  assert values[(("corruption_family", "noise"),)][(
      "candidate", PROBABILITIES_KEY, "mean_slice_ece_bootstrap_sd", False)] > 0


def test_a_model_below_the_accuracy_bound_is_not_blessed_and_the_reason_names_it(evaluated):
  rows, output, config = evaluated
  result = tfma.load_validation_result(output)
  assert not result.validation_ok
  failures = tfma_results.failures(result)
  eval_accuracy = np.mean([r[4] == r[3].argmax() for r in rows if r[0] == "eval"])
  assert [f.metric for f in failures] == ["accuracy"]
  (failure,) = failures
  assert failure.slice == "eval_set=eval"
  assert failure.value == pytest.approx(eval_accuracy, abs=1e-6)
  assert failure.margin == pytest.approx(config.gate.min_eval_accuracy - eval_accuracy, abs=1e-6)
  assert "accuracy on eval_set=eval" in failure.describe()
  assert os.path.isdir(output)


def test_a_model_whose_corrupted_ece_regresses_beyond_the_bound_is_not_blessed(tmp_path):
  """The same clean predictions as the blessed baseline, but less confident on the corrupted
  images than it should be (its NLL there even improves): only the cECE change bound fails."""
  rows = _write_evaluation_set(str(tmp_path / "data.tfrecord"), np.random.default_rng(1))
  config = PipelineConfig().replace(min_eval_accuracy=0.0, max_eval_ece=1.0, max_eval_nll=10.0,
                          min_corrupted_accuracy=0.0, max_corrupted_ece_increase=0.05,
                          max_corrupted_mean_ece_increase=1.0, **_LOOSE_SHIFT_BOUNDS)
  baseline = _save(_FakeModel(corrupted_temperature=0.5), str(tmp_path / "baseline"))
  candidate = _save(_FakeModel(corrupted_temperature=2.5), str(tmp_path / "candidate"))
  output = _evaluate(tmp_path, config, candidate, baseline)
  result = tfma.load_validation_result(output)
  assert not result.validation_ok
  (failure,) = tfma_results.failures(result)
  assert (failure.metric, failure.slice, failure.change) == ("ECE", "eval_set=corrupted", True)
  logits = np.stack([r[3] for r in rows if r[0] == "corrupted"])
  labels = np.array([r[4] for r in rows if r[0] == "corrupted"])
  ece = {t: reference_metrics.metrics(_softmax(logits, t), labels)["ece"] for t in (0.5, 2.5)}
  assert failure.value == pytest.approx(ece[2.5] - ece[0.5], abs=1e-4) and failure.value > 0.05
  assert failure.bound == 0.05 and not failure.lower
  assert failure.describe().startswith("ECE on eval_set=corrupted changed by +")


def test_a_model_whose_cece_regresses_beyond_the_bound_is_not_blessed(tmp_path):
  """Far less confident on the corrupted images than its accuracy there (the blessed baseline
  is not): the cECE change bound fails (the other shift bounds are left loose here, so cECE
  alone is judged)."""
  rows = _write_evaluation_set(str(tmp_path / "data.tfrecord"), np.random.default_rng(1))
  config = PipelineConfig().replace(min_eval_accuracy=0.0, max_eval_ece=1.0, max_eval_nll=10.0,
                          min_corrupted_accuracy=0.0, max_corrupted_nll=100.0,
                          max_corrupted_ece=1.0, max_corrupted_ece_increase=1.0,
                          max_corrupted_nll_increase=100.0, max_corrupted_mean_ece=1.0,
                          max_corrupted_mean_ece_increase=0.05)
  baseline = _save(_FakeModel(corrupted_temperature=1.0), str(tmp_path / "baseline"))
  candidate = _save(_FakeModel(corrupted_temperature=5.0), str(tmp_path / "candidate"))
  result = tfma.load_validation_result(_evaluate(tmp_path, config, candidate, baseline))
  assert not result.validation_ok
  (failure,) = tfma_results.failures(result)
  assert (failure.metric, failure.slice, failure.change) == ("cECE", "eval_set=corrupted", True)
  logits = np.stack([r[3] for r in rows if r[0] == "corrupted"])
  labels = np.array([r[4] for r in rows if r[0] == "corrupted"])
  slices = [(r[1], r[2]) for r in rows if r[0] == "corrupted"]

  def cece(t):
    return np.mean([reference_metrics.metrics(
        _softmax(logits[[s == name for s in slices]], t),
        labels[[s == name for s in slices]])["ece"] for name in sorted(set(slices))])

  assert failure.value == pytest.approx(cece(5.0) - cece(1.0), abs=1e-4) and failure.value > 0.05
  assert failure.describe().startswith("cECE on eval_set=corrupted changed by +")


def test_a_model_above_the_cnll_and_cece_bounds_is_not_blessed_on_a_first_run(tmp_path):
  """No baseline: the absolute bounds alone, and both calibration-under-shift bounds fail."""
  rows = _write_evaluation_set(str(tmp_path / "data.tfrecord"), np.random.default_rng(1))
  config = PipelineConfig().replace(min_eval_accuracy=0.0, max_eval_ece=1.0, max_eval_nll=10.0,
                          min_corrupted_accuracy=0.0, max_corrupted_ece=1.0,
                          max_corrupted_nll=1.0, max_corrupted_mean_ece=0.1)
  candidate = _save(_FakeModel(corrupted_temperature=0.3), str(tmp_path / "candidate"))
  result = tfma.load_validation_result(_evaluate(tmp_path, config, candidate))
  assert not result.validation_ok
  failures = {failure.metric: failure for failure in tfma_results.failures(result)}
  assert set(failures) == {"NLL", "cECE"}
  assert all(f.slice == "eval_set=corrupted" and not f.change for f in failures.values())
  logits = np.stack([r[3] for r in rows if r[0] == "corrupted"])
  labels = np.array([r[4] for r in rows if r[0] == "corrupted"])
  assert failures["NLL"].value == pytest.approx(
      reference_metrics.metrics(_softmax(logits, 0.3), labels)["nll"], abs=1e-4)
