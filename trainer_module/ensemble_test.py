"""Greedy selection (known answers), and the ensemble model serving the weighted mean."""
import dataclasses
import json
import os

import numpy as np
import pytest
from scipy import special
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import transformed_digits
from trainer_module import data, ensemble
from trainer_module.calibration import detail, distances, model_outputs
from trainer_module.calibration.record import (read_calibration_info, read_feature_support,
                                               write_calibration_info)
from trainer_module.export import (ENSEMBLE_FILE, TRAINING_FILE, export_serving_model,
                                   read_record)
from trainer_module.features import (IMAGE_SHAPE, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.reference_corruptions import VALIDATION_CORRUPTIONS


def _two_class(p_true):
  """[examples, 2] probabilities whose true class (0) gets p_true."""
  p_true = np.asarray(p_true, np.float64)
  return np.stack([p_true, 1 - p_true], axis=1)


LABELS = np.zeros(4, np.int64)
# Member 1 is best alone (NLL 1.151); adding member 0 helps (1.134), then member 1 again helps
# more (1.126) than member 0 again (1.159); no fourth pick improves, and member 2 never helps.
MEMBERS = np.stack([_two_class([0.1, 0.9, 0.1, 0.6]), _two_class([0.1, 0.4, 0.5, 0.5]),
                    _two_class([0.1, 0.1, 0.1, 0.1])])


def test_greedy_selection_picks_a_member_twice_and_stops_when_nothing_improves():
  assert ensemble.greedy_selection(MEMBERS, LABELS, size=3) == [1, 0, 1]
  np.testing.assert_allclose(ensemble.selection_weights([1, 0, 1], 3), [1 / 3, 2 / 3, 0])


def test_greedy_selection_stops_at_ensemble_size_distinct_members():
  assert ensemble.greedy_selection(MEMBERS, LABELS, size=1) == [1]
  # With size 2 the repeat pick still comes (one distinct member was not yet added by it).
  assert ensemble.greedy_selection(MEMBERS, LABELS, size=2) == [1, 0]


def test_a_member_that_cannot_be_improved_on_is_an_ensemble_of_one():
  members = np.stack([_two_class([0.9] * 4), _two_class([0.6] * 4)])
  assert ensemble.greedy_selection(members, LABELS, size=2) == [0]


# Raw, adding B makes the mean less confident and raises the NLL; after each candidate's own
# temperature (the served ensemble's T sharpens within the support), it separates the classes
# better: 6 images, class 0 true, p(class 0) per image.
SHARP_A = _two_class([0.55, 0.6, 0.8, 0.9, 0.3, 0.9])
SOFT_B = _two_class([0.6, 0.55, 0.7, 0.7, 0.4, 0.55])


def test_calibrated_selection_judges_each_candidate_after_its_own_temperature():
  members, labels = np.stack([SHARP_A, SOFT_B]), np.zeros(6, np.int64)
  assert ensemble.greedy_selection(members, labels, size=2) == [0]
  assert ensemble.greedy_selection(members, labels, size=2, calibrated=True) == [0, 1]
  mean = (SHARP_A + SOFT_B) / 2
  inverse_t = np.linspace(0.01, 10.0, 100_000)[:, None, None]  # A grid over 1/T.
  grid = -np.log(np.exp(np.log(mean) * inverse_t) /
                 np.exp(np.log(mean) * inverse_t).sum(axis=2, keepdims=True))[:, :, 0]
  assert ensemble.objective_value(mean, labels, "nll", calibrated=True) == pytest.approx(
      grid.mean(axis=1).min(), abs=1e-6)


def test_the_acc_objective_maximises_accuracy():
  right, wrong = _two_class([0.6] * 4), _two_class([0.4] * 4)
  assert ensemble.greedy_selection(np.stack([wrong, right]), LABELS, 2, "acc") == [1]
  assert ensemble.objective_value(right, LABELS, "acc") == -1.0
  assert ensemble.objective_value(right, LABELS, "nll-acc") == pytest.approx(-np.log(0.6) - 1)
  with pytest.raises(ValueError, match=r"ensemble_objective='brier': must be one of \('nll', "
                     r"'acc', 'nll-acc', 'shift_nll'\)"):
    ensemble.objective_value(right, LABELS, "brier")


# Two slices of 4 images each (class 0 true): A is sure and right on the clean slice and sure
# and wrong on half the shifted one; B is less sure on the clean slice and modest everywhere.
SLICES = np.array(["\0clean"] * 4 + ["blur_5"] * 4)
SHIFT_LABELS = np.zeros(8, np.int64)
SURE_A = _two_class([0.99, 0.99, 0.98, 0.99, 0.97, 0.03, 0.96, 0.02])
MODEST_B = _two_class([0.9, 0.85, 0.9, 0.8, 0.7, 0.45, 0.7, 0.4])


def _grid_shift_nll(probabilities, labels, slices):
  """The mean over slices of each slice's NLL at the best T, on a grid over 1/T (numpy)."""
  inverse_t = np.linspace(0.01, 10.0, 20_000)[:, None, None]
  log_p = np.log(probabilities) * inverse_t
  log_p -= np.log(np.exp(log_p).sum(axis=2, keepdims=True))
  true = -log_p[:, np.arange(len(labels)), labels]
  by_slice = [true[:, slices == name].mean(axis=1) for name in np.unique(slices)]
  return np.mean(by_slice, axis=0).min()


def test_shift_nll_is_the_mean_of_the_slices_nll_after_the_best_temperature():
  for candidate in (SURE_A, MODEST_B, (SURE_A + MODEST_B) / 2):
    assert ensemble.objective_value(candidate, SHIFT_LABELS, "shift_nll",
                                    slices=SLICES) == pytest.approx(
        _grid_shift_nll(candidate, SHIFT_LABELS, SLICES), abs=1e-4)
  # Every slice weighs the same, however many images it has.
  longer = np.concatenate([SLICES, ["\0clean"] * 4])
  doubled_clean = np.concatenate([SURE_A, SURE_A[:4]])
  assert ensemble.objective_value(doubled_clean, np.zeros(12, np.int64), "shift_nll",
                                  slices=longer) == pytest.approx(
      ensemble.objective_value(SURE_A, SHIFT_LABELS, "shift_nll", slices=SLICES), abs=1e-4)


def test_selection_under_the_shift_keeps_a_member_the_eval_split_alone_would_not():
  members = np.stack([SURE_A, MODEST_B])
  clean = SLICES == "\0clean"
  assert ensemble.greedy_selection(members[:, clean], SHIFT_LABELS[clean], size=2,
                                   calibrated=True) == [0]
  assert ensemble.greedy_selection(members, SHIFT_LABELS, size=2, objective="shift_nll",
                                   slices=SLICES) == [1]


def test_shift_nll_needs_each_examples_slice():
  with pytest.raises(ValueError, match="shift_nll needs each example's slice name"):
    ensemble.objective_value(SURE_A, SHIFT_LABELS, "shift_nll")
  with pytest.raises(ValueError, match="shift_nll needs each example's slice name"):
    ensemble.objective_value(SURE_A, SHIFT_LABELS, "shift_nll", slices=SLICES[:4])


def test_the_best_single_trial_is_judged_as_selection_judges():
  trials = [{"name": "sharp_on_clean", "eval": {"nll": 0.01}, "objective_value": 0.30},
            {"name": "best_under_shift", "eval": {"nll": 0.02}, "objective_value": 0.20}]
  assert ensemble.best_single({"objective": "shift_nll", "trials": trials})["name"] == (
      "best_under_shift")
  assert ensemble.best_single({"objective": "nll", "trials": trials})["name"] == "sharp_on_clean"
  # A record from before shift_nll: the lowest served eval NLL.
  assert ensemble.best_single({"trials": [{**t, "objective_value": None} for t in trials]})[
      "name"] == "sharp_on_clean"


def test_selection_rejects_predictions_that_do_not_match_the_labels():
  with pytest.raises(ValueError, match="do not match 3 eval labels"):
    ensemble.greedy_selection(MEMBERS, np.zeros(3, np.int64), 2)


def test_disagreement_is_the_mean_pairwise_share_of_differing_top_classes():
  a = _two_class([0.9, 0.9, 0.9, 0.9])  # Predicts 0 everywhere.
  b = _two_class([0.9, 0.9, 0.1, 0.1])  # Differs from a on half the examples.
  c = _two_class([0.1, 0.9, 0.9, 0.9])  # Differs from a on 1/4, from b on 3/4.
  assert ensemble.disagreement(np.stack([a, b, c])) == pytest.approx((0.5 + 0.25 + 0.75) / 3)
  assert ensemble.disagreement(np.stack([a])) == 0.0


def _small_member(seed):
  """A float32 network from images to logits with a pooled penultimate layer, as a member."""
  images = keras.Input(IMAGE_SHAPE)
  initializer = keras.initializers.RandomNormal(stddev=3.0, seed=seed)
  features = keras.layers.GlobalAveragePooling2D()(
      keras.layers.Conv2D(8, 3, kernel_initializer=initializer)(images))
  return keras.Model(images, keras.layers.Dense(10, kernel_initializer=initializer)(features))


def test_the_ensemble_network_computes_in_float32_under_a_mixed_global_policy():
  """As the members are served, whatever policy the process was left in."""
  networks = [_small_member(seed) for seed in range(2)]
  images = np.random.default_rng(0).normal(size=(8,) + IMAGE_SHAPE).astype(np.float32)
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    network, features_model = ensemble.ensemble_network(networks, [0.25, 0.75], [1.0, 2.0])
  finally:
    keras.mixed_precision.set_global_policy("float32")
  logits = [n(images).numpy().astype(np.float64) for n in networks]
  assert np.ptp(logits) > 10  # Logits bfloat16 would round by more than the tolerance.
  expected = (0.25 * special.softmax(logits[0], axis=1)
              + 0.75 * special.softmax(logits[1] / 2.0, axis=1))
  np.testing.assert_allclose(np.exp(network(images).numpy()), expected, atol=1e-6)
  member_features = [model_outputs.penultimate_model(n)(images).numpy() for n in networks]
  np.testing.assert_allclose(features_model(images).numpy(),
                             np.concatenate(member_features, axis=1), rtol=1e-6)


def test_an_ensemble_of_one_member_loads_back_from_its_savedmodel_with_its_layer(tmp_path):
  """As bench/calibration.py loads a pushed ensemble (one of several members: the distance
  detail test): a selection may keep one member, which Keras hands the layer as a tensor
  rather than a list of one."""
  network, _ = ensemble.ensemble_network([_small_member(0)], [1.0], [2.0])
  network.save(str(tmp_path / "ensemble"))
  loaded = keras.models.load_model(str(tmp_path / "ensemble"), compile=False, custom_objects={
      "LogMeanProbability": ensemble.LogMeanProbability})
  images = np.random.default_rng(0).normal(size=(4,) + IMAGE_SHAPE).astype(np.float32)
  np.testing.assert_allclose(loaded(images).numpy(), network(images).numpy(), rtol=1e-6)
  assert ensemble.member_features_model(loaded)(images).shape == (4, 8)


def _member_network(seed):
  """A differently initialised member that ends as a Wide ResNet does (batch norm, ReLU, its one
  global average pooling, the logits): all an ensemble reads of its members, at a fraction of a
  WRN-10-1's cost to export and load. Its batch norm would compute otherwise if the ensemble
  called it in training mode."""
  images = keras.Input(IMAGE_SHAPE)
  initializer = keras.initializers.HeNormal(seed=seed)
  features = keras.layers.Conv2D(16, 3, strides=2, kernel_initializer=initializer)(images)
  features = keras.layers.ReLU()(keras.layers.BatchNormalization()(features))
  features = keras.layers.GlobalAveragePooling2D()(features)
  return keras.Model(images, keras.layers.Dense(10, kernel_initializer=initializer)(features))


# Initialisations of the three members under which selection on the raw mean and after each
# candidate's own T both choose more than one member (the tests assert it).
MEMBER_SEEDS = (7, 8, 9)


@pytest.fixture(scope="module")
def members(tmp_path_factory):
  """Three differently initialised (untrained) networks exported as the Trainer exports its
  members: the serving signatures, a temperature, the trial's training config."""
  work = tmp_path_factory.mktemp("ensemble")
  flags = transformed_digits(count=60, eval_count=40)
  tft_output = tft.TFTransformOutput(flags["transform_output"])
  result = []
  for index, seed in enumerate(MEMBER_SEEDS):
    config = plain_trainer(**TINY_NETWORK, seed=seed, label_smoothing=0.01 * index)
    model_dir = str(work / f"member_{index}")
    export_serving_model(_member_network(seed), tft_output, model_dir,
                         calibration={"temperature": 1.0 + index},
                         records={TRAINING_FILE: {"trainer_config": config.to_dict()}})
    result.append(ensemble.Member(name=f"trial_{index}", model_dir=model_dir))
  return work, flags, result


def _penultimate_features(network, spec, files):
  """(penultimate features, labels) of a member on a transformed split, padding left out."""
  batches = list(data.eval_batches([files], spec, 256))
  keep = np.concatenate([b[2].numpy() > 0 for b in batches])
  features = model_outputs.penultimate_model(network)
  return (np.concatenate([features(b[0]).numpy() for b in batches])[keep],
          np.concatenate([b[1].numpy() for b in batches])[keep])


# The settings of each ensemble built here unless a test changes them: UB's selection on the
# clean eval NLL, one T under the validation shift, a small validation shift.
SETTINGS = dict(objective="nll", eval_batch_size=256, num_bins=15,
                temperature_fit="validation_corruptions", validation_corruption_examples=2)


def _build(member_list, flags, export_dir, ensemble_size, **changes):
  return ensemble.build_ensemble(member_list, [flags["eval_files"]], flags["transform_output"],
                                 export_dir, ensemble_size, **{**SETTINGS, **changes})


def _serve(model_dir, images):
  serve = tf.saved_model.load(model_dir).signatures["serving_images"]
  return {k: v.numpy() for k, v in serve(images=tf.constant(images)).items()}


def test_the_ensemble_serves_the_selection_weighted_mean_of_its_members(members):
  work, flags, member_list = members
  export_dir = str(work / "ensemble")
  record = _build(member_list, flags, export_dir, 3)
  weights = {m["name"]: m["weight"] for m in record["members"]}
  assert sum(weights.values()) == pytest.approx(1.0)
  assert len(weights) >= 2 and len(record["trials"]) == 3  # A mean of members.
  assert record["trials"][2]["hyperparameters"]["label_smoothing"] == 0.02
  assert record["trials"][1]["temperature"] == 2.0

  from test_support.transform_runs import raw_digit_examples
  images = [example["image"] for example in raw_digit_examples(16)]
  served = _serve(export_dir, images)
  # Members as served (each with its own T = 1, 2, 3), averaged with the selection's weights.
  expected = sum(weights.get(m.name, 0.0) * _serve(m.model_dir, images)[PROBABILITIES_KEY]
                 for m in member_list)
  np.testing.assert_allclose(served[UNCALIBRATED_PROBABILITIES_KEY], expected, atol=1e-5)
  # Temperature scaling of the ensemble: softmax(log(mean) / T).
  calibration = json.loads(open(os.path.join(export_dir, "assets.extra",
                                             "temperature.json")).read())
  sharpened = np.exp(np.log(expected) / calibration["temperature"])
  np.testing.assert_allclose(served[PROBABILITIES_KEY],
                             sharpened / sharpened.sum(axis=1, keepdims=True), atol=1e-5)
  # Fitted as a single model's: never worse than the raw mean under the validation corruptions.
  assert calibration["temperature_fit"] == "validation_corruptions"
  assert calibration["validation_examples"] == len(VALIDATION_CORRUPTIONS) * 5 * 2
  assert calibration["validation_nll_after"] <= calibration["validation_nll_before"]
  assert read_record(export_dir, ENSEMBLE_FILE)["picks"] == record["picks"]


def test_selection_under_the_shift_reads_the_validation_corruptions_of_the_eval_images(
    members):
  """Under a fit that makes no validation shift of its own (clean), selection makes it."""
  work, flags, member_list = members
  record = _build(member_list, flags, str(work / "ensemble_shift"), 3, objective="shift_nll",
                  temperature_fit="clean")
  assert record["selected_on"] == (f"the eval split and the validation shift's "
                                   f"{len(VALIDATION_CORRUPTIONS) * 5} slices")
  alone = [trial["objective_value"] for trial in record["trials"]]
  # Greedy: the first pick is the best member alone, and each later pick improved on it.
  assert record["picks"][0] == int(np.argmin(alone))
  assert record["objective_value"] <= min(alone) + 1e-12


def test_an_ensemble_calibrated_by_feature_distance_needs_the_training_split(members, tmp_path):
  _, flags, member_list = members
  with pytest.raises(ValueError, match="train_files"):
    _build(member_list, flags, str(tmp_path / "out"), 1, temperature_fit="distance_detail_curve")
  assert not (tmp_path / "out").exists()


def test_an_ensemble_temperature_fit_this_version_does_not_serve_is_refused(members, tmp_path):
  _, flags, member_list = members
  with pytest.raises(ValueError, match="temperature_fit='in_support': must be one of "):
    _build(member_list, flags, str(tmp_path / "out"), 1, temperature_fit="in_support")
  assert not (tmp_path / "out").exists()


def test_a_missing_member_model_is_named(members, tmp_path):
  _, flags, member_list = members
  missing = dataclasses.replace(member_list[0], model_dir=str(tmp_path / "nothing"))
  with pytest.raises(FileNotFoundError,
                     match=f"No SavedModel in ensemble member directory {tmp_path / 'nothing'}"):
    _build([missing], flags, str(tmp_path / "out"), 1)


def test_a_member_enters_with_its_served_t_or_raw_when_its_t_depends_on_its_features(
    tmp_path):
  assert ensemble.member_temperature(str(tmp_path)) == 1.0  # Exported without calibration.
  write_calibration_info(str(tmp_path), {"temperature_fit": "distance_detail_curve",
                                         "temperature": 0.4})
  assert ensemble.member_temperature(str(tmp_path)) == 1.0
  for fit, temperature in (("validation_corruptions", 0.8), ("clean", 0.6)):
    write_calibration_info(str(tmp_path), {"temperature_fit": fit, "temperature": temperature})
    assert ensemble.member_temperature(str(tmp_path)) == temperature


def test_a_distance_detail_ensemble_serves_the_numpy_calibrators_t_input_by_input(members):
  """Each chosen member's support recomputed here from its own features; the ensemble's score
  is the mean of its members'; the detail score reads the image, the same for every member; the
  served probabilities are softmax(log mean / T(score, detail))."""
  work, flags, member_list = members
  export_dir = str(work / "ensemble_distance_detail_curve")
  record = _build(member_list, flags, export_dir, 3, temperature_fit="distance_detail_curve",
                  train_files=[flags["train_files"]])
  calibration = read_calibration_info(export_dir)
  assert (calibration["temperature_fit"] == "distance_detail_curve"
          and record["calibrated_selection"])
  assert calibration["distance_curve"]["slope"] >= 0
  assert calibration["validation_nll_after"] <= calibration["validation_nll_before"]
  assert calibration["validation_ece_after"] <= calibration["validation_ece_before"]
  chosen = {m["name"] for m in record["members"]}
  assert len(chosen) >= 2  # The score is a mean of members' scores.
  networks = [ensemble.load_member(m.model_dir) for m in member_list if m.name in chosen]
  tft_output = tft.TFTransformOutput(flags["transform_output"])
  spec = tft_output.transformed_feature_spec()

  from test_support.transform_runs import encode_png, raw_digit_examples
  noise = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
  images = ([example["image"] for example in raw_digit_examples(12)] +
            [encode_png(image) for image in noise])
  transformed = tft_output.transform_features_layer()({"image": tf.constant(images)})["image"]
  member_scores = []
  for network in networks:
    means, precision = distances.class_statistics(
        *_penultimate_features(network, spec, flags["train_files"]))
    eval_log = np.log(distances.mahalanobis_distance(
        _penultimate_features(network, spec, flags["eval_files"])[0], means, precision))
    served_log = np.log(distances.mahalanobis_distance(
        model_outputs.penultimate_model(network)(transformed).numpy(), means, precision))
    member_scores.append((served_log - eval_log.mean()) / eval_log.std())
  scores = np.mean(member_scores, axis=0)
  details = detail.detail_scores(transformed.numpy(),
                                 detail.DetailScale(**calibration["detail_scale"]))
  assert details[-4:].min() > details[:12].max()  # Noise holds more fine detail than a digit.
  curve = calibration["distance_curve"]
  expected_t = np.clip(np.exp(curve["log_temperature"] + curve["slope"] * scores
                              + curve["detail_slope"] * details), 0.01, 100)
  served = _serve(export_dir, images)
  np.testing.assert_allclose(served["distance_score"], scores, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(served["detail_score"], details, rtol=1e-4, atol=1e-4)
  # The loaded ensemble network gives the same features, e.g. for bench/calibration.py.
  loaded = keras.models.load_model(export_dir, compile=False, custom_objects={
      "LogMeanProbability": ensemble.LogMeanProbability})
  features = ensemble.member_features_model(loaded)(transformed).numpy()
  np.testing.assert_allclose(distances.distance_scores(
      features, read_feature_support(export_dir)), scores, rtol=1e-4, atol=1e-4)
  log_mean = np.log(served[UNCALIBRATED_PROBABILITIES_KEY].astype(np.float64))
  expected = np.exp(log_mean / expected_t[:, np.newaxis])
  np.testing.assert_allclose(served[PROBABILITIES_KEY],
                             expected / expected.sum(axis=1, keepdims=True), atol=1e-5)
