"""`temperature_fit=distance_curve`: a temperature per input,
T(x) = exp(a + b z(x)) with b >= 0 over the input's distance score z, sharpening near the data
and softening farther out. The fit and why: docs/robustness.md, "A temperature per input".
"""
from typing import NamedTuple, Optional

import numpy as np

from trainer_module.calibration import distances, maths
from trainer_module.calibration.method import ByFeatureDistance, ShiftFit


class DistanceCurve(NamedTuple):
  """The map: log T = log_temperature + slope * distance score (+ detail_slope * detail score
  under distance_detail_curve), within [MIN_TEMPERATURE, MAX_TEMPERATURE]. slope >= 0: never
  sharper farther from the data."""
  log_temperature: float  # log T of a typical eval image: its distance and its detail.
  slope: float  # d log T / d distance score.
  detail_slope: float = 0.0  # d log T / d detail score (calibration/detail.py).

  def temperatures(self, scores: np.ndarray, details: Optional[np.ndarray] = None) -> np.ndarray:
    """[batch] T of inputs with these distance scores and, when the map reads them, detail
    scores."""
    log_t = self.log_temperature + self.slope * np.asarray(scores, np.float64)
    if self.detail_slope:
      if details is None:
        raise ValueError("This curve reads the inputs' detail scores; none were given.")
      log_t = log_t + self.detail_slope * np.asarray(details, np.float64)
    return np.clip(np.exp(log_t), maths.MIN_TEMPERATURE, maths.MAX_TEMPERATURE)


def _per_example_nll(logits: np.ndarray, labels: np.ndarray,
                     temperatures: np.ndarray) -> np.ndarray:
  log_p = maths.log_softmax(logits / temperatures[:, np.newaxis])
  return -log_p[np.arange(len(labels)), labels]


def curve_minimising_slice_nll(logits: np.ndarray, labels: np.ndarray, slices: np.ndarray,
                               scores: np.ndarray, details: Optional[np.ndarray] = None,
                               start_log_temperature: float = 0.0) -> DistanceCurve:
  """The curve (with details: the map) minimising the mean over the slices of each slice's NLL,
  slope >= 0; L-BFGS-B from one T, so deterministic."""
  from scipy import optimize
  weights = maths.slice_weights(slices)

  def objective(params):
    curve = DistanceCurve(*params)
    return float(np.sum(weights * _per_example_nll(logits, labels,
                                                   curve.temperatures(scores, details))))

  start = [start_log_temperature, 0.0]
  bounds = [(np.log(maths.MIN_TEMPERATURE), np.log(maths.MAX_TEMPERATURE)), (0.0, None)]
  if details is not None:
    start, bounds = start + [0.0], bounds + [(None, None)]
  return DistanceCurve(*(float(value) for value in optimize.minimize(
      objective, start, method="L-BFGS-B", bounds=bounds).x))


def fit_distance_curve(clean_logits: np.ndarray, clean_labels: np.ndarray,
                       clean_scores: np.ndarray, shifted_logits: np.ndarray,
                       shifted_labels: np.ndarray, shifted_slices: np.ndarray,
                       shifted_scores: np.ndarray, num_bins: int = 15,
                       clean_details: Optional[np.ndarray] = None,
                       shifted_details: Optional[np.ndarray] = None) -> DistanceCurve:
  """The curve minimising the mean, over the clean eval images and each shifted slice, of the
  slice's NLL; then drawn towards the raw softmax until the shifted slices' mean NLL and mean
  ECE are no worse than raw (see the module docstring). With the inputs' detail scores it also
  fits detail_slope (either sign). Deterministic: L-BFGS-B from the clean fit, then a fixed
  grid."""
  clean_logits, shifted_logits = (np.asarray(x, np.float64) for x in (clean_logits,
                                                                      shifted_logits))
  clean_labels, shifted_labels = (np.asarray(y, np.int64).reshape(-1)
                                  for y in (clean_labels, shifted_labels))
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    maths.check_logits(logits, labels)
  shifted_slices = np.asarray(shifted_slices)
  if not len(shifted_slices) == len(shifted_scores) == len(shifted_labels):
    raise maths.TemperatureFitError(f"{len(shifted_labels)} shifted examples but "
                                    f"{len(shifted_slices)} slice names and "
                                    f"{len(shifted_scores)} distance scores.")
  logits = np.concatenate([clean_logits, shifted_logits])
  labels = np.concatenate([clean_labels, shifted_labels])
  scores = np.concatenate([np.asarray(clean_scores, np.float64),
                           np.asarray(shifted_scores, np.float64)])
  slices = np.concatenate([np.full(len(clean_labels), maths.CLEAN_SLICE),
                           shifted_slices.astype(str)])
  with_details = clean_details is not None
  if with_details != (shifted_details is not None):
    raise ValueError("Give the detail scores of both the clean and the shifted images, or none.")
  details = (np.concatenate([np.asarray(clean_details, np.float64),
                             np.asarray(shifted_details, np.float64)]) if with_details else None)
  if with_details and len(details) != len(labels):
    raise maths.TemperatureFitError(f"{len(details)} detail scores for {len(labels)} examples.")
  fitted = curve_minimising_slice_nll(
      logits, labels, slices, scores, details,
      float(np.log(maths.fit_temperature(clean_logits, clean_labels))))
  raw_nll, raw_ece = maths.slice_means(shifted_logits, shifted_labels, shifted_slices, 1.0,
                                       num_bins)
  for step in range(maths.GRID_STEPS, 0, -1):
    curve = DistanceCurve(*(float(value) * step / maths.GRID_STEPS for value in fitted))
    moved = shifted_logits / curve.temperatures(shifted_scores,
                                                shifted_details)[:, np.newaxis]
    shifted_nll, shifted_ece = maths.slice_means(moved, shifted_labels, shifted_slices, 1.0,
                                                 num_bins)
    if shifted_nll <= raw_nll and shifted_ece <= raw_ece:
      return curve
  return DistanceCurve(0.0, 0.0)


