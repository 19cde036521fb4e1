"""`temperature_fit=in_support`: the validation_corruptions rule for a T that applies only to
inputs within the eval images' Mahalanobis radius of the training data, the raw softmax beyond.
Why: docs/robustness.md, "One T inside the data's support".
"""
import numpy as np

from trainer_module.calibration import distances, maths
from trainer_module.calibration.method import ByFeatureDistance, ShiftFit


class InSupport(ByFeatureDistance):
  name = "in_support"

  def _fit_by_distance(self, features_model, held_out, evaluated, shifted, support,
                       shifted_features, info, num_bins) -> ShiftFit:
    applies = distances.within_support(shifted_features, support)
    info.update(validation_inside_support=float(np.mean(applies)))
    return ShiftFit(maths.select_temperature_under_shift(
        evaluated.logits, evaluated.labels, shifted.logits, shifted.labels, shifted.slices,
        num_bins, applies), applies=applies)

  # Every eval image lies within the radius: the eval images are all served T (the default).

  def temperatures(self, info, support, features, images=None):
    return np.where(distances.within_support(features, support), info["temperature"], 1.0)

  def _graph_temperatures(self, info, support, features, scores):
    from trainer_module.calibration import serving
    return serving.support_temperatures(features, support, info["temperature"])

  def describe(self, info: dict) -> str:
    radius = info["support_radius"]
    where = (f"whose penultimate features lie within Mahalanobis distance {radius:.2f} of the "
             "nearest training class mean (the farthest clean eval image's)"
             if not isinstance(radius, list) else
             "whose penultimate features, in some member's own feature space, lie within that "
             "member's Mahalanobis distance of its nearest training class mean (the farthest "
             f"clean eval image's: {', '.join(f'{r:.2f}' for r in radius)})")
    return (
        f"T = {info['temperature']:.4f} for inputs {where}, the raw softmax (T = 1) "
        "beyond. T is "
        f"chosen on {self._shift_sources(info)}; "
        f"{info['validation_inside_support']:.0%} of them within the radius), never on "
        "test and never on an evaluated corruption: the clean NLL minimum among the "
        "temperatures at which every validation slice's NLL, and the slices' mean ECE, are no "
        "worse than the raw softmax's. The clean eval examples alone would give "
        f"T = {info['clean_fit_temperature']:.4f}. The eval and validation-shift rows are "
        "in-sample; the test and corrupted rows are not.")


METHOD = InSupport()
