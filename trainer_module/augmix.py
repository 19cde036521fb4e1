"""AugMix (Hendrycks et al., ICLR 2020) in TensorFlow ops, stateless and seeded per example: one
implementation for Transform and the Trainer's input pipeline, vectorised over a batch, with
the paper's operations and PIL semantics. docs/robustness.md, "AugMix".
"""
import math
from typing import NamedTuple

import tensorflow as tf

OPERATIONS = ("autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x",
              "shear_y", "translate_x", "translate_y")
MAX_DEPTH = 3  # A sampled depth (augmix_depth = -1) is uniform in [1, MAX_DEPTH].
_MIN_LEVEL = 0.1
_GAMMA_FLOOR = 1e-30  # Keeps Dirichlet/Beta weights finite when every gamma draw underflows.


class AugMixParams(NamedTuple):
  width: int = 3  # augmix_width: chains mixed per view.
  depth: int = -1  # augmix_depth: operations per chain; -1 samples it in [1, 3].
  alpha: float = 0.5  # augmix_prob_coeff: Dirichlet and Beta concentration.
  severity: int = 3  # Upper bound of the operation levels (the paper's CIFAR setting).


def params_from_options(options) -> AugMixParams:
  """AugMixParams from TrainerConfig.transform_options() (the original flags' names)."""
  return AugMixParams(width=options["augmix_width"], depth=options["augmix_depth"],
                      alpha=options["augmix_prob_coeff"], severity=options["augmix_severity"])


# --- Operations on uint8 images [batch, height, width, channels]. ----------------------------


def _channel_pixels(images):
  """int32 [batch * channels, height * width]: one row per image channel."""
  batch, height, width, channels = tf.unstack(tf.shape(images))
  return tf.reshape(tf.transpose(tf.cast(images, tf.int32), [0, 3, 1, 2]),
                    [batch * channels, height * width])


def _apply_per_channel_lut(images, pixels, luts):
  """luts: int32 [batch * channels, 256]."""
  shape = tf.shape(images)
  mapped = tf.gather(luts, pixels, batch_dims=1)
  mapped = tf.reshape(mapped, [shape[0], shape[3], shape[1], shape[2]])
  return tf.cast(tf.clip_by_value(tf.transpose(mapped, [0, 2, 3, 1]), 0, 255), tf.uint8)


def autocontrast(images):
  """Stretches each channel to [0, 255] (PIL ImageOps.autocontrast with cutoff 0)."""
  pixels = _channel_pixels(images)
  # float64 as in PIL: in float32 some values land one level lower.
  lo = tf.cast(tf.reduce_min(pixels, axis=1, keepdims=True), tf.float64)
  hi = tf.cast(tf.reduce_max(pixels, axis=1, keepdims=True), tf.float64)
  scale = 255.0 / tf.maximum(hi - lo, 1.0)
  values = tf.range(256, dtype=tf.float64)[tf.newaxis, :]
  stretched = tf.cast(tf.floor(values * scale - lo * scale), tf.int32)
  luts = tf.where(hi > lo, stretched, tf.range(256)[tf.newaxis, :])
  return _apply_per_channel_lut(images, pixels, luts)


