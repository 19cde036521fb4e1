"""The robustness numbers of the run report: means over corruption x severity slices, per family."""
import numpy as np
import pytest

from components import report_sections
from components.calibration_metrics import ACCURACY_NAME, ECE_NAME, NLL_NAME, RELIABILITY_NAME
from trainer_module.class_names import CLASS_NAMES_FILE
from trainer_module.export import write_record
from trainer_module.features import PROBABILITIES_KEY
from trainer_module.metrics import ece_floor
from trainer_module.reference_corruptions import BENCHMARK_CORRUPTIONS

_SETTINGS = report_sections.ReportSettings(
    pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
    corruptions=BENCHMARK_CORRUPTIONS, bounds=())


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
  overall = report_sections.corrupted_means(values, PROBABILITIES_KEY, names)
  assert overall[ACCURACY_NAME] == pytest.approx(0.6 + 0.03)
  assert overall[ECE_NAME] == pytest.approx(0.1)
  families = report_sections.family_means(values, PROBABILITIES_KEY, names)
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
  means = report_sections.corrupted_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  small, large = ece_floor([40, 60], [0.55, 0.95]), ece_floor([360, 540], [0.55, 0.95])
  assert small == pytest.approx(3 * large, rel=0.05)
  assert means[report_sections.ECE_FLOOR] == pytest.approx((small + large) / 2)
  assert report_sections.family_means(values, PROBABILITIES_KEY, ["fog"])["weather"][
      report_sections.ECE_FLOOR] == pytest.approx(small)


def test_missing_slices_give_no_number_rather_than_a_wrong_one():
  assert report_sections.corrupted_means({}, PROBABILITIES_KEY, ["fog"])[ACCURACY_NAME] is None
  values = _values({"fog": 0.9, "contrast": 0.3})
  del values[(("corruption", "fog"), ("severity", 5))]  # One slice of ten missing.
  means = report_sections.corrupted_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert means[ACCURACY_NAME] is None
  family_outputs = {("candidate", PROBABILITIES_KEY, name, False): 0.01 for name in (
      "mean_slice_confidence_gap", "mean_slice_ece_bootstrap_sd",
      "mean_slice_confidence_gap_bootstrap_sd")}
  for family in ("weather", "digital"):  # The Evaluator's MeanSliceECE on the family slices.
    values[(("corruption_family", family),)] = dict(family_outputs)
  families = report_sections.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert families["weather"][ACCURACY_NAME] is None
  assert [families["weather"][key] for key in (
      report_sections.GAP, report_sections.ECE_SD, report_sections.GAP_SD)] == [None] * 3, (
      "nor the gap over the slices that are there")
  assert families["digital"][ACCURACY_NAME] == pytest.approx(0.33)  # Its five are all there.
  assert families["digital"][report_sections.GAP] == 0.01


def test_the_warm_start_line_says_what_the_model_records(tmp_path):
  from trainer_module.export import ENSEMBLE_FILE, TRAINING_FILE, write_record
  single, ensemble, bare = (str(tmp_path / name) for name in ("single", "ensemble", "bare"))
  write_record(single, TRAINING_FILE, {"warm_start": None})
  write_record(ensemble, ENSEMBLE_FILE, {"members": []})
  assert report_sections.warm_start_summary(single) == "no, trained from scratch"
  assert report_sections.warm_start_summary(ensemble).startswith("per member: an ensemble")
  assert report_sections.warm_start_summary(bare) == "not recorded"


def _validation_fit(**overrides):
  """temperature.json of a fit on the validation corruptions."""
  return {"temperature_fit": "validation_corruptions", "temperature": 1.0,
          "clean_fit_temperature": 0.39, "eval_examples": 270, "validation_examples": 1000,
          "validation_corruptions": ["speckle_noise", "gaussian_blur", "spatter", "saturate"],
          "validation_nll_before": 1.2, "validation_nll_after": 1.2,
          "validation_ece_before": 0.15, "validation_ece_after": 0.15,
          "validation_nll_clean_fit": 2.5, "validation_ece_clean_fit": 0.3, **overrides}