class DistanceCurveFit(ByFeatureDistance):
  name = "distance_curve"

  def _fit_by_distance(self, features_model, held_out, evaluated, shifted, support,
                       shifted_features, info, num_bins) -> ShiftFit:
    from trainer_module.calibration import model_outputs
    eval_scores = distances.distance_scores(
        model_outputs.model_logits(features_model, held_out.eval_batches)[0], support)
    shifted_scores = distances.distance_scores(shifted_features, support)
    eval_details, shifted_details = self._fit_details(held_out, shifted, info)
    curve = fit_distance_curve(evaluated.logits, evaluated.labels, eval_scores, shifted.logits,
                               shifted.labels, shifted.slices, shifted_scores, num_bins,
                               eval_details, shifted_details)
    info.update(distance_curve=curve._asdict(), eval_distance_scores=eval_scores.tolist(),
                validation_distance_scores=shifted_scores.tolist())
    return ShiftFit(float(np.exp(curve.log_temperature)),
                    shifted_temperatures=curve.temperatures(shifted_scores, shifted_details))

  def _fit_details(self, held_out, shifted, info):
    """(eval, shifted) detail scores, for a map that reads them; (None, None) here."""
    return None, None

  def _details(self, info, images):
    """[batch] the detail scores of these transformed images, for a map that reads them."""
    return None

  def _graph_details(self, info, images):
    """_details in the served graph."""
    return None

  def eval_temperatures(self, info):
    return self.temperature_of_score(info)(info["eval_distance_scores"],
                                           info.get("eval_detail_scores"))

  def temperatures(self, info, support, features, images=None):
    return DistanceCurve(**info["distance_curve"]).temperatures(
        distances.distance_scores(features, support), self._details(info, images))

  def served_temperatures(self, info, logits, features, images):
    from trainer_module.calibration import serving
    scores = serving.graph_distance_scores(features, info["feature_support"])
    details = self._graph_details(info, images)
    temperatures = serving.curve_temperatures(DistanceCurve(**info["distance_curve"]), scores,
                                              details)
    return temperatures, dict(zip(self.served_scores, (scores, details)))

  def temperature_of_score(self, info):
    """T(z, s): an input whose detail score is not given is taken to be of typical detail
    (s = 0)."""
    curve = DistanceCurve(**info["distance_curve"])

    def temperatures(scores, details=None):
      scores = np.asarray(scores, np.float64)
      return curve.temperatures(scores, np.zeros(len(scores)) if details is None else details)
    return temperatures

  @staticmethod
  def _features_described(info: dict) -> str:
    return ("its penultimate features" if not isinstance(info["support_radius"], list)
            else "its members' penultimate features (each member's own feature space; "
            "z is the mean of the members' scores)")

  def describe(self, info: dict) -> str:
    curve = info["distance_curve"]
    where = self._features_described(info)
    return (
        f"A temperature per input: T(x) = exp({curve['log_temperature']:.4f} + "
        f"{curve['slope']:.4f} z(x)), where z(x) is how far the input lies from the training "
        f"data: the log Mahalanobis distance of {where} to the nearest training class mean, in "
        "standard deviations of the clean eval images' log distances above their mean. A "
        f"typical eval image (z = 0) gets T = {info['temperature']:.4f}; T grows with "
        "z, softening the inputs farthest from the data. The curve is fitted on "
        f"{self._shift_sources(info)}), never on test "
        "and never on an evaluated corruption: the mean over the clean images and each "
        "validation slice of its NLL, kept no worse than the raw softmax on the validation "
        "slices' mean NLL and mean ECE. The clean eval examples alone would give one "
        f"T = {info['clean_fit_temperature']:.4f}. The eval and validation-shift rows are "
        "in-sample; the test and corrupted rows are not.")


METHOD = DistanceCurveFit()
