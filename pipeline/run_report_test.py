"""The robustness numbers of the run report: means over corruption x severity slices, per family."""
import pytest

from pipeline import run_report
from pipeline.evaluation import ACCURACY_NAME
from components.calibration_metrics import ECE_NAME, NLL_NAME
from trainer_module.features import PROBABILITIES_KEY


def _values(per_corruption):
  """TFMA-like values: every severity of a corruption gets (accuracy + severity / 100)."""
  values = {}
  for name, accuracy in per_corruption.items():
    for severity in range(1, 6):
      values[(("corruption", name), ("severity", severity))] = {
          ("candidate", PROBABILITIES_KEY, ACCURACY_NAME, False): accuracy + severity / 100,
          ("candidate", PROBABILITIES_KEY, ECE_NAME, False): 0.1,
          ("candidate", PROBABILITIES_KEY, NLL_NAME, False): 1.0 - accuracy}
  return values


def test_ca_is_the_mean_over_slices_and_families_group_as_hendrycks_and_dietterich():
  values = _values({"gaussian_noise": 0.5, "shot_noise": 0.7, "fog": 0.9, "contrast": 0.3})
  names = ["gaussian_noise", "shot_noise", "fog", "contrast"]
  overall = run_report.corrupted_means(values, PROBABILITIES_KEY, names)
  assert overall[ACCURACY_NAME] == pytest.approx(0.6 + 0.03)
  assert overall[ECE_NAME] == pytest.approx(0.1)
  families = run_report.family_means(values, PROBABILITIES_KEY, names)
  assert list(families) == ["noise", "weather", "digital"]
  assert families["noise"][ACCURACY_NAME] == pytest.approx(0.6 + 0.03)
  assert families["weather"][NLL_NAME] == pytest.approx(0.1)
  assert families["digital"][ACCURACY_NAME] == pytest.approx(0.33)


def test_missing_slices_give_no_number_rather_than_a_wrong_one():
  assert run_report.corrupted_means({}, PROBABILITIES_KEY, ["fog"])[ACCURACY_NAME] is None


def test_the_warm_start_line_says_what_the_model_records(tmp_path):
  from trainer_module.export import ENSEMBLE_FILE, TRAINING_FILE, write_record
  single, ensemble, bare = (str(tmp_path / name) for name in ("single", "ensemble", "bare"))
  write_record(single, TRAINING_FILE, {"warm_start": None})
  write_record(ensemble, ENSEMBLE_FILE, {"members": []})
  assert run_report.warm_start_summary(single) == "no, trained from scratch"
  assert run_report.warm_start_summary(ensemble).startswith("per member: an ensemble")
  assert run_report.warm_start_summary(bare) == "not recorded"
