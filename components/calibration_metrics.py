"""Multi-class accuracy, ECE, NLL, Brier score and cECE as TFMA metrics, since TFMA 0.47 has
only binary ones; all share one pass of mergeable sums per slice (docs/pipeline.md,
"Evaluation and the gate").
"""
import hashlib
import math
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types, metric_util

from trainer_module.metrics import confidence_bins

ACCURACY_NAME = "accuracy"
ECE_NAME = "ece"
RELIABILITY_NAME = "reliability_diagram"  # [num_bins, 3]: count, mean confidence, accuracy.
NLL_NAME = "nll"
BRIER_NAME = "brier_score"
MEAN_SLICE_ECE_NAME = "mean_slice_ece"
# MeanSliceECE's other outputs, under these fixed names whatever the metric's own: the mean over
# the sub-slices of confidence minus accuracy, and the bootstrap standard deviations of both.
MEAN_SLICE_GAP_NAME = "mean_slice_confidence_gap"
MEAN_SLICE_ECE_SD_NAME = "mean_slice_ece_bootstrap_sd"
MEAN_SLICE_GAP_SD_NAME = "mean_slice_confidence_gap_bootstrap_sd"
# The features whose values make MeanSliceECE's sub-slices (components/evaluation_set.py).
DEFAULT_SUB_SLICE_KEYS = ("corruption", "severity")
# The feature naming the source image an example was made from (components/evaluation_set.py):
# MeanSliceECE's bootstrap resamples source images, each with all its corrupted versions.
DEFAULT_RESAMPLE_KEY = "source_image"
DEFAULT_BOOTSTRAP_REPLICATES = 200
DEFAULT_NUM_BINS = 15
PROBABILITY_FLOOR = 1e-12  # Keeps -log p finite when a float32 softmax rounds p to 0.
# One leading underscore: TFMA computes the statistics but drops them from its output.
_STATISTICS_NAME = "_calibration_statistics"
FLUSH_SIZE = 1024  # Examples an accumulator holds before adding them in one numpy pass.
# P(K <= k) for K ~ Poisson(1), k = 0, 1, ...: beyond k = 18 it is 1 to float64's precision.
_POISSON_1_CDF = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(19)])
_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment and mixing constants.
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def poisson_weights(groups: Sequence[str], replicates: int) -> np.ndarray:
  """[replicates, len(groups)] Poisson(1) counts, each a function of its group and replicate
  alone (splitmix64 of a hash of the group's name). Every slice, worker and run draws the same
  count for the same source image, so a bootstrap of a mean over slices resamples images whole,
  with every corrupted version of each; and the sums stay mergeable (the Poisson bootstrap:
  each example kept a Poisson(1) number of times approximates resampling n of n)."""
  keys = np.array([int.from_bytes(hashlib.blake2b(group.encode("utf-8"), digest_size=8).digest(),
                                  "little") for group in groups], dtype=np.uint64)
  with np.errstate(over="ignore"):
    z = keys[None, :] + np.arange(1, replicates + 1, dtype=np.uint64)[:, None] * _GOLDEN_GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    z ^= z >> np.uint64(31)
  uniform = (z >> np.uint64(11)).astype(np.float64) / float(2 ** 53)
  return np.searchsorted(_POISSON_1_CDF, uniform, side="right").astype(np.float64)


def _read(value, what: str, model_name: str, output_name: str, needs: str, scalar: bool = True):
  """One example's label or weight (`scalar`) as its number, or its prediction as a flat array.
  A dict (the values of several outputs), a missing value, or more than one number where one is
  expected is refused, naming the model, the output and what the configuration needs."""
  if (value is None or isinstance(value, Mapping) or np.size(value) == 0 or
      (scalar and np.size(value) != 1)):
    raise ValueError(f"No single {what} for model {model_name!r} and output {output_name!r}: "
                     f"got {value!r}. This metric needs {needs}.")
  return np.ravel(value)[0] if scalar else np.ravel(value)


