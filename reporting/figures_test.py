"""The robustness numbers of the run report: means over corruption x severity slices, per
family, their floors, and a missing slice giving no number."""
import numpy as np
import pytest

from components.calibration_metrics import ACCURACY_NAME, ECE_NAME, NLL_NAME, RELIABILITY_NAME
from reporting import figures
from trainer_module.features import PROBABILITIES_KEY
from trainer_module.metrics import ece_floor


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
  overall = figures.corrupted_means(values, PROBABILITIES_KEY, names)
  assert overall[ACCURACY_NAME] == pytest.approx(0.6 + 0.03)
  assert overall[ECE_NAME] == pytest.approx(0.1)
  families = figures.family_means(values, PROBABILITIES_KEY, names)
  assert list(families) == ["noise", "weather", "digital"]
  assert families["noise"][ACCURACY_NAME] == pytest.approx(0.6 + 0.03)
  assert families["weather"][NLL_NAME] == pytest.approx(0.1)
  assert families["digital"][ACCURACY_NAME] == pytest.approx(0.33)


def test_the_cece_floor_is_the_mean_of_the_slices_floors_from_their_reliability_bins():
  """Each slice's floor comes from its own bins (count, mean confidence, accuracy): slices of
  100 and of 900 images at the same confidences, so the small one's floor is 3 times larger."""
  values = _values({"fog": 0.9, "contrast": 0.3})
  for slice_, row in values.items():
    count = 100 if dict(slice_)["corruption"] == "fog" else 900
    row[("candidate", PROBABILITIES_KEY, RELIABILITY_NAME, False)] = np.array(
        [[count * 0.4, 0.55, 0.5], [count * 0.6, 0.95, 0.9]])
  means = figures.corrupted_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  small, large = ece_floor([40, 60], [0.55, 0.95]), ece_floor([360, 540], [0.55, 0.95])
  assert small == pytest.approx(3 * large, rel=0.05)
  assert means[figures.ECE_FLOOR] == pytest.approx((small + large) / 2)
  assert figures.family_means(values, PROBABILITIES_KEY, ["fog"])["weather"][
      figures.ECE_FLOOR] == pytest.approx(small)


def test_missing_slices_give_no_number_rather_than_a_wrong_one():
  assert figures.corrupted_means({}, PROBABILITIES_KEY, ["fog"])[ACCURACY_NAME] is None
  values = _values({"fog": 0.9, "contrast": 0.3})
  del values[(("corruption", "fog"), ("severity", 5))]  # One slice of ten missing.
  means = figures.corrupted_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert means[ACCURACY_NAME] is None
  family_outputs = {("candidate", PROBABILITIES_KEY, name, False): 0.01 for name in (
      "mean_slice_confidence_gap", "mean_slice_ece_bootstrap_sd",
      "mean_slice_confidence_gap_bootstrap_sd")}
  for family in ("weather", "digital"):  # The Evaluator's MeanSliceECE on the family slices.
    values[(("corruption_family", family),)] = dict(family_outputs)
  families = figures.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert families["weather"][ACCURACY_NAME] is None
  assert [families["weather"][key] for key in (
      figures.GAP, figures.ECE_SD, figures.GAP_SD)] == [None] * 3, (
      "nor the gap over the slices that are there")
  assert families["digital"][ACCURACY_NAME] == pytest.approx(0.33)  # Its five are all there.
  assert families["digital"][figures.GAP] == 0.01


def test_a_familys_confidence_gap_is_the_evaluators_on_the_familys_slice_and_missing_is_none():
  """The mean over the family's slices of confidence minus accuracy is MeanSliceECE's (checked
  against numpy in tests/calibration_metrics_test.py); a family slice without it has none."""
  values = _values({"fog": 0.5, "contrast": 0.7})
  values[(("corruption_family", "weather"),)] = {
      ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap", False): -0.0444}
  families = figures.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert families["weather"]["gap"] == -0.0444
  assert families["digital"]["gap"] is None
