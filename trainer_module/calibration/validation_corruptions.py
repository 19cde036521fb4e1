"""`temperature_fit=validation_corruptions` (the standalone trainer's default): the clean NLL
minimum among temperatures no worse than the raw softmax on every validation corruption x
severity slice (NLL) and on their mean ECE. Why per slice: docs/robustness.md, "Calibration".
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
