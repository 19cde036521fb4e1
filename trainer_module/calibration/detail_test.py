"""The detail statistic s(x): what blur and noise do to it, what it ignores, and its unit."""
import numpy as np
import pytest
from scipy import ndimage

from trainer_module.calibration import detail


def _digits(count=30):
  from sklearn.datasets import load_digits
  from components.image_sources import digits_to_images
  return digits_to_images(load_digits().images[:count]).astype(np.float64)


def test_detail_is_the_log_ratio_of_fine_detail_to_contrast_as_scipy_computes_it():
  images = np.random.default_rng(3).uniform(0, 255, (4, 32, 32, 3))
  grey = images.mean(axis=-1)
  local_mean = np.stack([ndimage.uniform_filter(g, size=3, mode="nearest") for g in grey])
  expected = np.log(np.abs(grey - local_mean).mean(axis=(1, 2)) / grey.std(axis=(1, 2)))
  np.testing.assert_allclose(detail.raw_detail(images), expected, rtol=1e-9)


def test_blur_lowers_detail_and_noise_raises_it():
  images = _digits()
  blurred = np.stack([ndimage.gaussian_filter(image, sigma=(1.5, 1.5, 0)) for image in images])
  noisy = images + np.random.default_rng(4).normal(0, 30, images.shape)
  raw, raw_blurred, raw_noisy = (detail.raw_detail(x) for x in (images, blurred, noisy))
  assert np.all(raw_blurred < raw) and np.all(raw_noisy > raw)


def test_detail_ignores_brightness_and_contrast():
  images = _digits()
  np.testing.assert_allclose(detail.raw_detail(0.3 * images + 40), detail.raw_detail(images),
                             rtol=1e-9)


def test_detail_scores_are_standardised_over_the_clean_eval_images():
  images = _digits()
  scale = detail.detail_scale(images)
  scores = detail.detail_scores(images, scale)
  assert scores.mean() == pytest.approx(0.0, abs=1e-9)
  assert scores.std() == pytest.approx(1.0)
  with pytest.raises(ValueError, match="1 clean eval images"):
    detail.detail_scale(images[:1])


def test_a_flat_image_has_a_finite_detail():
  assert np.isfinite(detail.raw_detail(np.full((1, 32, 32, 3), 7.0))).all()