class _Accumulator:
  """Sufficient statistics of one slice: they add, so workers' partial sums merge exactly.
  Examples wait in `pending` (label, probability row, weight, source image or None) until
  `flush` adds a batch of them at once: one vectorised numpy pass instead of a dozen numpy
  calls per example. With `replicates`, the reliability sums are also kept per bootstrap
  replicate ([replicates, num_bins], each example weighted by poisson_weights of its source
  image); an example without a source image makes the slice's bootstrap unavailable
  (`bootstrap_complete` False), never a bootstrap over part of it."""
  __slots__ = ["count", "nll_sum", "brier_sum", "bin_count", "bin_confidence", "bin_correct",
               "replicate_count", "replicate_confidence", "replicate_correct", "bootstrap_complete",
               "pending"]

  def __init__(self, num_bins: int, replicates: int = 0):
    self.count = 0.0
    self.nll_sum = 0.0
    self.brier_sum = 0.0
    self.bin_count = np.zeros(num_bins)
    self.bin_confidence = np.zeros(num_bins)
    self.bin_correct = np.zeros(num_bins)
    self.replicate_count = np.zeros((replicates, num_bins))
    self.replicate_confidence = np.zeros((replicates, num_bins))
    self.replicate_correct = np.zeros((replicates, num_bins))
    self.bootstrap_complete = replicates > 0
    self.pending: List[Tuple[int, np.ndarray, float, Optional[str]]] = []

  def add(self, element: metric_types.StandardMetricInputs, model_name: str, output_name: str,
          example_weighted: bool, source: Optional[str] = None) -> None:
    """Queues the element's (label, probabilities, weight) of one output for the next flush.
    Read with the extracts' own accessors, not metric_util.to_label_prediction_example_weight:
    its binarization, top-k and class-weight options do not apply here (_check_full_vector),
    and its generality was the largest part of the Evaluator's own time (bench/README.md)."""
    model, output = model_name or None, output_name or None
    label = _read(element.get_labels(model, output), "label", model_name, output_name,
                  "a label feature named in ModelSpec.label_key")
    prediction = _read(element.get_predictions(model, output), "prediction", model_name,
                       output_name, "the output named in MetricsSpec.output_names", scalar=False)
    weight = 1.0
    if example_weighted:
      weights = element.get_example_weights(model, output)
      if weights is not None:
        weight = float(_read(weights, "example weight", model_name, output_name,
                             "one weight per example (ModelSpec.example_weight_key)"))
    self.pending.append((int(label), prediction, weight, source))

  def merge(self, other: "_Accumulator") -> None:
    self.count += other.count
    self.nll_sum += other.nll_sum
    self.brier_sum += other.brier_sum
    self.bin_count += other.bin_count
    self.bin_confidence += other.bin_confidence
    self.bin_correct += other.bin_correct
    self.replicate_count += other.replicate_count
    self.replicate_confidence += other.replicate_confidence
    self.replicate_correct += other.replicate_correct
    self.bootstrap_complete = self.bootstrap_complete and other.bootstrap_complete
    self.pending.extend(other.pending)

  def flush(self) -> None:
    """Adds the pending examples to the statistics (the per-example rules of the module
    docstring, summed over the batch)."""
    if not self.pending:
      return
    labels, rows, weights, sources = zip(*self.pending)
    sizes = {row.size for row in rows}
    if len(sizes) != 1:
      raise ValueError(f"Predictions of different numbers of class probabilities "
                       f"{sorted(sizes)} in one slice and output.")
    (classes,) = sizes
    y = np.array(labels, dtype=np.int64)
    outside = (y < 0) | (y >= classes)
    if outside.any():
      raise ValueError(f"Label {y[outside][0]} is outside [0, {classes}) for a prediction "
                       f"of {classes} class probabilities.")
    p = np.stack(rows).astype(np.float64)
    w = np.array(weights, dtype=np.float64)
    examples = np.arange(len(y))
    predicted = p.argmax(axis=1)
    confidence = p[examples, predicted]
    one_hot = np.zeros_like(p)
    one_hot[examples, y] = 1.0
    self.count += float(np.sum(w))
    self.nll_sum -= float(np.sum(w * np.log(np.maximum(p[examples, y], PROBABILITY_FLOOR))))
    self.brier_sum += float(np.sum(w * np.sum((p - one_hot) ** 2, axis=1)))
    num_bins = self.bin_count.size
    bins = confidence_bins(confidence, num_bins)
    self.bin_count += np.bincount(bins, weights=w, minlength=num_bins)
    self.bin_confidence += np.bincount(bins, weights=w * confidence, minlength=num_bins)
    self.bin_correct += np.bincount(bins, weights=w * (predicted == y), minlength=num_bins)
    if self.bootstrap_complete and any(source is None for source in sources):
      self.bootstrap_complete = False
    if self.bootstrap_complete:
      replicates = self.replicate_count.shape[0]
      replicate_w = poisson_weights(sources, replicates) * w  # [replicates, examples]
      cells = (np.arange(replicates)[:, None] * num_bins + bins[None, :]).ravel()

      def replicate_sums(values):
        return np.bincount(cells, weights=(replicate_w * values).ravel(),
                           minlength=replicates * num_bins).reshape(replicates, num_bins)

      self.replicate_count += replicate_sums(1.0)
      self.replicate_confidence += replicate_sums(confidence)
      self.replicate_correct += replicate_sums(predicted == y)
    self.pending = []


