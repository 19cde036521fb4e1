"""AugMix: each operation against PIL, the mixing statistics, and seeded determinism."""
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from trainer_module import augmix

SIZE = 32


@pytest.fixture(scope="module")
def images():
  rng = np.random.default_rng(0)
  noise = rng.integers(0, 256, (12, SIZE, SIZE, 3), dtype=np.uint8)
  narrow = (noise // 3 + 40).astype(np.uint8)  # Low contrast: autocontrast/equalize have work.
  return np.concatenate([noise, narrow])


def _pil(images, fn):
  return np.stack([np.asarray(fn(Image.fromarray(image))) for image in images])


def _batch(value, images):
  return tf.fill([len(images)], value)


def test_autocontrast_equals_pil(images):
  np.testing.assert_array_equal(augmix.autocontrast(images).numpy(),
                                _pil(images, ImageOps.autocontrast))


def test_equalize_equals_pil(images):
  np.testing.assert_array_equal(augmix.equalize(images).numpy(), _pil(images, ImageOps.equalize))


@pytest.mark.parametrize("bits", [0, 1, 3, 4, 8])
def test_posterize_equals_pil(images, bits):
  np.testing.assert_array_equal(augmix.posterize(images, _batch(bits, images)).numpy(),
                                _pil(images, lambda i: ImageOps.posterize(i, bits)))


@pytest.mark.parametrize("threshold", [0, 128, 180, 256])
def test_solarize_equals_pil(images, threshold):
  np.testing.assert_array_equal(augmix.solarize(images, _batch(threshold, images)).numpy(),
                                _pil(images, lambda i: ImageOps.solarize(i, threshold)))


def _source_inside(matrix):
  """Output pixels whose PIL source point lies inside the image (index coordinates)."""
  a, b, c, d, e, f = matrix
  y, x = np.mgrid[0:SIZE, 0:SIZE] + 0.5
  source_x, source_y = a * x + b * y + c - 0.5, d * x + e * y + f - 0.5
  return (source_x >= 0) & (source_x <= SIZE - 1) & (source_y >= 0) & (source_y <= SIZE - 1)


def _assert_matches_pil_affine(ours, reference, matrix):
  """Stated tolerance: within 1 grey level wherever the source point is inside the image.

  Only along the border, where PIL and TensorFlow treat neighbours outside the image
  differently, may values differ more; that band is under 10% of the pixels here.
  """
  inside = _source_inside(matrix)
  difference = np.abs(ours.astype(int) - reference.astype(int))
  assert difference[:, inside].max() <= 1
  assert (~inside).mean() < 0.10


@pytest.mark.parametrize("name, matrix", [
    ("shear_x", (1, 0.09, 0, 0, 1, 0)), ("shear_x", (1, -0.05, 0, 0, 1, 0)),
    ("shear_y", (1, 0, 0, 0.07, 1, 0)), ("translate_x", (1, 0, 3, 0, 1, 0)),
    ("translate_y", (1, 0, 0, 0, 1, -2)),
])
def test_shear_and_translate_match_pil_affine(images, name, matrix):
  ours = augmix.affine(images, tf.constant([matrix] * len(images), tf.float32)).numpy()
  reference = _pil(images, lambda i: i.transform((SIZE, SIZE), Image.AFFINE, matrix,
                                                 resample=Image.BILINEAR))
  _assert_matches_pil_affine(ours, reference, matrix)
  if name.startswith("translate"):
    np.testing.assert_array_equal(ours, reference)  # Whole-pixel shifts are exact.


@pytest.mark.parametrize("degrees", [-8.0, -3.0, 5.0, 8.0])
def test_rotate_matches_pil_rotate(images, degrees):
  matrices = augmix.rotation_matrices(tf.fill([len(images)], degrees), float(SIZE), float(SIZE))
  ours = augmix.affine(images, matrices).numpy()
  reference = _pil(images, lambda i: i.rotate(degrees, resample=Image.BILINEAR))
  _assert_matches_pil_affine(ours, reference, matrices.numpy()[0])


def _seeds(count, seed=7, view=0):
  return augmix.example_seeds(tf.constant([f"key-{i}" for i in range(count)]), seed, view,
                              epochs=tf.zeros([count], tf.int32))


def _draws(count, params):
  """sample_draws for `count` keys, seeds and draws in one graph, as Transform and the input
  pipeline make them (eagerly, map_fn loops in Python: ~6 CPU-s for 4,000 seeds alone)."""
  return tf.function(lambda: augmix.sample_draws(_seeds(count), params))()


def test_mixing_weights_have_the_dirichlet_and_beta_means_and_depth_covers_1_to_3():
  params = augmix.AugMixParams(width=3, depth=-1, alpha=0.5)
  draws = _draws(4000, params)
  weights = draws.chain_weights.numpy()
  np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-5)
  np.testing.assert_allclose(weights.mean(axis=0), [1 / 3] * 3, atol=0.02)
  # Var of a Dirichlet(0.5, 0.5, 0.5) component: (1/3)(2/3) / (1.5 + 1) = 0.0889.
  np.testing.assert_allclose(weights.var(axis=0), [0.0889] * 3, atol=0.01)
  m = draws.mix_weight.numpy()
  assert abs(m.mean() - 0.5) < 0.02 and abs(m.var() - 0.125) < 0.01  # Beta(0.5, 0.5).
  depths, counts = np.unique(draws.depths.numpy(), return_counts=True)
  assert list(depths) == [1, 2, 3] and counts.min() > 0.3 * counts.sum() / 3
  operations = np.unique(draws.operations.numpy())
  assert list(operations) == list(range(len(augmix.OPERATIONS)))
  levels = draws.levels.numpy()
  assert 0.1 <= levels.min() and levels.max() < 3.0


