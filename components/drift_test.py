"""The drift computations: image statistics, the two-sample tests against independent numpy
computations, TFDV's distances (the label compared as categorical) and what counts as moved."""
import io

import numpy as np
import pytest
from PIL import Image

from components import drift

LIMITS = drift.Limits(max_category_distance=0.03, max_image_divergence=0.05, p_value=0.01)


def _png(array: np.ndarray, image_format: str = "PNG") -> bytes:
  buffer = io.BytesIO()
  Image.fromarray(array).save(buffer, format=image_format)
  return buffer.getvalue()


def test_image_statistics_of_known_images():
  grey = np.full((20, 30, 3), 128, np.uint8)
  stats = drift.image_statistics(_png(grey))
  assert stats[drift.BRIGHTNESS] == pytest.approx(128 / 255, abs=1e-6)
  assert stats[drift.CONTRAST] == pytest.approx(0.0, abs=1e-9)
  assert stats[drift.COLOURFULNESS] == pytest.approx(0.0, abs=1e-9)
  assert stats[drift.NOISE] == pytest.approx(0.0, abs=1e-9)
  assert (stats[drift.HEIGHT], stats[drift.WIDTH], stats[drift.FORMAT]) == (20, 30, "png")
  halves = np.zeros((10, 10, 3), np.uint8)
  halves[:, 5:] = 255
  stats = drift.image_statistics(_png(halves, "JPEG"))
  assert stats[drift.FORMAT] == "jpeg"
  assert stats[drift.BRIGHTNESS] == pytest.approx(0.5, abs=0.02)
  assert stats[drift.CONTRAST] == pytest.approx(0.5, abs=0.02)
  red = np.zeros((8, 8, 3), np.uint8)
  red[..., 0] = 255  # rg = 1, yb = 0.5: Hasler and Suesstrunk's 0.3 * sqrt(1.25).
  assert drift.image_statistics(_png(red))[drift.COLOURFULNESS] == pytest.approx(
      0.3 * np.sqrt(1.25))


def test_the_noise_estimate_recovers_the_sigma_of_added_gaussian_noise():
  rng = np.random.default_rng(0)
  ramp = np.tile(np.linspace(0.2, 0.8, 200), (200, 1))  # Smooth: the mask cancels it.
  assert drift.noise_sigma(ramp) == pytest.approx(0.0, abs=1e-9)
  assert drift.noise_sigma(ramp + rng.normal(0, 0.08, ramp.shape)) == pytest.approx(0.08, rel=0.05)


def _ks_statistic(a, b):
  """Largest gap between the two empirical distribution functions, over the pooled points."""
  points = np.sort(np.concatenate([a, b]))
  cdf = lambda s: np.searchsorted(np.sort(s), points, side="right") / len(s)  # noqa: E731
  return float(np.max(np.abs(cdf(a) - cdf(b))))


def _permutation_p_value(a, b, permutations, rng):
  observed = _ks_statistic(a, b)
  pooled = np.concatenate([a, b])
  hits = 0
  for _ in range(permutations):
    rng.shuffle(pooled)
    hits += _ks_statistic(pooled[:len(a)], pooled[len(a):]) >= observed - 1e-12
  return (hits + 1) / (permutations + 1)


@pytest.mark.parametrize("shift", [0.0, 0.15, 0.4])
def test_ks_matches_an_independent_numpy_computation(shift):
  rng = np.random.default_rng(1)
  a, b = rng.normal(size=150), rng.normal(shift, 1.0, size=120)
  statistic, p_value = drift.ks_test(a, b)
  assert statistic == pytest.approx(_ks_statistic(a, b), abs=1e-12)
  expected = _permutation_p_value(a, b, 1500, rng)  # sd <= 0.013 at p = 0.5
  assert p_value == pytest.approx(expected, abs=max(0.04, 0.3 * expected))


def test_bbsd_is_bonferroni_over_the_per_class_ks_tests():
  rng = np.random.default_rng(2)
  logits = rng.normal(size=(300, 4))
  baseline = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  shifted_logits = rng.normal(size=(250, 4))
  shifted_logits[:, 2] += 0.6  # Class 2 favoured.
  new = np.exp(shifted_logits) / np.exp(shifted_logits).sum(1, keepdims=True)
  p_value, statistics, p_values = drift.bbsd_test(baseline, new)
  assert statistics == pytest.approx([_ks_statistic(baseline[:, k], new[:, k])
                                      for k in range(4)])
  assert p_value == pytest.approx(min(1.0, 4 * min(p_values)))
  assert int(np.argmin(p_values)) == 2 and p_value < 1e-3
  same_p, _, _ = drift.bbsd_test(baseline[:150], baseline[150:])
  assert same_p > 0.05
  with pytest.raises(ValueError, match="4.*3"):
    drift.bbsd_test(baseline, new[:, :3])