class _StatisticsCombiner(beam.CombineFn):
  """Accumulates per-example statistics, reported whole under `key` for the derived metrics.

  Examples are buffered and added `flush_size` at a time (and whatever is pending on merge,
  compact and extract), as TFMA's own combiner of Keras metrics batches its inputs
  (tensorflow_model_analysis/metrics/tf_metric_wrapper.py, _CompilableMetricsCombiner)."""

  def __init__(self, key: metric_types.MetricKey, num_bins: int,
               model_name: str, output_name: str, example_weighted: bool,
               flush_size: int = FLUSH_SIZE):
    self._key = key
    self._num_bins = num_bins
    self._model_name = model_name
    self._output_name = output_name
    self._example_weighted = example_weighted
    self._flush_size = flush_size

  def create_accumulator(self) -> _Accumulator:
    return _Accumulator(self._num_bins)

  def add_input(self, accumulator: _Accumulator,
                element: metric_types.StandardMetricInputs) -> _Accumulator:
    accumulator.add(element, self._model_name, self._output_name, self._example_weighted)
    if len(accumulator.pending) >= self._flush_size:
      accumulator.flush()
    return accumulator

  def merge_accumulators(self, accumulators: Iterable[_Accumulator]) -> _Accumulator:
    accumulators = iter(accumulators)
    result = next(accumulators)
    for accumulator in accumulators:
      result.merge(accumulator)
      if len(result.pending) >= self._flush_size:
        result.flush()
    return result

  def compact(self, accumulator: _Accumulator) -> _Accumulator:
    accumulator.flush()  # Only statistics travel between workers.
    return accumulator

  def extract_output(self, accumulator: _Accumulator) -> Dict[metric_types.MetricKey, object]:
    accumulator.flush()
    return {self._key: accumulator}


