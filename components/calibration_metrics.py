"""Calibration metrics for multi-class probabilities, as TFMA metrics that combine on Beam.

TFMA 0.47 has no multi-class expected calibration error, Brier score or negative
log-likelihood (its calibration and cross-entropy metrics are binary), so they are here. Each
is a `tfma.metrics.Metric` whose Beam CombineFn keeps sufficient statistics (sums and per-bin
counts), so partial results from any number of workers merge exactly. The Evaluator imports
this module by name (`MetricConfig.module`), in every Beam worker.

Definitions (as in Uncertainty Baselines):
- ECE: top-label, `num_bins` equal-width confidence bins over [0, 1]; the bin-count-weighted
  mean of |accuracy - mean confidence| per bin. A confidence of exactly 1 falls in the last bin.
- NLL: mean of -log p(true class), with p clipped below at PROBABILITY_FLOOR.
- Brier score: mean over examples of sum over classes of (p_k - 1[k = true class])^2.
"""
from typing import Dict, Iterable, Optional

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types, metric_util
from tensorflow_model_analysis.proto import config_pb2

ECE_NAME = "ece"
RELIABILITY_NAME = "reliability_diagram"  # [num_bins, 3]: count, mean confidence, accuracy.
NLL_NAME = "nll"
BRIER_NAME = "brier_score"
DEFAULT_NUM_BINS = 15
PROBABILITY_FLOOR = 1e-12  # Keeps -log p finite when a float32 softmax rounds p to 0.


def confidence_bin(confidence: float, num_bins: int) -> int:
  """Bin i holds confidences in (i/num_bins, (i+1)/num_bins]; 0 goes to bin 0."""
  return min(max(int(np.ceil(confidence * num_bins)) - 1, 0), num_bins - 1)


class _Accumulator:
  """Sufficient statistics of one slice: they add, so workers' partial sums merge exactly."""
  __slots__ = ["count", "nll_sum", "brier_sum", "bin_count", "bin_confidence", "bin_correct"]

  def __init__(self, num_bins: int):
    self.count = 0.0
    self.nll_sum = 0.0
    self.brier_sum = 0.0
    self.bin_count = np.zeros(num_bins)
    self.bin_confidence = np.zeros(num_bins)
    self.bin_correct = np.zeros(num_bins)

  def merge(self, other: "_Accumulator") -> None:
    self.count += other.count
    self.nll_sum += other.nll_sum
    self.brier_sum += other.brier_sum
    self.bin_count += other.bin_count
    self.bin_confidence += other.bin_confidence
    self.bin_correct += other.bin_correct


class _CalibrationCombiner(beam.CombineFn):
  """Accumulates per-example statistics; `outputs` maps each output key to what it reports."""

  def __init__(self, outputs: Dict[metric_types.MetricKey, str], num_bins: int,
               eval_config: Optional[config_pb2.EvalConfig], model_name: str, output_name: str,
               example_weighted: bool):
    self._outputs = outputs
    self._num_bins = num_bins
    self._eval_config = eval_config
    self._model_name = model_name
    self._output_name = output_name
    self._example_weighted = example_weighted

  def create_accumulator(self) -> _Accumulator:
    return _Accumulator(self._num_bins)

  def add_input(self, accumulator: _Accumulator,
                element: metric_types.StandardMetricInputs) -> _Accumulator:
    for label, prediction, weight in metric_util.to_label_prediction_example_weight(
        element, eval_config=self._eval_config, model_name=self._model_name,
        output_name=self._output_name, example_weighted=self._example_weighted, flatten=False):
      probabilities = np.asarray(prediction, dtype=np.float64).reshape(-1)
      true_class = int(np.asarray(label).reshape(-1)[0])
      if not 0 <= true_class < probabilities.size:
        raise ValueError(f"Label {true_class} is outside [0, {probabilities.size}) for a "
                         f"prediction of {probabilities.size} class probabilities.")
      weight = float(metric_util.safe_to_scalar(weight))
      predicted = int(np.argmax(probabilities))
      confidence = probabilities[predicted]
      one_hot = np.zeros_like(probabilities)
      one_hot[true_class] = 1.0
      accumulator.count += weight
      accumulator.nll_sum -= weight * np.log(max(probabilities[true_class], PROBABILITY_FLOOR))
      accumulator.brier_sum += weight * float(np.sum((probabilities - one_hot) ** 2))
      b = confidence_bin(confidence, self._num_bins)
      accumulator.bin_count[b] += weight
      accumulator.bin_confidence[b] += weight * confidence
      accumulator.bin_correct[b] += weight * float(predicted == true_class)
    return accumulator

  def merge_accumulators(self, accumulators: Iterable[_Accumulator]) -> _Accumulator:
    accumulators = iter(accumulators)
    result = next(accumulators)
    for accumulator in accumulators:
      result.merge(accumulator)
    return result

  def extract_output(self, accumulator: _Accumulator) -> Dict[metric_types.MetricKey, object]:
    values = _values(accumulator)
    return {key: values[what] for key, what in self._outputs.items()}


