"""temperature_fit=distance_detail_curve: the distance curve and the input's detail, fitted on
the eval images and the validation shift, served as the numpy map computes it."""
import numpy as np
import pytest
import tensorflow as tf

from test_support.calibration_data import feature_distance_fit, labelled_logits
from trainer_module.calibration import (detail, distance_curve, distances, maths, registry,
                                        serving)
from trainer_module.calibration.inputs import VALIDATION_CORRUPTIONS


def _far_blur_and_far_noise(rng):
  """Clean images near the data, right and a little under-confident; two shifted kinds at the
  same distance: blurred ones (low detail) mostly wrong, noisy ones (high detail) mostly right."""
  clean_logits, clean_labels = labelled_logits(rng, 400, 2.0, 0.99)
  blur_logits, blur_labels = labelled_logits(rng, 200, 3.0, 0.4)
  noise_logits, noise_labels = labelled_logits(rng, 200, 3.0, 0.97)
  shifted = (np.concatenate([blur_logits, noise_logits]),
             np.concatenate([blur_labels, noise_labels]),
             np.array(["blur_3"] * 200 + ["noise_3"] * 200),
             rng.normal(5.0, 0.5, 400),
             np.concatenate([rng.normal(-3.0, 0.5, 200), rng.normal(2.0, 0.5, 200)]))
  return (clean_logits, clean_labels, rng.normal(0, 1, 400), rng.normal(0, 1, 400)), shifted


def test_the_detail_softens_a_far_blurred_image_and_spares_a_far_noisy_one():
  """At one distance the curve must treat both kinds alike; the detail score tells them apart,
  and the fit with it is the better one on the shift it was fitted on."""
  (logits, labels, scores, details), shifted = _far_blur_and_far_noise(np.random.default_rng(5))
  s_logits, s_labels, s_slices, s_scores, s_details = shifted
  curve = distance_curve.fit_distance_curve(logits, labels, scores, s_logits, s_labels, s_slices,
                                            s_scores)
  with_detail = distance_curve.fit_distance_curve(logits, labels, scores, s_logits, s_labels,
                                                  s_slices, s_scores, 15, details, s_details)
  assert curve.detail_slope == 0.0 and with_detail.detail_slope < 0
  t = with_detail.temperatures(s_scores, s_details)
  blurred, noisy = s_slices == "blur_3", s_slices == "noise_3"
  assert t[blurred].min() > t[noisy].max()
  nll = {name: maths.slice_means(s_logits / fitted.temperatures(s_scores, s_details)[:, None],
                                 s_labels, s_slices)[0]
         for name, fitted in (("curve", curve), ("detail", with_detail))}
  assert nll["detail"] < nll["curve"]


def test_a_map_that_reads_details_refuses_to_serve_without_them():
  curve = distance_curve.DistanceCurve(-0.5, 0.2, -0.1)
  with pytest.raises(ValueError, match="detail scores"):
    curve.temperatures(np.zeros(3))
  with pytest.raises(ValueError, match="detail scores"):
    serving.curve_temperatures(curve, tf.zeros([3], tf.float64))
  np.testing.assert_allclose(curve.temperatures(np.zeros(2), np.array([0.0, -10.0])),
                             np.exp([-0.5, 0.5]))
  with pytest.raises(ValueError, match="both the clean and the shifted"):
    distance_curve.fit_distance_curve(np.zeros((2, 4)), np.zeros(2, int), np.zeros(2),
                                      np.zeros((2, 4)), np.zeros(2, int), np.array(["a", "a"]),
                                      np.zeros(2), 15, np.zeros(2), None)


def test_the_served_graph_computes_the_detail_score_as_numpy_does():
  rng = np.random.default_rng(6)
  images = rng.normal(0.0, 1.0, (6, 32, 32, 3)).astype(np.float32)
  images[1] = 0.5  # A flat image: finite.
  scale = detail.DetailScale(-0.3, 0.4)
  served = serving.graph_detail_scores(tf.constant(images), scale).numpy()
  assert np.isfinite(served).all()
  np.testing.assert_allclose(served, detail.detail_scores(images, scale), rtol=1e-9, atol=1e-9)
  curve = distance_curve.DistanceCurve(-0.4, 0.3, -0.2)
  scores, details = rng.normal(0, 2, 6), rng.normal(0, 2, 6)
  np.testing.assert_allclose(
      serving.curve_temperatures(curve, tf.constant(scores), tf.constant(details)).numpy(),
      curve.temperatures(scores, details), rtol=1e-6)


def test_the_fit_reads_the_eval_images_and_the_validation_shift_and_records_their_details():
  model, eval_images, _, held_out = feature_distance_fit(16)
  method = registry.get("distance_detail_curve")
  info = method.fit(model, held_out)
  assert info["temperature_fit"] == "distance_detail_curve"
  assert info["distance_curve"]["detail_slope"] != 0.0
  # The unit is the eval images' own, and every set is scored in it.
  scale = detail.detail_scale(eval_images)
  assert info["detail_scale"] == pytest.approx(scale._asdict(), rel=1e-12)
  np.testing.assert_allclose(info["eval_detail_scores"], detail.detail_scores(eval_images, scale))
  from trainer_module.calibration import model_outputs
  shifted_images = model_outputs.batch_images(held_out.validation_corrupted.batches)
  assert len(shifted_images) == len(VALIDATION_CORRUPTIONS) * 5 * 3
  np.testing.assert_allclose(info["validation_detail_scores"],
                             detail.detail_scores(shifted_images, scale))
  features_model = model_outputs.penultimate_model(model)
  features, shifted_features = (model_outputs.model_logits(features_model, batches)[0]
                                for batches in (held_out.eval_batches,
                                                held_out.validation_corrupted.batches))
  np.testing.assert_allclose(info["eval_distance_scores"],
                             distances.distance_scores(features, info["feature_support"]))
  np.testing.assert_allclose(info["validation_distance_scores"],
                             distances.distance_scores(shifted_features, info["feature_support"]))
  np.testing.assert_allclose(method.temperatures(info, info["feature_support"], features,
                                                 eval_images),
                             method.eval_temperatures(info), rtol=1e-9)
  with pytest.raises(ValueError, match="reads the input images"):
    method.temperatures(info, info["feature_support"], features)