def test_a_fixed_depth_is_used_as_given():
  draws = _draws(50, augmix.AugMixParams(depth=2))
  assert set(np.unique(draws.depths.numpy())) == {2}
  assert draws.operations.shape[2] == 2


def _epochs(images, epoch=0):
  return tf.fill([len(images)], epoch)


@tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.uint8),
                              tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.int64),
                              tf.TensorSpec([None], tf.int32)])
def _two_views(images, keys, seed, epochs):
  """augmix_views(count=2, default parameters) in a graph, as the input pipeline runs it online:
  traced once for the module (eagerly, each call's map_fn loops in Python, ~0.7 CPU-s for 24
  images)."""
  return augmix.augmix_views(images, keys, seed, 2, augmix.AugMixParams(), epochs)


def _online(images, keys, seed, epoch=0):
  return _two_views(images, keys, tf.constant(seed, tf.int64), _epochs(images, epoch)).numpy()


@tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.uint8),
                              tf.TensorSpec([None], tf.string)])
def _three_view_sets(images, keys):
  """encode_view_sets(seed 42, 2 views, 3 sets) in a graph of any batch size, as Transform
  runs it: traced once for the module."""
  return augmix.encode_view_sets(images, keys, 42, 2, 3, augmix.AugMixParams())


def test_views_are_reproducible_and_differ_across_keys_seeds_views_and_epochs(images):
  keys = tf.constant([f"key-{i}" for i in range(len(images))])
  views = _online(images, keys, 42)
  assert views.shape == (len(images), 2, SIZE, SIZE, 3)
  assert views.min() >= 0.0 and views.max() <= 1.0
  np.testing.assert_array_equal(views, _online(images, keys, 42))
  other_seed = _online(images, keys, 43)
  other_keys = _online(images, tf.constant([f"other-{i}" for i in range(len(images))]), 42)
  other_epoch = _online(images, keys, 42, epoch=1)
  for other in (other_seed, other_keys, other_epoch):
    assert np.mean(np.any(views != other, axis=(1, 2, 3, 4))) > 0.9
  assert np.mean(np.any(views[:, 0] != views[:, 1], axis=(1, 2, 3))) > 0.9


def test_an_image_does_not_depend_on_its_batch(images):
  keys = tf.constant([f"key-{i}" for i in range(len(images))])
  whole = augmix.augmix_views(images, keys, 42, 1, augmix.AugMixParams(),
                              _epochs(images)).numpy()
  alone = augmix.augmix_views(images[5:6], keys[5:6], 42, 1, augmix.AugMixParams(),
                              _epochs(images[5:6])).numpy()
  np.testing.assert_array_equal(whole[5:6], alone)


def test_view_set_s_is_epoch_s_of_online_augmix_rounded_to_uint8(images):
  keys = tf.constant([f"key-{i}" for i in range(len(images))])
  view_sets = _three_view_sets(images, keys)
  assert view_sets.shape == (len(images), 3)
  for epoch in range(5):
    stored = augmix.decode_view_set(view_sets, _epochs(images, epoch), 2, (SIZE, SIZE, 3))
    if epoch < 3:  # Set s is epoch s: equal up to rounding to the nearest 1/255.
      online = _online(images, keys, 42, epoch)
      np.testing.assert_allclose(stored.numpy(), online, rtol=0, atol=0.5 / 255 + 1e-6)
    else:  # Then the sets repeat.
      np.testing.assert_array_equal(stored.numpy(), augmix.decode_view_set(
          view_sets, _epochs(images, epoch - 3), 2, (SIZE, SIZE, 3)).numpy())


def test_a_view_set_is_one_png_of_the_views_channel_planes(images):
  keys = tf.constant([f"key-{i}" for i in range(len(images))])
  params = augmix.AugMixParams()
  (png,) = augmix.encode_view_sets(images[:1], keys[:1], 42, 2, 1, params)[0].numpy()
  planes = tf.io.decode_png(png).numpy()
  assert planes.shape == (2 * 3 * SIZE, SIZE, 1)
  views = augmix.augmix_views(images[:1], keys[:1], 42, 2, params, _epochs(images[:1])).numpy()
  rounded = np.round(views[0] * 255.0).astype(np.uint8)  # [view, h, w, c]
  np.testing.assert_array_equal(planes.reshape(2, 3, SIZE, SIZE),
                                rounded.transpose(0, 3, 1, 2))


def test_a_batch_without_training_examples_encodes_to_no_view_sets(images):
  """Transform's eval batches: a graph (as Transform runs it) over zero training images."""
  assert _three_view_sets(images[:0], tf.constant([], tf.string)).shape == (0, 3)


def test_view_sets_of_another_view_count_fail_with_the_reason(images):
  keys = tf.constant([f"key-{i}" for i in range(len(images))])
  view_sets = augmix.encode_view_sets(images, keys, 42, 1, 2, augmix.AugMixParams())
  with pytest.raises(tf.errors.InvalidArgumentError, match="do not hold 2 view"):
    augmix.decode_view_set(view_sets, _epochs(images), 2, (SIZE, SIZE, 3))