def _values(accumulator: _Accumulator) -> dict:
  count = accumulator.count
  occupied = accumulator.bin_count > 0
  safe_counts = np.where(occupied, accumulator.bin_count, 1.0)
  mean_confidence = np.where(occupied, accumulator.bin_confidence / safe_counts, 0.0)
  accuracy = np.where(occupied, accumulator.bin_correct / safe_counts, 0.0)
  if count <= 0:
    nan = float("nan")
    return {ECE_NAME: nan, NLL_NAME: nan, BRIER_NAME: nan,
            RELIABILITY_NAME: np.stack([accumulator.bin_count, mean_confidence, accuracy], 1)}
  gaps = np.abs(accumulator.bin_correct - accumulator.bin_confidence)  # count * |acc - conf|
  return {ECE_NAME: float(np.sum(gaps) / count),
          NLL_NAME: accumulator.nll_sum / count,
          BRIER_NAME: accumulator.brier_sum / count,
          RELIABILITY_NAME: np.stack([accumulator.bin_count, mean_confidence, accuracy], 1)}


def _computations(value: str, extra_values: tuple = ()):
  """A per-key computation function: the metric's own key reports `value`; each of
  `extra_values` is reported under its own name beside it."""

  def computations(name: str, num_bins: int = DEFAULT_NUM_BINS,
                   eval_config: Optional[config_pb2.EvalConfig] = None, model_name: str = "",
                   output_name: str = "", sub_key: Optional[metric_types.SubKey] = None,
                   aggregation_type: Optional[metric_types.AggregationType] = None,
                   class_weights: Optional[Dict[int, float]] = None,
                   example_weighted: bool = False) -> metric_types.MetricComputations:
    if sub_key is not None or aggregation_type is not None or class_weights:
      raise ValueError(f"Metric {name!r} is computed over the full probability vector; "
                       "binarization, top-k and aggregation options do not apply.")
    outputs = {}
    for key_name, reported in [(name, value)] + [(v, v) for v in extra_values]:
      key = metric_types.MetricKey(name=key_name, model_name=model_name,
                                   output_name=output_name, example_weighted=example_weighted)
      outputs[key] = reported
    return [metric_types.MetricComputation(
        keys=list(outputs), preprocessors=None,
        combiner=_CalibrationCombiner(outputs, num_bins, eval_config, model_name, output_name,
                                      example_weighted))]

  return computations


def _check_num_bins(num_bins: int) -> None:
  if not isinstance(num_bins, int) or num_bins < 1:
    raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}.")


class ExpectedCalibrationError(metric_types.Metric):
  """Top-label ECE over `num_bins` equal-width bins, plus the reliability diagram's bins."""

  def __init__(self, name: str = ECE_NAME, num_bins: int = DEFAULT_NUM_BINS):
    _check_num_bins(num_bins)
    super().__init__(metric_util.merge_per_key_computations(
        _computations(ECE_NAME, (RELIABILITY_NAME,))),
                     name=name, num_bins=num_bins)


class NegativeLogLikelihood(metric_types.Metric):
  """Mean -log p(true class) of multi-class probabilities."""

  def __init__(self, name: str = NLL_NAME):
    super().__init__(metric_util.merge_per_key_computations(_computations(NLL_NAME)),
                     name=name)


class BrierScore(metric_types.Metric):
  """Mean squared distance between the probabilities and the one-hot label."""

  def __init__(self, name: str = BRIER_NAME):
    super().__init__(metric_util.merge_per_key_computations(
        _computations(BRIER_NAME)), name=name)


for _metric in (ExpectedCalibrationError, NegativeLogLikelihood, BrierScore):
  metric_types.register_metric(_metric)