def _ece_and_gap(count: np.ndarray, confidence: np.ndarray, correct: np.ndarray):
  """From per-bin sums ([..., num_bins]: weights, confidences, correct predictions), per row:
  the top-label ECE and the mean confidence minus the accuracy (NaN for a row of no weight)."""
  total = np.sum(count, axis=-1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return (np.sum(np.abs(correct - confidence), axis=-1) / total,
            (np.sum(confidence, axis=-1) - np.sum(correct, axis=-1)) / total)


def _values(accumulator: _Accumulator) -> dict:
  count = accumulator.count
  occupied = accumulator.bin_count > 0
  safe_counts = np.where(occupied, accumulator.bin_count, 1.0)
  mean_confidence = np.where(occupied, accumulator.bin_confidence / safe_counts, 0.0)
  accuracy = np.where(occupied, accumulator.bin_correct / safe_counts, 0.0)
  if count <= 0:
    nan = float("nan")
    return {ACCURACY_NAME: nan, ECE_NAME: nan, NLL_NAME: nan, BRIER_NAME: nan,
            RELIABILITY_NAME: np.stack([accumulator.bin_count, mean_confidence, accuracy], 1)}
  ece, _ = _ece_and_gap(accumulator.bin_count, accumulator.bin_confidence,
                        accumulator.bin_correct)
  return {ACCURACY_NAME: float(np.sum(accumulator.bin_correct) / count),
          ECE_NAME: float(ece),
          NLL_NAME: accumulator.nll_sum / count,
          BRIER_NAME: accumulator.brier_sum / count,
          RELIABILITY_NAME: np.stack([accumulator.bin_count, mean_confidence, accuracy], 1)}


def _check_full_vector(name: str, sub_key, aggregation_type, class_weights) -> None:
  if sub_key is not None or aggregation_type is not None or class_weights:
    raise ValueError(f"Metric {name!r} is computed over the full probability vector; "
                     "binarization, top-k and aggregation options do not apply.")


def _computations(value: str, extra_values: tuple = ()):
  """A per-key computation function: the shared statistics pass, and a derived computation
  that reports `value` under the metric's own key and each of `extra_values` under its own
  name beside it."""

  def computations(name: str, num_bins: int = DEFAULT_NUM_BINS,
                   model_name: str = "",
                   output_name: str = "", sub_key: Optional[metric_types.SubKey] = None,
                   aggregation_type: Optional[metric_types.AggregationType] = None,
                   class_weights: Optional[Dict[int, float]] = None,
                   example_weighted: bool = False) -> metric_types.MetricComputations:
    _check_full_vector(name, sub_key, aggregation_type, class_weights)

    def key(key_name: str) -> metric_types.MetricKey:
      return metric_types.MetricKey(name=key_name, model_name=model_name,
                                    output_name=output_name, example_weighted=example_weighted)

    statistics_key = key(f"{_STATISTICS_NAME}_{num_bins}")
    outputs = {key(key_name): reported
               for key_name, reported in [(name, value)] + [(v, v) for v in extra_values]}

    def result(metrics: Dict[metric_types.MetricKey, object]) -> Dict[metric_types.MetricKey,
                                                                       object]:
      values = _values(metrics[statistics_key])
      return {output_key: values[reported] for output_key, reported in outputs.items()}

    return [
        metric_types.MetricComputation(
            keys=[statistics_key], preprocessors=None,
            combiner=_StatisticsCombiner(statistics_key, num_bins, model_name, output_name,
                                         example_weighted)),
        metric_types.DerivedMetricComputation(keys=list(outputs), result=result)]

  return computations


def _check_num_bins(num_bins: int) -> None:
  if not isinstance(num_bins, int) or num_bins < 1:
    raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}.")


class _FromSharedStatistics(metric_types.Metric):
  """A metric derived from the shared statistics pass; `num_bins` selects that pass (only ECE
  and the reliability diagram depend on it; metrics reported beside ECE should pass the same)."""
  REPORTS = ""
  EXTRA = ()

  def __init__(self, name: Optional[str] = None, num_bins: int = DEFAULT_NUM_BINS):
    _check_num_bins(num_bins)
    super().__init__(metric_util.merge_per_key_computations(
        _computations(self.REPORTS, self.EXTRA)), name=name or self.REPORTS, num_bins=num_bins)


class TopLabelAccuracy(_FromSharedStatistics):
  """The fraction of examples whose most probable class is the label."""
  REPORTS = ACCURACY_NAME


class ExpectedCalibrationError(_FromSharedStatistics):
  """Top-label ECE over `num_bins` equal-width bins, plus the reliability diagram's bins."""
  REPORTS = ECE_NAME
  EXTRA = (RELIABILITY_NAME,)


class NegativeLogLikelihood(_FromSharedStatistics):
  """Mean -log p(true class) of multi-class probabilities."""
  REPORTS = NLL_NAME


class BrierScore(_FromSharedStatistics):
  """Mean squared distance between the probabilities and the one-hot label."""
  REPORTS = BRIER_NAME


