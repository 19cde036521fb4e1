"""`temperature_fit=clean`: the T minimising the NLL of the clean eval images (Guo et al., ICML
2017). It often sharpens (T < 1) a model that is under-confident on clean images but
over-confident on shifted ones, and so makes the corrupted set worse."""
from trainer_module.calibration.method import CalibrationMethod


class Clean(CalibrationMethod):
  name = "clean"
  calibrated_selection = True  # Its T applies everywhere, so a candidate is judged after it.

  def _fit_temperature(self, model, held_out, evaluated, info, num_bins, features_model,
                       feature_widths) -> float:
    return evaluated.clean_fit

  def describe(self, info: dict) -> str:
    return (f"T = {info['temperature']:.4f}, fitted on {info['eval_examples']} clean eval "
            "examples (never on test); served probabilities are softmax(logits / T). On the "
            "eval split the fit is in-sample; the test and corrupted rows are not.")


METHOD = Clean()