def equalize(images):
  """Equalizes each channel's histogram (PIL ImageOps.equalize)."""
  pixels = _channel_pixels(images)
  histograms = tf.math.bincount(pixels, minlength=256, maxlength=256, axis=-1)
  present = histograms > 0
  last_present = 255 - tf.argmax(tf.reverse(tf.cast(present, tf.int32), [1]), axis=1,
                                 output_type=tf.int32)
  last_count = tf.gather(histograms, last_present, batch_dims=1)
  step = (tf.reduce_sum(histograms, axis=1) - last_count) // 255
  cumulative = tf.cumsum(histograms, axis=1, exclusive=True)
  safe_step = tf.maximum(step, 1)[:, tf.newaxis]
  luts = (safe_step // 2 + cumulative) // safe_step
  identity = (tf.reduce_sum(tf.cast(present, tf.int32), axis=1) <= 1) | (step == 0)
  luts = tf.where(identity[:, tf.newaxis], tf.range(256)[tf.newaxis, :], luts)
  return _apply_per_channel_lut(images, pixels, luts)


def posterize(images, bits):
  """Keeps the `bits` (per example, int32 [batch]) high bits of each value."""
  masks = tf.cast(255 - (2 ** (8 - bits) - 1), tf.uint8)
  return tf.bitwise.bitwise_and(images, masks[:, tf.newaxis, tf.newaxis, tf.newaxis])


def solarize(images, thresholds):
  """Inverts values at or above the per-example threshold (int32 [batch])."""
  values = tf.cast(images, tf.int32)
  thresholds = thresholds[:, tf.newaxis, tf.newaxis, tf.newaxis]
  return tf.cast(tf.where(values < thresholds, values, 255 - values), tf.uint8)


def affine(images, matrices):
  """PIL's Image.transform(AFFINE, (a, b, c, d, e, f), BILINEAR), filled with black.

  PIL maps each output pixel centre (x + 0.5, y + 0.5) to an input point and samples with
  pixel centres at +0.5; in index coordinates that adds (a + b - 1) / 2 and (d + e - 1) / 2
  to the offsets.
  """
  a, b, c, d, e, f = tf.unstack(tf.cast(matrices, tf.float32), axis=1)
  zeros = tf.zeros_like(a)
  transforms = tf.stack([a, b, c + 0.5 * (a + b - 1.0), d, e, f + 0.5 * (d + e - 1.0),
                         zeros, zeros], axis=1)
  shape = tf.shape(images)
  warped = tf.raw_ops.ImageProjectiveTransformV3(
      images=tf.cast(images, tf.float32), transforms=transforms, output_shape=shape[1:3],
      fill_value=0.0, interpolation="BILINEAR", fill_mode="CONSTANT")
  return tf.cast(tf.clip_by_value(tf.round(warped), 0.0, 255.0), tf.uint8)


def rotation_matrices(degrees, height, width):
  """PIL Image.rotate(degrees) about the image centre, as affine input-from-output maps."""
  angle = -degrees * (math.pi / 180.0)
  cos, sin = tf.cos(angle), tf.sin(angle)
  cx, cy = width / 2.0, height / 2.0
  c = cos * -cx + sin * -cy + cx
  f = -sin * -cx + cos * -cy + cy
  return tf.stack([cos, sin, c, -sin, cos, f], axis=1)


# --- Sampling. ---------------------------------------------------------------------------------


def _per_example(draw, seeds, salt):
  """Runs a stateless draw once per example with that example's seed (seeds: [batch, 2])."""
  return tf.map_fn(lambda s: draw(tf.random.experimental.stateless_fold_in(s, salt)), seeds,
                   fn_output_signature=tf.float32)


def example_seeds(keys, seed, view, epochs):
  """A stateless seed per example from the run's seed, the example's key, the view index and
  the epoch (int [batch]): the Trainer's epoch online, the view set's index in Transform.

  Fingerprints of the key are stable across processes, machines and Beam workers, so the same
  key, seed, view and epoch give the same randomness everywhere. Transform's view set s is
  therefore exactly what online AugMix makes in epoch s.
  """
  key_hashes = tf.strings.to_hash_bucket_fast(tf.reshape(keys, [-1]), 2**62)
  base = tf.stack([tf.fill(tf.shape(key_hashes), tf.cast(seed, tf.int64)), key_hashes], axis=1)
  fold = tf.random.experimental.stateless_fold_in
  return tf.map_fn(lambda s_e: tf.cast(fold(fold(s_e[0], view), s_e[1]), tf.int64),
                   (base, tf.cast(tf.reshape(epochs, [-1]), tf.int64)),
                   fn_output_signature=tf.int64)


def _operation_functions(height, width):
  """The nine operations as f(images, levels, signs), with the paper's magnitude ranges."""

  def affine_from(columns):
    return lambda images, levels, signs: affine(images, tf.stack(columns(levels, signs), axis=1))

  def shear(levels, signs):
    return signs * levels * 0.3 / 10.0

  def shift(levels, signs, size):
    return signs * tf.floor(levels * (size / 3.0) / 10.0)

  one, zero = tf.ones_like, tf.zeros_like
  return [
      lambda images, levels, signs: autocontrast(images),
      lambda images, levels, signs: equalize(images),
      lambda images, levels, signs: posterize(
          images, 4 - tf.cast(tf.floor(levels * 4.0 / 10.0), tf.int32)),
      lambda images, levels, signs: affine(images, rotation_matrices(
          signs * tf.floor(levels * 30.0 / 10.0), height, width)),
      lambda images, levels, signs: solarize(
          images, 256 - tf.cast(tf.floor(levels * 256.0 / 10.0), tf.int32)),
      affine_from(lambda l, s: [one(l), shear(l, s), zero(l), zero(l), one(l), zero(l)]),
      affine_from(lambda l, s: [one(l), zero(l), zero(l), shear(l, s), one(l), zero(l)]),
      affine_from(lambda l, s: [one(l), zero(l), shift(l, s, width), zero(l), one(l), zero(l)]),
      affine_from(lambda l, s: [one(l), zero(l), zero(l), zero(l), one(l), shift(l, s, height)]),
  ]


def _apply_operation(images, op_index, levels, signs):
  """Applies operation op_index[i] with level levels[i] to image i.

  Each operation runs only on the images that drew it (partition, apply, stitch back).
  """
  height = tf.cast(tf.shape(images)[1], tf.float32)
  width = tf.cast(tf.shape(images)[2], tf.float32)
  positions = tf.dynamic_partition(tf.range(tf.shape(images)[0]), op_index, len(OPERATIONS))
  results = [operation(tf.gather(images, where), tf.gather(levels, where),
                       tf.gather(signs, where))
             for operation, where in zip(_operation_functions(height, width), positions)]
  stitched = tf.dynamic_stitch(positions, results)
  stitched.set_shape(images.shape)
  return stitched


class AugMixDraws(NamedTuple):
  """Everything random about one view of each image in a batch."""
  chain_weights: tf.Tensor  # float32 [batch, width], Dirichlet(alpha).
  mix_weight: tf.Tensor  # float32 [batch], Beta(alpha, alpha).
  depths: tf.Tensor  # int32 [batch, width], in [1, MAX_DEPTH] or the fixed depth.
  operations: tf.Tensor  # int32 [batch, width, steps], indices into OPERATIONS.
  levels: tf.Tensor  # float32 [batch, width, steps], uniform in [0.1, severity).
  signs: tf.Tensor  # float32 [batch, width, steps], -1 or +1.


def sample_draws(seeds, params: AugMixParams) -> AugMixDraws:
  steps = params.depth if params.depth > 0 else MAX_DEPTH
  chain_gammas = _per_example(
      lambda s: tf.random.stateless_gamma([params.width], seed=s, alpha=params.alpha), seeds, 0)
  beta_gammas = tf.maximum(_per_example(
      lambda s: tf.random.stateless_gamma([2], seed=s, alpha=params.alpha), seeds, 1),
      _GAMMA_FLOOR)
  uniforms = _per_example(
      lambda s: tf.random.stateless_uniform([params.width * (1 + 3 * steps)], seed=s), seeds, 2)
  uniforms = tf.reshape(uniforms, [-1, params.width, 1 + 3 * steps])
  if params.depth > 0:
    depths = tf.fill(tf.shape(uniforms)[:2], params.depth)
  else:
    depths = 1 + tf.minimum(tf.cast(uniforms[:, :, 0] * MAX_DEPTH, tf.int32), MAX_DEPTH - 1)
  per_step = tf.reshape(uniforms[:, :, 1:], [-1, params.width, steps, 3])
  return AugMixDraws(
      chain_weights=chain_gammas / tf.maximum(
          tf.reduce_sum(chain_gammas, axis=1, keepdims=True), _GAMMA_FLOOR),
      mix_weight=beta_gammas[:, 0] / tf.reduce_sum(beta_gammas, axis=1),
      depths=depths,
      operations=tf.minimum(tf.cast(per_step[..., 0] * len(OPERATIONS), tf.int32),
                            len(OPERATIONS) - 1),
      levels=_MIN_LEVEL + per_step[..., 1] * (params.severity - _MIN_LEVEL),
      signs=tf.where(per_step[..., 2] < 0.5, -1.0, 1.0))


def augment_and_mix(images, seeds, params: AugMixParams):
  """One AugMix view per image: uint8 [batch, h, w, c] -> float32 in [0, 1].

  Per example: `width` chains of `depth` random operations, mixed with Dirichlet(alpha)
  weights, then mixed with the original image by m ~ Beta(alpha, alpha).
  """
  images = tf.convert_to_tensor(images, tf.uint8)
  draws = sample_draws(seeds, params)
  steps = draws.operations.shape[2]
  expand = lambda values: values[:, tf.newaxis, tf.newaxis, tf.newaxis]  # noqa: E731

  def apply_step(i, augmented, mixed):
    """Iteration i is step i % steps of chain i // steps (one graph for every chain)."""
    chain, step = i // steps, i % steps
    augmented = tf.where(tf.equal(step, 0), images, augmented)  # Each chain starts afresh.
    stepped = _apply_operation(augmented, draws.operations[:, chain, step],
                               draws.levels[:, chain, step], draws.signs[:, chain, step])
    augmented = tf.where(expand(step < draws.depths[:, chain]), stepped, augmented)
    chain_done = tf.cast(tf.equal(step, steps - 1), tf.float32)
    mixed += chain_done * expand(draws.chain_weights[:, chain]) * tf.cast(augmented, tf.float32)
    return i + 1, augmented, mixed

  _, _, mixed = tf.while_loop(
      lambda i, *_: i < params.width * steps, apply_step,
      [tf.constant(0), images, tf.zeros(tf.shape(images), tf.float32)])
  m = expand(draws.mix_weight)
  return ((1.0 - m) * tf.cast(images, tf.float32) + m * mixed) / 255.0


def augmix_views(images, keys, seed, count, params: AugMixParams, epochs):
  """`count` views per image for its epoch (int [batch]): float32 [batch, count, h, w, c] in
  [0, 1].

  All views go through one augment_and_mix call (images repeated per view, each view with its
  own seed), so the graph does not grow with `count`.
  """
  images = tf.convert_to_tensor(images, tf.uint8)
  seeds = tf.stack([example_seeds(keys, seed, view, epochs) for view in range(count)], axis=1)
  repeated = tf.repeat(images, count, axis=0)  # Example-major: image 0's views first.
  views = augment_and_mix(repeated, tf.reshape(seeds, [-1, 2]), params)
  return tf.reshape(views, tf.concat([[-1, count], tf.shape(images)[1:]], axis=0))


# --- Compact view sets: what Transform writes and the Trainer reads. ----------------------------
# A view set is the `count` views of one image for one epoch, rounded to uint8 (at most 0.5/255
# from the float view in [0, 1]) and stored as one greyscale PNG of the views' channel planes
# stacked vertically: [count * channels * height, width]. Planes rather than interleaved
# channels give PNG's row filters smooth rows, and deflate finds a grey image's equal planes;
# bench/augmix.py measures it against raw bytes and float32 on grey and colour images.


def encode_view_sets(images, keys, seed, count, sets, params: AugMixParams):
  """View sets 0..sets-1 of each image: string [batch, sets], each a PNG (decode_view_set).

  Set s holds the views online AugMix would make in epoch s, rounded to uint8.
  """
  images = tf.convert_to_tensor(images, tf.uint8)
  batch = tf.shape(images)[0]
  height, width, channels = tf.unstack(tf.shape(images)[1:])
  set_indices = tf.tile(tf.range(sets), [batch])  # Example-major, like the views.
  views01 = augmix_views(tf.repeat(images, sets, axis=0), tf.repeat(tf.reshape(keys, [-1]), sets),
                         seed, count, params, epochs=set_indices)
  quantised = tf.cast(tf.clip_by_value(tf.round(views01 * 255.0), 0.0, 255.0), tf.uint8)
  planes = tf.reshape(tf.transpose(quantised, [0, 1, 4, 2, 3]),  # [n, count, c, h, w]
                      tf.stack([batch * sets, count * channels * height, width, 1]))
  pngs = tf.map_fn(tf.io.encode_png, planes, fn_output_signature=tf.string)
  return tf.reshape(pngs, tf.stack([batch, sets]))


def decode_view_set(view_sets, epochs, count, image_shape):
  """Each example's view set `epoch mod sets`: float32 [batch, count, *image_shape] in [0, 1].

  view_sets: string [batch, sets] from encode_view_sets; epochs: int [batch].
  """
  height, width, channels = image_shape
  sets = tf.shape(view_sets)[1]
  chosen = tf.gather(view_sets, tf.math.floormod(tf.cast(epochs, tf.int32), sets), batch_dims=1)

  def decode(png):
    planes = tf.io.decode_png(png, channels=1)
    with tf.control_dependencies([tf.debugging.assert_equal(
        tf.shape(planes), [count * channels * height, width, 1],
        message=f"AugMix view sets do not hold {count} view(s) of {list(image_shape)} per "
        "image: was Transform run with this config's aug_count?")]):
      return tf.reshape(planes, [count, channels, height, width])

  planes = tf.map_fn(decode, chosen,
                     fn_output_signature=tf.TensorSpec([count, channels, height, width], tf.uint8))
  return tf.cast(tf.transpose(planes, [0, 1, 3, 4, 2]), tf.float32) / 255.0
