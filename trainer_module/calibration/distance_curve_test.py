"""The map's curve and its fit (distance_curve.py): a T per input that never falls with the
distance, fitted on the eval images and the validation corruptions only."""
import json

import numpy as np
import pytest
from scipy import special

from test_support.calibration_data import feature_distance_fit, labelled_logits, miscalibrated
from trainer_module import reference_corruptions
from trainer_module.calibration import distance_curve, distances, maths, model_outputs, registry
from trainer_module.calibration.inputs import VALIDATION_CORRUPTIONS
from trainer_module.calibration.method import HeldOut


def test_the_curve_minimises_the_mean_over_the_slices_of_each_slices_nll():
  """1000 clean images near the data ask for sharpening, 100 shifted ones farther out for
  softening. Each slice weighs the same, however few its examples: the curve is the minimum
  on a grid of (log T, slope) of the mean of the two slices' NLLs."""
  rng = np.random.default_rng(29)
  clean_logits, clean_labels = miscalibrated(rng, 0.5, count=1000, classes=4)
  shifted_logits, shifted_labels = miscalibrated(rng, 2.0, count=100, classes=4)
  logits = np.concatenate([clean_logits, shifted_logits])
  labels = np.concatenate([clean_labels, shifted_labels])
  clean = np.arange(1100) < 1000
  scores = np.concatenate([rng.normal(0.0, 1.0, 1000), rng.normal(2.0, 0.5, 100)])
  curve = distance_curve.curve_minimising_slice_nll(logits, labels,
                                                    np.where(clean, "clean", "shifted"), scores)
  log_temperatures, slopes = np.linspace(-2.0, 2.0, 81), np.linspace(0.0, 2.0, 41)

  def mean_slice_nll(log_temperature):  # [slopes]
    temperatures = np.exp(log_temperature + slopes[:, np.newaxis] * scores)
    scaled = logits / temperatures[:, :, np.newaxis]
    nll = special.logsumexp(scaled, axis=2) - scaled[:, np.arange(1100), labels]
    return (nll[:, clean].mean(axis=1) + nll[:, ~clean].mean(axis=1)) / 2

  table = np.array([mean_slice_nll(a) for a in log_temperatures])
  best_a, best_b = np.unravel_index(np.argmin(table), table.shape)
  assert curve.log_temperature == pytest.approx(log_temperatures[best_a], abs=0.05)
  assert curve.slope == pytest.approx(slopes[best_b], abs=0.05)


def test_distance_curve_sharpens_near_the_data_and_softens_far_from_it():
  """Clean and mildly shifted inputs are right but under-confident (they ask for T < 1); far
  inputs are confidently wrong (they ask for T > 1): the fitted T rises with the distance."""
  rng = np.random.default_rng(25)
  clean_logits, clean_labels = labelled_logits(rng, 400, 1.0, 1.0)
  clean_scores = rng.normal(0.0, 1.0, 400)
  mild_logits, mild_labels = labelled_logits(rng, 200, 1.0, 0.97)
  far_logits, far_labels = labelled_logits(rng, 200, 5.0, 0.25)
  shifted_logits = np.concatenate([mild_logits, far_logits])
  shifted_labels = np.concatenate([mild_labels, far_labels])
  slices = np.array(["mild"] * 200 + ["far"] * 200)
  shifted_scores = np.concatenate([rng.normal(3.0, 0.5, 200), rng.normal(10.0, 1.0, 200)])
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, clean_scores,
                                            shifted_logits, shifted_labels, slices, shifted_scores)
  assert curve.slope > 0
  near, just_outside, far = curve.temperatures(np.array([0.0, 3.0, 10.0]))
  assert near < just_outside < far and near < 1 and just_outside < 1 < far
  served = shifted_logits / curve.temperatures(shifted_scores)[:, np.newaxis]
  for name, sharper in (("mild", True), ("far", False)):
    mask = slices == name
    confidence = np.exp(maths.log_softmax(served[mask])).max(axis=1).mean()
    raw_confidence = np.exp(maths.log_softmax(shifted_logits[mask])).max(axis=1).mean()
    assert (confidence > raw_confidence) == sharper, name
  raw = maths.slice_means(shifted_logits, shifted_labels, slices)
  after = maths.slice_means(served, shifted_labels, slices)
  assert after[0] < raw[0] and after[1] < raw[1]


def test_distance_curve_is_never_sharper_farther_from_the_data():
  """Far inputs that are right and under-confident would ask for a falling T: the curve stays
  flat instead (slope >= 0), so no input is sharpened for lying far out."""
  rng = np.random.default_rng(26)
  clean_logits, clean_labels = labelled_logits(rng, 300, 6.0, 0.6)  # Over-confident.
  far_logits, far_labels = labelled_logits(rng, 300, 0.5, 1.0)  # Right, under-confident.
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, rng.normal(0, 1, 300),
                                            far_logits, far_labels, np.full(300, "far"),
                                            rng.normal(8.0, 1.0, 300))
  assert curve.slope == 0.0
  t = curve.temperatures(np.linspace(-3, 20, 24))
  assert np.all(np.diff(t) >= 0)


