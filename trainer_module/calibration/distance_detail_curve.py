"""`temperature_fit=distance_detail_curve` (the pipeline presets'): the distance curve and the
input image's detail, T(x) = exp(a + b z(x) + c s(x)) with b >= 0 and c of either sign. The
distance score z rises for a blurred image and a noisy one alike, though a blur costs more
accuracy; the detail score s (calibration/detail.py) falls for the one and rises for the other,
so the map can soften a far image for its blur and not for its distance alone. Fitted as
distance_curve is. Why, and how it was chosen: docs/robustness.md, "The joint candidate
again".
"""
from trainer_module.calibration import detail
from trainer_module.calibration.distance_curve import DistanceCurve, DistanceCurveFit
from trainer_module.features import DETAIL_SCORE_KEY, DISTANCE_SCORE_KEY


class DistanceDetailCurveFit(DistanceCurveFit):
  name = "distance_detail_curve"
  served_scores = (DISTANCE_SCORE_KEY, DETAIL_SCORE_KEY)
  reads_images = True

  def _fit_details(self, held_out, shifted, info):
    from trainer_module.calibration import model_outputs
    eval_images = model_outputs.batch_images(held_out.eval_batches)
    scale = detail.detail_scale(eval_images)
    eval_details = detail.detail_scores(eval_images, scale)
    shifted_details = detail.detail_scores(model_outputs.batch_images(shifted.batches), scale)
    info.update(detail_scale=scale._asdict(), eval_detail_scores=eval_details.tolist(),
                validation_detail_scores=shifted_details.tolist())
    return eval_details, shifted_details

  def _details(self, info, images):
    if images is None:
      raise ValueError(f"temperature_fit={self.name} reads the input images; none were given.")
    return detail.detail_scores(images, detail.DetailScale(**info["detail_scale"]))

  def _graph_details(self, info, images):
    from trainer_module.calibration import serving
    return serving.graph_detail_scores(images, detail.DetailScale(**info["detail_scale"]))

  def describe(self, info: dict) -> str:
    curve = info["distance_curve"]
    return (
        f"A temperature per input: T(x) = exp({curve['log_temperature']:.4f} + "
        f"{curve['slope']:.4f} z(x) {curve['detail_slope']:+.4f} s(x)), from how far the input "
        "lies from the training data and how much fine detail it holds. z(x) is the log "
        f"Mahalanobis distance of {self._features_described(info)} to the nearest training "
        "class mean, in standard deviations of the clean eval images' log distances above "
        "their mean; s(x), the detail score, is log(mean |x - its 3x3 mean| / "
        "std(x)) of the input's grey levels in standard deviations of the clean eval images' "
        "from their mean: below 0 for a blurred image, above for a noisy one. A typical eval "
        f"image (z = 0, s = 0) gets T = {info['temperature']:.4f}. The map is fitted on "
        f"{self._shift_sources(info)}), never on test and never on an evaluated corruption: "
        "the mean over the clean images and each validation slice of its NLL, kept no worse "
        "than the raw softmax on the validation slices' mean NLL and mean ECE. The clean eval "
        f"examples alone would give one T = {info['clean_fit_temperature']:.4f}. The eval and "
        "validation-shift rows are in-sample; the test and corrupted rows are not.")


METHOD = DistanceDetailCurveFit()