def test_the_temperature_section_reports_the_validation_shift_apart_from_the_corrupted_set():
  calibration = _validation_fit()
  section = report_sections._temperature_section  # pylint: disable=protected-access
  lines = section(_SETTINGS, {}, calibration)
  text = "\n".join(lines)
  assert "T = 1.0000, chosen on 270 clean eval examples and 1000 eval images" in text
  assert "alone would give T = 0.3900 (validation shift at that T: NLL 2.5000, ECE 0.3000)" in text
  assert ("| validation shift (eval images, validation corruptions; chose T) | 1.2000 | 1.2000 | "
          "0.1500 | 0.1500 | | |") in lines
  assert "| corrupted, mean over slices (cNLL, cECE) | n/a | n/a | n/a | n/a | | |" in lines


def test_a_distance_map_is_described_and_charted_where_it_sharpens_and_softens(tmp_path):
  calibration = _validation_fit(
      temperature_fit="distance_detail_curve", temperature=float(np.exp(-1.0)),
      support_radius=14.25, distance_curve={"log_temperature": -1.0, "slope": 0.2,
                                            "detail_slope": 0.0},
      detail_scale={"mean": -0.4, "std": 0.3},
      eval_distance_scores=[-1.0, 0.0, 1.0], eval_detail_scores=[0.0, 0.0, 0.0],
      validation_distance_scores=[1.0, 2.0, 8.0, 9.0],
      validation_detail_scores=[0.0, 0.0, 0.0, 0.0],
      validation_slices=["spatter_1", "saturate_2", "spatter_5", "speckle_noise_4"])
  text = "\n".join(report_sections._temperature_section(  # pylint: disable=protected-access
      _SETTINGS, {}, calibration))
  assert "T(x) = exp(-1.0000 + 0.2000 z(x) +0.0000 s(x))" in text
  assert "A typical eval image (z = 0, s = 0) gets T = 0.3679" in text
  noise = report_sections.ServedImages(scores=np.array([10.0, 12.0, 1.0]),
                                       confidence=np.array([0.9, 0.6, 0.99]),
                                       correct=np.array([True, False, True]))
  lines = report_sections._distance_section(  # pylint: disable=protected-access
      str(tmp_path), calibration, {"corrupted test: noise": noise})
  assert (tmp_path / report_sections.DISTANCE_CHART).stat().st_size > 0
  # Median z, median T (exp(-1 + 0.2 z)), the share sharpened (T < 1: z < 5), the share beyond
  # the validation shift's 95th percentile (8 + 0.85 (9 - 8) = 8.85) and, for served test
  # images, their accuracy there and mean confidence minus it: (0.9 + 0.6) / 2 - 1 / 2.
  assert ("| set | images | median z | median T | T < 1 (sharpened) | beyond z = 8.85 |"
          in "\n".join(lines))
  assert "| clean eval (fit) | 3 | 0.00 | 0.368 | 100% | 0% |  |  |" in lines
  assert "| validation shift, severities 1-2 (fit) | 2 | 1.50 | 0.499 | 100% | 0% |  |  |" in lines
  assert "| validation shift, severities 3-5 (fit) | 2 | 8.50 | 2.024 | 0% | 50% |  |  |" in lines
  assert "| corrupted test: noise | 3 | 10.00 | 2.718 | 33% | 67% | 0.50 | +0.25 |" in lines
  assert report_sections._distance_section(  # pylint: disable=protected-access
      str(tmp_path), _validation_fit(), None) == []