def test_distance_curve_is_drawn_back_until_the_validation_shift_is_no_worse_than_raw():
  """Clean images that ask for strong sharpening and a shift at the same distance that asks
  for softening: the best curve for both together costs the shift, so the fit takes the
  first curve on the way to the raw softmax at which the shift's NLL and ECE are no worse."""
  rng = np.random.default_rng(27)
  clean_logits, clean_labels = labelled_logits(rng, 2000, 1.5, 1.0)
  shifted_logits, shifted_labels = labelled_logits(rng, 200, 1.5, 0.65)
  scores = rng.normal(0.0, 0.1, 2200)
  slices = np.full(200, "shift")
  curve = distance_curve.fit_distance_curve(clean_logits, clean_labels, scores[:2000],
                                            shifted_logits, shifted_labels, slices, scores[2000:])
  raw_nll, raw_ece = maths.slice_means(shifted_logits, shifted_labels, slices)
  moved = shifted_logits / curve.temperatures(scores[2000:])[:, np.newaxis]
  nll_after, ece_after = maths.slice_means(moved, shifted_labels, slices)
  assert nll_after <= raw_nll and ece_after <= raw_ece
  unconstrained = shifted_logits / np.exp(np.log(maths.fit_temperature(
      np.concatenate([clean_logits, shifted_logits]),
      np.concatenate([clean_labels, shifted_labels]),
      np.r_[np.full(2000, 1 / 2000), np.full(200, 1 / 200)])))
  assert maths.nll(unconstrained, shifted_labels) > raw_nll, "the rule had work to do"
  assert curve.log_temperature < 0, "still sharpens the clean images as far as allowed"
  assert maths.nll(clean_logits / curve.temperatures(scores[:2000])[:, np.newaxis],
                   clean_labels) < maths.nll(clean_logits, clean_labels)


def test_the_default_map_fits_on_eval_images_and_the_validation_corruptions_only(
    monkeypatch):
  """No leakage: the only corrupted images that reach the fit are eval images under the
  validation corruptions (never a benchmark corruption), and the pipeline transforms only the
  train and eval splits for the Trainer, so no test image can reach it either."""
  requested = []
  corrupt_all = reference_corruptions.corrupt_all

  def spy(requests, *args, **kwargs):
    requests = list(requests)
    requested.extend(name for _, name, _, _ in requests)
    return corrupt_all(requests, *args, **kwargs)

  monkeypatch.setattr(reference_corruptions, "corrupt_all", spy)
  model, images, labels, held_out = feature_distance_fit(11)
  info = registry.get("distance_detail_curve").fit(model, held_out)
  assert requested and set(requested) == set(VALIDATION_CORRUPTIONS)
  assert not set(requested) & set(reference_corruptions.BENCHMARK_CORRUPTIONS)
  assert info["temperature_fit"] == "distance_detail_curve"
  assert info["validation_examples"] == len(VALIDATION_CORRUPTIONS) * 5 * 3
  assert info["eval_examples"] == 12
  # Both sets are scored by their penultimate features, in the support the fit measured.
  corrupted = held_out.validation_corrupted
  features_model = model_outputs.penultimate_model(model)
  eval_scores, shifted_scores = (
      distances.distance_scores(model_outputs.model_logits(features_model, batches)[0],
                                info["feature_support"])
      for batches in (held_out.eval_batches, corrupted.batches))
  np.testing.assert_allclose(info["eval_distance_scores"], eval_scores)
  np.testing.assert_allclose(info["validation_distance_scores"], shifted_scores)
  curve = distance_curve.DistanceCurve(**info["distance_curve"])
  assert curve.slope > 0
  assert info["temperature"] == pytest.approx(np.exp(curve.log_temperature))
  shifted_logits, shifted_labels = model_outputs.model_logits(model, corrupted.batches)
  served = shifted_logits / curve.temperatures(
      shifted_scores, info["validation_detail_scores"])[:, np.newaxis]
  assert (info["validation_nll_after"], info["validation_ece_after"]) == pytest.approx(
      maths.slice_means(served, shifted_labels, corrupted.slices))
  assert info["validation_nll_after"] < info["validation_nll_before"]
  assert info["validation_ece_after"] <= info["validation_ece_before"]
  assert info["eval_nll_after"] == pytest.approx(maths.nll(
      model(images).numpy() / curve.temperatures(eval_scores, info["eval_detail_scores"])[
          :, np.newaxis], labels))
  from tfx.types import Channel, standard_artifacts
  from pipeline import pipeline as pipeline_graph
  from pipeline.config import PipelineConfig
  transform = pipeline_graph.transform_component(
      PipelineConfig(), Channel(type=standard_artifacts.Examples),
      Channel(type=standard_artifacts.Schema), "")
  splits = json.loads(transform.exec_properties["splits_config"])
  assert splits["transform"] == ["train", "eval"]
  with pytest.raises(ValueError, match="needs the train split"):
    registry.get("distance_detail_curve").fit(model, HeldOut(held_out.eval_batches,
                                                             held_out.validation_corrupted))
