"""What every temperature_fit method is: a fit on held-out data, the temperatures it serves (in
numpy and in the served graph), and a description for the run report; and the fitting steps the
methods share. TensorFlow loads only when a method fits or serves: the config checks method
names without it."""
import dataclasses
import logging
from typing import Any, Callable, ClassVar, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from trainer_module import reference_corruptions
from trainer_module.calibration import distances, maths
from trainer_module.features import DISTANCE_SCORE_KEY

log = logging.getLogger(__name__)
# Set apart for validation by Hendrycks & Dietterich (hendrycks/robustness,
# ImageNet-C/imagenet_c/README.md: "the last four are validation functions"); tfds ships them as
# cifar10_corrupted's 4 extra corruptions; with them the project's uneven illumination
# (reference_corruptions.OWN_CORRUPTIONS) and three of CIFAR-10-C-bar (C_BAR_CORRUPTIONS).
# Disjoint from the 15 the gate and report evaluate.
VALIDATION_CORRUPTIONS = reference_corruptions.VALIDATION_CORRUPTIONS


@dataclasses.dataclass(frozen=True)
class HeldOut:
  """The sets a fit reads, all from the eval split (and the train split's features), never test:
  exactly those the method's needs_* properties ask for (inputs.held_out_sets makes them)."""
  eval_batches: Any  # tf.data.Dataset of (images, labels[, weights]) batches.
  validation_corrupted: Optional[Any] = None  # inputs.ShiftedSet.
  train_batches: Optional[Any] = None  # The train split, where feature distances start.


class EvalFit(NamedTuple):
  """The model's logits on the eval images, and the clean-only fit's T."""
  logits: np.ndarray
  labels: np.ndarray
  clean_fit: float


class CalibrationMethod:
  """One value of temperature_fit. Subclasses set the class properties and implement
  _fit_temperature and describe."""
  name: ClassVar[str]
  needs_validation_corruptions: ClassVar[bool] = False
  # T depends on where an input's penultimate features lie (the train split's classes): the
  # served model also serves the distance score, and an ensemble's members enter it raw.
  needs_feature_distances: ClassVar[bool] = False
  # Ensemble selection judges each candidate after its own clean T, as a T that sharpens near
  # the data is served there.
  calibrated_selection: ClassVar[bool] = False
  # The outputs the served graph adds beside the probabilities ([batch] float32 each).
  served_scores: ClassVar[Tuple[str, ...]] = ()
  reads_images: ClassVar[bool] = False  # T depends on the input image itself (its detail).

  def fit(self, model, held_out: HeldOut, num_bins: int = 15, features_model=None,
          feature_widths: Optional[Sequence[int]] = None) -> dict:
    """Fits on `held_out` and returns the calibration record (what export serves): T, with
    the NLLs and ECEs before and after and those of the clean-only fit. Features are read from
    `features_model` (default: the network's penultimate_model), in `feature_widths` blocks
    for an ensemble's members."""
    self._check_held_out(held_out)
    from trainer_module.calibration import model_outputs
    logits, labels = model_outputs.model_logits(model, held_out.eval_batches)
    clean_fit = maths.fit_temperature(logits, labels)
    info = {"temperature_fit": self.name, "clean_fit_temperature": clean_fit,
            "eval_examples": int(len(labels)), "eval_nll_before": maths.nll(logits, labels),
            "eval_ece_before": maths.ece(logits, labels, 1.0, num_bins)}
    temperature = self._fit_temperature(model, held_out, EvalFit(logits, labels, clean_fit),
                                        info, num_bins, features_model, feature_widths)
    info["temperature"] = temperature
    eval_temperatures = self.eval_temperatures(info)
    served_eval = logits / (eval_temperatures if np.ndim(eval_temperatures) == 0
                            else eval_temperatures[:, np.newaxis])
    info.update(eval_nll_after=maths.nll(served_eval, labels),
                eval_ece_after=maths.ece(served_eval, labels, 1.0, num_bins))
    log.info("Temperature scaling (%s) on %d eval examples: T = %.4f (clean-only fit %.4f), "
             "eval NLL %.4f -> %.4f.", self.name, info["eval_examples"], temperature, clean_fit,
             info["eval_nll_before"], info["eval_nll_after"])
    return info

  def _fit_temperature(self, model, held_out: HeldOut, evaluated: EvalFit, info: dict,
                       num_bins: int, features_model, feature_widths) -> float:
    """The method's T (for a map, the T of a typical eval image); adds what it measured to
    `info`."""
    raise NotImplementedError

  def eval_temperatures(self, info: dict) -> Union[float, np.ndarray]:
    """The T (or one per eval image) a model calibrated as `info` serves its eval images."""
    return info["temperature"]

  def temperatures(self, info: dict, support: Optional[distances.Support],
                   features: np.ndarray, images: Optional[np.ndarray] = None) -> np.ndarray:
    """[batch] the temperatures served to inputs of these penultimate `features` and
    transformed `images` (numpy; a method reads the images only when its map does)."""
    return np.full(len(features), info.get("temperature", 1.0))

  def served_temperatures(self, info: dict, logits, features, images):
    """(temperatures, {output name: tensor}): the served graph's [batch] temperatures for these
    logits, penultimate features (read only when needs_feature_distances) and transformed
    images, and the [batch] scores it serves beside the probabilities (served_scores)."""
    from trainer_module.calibration import serving
    return serving.constant_temperatures(logits, info["temperature"]), {}

  def temperature_of_score(self, info: dict) -> Optional[Callable[..., np.ndarray]]:
    """T as a function of the distance score (and the detail score, when the map reads it),
    when the method's T follows it (the report charts it)."""
    return None

  def describe(self, info: dict) -> str:
    """The run report's paragraph on how T was chosen."""
    raise NotImplementedError

  def _check_held_out(self, held_out: HeldOut) -> None:
    for field, needed, what in (
        ("validation_corrupted", self.needs_validation_corruptions,
         "the validation corruptions of the eval images"),
        ("train_batches", self.needs_feature_distances, "the train split's batches")):
      given = getattr(held_out, field) is not None
      if needed and not given:
        raise ValueError(f"temperature_fit={self.name} needs {what}.")
      if given and not needed:
        raise ValueError(f"temperature_fit={self.name} does not read {what}; leave them out.")