def _feature_value(features, key: str):
  """An example's one value of `key`, or None when it has none."""
  value = None if features is None else features.get(key)
  if value is None:
    return None
  value = np.ravel(value)
  if not value.size:
    return None
  value = value[0]
  return value.decode() if isinstance(value, bytes) else value.item() if hasattr(
      value, "item") else value


def _slice_means(accumulators: List[_Accumulator]) -> Dict[str, float]:
  """The mean over sub-slices of their ECE and of their confidence minus accuracy, and each
  mean's standard deviation over the bootstrap replicates (NaN without a bootstrap). A replicate
  that drew none of some sub-slice's images (only likely with a handful per slice) has no mean
  and is left out; fewer than two left leave no deviation."""
  nan = float("nan")
  means = {MEAN_SLICE_ECE_NAME: nan, MEAN_SLICE_GAP_NAME: nan, MEAN_SLICE_ECE_SD_NAME: nan,
           MEAN_SLICE_GAP_SD_NAME: nan}
  if not accumulators:
    return means
  ece, gap = np.mean([_ece_and_gap(a.bin_count, a.bin_confidence, a.bin_correct)
                      for a in accumulators], axis=0)
  means.update({MEAN_SLICE_ECE_NAME: float(ece), MEAN_SLICE_GAP_NAME: float(gap)})
  if all(a.bootstrap_complete for a in accumulators):
    replicate_ece, replicate_gap = np.mean(
        [_ece_and_gap(a.replicate_count, a.replicate_confidence, a.replicate_correct)
         for a in accumulators], axis=0)  # Each [replicates]: the means of one resample.
    drawn = np.isfinite(replicate_ece)
    if np.sum(drawn) >= 2:
      means.update({MEAN_SLICE_ECE_SD_NAME: float(np.std(replicate_ece[drawn], ddof=1)),
                    MEAN_SLICE_GAP_SD_NAME: float(np.std(replicate_gap[drawn], ddof=1))})
  return means


class _SubSliceCombiner(beam.CombineFn):
  """One _Accumulator per sub-slice (the values of `sub_slice_keys`), merged exactly; each with
  `replicates` bootstrap replicates over the values of `resample_key` (0: none)."""

  def __init__(self, keys: Dict[str, metric_types.MetricKey], num_bins: int, sub_slice_keys,
               resample_key: str, replicates: int,
               example_weighted: bool):
    self._keys = keys  # _slice_means' names -> the metric keys they are reported under.
    self._model_name = keys[MEAN_SLICE_ECE_NAME].model_name
    self._output_name = keys[MEAN_SLICE_ECE_NAME].output_name
    self._num_bins = num_bins
    self._sub_slice_keys = tuple(sub_slice_keys)
    self._resample_key = resample_key
    self._replicates = replicates
    self._example_weighted = example_weighted

  def create_accumulator(self) -> Dict[tuple, _Accumulator]:
    return {}

  def add_input(self, accumulator: Dict[tuple, _Accumulator],
                element: metric_types.StandardMetricInputs) -> Dict[tuple, _Accumulator]:
    sub_slice = tuple(_feature_value(element.features, key) for key in self._sub_slice_keys)
    if any(value is None for value in sub_slice):
      return accumulator
    source = _feature_value(element.features, self._resample_key)
    statistics = accumulator.setdefault(sub_slice,
                                        _Accumulator(self._num_bins, self._replicates))
    statistics.add(element, self._model_name, self._output_name, self._example_weighted,
                   None if source is None else str(source))
    if len(statistics.pending) >= FLUSH_SIZE:
      statistics.flush()
    return accumulator

  def merge_accumulators(self, accumulators: Iterable[Dict[tuple, _Accumulator]]
                         ) -> Dict[tuple, _Accumulator]:
    result = {}
    for accumulator in accumulators:
      for sub_slice, statistics in accumulator.items():
        if sub_slice in result:
          result[sub_slice].merge(statistics)
        else:
          result[sub_slice] = statistics
    return result

  def compact(self, accumulator: Dict[tuple, _Accumulator]) -> Dict[tuple, _Accumulator]:
    for statistics in accumulator.values():
      statistics.flush()
    return accumulator

  def extract_output(self, accumulator: Dict[tuple, _Accumulator]
                     ) -> Dict[metric_types.MetricKey, float]:
    means = _slice_means(list(self.compact(accumulator).values()))
    return {key: means[name] for name, key in self._keys.items()}