def test_the_share_test_is_bonferroni_over_each_categorys_2x2_chi_square():
  from scipy.stats import chi2_contingency
  before, after = {"0": 50, "1": 50, "2": 40}, {"0": 20, "1": 60, "3": 5}
  expected = {}
  for category in ("0", "1", "2", "3"):
    table = [[before.get(category, 0), 140 - before.get(category, 0)],
             [after.get(category, 0), 85 - after.get(category, 0)]]
    expected[category] = chi2_contingency(table, correction=False)[1]  # z^2 is this chi-square.
  p_value, worst = drift.share_test(before, after)
  assert worst == min(expected, key=expected.get)
  assert p_value == pytest.approx(min(1.0, 4 * min(expected.values())))
  assert drift.share_test({"0": 3}, {"0": 9}) == (1.0, None)


def _table(rng, n, labels=None, brightness=0.3, image_format="png"):
  return {drift.LABEL: rng.integers(0, 5, n) if labels is None else labels,
          drift.FORMAT: np.array([image_format] * n),
          drift.BRIGHTNESS: rng.normal(brightness, 0.05, n),
          drift.CONTRAST: rng.normal(0.3, 0.04, n), drift.COLOURFULNESS: np.zeros(n),
          drift.NOISE: rng.normal(0.02, 0.005, n), drift.HEIGHT: np.full(n, 32),
          drift.WIDTH: np.full(n, 32)}


def test_the_label_is_compared_as_categorical_by_tfdv_l_infinity():
  rng = np.random.default_rng(3)
  before = _table(rng, 600, labels=np.repeat(np.arange(5), 120))
  after_labels = np.concatenate([np.repeat(np.arange(4), 120), np.full(40, 4)])
  after = _table(rng, len(after_labels), labels=after_labels)
  distances = drift.tfdv_distances(before, after, LIMITS)
  share = 120 / len(after_labels)  # Class 4: 0.2 of the baseline, 40/520 of the new data.
  assert distances[drift.LABEL] == pytest.approx(
      max(abs(share - 0.2), abs(40 / len(after_labels) - 0.2)), abs=1e-6)
  comparisons = {c.feature: c for c in drift.compare(before, after, LIMITS)}
  assert comparisons[drift.LABEL].moved
  assert comparisons[drift.LABEL].chart["categories"] == ["0", "1", "2", "3", "4"]
  assert not comparisons[drift.BRIGHTNESS].moved


def test_a_brightness_shift_moves_brightness_alone_and_a_random_split_moves_nothing():
  rng = np.random.default_rng(4)
  before, same = _table(rng, 800), _table(rng, 800)
  darker = _table(rng, 800, brightness=0.24)
  assert not [c.feature for c in drift.compare(before, same, LIMITS) if c.moved]
  moved = [c for c in drift.compare(before, darker, LIMITS) if c.moved]
  assert [c.feature for c in moved] == [drift.BRIGHTNESS]
  assert moved[0].distance > LIMITS.max_image_divergence and moved[0].p_value < 0.01 / 8
  assert "brightness: Jensen-Shannon" in moved[0].describe()


def test_a_significant_move_within_its_bound_is_not_drift():
  rng = np.random.default_rng(5)
  before, after = _table(rng, 20000), _table(rng, 20000, brightness=0.303)
  brightness = {c.feature: c for c in drift.compare(before, after, LIMITS)}[drift.BRIGHTNESS]
  assert brightness.p_value < brightness.threshold
  assert brightness.distance < LIMITS.max_image_divergence
  assert not brightness.moved


def test_a_new_format_is_measured_and_vanished_and_new_classes_are_named():
  rng = np.random.default_rng(6)
  before, after = _table(rng, 300), _table(rng, 300, image_format="jpeg")
  fmt = {c.feature: c for c in drift.compare(before, after, LIMITS)}[drift.FORMAT]
  assert fmt.distance == pytest.approx(1.0) and fmt.moved
  assert drift.class_set_change({"0": 5, "1": 4, "2": 3}, {"0": 9, "2": 1, "7": 2}) == (
      ["1"], ["7"])
  assert drift.class_set_change({"0": 5, "10": 1, "2": 3}, {"0": 9}) == (["2", "10"], [])


def test_bbsd_in_compare_charts_the_class_that_moved_most():
  rng = np.random.default_rng(7)
  table = _table(rng, 400)
  probabilities = rng.dirichlet(np.ones(3), 400)
  moved = probabilities.copy()
  moved[:, 1] = moved[:, 1] * 0.3
  moved /= moved.sum(1, keepdims=True)
  bbsd = drift.compare(table, table, LIMITS, probabilities, moved)[-1]
  assert bbsd.feature == drift.BBSD and bbsd.moved and bbsd.chart["class_index"] == 1
  # Label, brightness, contrast, noise and BBSD: colourfulness, size and format are constant.
  assert bbsd.threshold == pytest.approx(0.01 / 5)
  again = drift.Comparison.from_json(bbsd.to_json())
  assert again == bbsd