def test_a_distance_and_detail_map_reads_each_images_own_detail_in_the_table(tmp_path):
  calibration = _validation_fit(
      temperature_fit="distance_detail_curve", temperature=float(np.exp(-1.0)),
      support_radius=14.25, distance_curve={"log_temperature": -1.0, "slope": 0.2,
                                            "detail_slope": -0.5},
      detail_scale={"mean": -0.4, "std": 0.3},
      eval_distance_scores=[-1.0, 0.0, 1.0], eval_detail_scores=[0.0, 0.0, 0.0],
      validation_distance_scores=[1.0, 2.0, 8.0, 9.0],
      validation_detail_scores=[0.0, 0.0, -2.0, -2.0],
      validation_slices=["spatter_1", "saturate_2", "gaussian_blur_5", "gaussian_blur_4"])
  text = "\n".join(report_sections._temperature_section(  # pylint: disable=protected-access
      _SETTINGS, {}, calibration))
  assert "T(x) = exp(-1.0000 + 0.2000 z(x) -0.5000 s(x))" in text
  assert "A typical eval image (z = 0, s = 0) gets T = 0.3679" in text
  blur = report_sections.ServedImages(scores=np.array([10.0, 10.0]),
                                      confidence=np.array([0.9, 0.6]),
                                      correct=np.array([True, False]),
                                      details=np.array([-2.0, -2.0]))
  lines = report_sections._distance_section(  # pylint: disable=protected-access
      str(tmp_path), calibration, {"corrupted test: blur": blur})
  assert "for an image of typical detail (s = 0)" in "\n".join(lines)
  # T = exp(-1 + 0.2 z - 0.5 s): at s = -2, z = 8 and 9 give exp(1.6) and exp(1.8) (median
  # 5.501), z = 10 gives exp(2); at s = 0 (the curve alone) they would be 1.8-2.7.
  assert "| validation shift, severities 3-5 (fit) | 2 | 8.50 | 5.501 | 0% | 50% |  |  |" in lines
  assert "| corrupted test: blur | 2 | 10.00 | 7.389 | 0% | 100% | 0.50 | +0.25 |" in lines