# TFMA passes a metric's model and output names by the argument names of its computations
# function (inspect.getfullargspec), which mutmut's wrapper (`make mutation`) would hide.
# pragma: no mutate block
def _mean_slice_ece(name: str, num_bins: int = DEFAULT_NUM_BINS,
                    sub_slice_keys=DEFAULT_SUB_SLICE_KEYS, resample_key=DEFAULT_RESAMPLE_KEY,
                    bootstrap_replicates: int = DEFAULT_BOOTSTRAP_REPLICATES,
                    model_name: str = "",
                    output_name: str = "", sub_key: Optional[metric_types.SubKey] = None,
                    aggregation_type: Optional[metric_types.AggregationType] = None,
                    class_weights: Optional[Dict[int, float]] = None,
                    example_weighted: bool = False) -> metric_types.MetricComputations:
  _check_full_vector(name, sub_key, aggregation_type, class_weights)

  def key(key_name: str) -> metric_types.MetricKey:
    return metric_types.MetricKey(name=key_name, model_name=model_name, output_name=output_name,
                                  example_weighted=example_weighted)

  keys = {MEAN_SLICE_ECE_NAME: key(name), MEAN_SLICE_GAP_NAME: key(MEAN_SLICE_GAP_NAME)}
  if bootstrap_replicates:
    keys[MEAN_SLICE_ECE_SD_NAME] = key(MEAN_SLICE_ECE_SD_NAME)
    keys[MEAN_SLICE_GAP_SD_NAME] = key(MEAN_SLICE_GAP_SD_NAME)
  return [metric_types.MetricComputation(
      keys=list(keys.values()),
      preprocessors=[metric_types.FeaturePreprocessor(
          feature_keys=list(sub_slice_keys) + [resample_key])],
      combiner=_SubSliceCombiner(keys, num_bins, sub_slice_keys, resample_key,
                                 bootstrap_replicates, example_weighted))]


class MeanSliceECE(metric_types.Metric):
  """cECE: the mean over the sub-slices (corruption x severity) of their top-label ECE; beside
  it, under fixed names, the mean over the sub-slices of confidence minus accuracy
  (MEAN_SLICE_GAP_NAME) and, with `bootstrap_replicates`, each mean's standard deviation over a
  Poisson bootstrap of the source images named by `resample_key` (MEAN_SLICE_ECE_SD_NAME,
  MEAN_SLICE_GAP_SD_NAME): how far the figure would move on another draw of test images of the
  same kind. The replicates resample an image with all its corrupted versions at once, since
  the slices share their images."""

  def __init__(self, name: str = MEAN_SLICE_ECE_NAME, num_bins: int = DEFAULT_NUM_BINS,
               sub_slice_keys=DEFAULT_SUB_SLICE_KEYS, resample_key: str = DEFAULT_RESAMPLE_KEY,
               bootstrap_replicates: int = DEFAULT_BOOTSTRAP_REPLICATES):
    _check_num_bins(num_bins)
    if not isinstance(bootstrap_replicates, int) or bootstrap_replicates == 1 or \
        bootstrap_replicates < 0:
      raise ValueError("bootstrap_replicates must be 0 (no bootstrap) or at least 2, got "
                       f"{bootstrap_replicates!r}.")
    super().__init__(metric_util.merge_per_key_computations(_mean_slice_ece), name=name,
                     num_bins=num_bins, sub_slice_keys=list(sub_slice_keys),
                     resample_key=resample_key, bootstrap_replicates=bootstrap_replicates)


for _metric in (TopLabelAccuracy, ExpectedCalibrationError, NegativeLogLikelihood, BrierScore,
                MeanSliceECE):
  metric_types.register_metric(_metric)
