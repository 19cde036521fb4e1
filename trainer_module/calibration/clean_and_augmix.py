"""`temperature_fit=clean_and_augmix`: T minimises the mean NLL of the clean eval images and
their training-time AugMix views, among temperatures at which neither is above the raw
softmax's. Single models only: an ensemble's members saw different AugMix views."""
import numpy as np

from trainer_module.calibration import maths
from trainer_module.calibration.method import CalibrationMethod


def select_temperature(clean_logits: np.ndarray, clean_labels: np.ndarray,
                       shifted_logits: np.ndarray, shifted_labels: np.ndarray) -> float:
  """The T minimising the mean of the clean and the shifted NLL, among the temperatures at which
  neither is above the raw softmax's (see the module docstring)."""
  for logits, labels in ((clean_logits, clean_labels), (shifted_logits, shifted_labels)):
    maths.check_logits(np.asarray(logits), np.asarray(labels).reshape(-1))
  weights = np.concatenate([np.full(len(clean_labels), 1.0 / len(clean_labels)),
                            np.full(len(shifted_labels), 1.0 / len(shifted_labels))])
  pooled = maths.fit_temperature(np.concatenate([clean_logits, shifted_logits]),
                                 np.concatenate([clean_labels, shifted_labels]), weights)
  clean_low, clean_high = maths.no_worse_than_raw(clean_logits, clean_labels)
  shifted_low, shifted_high = maths.no_worse_than_raw(shifted_logits, shifted_labels)
  low, high = max(clean_low, shifted_low), min(clean_high, shifted_high)  # Both hold 0.
  return float(np.exp(-np.clip(np.log(1.0 / pooled), low, high)))


class CleanAndAugmix(CalibrationMethod):
  name = "clean_and_augmix"
  needs_augmix_views = True
  for_ensembles = False

  def _fit_temperature(self, model, held_out, evaluated, info, num_bins, features_model,
                       feature_widths) -> float:
    from trainer_module.calibration import model_outputs
    augmented_logits, augmented_labels = model_outputs.model_logits(model,
                                                                    held_out.augmented_batches)
    temperature = select_temperature(evaluated.logits, evaluated.labels, augmented_logits,
                                     augmented_labels)
    info.update(augmented_examples=int(len(augmented_labels)),
                augmented_nll_before=maths.nll(augmented_logits, augmented_labels),
                augmented_nll_after=maths.nll(augmented_logits, augmented_labels, temperature),
                augmented_nll_clean_fit=maths.nll(augmented_logits, augmented_labels,
                                                  evaluated.clean_fit))
    return temperature

  def describe(self, info: dict) -> str:
    return (
        f"T = {info['temperature']:.4f}, chosen on {info['eval_examples']} clean "
        f"eval examples and {info['augmented_examples']} AugMix views of them (never on "
        "test, never on a corruption): the T minimising their mean NLL among those at which "
        "neither NLL is above the raw softmax's. A fit on the clean eval examples alone would "
        f"give T = {info['clean_fit_temperature']:.4f} (NLL of the AugMix views: raw "
        f"{info['augmented_nll_before']:.4f}, chosen T "
        f"{info['augmented_nll_after']:.4f}, clean-only T "
        f"{info['augmented_nll_clean_fit']:.4f}). Served probabilities are "
        "softmax(logits / T). On the eval split the fit is in-sample; the test and corrupted "
        "rows are not.")


METHOD = CleanAndAugmix()
