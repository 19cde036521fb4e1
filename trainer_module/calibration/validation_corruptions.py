"""`temperature_fit=validation_corruptions` (the standalone trainer's default): the clean NLL
minimum among the temperatures at which the NLL of every validation corruption x severity slice
of the eval images, and the slices' mean ECE, are no worse than the raw softmax's (T = 1).

The four validation corruptions (speckle noise, gaussian blur, spatter, saturate, severities
1-5) are those Hendrycks & Dietterich set apart from their 15 test corruptions for tuning under
shift. Per slice, not on average: a mild slice that welcomes sharpening must not outvote a
strong one that it hurts, since the mix of strengths met in use is unknown.
"""
from trainer_module.calibration import maths
from trainer_module.calibration.method import ShiftFit, UnderValidationShift


class ValidationCorruptions(UnderValidationShift):
  name = "validation_corruptions"

  def _fit_under_shift(self, model, held_out, evaluated, shifted, info, num_bins,
                       features_model, feature_widths) -> ShiftFit:
    return ShiftFit(maths.select_temperature_under_shift(
        evaluated.logits, evaluated.labels, shifted.logits, shifted.labels, shifted.slices,
        num_bins))

  def describe(self, info: dict) -> str:
    return (
        f"T = {info['temperature']:.4f}, chosen on {self._shift_sources(info)}), never on test "
        "and never on an evaluated corruption: the clean NLL "
        "minimum among the temperatures at which every validation corruption x severity slice's "
        "NLL, and the slices' mean ECE, are no worse than the raw softmax's. The clean eval "
        f"examples alone would give T = {info['clean_fit_temperature']:.4f} "
        f"(validation shift at that T: NLL {info['validation_nll_clean_fit']:.4f}, ECE "
        f"{info['validation_ece_clean_fit']:.4f}). Served probabilities are "
        "softmax(logits / T). The eval and validation-shift rows are in-sample; the test and "
        "corrupted rows are not.")


METHOD = ValidationCorruptions()