class ShiftFit(NamedTuple):
  """What a fit under the validation shift serves there: one T for every shifted example, or a
  T per shifted example."""
  temperature: float
  shifted_temperatures: Optional[np.ndarray] = None


class Shifted(NamedTuple):
  """The model's logits on the validation-corrupted eval images and each one's slice."""
  batches: Any
  logits: np.ndarray
  labels: np.ndarray
  slices: np.ndarray


class UnderValidationShift(CalibrationMethod):
  """A method that bounds T by the eval images under the validation corruptions (never an
  evaluated one) and records the shift's NLL and ECE before and after."""
  needs_validation_corruptions = True

  def _fit_temperature(self, model, held_out, evaluated, info, num_bins, features_model,
                       feature_widths) -> float:
    from trainer_module.calibration import model_outputs
    corrupted = held_out.validation_corrupted
    shifted = Shifted(corrupted.batches,
                      *model_outputs.model_logits(model, corrupted.batches), corrupted.slices)
    fitted = self._fit_under_shift(model, held_out, evaluated, shifted, info, num_bins,
                                   features_model, feature_widths)
    info.update(validation_corruptions=list(VALIDATION_CORRUPTIONS),
                validation_examples=int(len(shifted.labels)),
                validation_slices=[str(name) for name in shifted.slices],
                validation_accuracy=float(np.mean(shifted.logits.argmax(axis=1) ==
                                                  shifted.labels)))
    after = shifted.logits / (fitted.temperature if fitted.shifted_temperatures is None
                              else fitted.shifted_temperatures[:, np.newaxis])
    for name, moved in (("before", shifted.logits), ("after", after),
                        ("clean_fit", shifted.logits / evaluated.clean_fit)):
      (info[f"validation_nll_{name}"], info[f"validation_ece_{name}"]) = maths.slice_means(
          moved, shifted.labels, shifted.slices, 1.0, num_bins)
    return fitted.temperature

  def _fit_under_shift(self, model, held_out: HeldOut, evaluated: EvalFit, shifted: Shifted,
                       info: dict, num_bins: int, features_model, feature_widths) -> ShiftFit:
    raise NotImplementedError

  @staticmethod
  def _shift_sources(info: dict) -> str:
    return (f"{info['eval_examples']} clean eval examples and {info['validation_examples']} "
            "eval images under the validation corruptions "
            f"({', '.join(info['validation_corruptions'])}; severities 1-5")


class ByFeatureDistance(UnderValidationShift):
  """A method whose T depends on how far an input's penultimate features lie from the training
  classes (distances.py); records the support it measured ("feature_support", served)."""
  needs_feature_distances = True
  calibrated_selection = True
  served_scores = (DISTANCE_SCORE_KEY,)

  def _fit_under_shift(self, model, held_out, evaluated, shifted, info, num_bins,
                       features_model, feature_widths) -> ShiftFit:
    from trainer_module.calibration import model_outputs
    features_model = features_model or model_outputs.penultimate_model(model)
    support = model_outputs.feature_support(features_model, held_out.train_batches,
                                            held_out.eval_batches, feature_widths)
    shifted_features = model_outputs.model_logits(features_model, shifted.batches)[0]
    radii = [part.radius for part in distances.parts(support)]
    info.update(feature_support=support, support_radius=radii[0] if len(radii) == 1 else radii)
    return self._fit_by_distance(features_model, held_out, evaluated, shifted, support,
                                 shifted_features, info, num_bins)

  def _fit_by_distance(self, features_model, held_out: HeldOut, evaluated: EvalFit,
                       shifted: Shifted, support: distances.Support,
                       shifted_features: np.ndarray, info: dict, num_bins: int) -> ShiftFit:
    raise NotImplementedError

  def served_temperatures(self, info, logits, features, images):
    from trainer_module.calibration import serving
    support = info["feature_support"]
    scores = serving.graph_distance_scores(features, support)
    return (self._graph_temperatures(info, support, features, scores),
            {DISTANCE_SCORE_KEY: scores})

  def _graph_temperatures(self, info: dict, support, features, scores):
    raise NotImplementedError