def test_a_familys_confidence_gap_is_the_evaluators_on_the_familys_slice_and_missing_is_none():
  """The mean over the family's slices of confidence minus accuracy is MeanSliceECE's (checked
  against numpy in tests/calibration_metrics_test.py); a family slice without it has none."""
  values = _values({"fog": 0.5, "contrast": 0.7})
  values[(("corruption_family", "weather"),)] = {
      ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap", False): -0.0444}
  families = report_sections.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert families["weather"]["gap"] == -0.0444
  assert families["digital"]["gap"] is None


def _with_bootstrap(values, deviations):
  """`values` with the Evaluator's MeanSliceECE outputs on the corrupted slice and the family
  slices: {slice: (cECE sd, gap, gap sd)}."""
  for slice_, (ece_sd, gap, gap_sd) in deviations.items():
    values.setdefault(slice_, {}).update({
        ("candidate", PROBABILITIES_KEY, "mean_slice_ece_bootstrap_sd", False): ece_sd,
        ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap", False): gap,
        ("candidate", PROBABILITIES_KEY, "mean_slice_confidence_gap_bootstrap_sd", False): gap_sd})
  return values


def test_cece_and_each_familys_gap_carry_their_bootstrap_deviations_when_the_evaluator_has_them():
  from components.calibration_metrics import RELIABILITY_NAME
  values = _values({"fog": 0.5, "contrast": 0.7})
  for row in values.values():
    row[("candidate", PROBABILITIES_KEY, RELIABILITY_NAME, False)] = np.array(
        [[40, 0.9, 0.6], [10, 0.3, 0.3]])
  settings = report_sections.ReportSettings(
      pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
      corruptions=("fog", "contrast"), bounds=())
  without = "\n".join(report_sections._metric_table(settings, values))
  assert "| weather | fog | 0.5300 | 0.5000 | 0.1000 |" in without
  assert "(sd " not in without and "bootstrap standard deviation" not in without

  _with_bootstrap(values, {report_sections.CORRUPTED: (0.0024, 0.012, 0.0031),
                           (("corruption_family", "weather"),): (0.0041, -0.044, 0.0052),
                           (("corruption_family", "digital"),): (0.0043, 0.0038, 0.0057)})
  assert report_sections.corrupted_ece_sd(values, PROBABILITIES_KEY) == 0.0024
  families = report_sections.family_means(values, PROBABILITIES_KEY, ["fog", "contrast"])
  assert (families["weather"][report_sections.ECE_SD],
          families["weather"][report_sections.GAP_SD]) == (0.0041, 0.0052)
  table = "\n".join(report_sections._metric_table(settings, values))
  assert "cECE's bootstrap standard deviation 0.0024" in table
  assert "| weather | fog | 0.5300 | 0.5000 | 0.1000 (sd 0.0041) | " in table
  assert "| -0.0440 (sd 0.0052) |" in table and "| +0.0038 (sd 0.0057) |" in table
  assert report_sections.headline(settings, values)["corrupted_ece_sd"] == 0.0024


def test_a_bootstrap_the_evaluator_could_not_make_is_left_out_not_shown_as_a_number():
  values = _with_bootstrap(_values({"fog": 0.5}), {report_sections.CORRUPTED: (
      float("nan"), 0.01, float("nan"))})
  assert report_sections.corrupted_ece_sd(values, PROBABILITIES_KEY) is None
  settings = report_sections.ReportSettings(
      pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
      corruptions=("fog",), bounds=())
  assert "corrupted_ece_sd" not in report_sections.headline(settings, values)
  table = "\n".join(report_sections._metric_table(settings, values))
  assert "no bootstrap deviation: a corrupted example names no source image" in table
  assert "| weather | fog | 0.5300 | 0.5000 | 0.1000 | n/a | n/a |" in table


def test_class_names_come_from_the_model_and_skipped_files_are_listed(tmp_path):
  assert report_sections.model_class_names(_SETTINGS, None) == [str(k) for k in range(10)]
  write_record(str(tmp_path), CLASS_NAMES_FILE, {"class_names": ["cat", "dog"]})
  assert report_sections.model_class_names(_SETTINGS, str(tmp_path)) == ["cat", "dog"]
  assert report_sections.skipped_section([]) == []
  lines = report_sections.skipped_section([("/photos/cat/a.jpg", "empty file (0 bytes)"),
                                       ("/photos/dog", "empty class folder: a | b")])
  assert "## Skipped input files" in lines
  assert "| `/photos/cat/a.jpg` | empty file (0 bytes) |" in lines
  assert "| `/photos/dog` | empty class folder: a / b |" in lines


def _ensemble_record(**selection):
  trial = {"hyperparameters": {"seed": 1, "label_smoothing": 0.01, "l2": 1e-4, "bn_l2": None},
           "temperature": 1.0, "eval": {"accuracy": 0.98, "nll": 0.05, "ece": 0.01}}
  return {"objective": "nll", "picks": [0], "ensemble_size": 2, "diversity": 0.0,
          "members": [{"name": "trial_0", "weight": 1.0}],
          "trials": [{"name": "trial_0", **trial, **selection.pop("trial", {})}], **selection}


def test_the_ensemble_section_says_what_selection_read_and_each_trials_value_alone():
  section = "\n".join(report_sections._ensemble_section(_ensemble_record(
      objective="shift_nll", calibrated_selection=True,
      selected_on="the eval split and the validation shift's 25 slices",
      trial={"objective_value": 0.1234})))
  assert ("Greedy selection with replacement on the eval split and the validation shift's 25 "
          "slices (shift_nll, each candidate after its own temperature)") in section
  assert "| shift_nll alone |" in section and "| 0.1234 |" in section
  # A record written before selection could read the shift: the eval split, no value alone.
  older = "\n".join(report_sections._ensemble_section(_ensemble_record()))
  assert "Greedy selection with replacement on the eval split (nll)" in older
  assert older.rstrip().endswith("| n/a |")
