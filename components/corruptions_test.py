"""Generated corruptions: deterministic, shape-preserving, stronger with severity."""
import numpy as np
import pytest

from components import corruptions
from components.image_sources import digits_to_images


@pytest.fixture(scope="module")
def digits():
  from sklearn.datasets import load_digits
  return digits_to_images(load_digits().images[:16])


@pytest.mark.parametrize("name", sorted(corruptions.CORRUPTIONS))
def test_each_corruption_is_deterministic_and_grows_with_severity(name, digits):
  distances = []
  for severity in corruptions.SEVERITIES:
    outputs = [corruptions.corrupt(image, name, severity, f"k{i}") for i, image in
               enumerate(digits)]
    again = [corruptions.corrupt(image, name, severity, f"k{i}") for i, image in
             enumerate(digits)]
    for output, repeat in zip(outputs, again):
      assert output.shape == digits.shape[1:] and output.dtype == np.uint8
      np.testing.assert_array_equal(output, repeat)
    distances.append(np.mean([np.abs(o.astype(float) - d).mean()
                              for o, d in zip(outputs, digits)]))
  assert distances[0] > 0, "severity 1 changes the images"
  # Severity 5 is the strongest. (Not strictly step by step: pixelating 32 pixels to 30 or to
  # 29 aliases differently, as in CIFAR-10-C.)
  assert distances[-1] == max(distances) > distances[0], distances


def test_noise_is_seeded_by_the_key(digits):
  a = corruptions.corrupt(digits[0], "gaussian_noise", 3, "key-a")
  b = corruptions.corrupt(digits[0], "gaussian_noise", 3, "key-b")
  assert not np.array_equal(a, b)


def test_contrast_scales_the_deviation_from_the_mean(digits):
  image = digits[3]
  corrupted = corruptions.corrupt(image, "contrast", 5, "k")
  assert corrupted.std() == pytest.approx(0.15 * image.std(), rel=0.05)
  assert corrupted.mean() == pytest.approx(image.mean(), abs=1.0)


@pytest.mark.parametrize("name, severity, image, message", [
    ("snow", 1, np.zeros((32, 32, 3), np.uint8), "Unknown corruption 'snow'"),
    ("contrast", 6, np.zeros((32, 32, 3), np.uint8), "Severity 6"),
    ("contrast", 1, np.zeros((32, 32), np.uint8), "RGB uint8"),
])
def test_bad_requests_are_refused(name, severity, image, message):
  with pytest.raises(ValueError, match=message):
    corruptions.corrupt(image, name, severity, "k")


def test_every_generated_corruption_is_also_a_cifar10_c_corruption():
  assert set(corruptions.CORRUPTIONS) <= set(corruptions.CIFAR10_C_CORRUPTIONS)
  assert set(corruptions.DEFAULT_CORRUPTIONS) <= set(corruptions.CORRUPTIONS)
