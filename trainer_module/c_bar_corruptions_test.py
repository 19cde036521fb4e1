"""The three C-bar corruptions do what their definitions say, at C-bar's CIFAR-10 severities."""
import numpy as np
import pytest

from trainer_module import c_bar_corruptions as c_bar
from trainer_module import reference_corruptions


@pytest.fixture(autouse=True)
def seeded():
  np.random.seed(0)


def _neighbour_correlation(noise):
  return np.corrcoef(noise[:, :-1].ravel(), noise[:, 1:].ravel())[0, 1]


@pytest.mark.parametrize("severity", reference_corruptions.SEVERITIES)
def test_brownish_noise_adds_smooth_noise_of_its_levels_deviation(severity):
  grey = np.full((32, 32, 3), 128, np.uint8)
  noise = c_bar.brownish_noise(grey, severity) - 128.0
  expected = c_bar.BROWNISH_NOISE_LEVELS[severity - 1] * 6.4
  for channel in range(3):  # Each field keeps its own mean; 3 deviations clip at severity 5.
    assert 0.95 * expected < noise[..., channel].std() < 1.01 * expected
  assert _neighbour_correlation(noise[..., 0]) > 0.8  # Blotches: 1/(f^2 + 1) spectrum.
  assert not np.allclose(noise[..., 0], noise[..., 1])  # Each channel its own field.


def test_brownish_noise_is_smooth_where_speckle_is_grain():
  grey = np.full((32, 32, 3), 128, np.uint8)
  speckle = reference_corruptions.corrupt(grey, "speckle_noise", 5, "k") - 128.0
  brownish = reference_corruptions.corrupt(grey, "brownish_noise", 1, "k") - 128.0
  assert abs(_neighbour_correlation(speckle[..., 0])) < 0.2
  assert _neighbour_correlation(brownish[..., 0]) > 0.8


def test_circular_motion_blur_leaves_a_centred_disc_and_smears_an_offset_bar():
  rows, columns = np.mgrid[0:32, 0:32]
  radius = np.hypot(rows - 15.5, columns - 15.5)
  disc = np.repeat(np.where(radius < 8, 255, 0)[..., None], 3, axis=2).astype(np.uint8)
  blurred = c_bar.circular_motion_blur(disc, 5)
  assert np.abs(blurred - disc)[radius < 6].max() < 3  # Turning a disc changes nothing.
  bar = np.zeros((32, 32, 3), np.uint8)
  bar[2:30, 26:28] = 255  # Far from the centre: a turn moves it sideways.
  smeared = c_bar.circular_motion_blur(bar, 5)
  assert smeared[2:6, 23:26].max() > 20  # Its end swept across the columns beside it,
  assert smeared[14:18, 26:28].min() > 200  # its middle (near the radius' foot) barely.
  mild = c_bar.circular_motion_blur(bar, 1)
  assert np.abs(mild - bar).sum() < np.abs(smeared - bar).sum()  # Severity widens the sweep.


def test_pinch_and_twirl_warps_inside_each_cells_circle_and_nothing_outside():
  image = np.random.default_rng(1).integers(0, 256, (32, 32, 3)).astype(np.uint8)
  warped = c_bar.pinch_and_twirl(image, 5)
  rows, columns = np.mgrid[0:32, 0:32]
  cell, radius = 10, 5.0
  centre_rows, centre_columns = (rows // cell) * cell + radius, (columns // cell) * cell + radius
  distance = np.hypot(rows - centre_rows, columns - centre_columns)
  outside = (distance > radius) | (rows >= 3 * cell) | (columns >= 3 * cell)
  np.testing.assert_allclose(warped[outside], image[outside], atol=1e-9)
  inside = ~outside & (distance > 1.5) & (distance < radius - 1)
  moved = np.abs(warped[inside].astype(np.int16) - image[inside]).max(axis=-1)  # No uint8 wrap.
  assert np.mean(moved > 10) > 0.5


def test_pinch_and_twirl_turns_each_cell_its_own_way_by_the_key():
  image = np.random.default_rng(2).integers(0, 256, (32, 32, 3)).astype(np.uint8)
  outputs = {reference_corruptions.corrupt(image, "pinch_and_twirl", 3, f"k{index}").tobytes()
             for index in range(4)}
  assert len(outputs) == 4
