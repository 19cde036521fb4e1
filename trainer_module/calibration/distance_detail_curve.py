"""`temperature_fit=distance_detail_curve` (the default): a temperature per input from how far
its features lie from the training data and how much fine detail it holds, T(x) = exp(a + b z(x)
+ c s(x)) with b >= 0 and c of either sign (distance_curve.py). The distance score z rises for
a blurred image and a noisy one alike, though a blur costs more accuracy; the detail score s
(calibration/detail.py) falls for the one and rises for the other, so the map can soften a far
image for its blur and not for its distance alone. Why: docs/robustness.md, "Choosing the
temperature".
"""
import numpy as np

from trainer_module.calibration import detail, distances
from trainer_module.calibration.distance_curve import DistanceCurve, fit_distance_curve
from trainer_module.calibration.method import ByFeatureDistance, ShiftFit
from trainer_module.features import DETAIL_SCORE_KEY, DISTANCE_SCORE_KEY


class DistanceDetailCurveFit(ByFeatureDistance):
  name = "distance_detail_curve"
  served_scores = (DISTANCE_SCORE_KEY, DETAIL_SCORE_KEY)
  reads_images = True

  def _fit_by_distance(self, features_model, held_out, evaluated, shifted, support,
                       shifted_features, info, num_bins) -> ShiftFit:
    from trainer_module.calibration import model_outputs
    eval_scores = distances.distance_scores(
        model_outputs.model_logits(features_model, held_out.eval_batches)[0], support)
    shifted_scores = distances.distance_scores(shifted_features, support)
    eval_images = model_outputs.batch_images(held_out.eval_batches)
    scale = detail.detail_scale(eval_images)
    eval_details = detail.detail_scores(eval_images, scale)
    shifted_details = detail.detail_scores(model_outputs.batch_images(shifted.batches), scale)
    curve = fit_distance_curve(evaluated.logits, evaluated.labels, eval_scores, shifted.logits,
                               shifted.labels, shifted.slices, shifted_scores, num_bins,
                               eval_details, shifted_details)
    info.update(detail_scale=scale._asdict(), eval_detail_scores=eval_details.tolist(),
                validation_detail_scores=shifted_details.tolist(),
                distance_curve=curve._asdict(), eval_distance_scores=eval_scores.tolist(),
                validation_distance_scores=shifted_scores.tolist())
    return ShiftFit(float(np.exp(curve.log_temperature)),
                    shifted_temperatures=curve.temperatures(shifted_scores, shifted_details))

  def eval_temperatures(self, info):
    return self.temperature_of_score(info)(info["eval_distance_scores"],
                                           info["eval_detail_scores"])

  def temperatures(self, info, support, features, images=None):
    if images is None:
      raise ValueError(f"temperature_fit={self.name} reads the input images; none were given.")
    return DistanceCurve(**info["distance_curve"]).temperatures(
        distances.distance_scores(features, support),
        detail.detail_scores(images, detail.DetailScale(**info["detail_scale"])))

  def served_temperatures(self, info, logits, features, images):
    from trainer_module.calibration import serving
    scores = serving.graph_distance_scores(features, info["feature_support"])
    details = serving.graph_detail_scores(images, detail.DetailScale(**info["detail_scale"]))
    temperatures = serving.curve_temperatures(DistanceCurve(**info["distance_curve"]), scores,
                                              details)
    return temperatures, {DISTANCE_SCORE_KEY: scores, DETAIL_SCORE_KEY: details}

  def temperature_of_score(self, info):
    """T(z, s): an input whose detail score is not given is taken to be of typical detail
    (s = 0)."""
    curve = DistanceCurve(**info["distance_curve"])

    def temperatures(scores, details=None):
      scores = np.asarray(scores, np.float64)
      return curve.temperatures(scores, np.zeros(len(scores)) if details is None else details)
    return temperatures

  def describe(self, info: dict) -> str:
    curve = info["distance_curve"]
    features = ("its penultimate features" if not isinstance(info["support_radius"], list)
                else "its members' penultimate features (each member's own feature space; "
                "z is the mean of the members' scores)")
    return (
        f"A temperature per input: T(x) = exp({curve['log_temperature']:.4f} + "
        f"{curve['slope']:.4f} z(x) {curve['detail_slope']:+.4f} s(x)), from how far the input "
        "lies from the training data and how much fine detail it holds. z(x) is the log "
        f"Mahalanobis distance of {features} to the nearest training class mean, in standard "
        "deviations of the clean eval images' log distances above their mean; s(x), the detail "
        "score, is log(mean |x - its 3x3 mean| / std(x)) of the input's grey levels in standard "
        "deviations of the clean eval images' from their mean: below 0 for a blurred image, "
        f"above for a noisy one. A typical eval image (z = 0, s = 0) gets T = "
        f"{info['temperature']:.4f}. The map is fitted on {self._shift_sources(info)}), never on "
        "test and never on an evaluated corruption: the mean over the clean images and each "
        "validation slice of its NLL, kept no worse than the raw softmax on the validation "
        "slices' mean NLL and mean ECE. The clean eval examples alone would give one "
        f"T = {info['clean_fit_temperature']:.4f}. The eval and validation-shift rows are "
        "in-sample; the test and corrupted rows are not.")


METHOD = DistanceDetailCurveFit()
