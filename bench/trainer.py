"""Training throughput: trainer_module's loop against a bare tf.function GradientTape loop.

Both train the same Wide ResNet (trainer_module.model) with the same optimizer on the same
transformed TFRecords (random 32x32x3 images, normalised, gzipped like Transform's output):

- trainer_module: `train.Training` + `train.fit` over `data.training_batches` under the
  default strategy, as `python -m trainer_module` runs it (per-replica loss scaling, L2 terms,
  on-device accuracy/NLL/ECE accumulation, progress log, checkpoint at the last step);
- bare: the seeds' style, `for images, labels in dataset: train_step(images, labels)` with
  mean cross-entropy + L2 and nothing else.

Each loop first runs warm-up steps (tracing, allocation), then the timed steps. Prints
images/s for both and their ratio, with trainer_module's time taken whole and without the
checkpoint `fit` writes at its last step (timed by writing one more of the same size), and
the achieved FLOP/s (3 x the forward FLOPs counted from the model's convolutions and dense
layer) against a float32 matmul peak measured here.

  make bench-trainer                                  # WRN-16-4 and WRN-28-10
  make bench-trainer ARGS="--models 16-4 --steps 10"
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trainer_module  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from trainer_module import data  # noqa: E402
from trainer_module.config import TrainerConfig  # noqa: E402
from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY  # noqa: E402
from trainer_module.model import wide_resnet  # noqa: E402
from trainer_module.train import Training, fit, make_optimizer  # noqa: E402

FEATURE_SPEC = {IMAGE_KEY: tf.io.FixedLenFeature(IMAGE_SHAPE, tf.float32),
                LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}
BATCH = {"16-4": 64, "28-10": 32}


def write_records(path: str, count: int) -> None:
  rng = np.random.default_rng(0)
  with tf.io.TFRecordWriter(path, "GZIP") as writer:
    for i in range(count):
      image = rng.normal(size=IMAGE_SHAPE).astype(np.float32)
      feature = {IMAGE_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=image.ravel())),
                 LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())


def forward_flops(model: keras.Model) -> int:
  """Multiply-adds x 2 of the convolutions and the dense head for one image."""
  flops = 0
  for layer in model.layers:
    if isinstance(layer, keras.layers.Conv2D):
      _, height, width, channels_out = layer.output_shape
      kernel_h, kernel_w, channels_in, _ = layer.kernel.shape
      flops += 2 * height * width * kernel_h * kernel_w * channels_in * channels_out
    elif isinstance(layer, keras.layers.Dense):
      flops += 2 * int(np.prod(layer.kernel.shape))
  return flops


def matmul_peak_flops(size: int = 4096, repeats: int = 5, trials: int = 3) -> float:
  """The best of `trials` timings of float32 matmuls (TensorFlow, all cores)."""
  a = tf.random.normal([size, size])
  b = tf.random.normal([size, size])
  matmul = tf.function(lambda x, y: tf.reduce_sum(tf.matmul(x, y)))
  matmul(a, b).numpy()
  best = float("inf")
  for _ in range(trials):
    start = time.perf_counter()
    for _ in range(repeats):
      matmul(a, b).numpy()
    best = min(best, time.perf_counter() - start)
  return 2 * size ** 3 * repeats / best


def trainer_module_seconds(config: TrainerConfig, files, warmup: int, steps: int,
                           scratch: str) -> tuple:
  """(seconds for `steps` steps, of which the final checkpoint write took about this many)."""
  strategy = tf.distribute.get_strategy()
  training = Training(config, strategy, steps_per_epoch=10_000,
                      checkpoint_dir=os.path.join(scratch, "checkpoints"))
  writer = tf.summary.create_noop_writer()

  def run_until(last_step):
    training.total_steps = last_step
    batches = strategy.distribute_datasets_from_function(
        lambda context: data.training_batches(files, FEATURE_SPEC, config,
                                              config.per_core_batch_size,
                                              training.examples_seen, context))
    fit(training, batches, None, writer)

  run_until(warmup)
  start = time.perf_counter()
  run_until(warmup + steps)
  seconds = time.perf_counter() - start
  start = time.perf_counter()  # fit ends with a checkpoint: time one more, the same size.
  training.checkpoints.save(training.step)
  return seconds, time.perf_counter() - start


def bare_loop_seconds(config: TrainerConfig, files, warmup: int, steps: int) -> float:
  keras.utils.set_random_seed(config.seed)
  model = wide_resnet(config)
  optimizer = make_optimizer(config, steps_per_epoch=10_000,
                             global_batch_size=config.per_core_batch_size)
  dataset = (tf.data.TFRecordDataset(files, "GZIP").repeat()
             .batch(config.per_core_batch_size, drop_remainder=True)
             .map(lambda s: tf.io.parse_example(s, FEATURE_SPEC),
                  num_parallel_calls=tf.data.AUTOTUNE)
             .map(lambda f: (f[IMAGE_KEY], f[LABEL_KEY])).prefetch(tf.data.AUTOTUNE))

  @tf.function
  def train_step(images, labels):
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
          labels, logits, from_logits=True)) + tf.add_n(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  batches = iter(dataset)
  for _ in range(warmup):
    loss = train_step(*next(batches))
  float(loss)  # Drain before timing.
  start = time.perf_counter()
  for _ in range(steps):
    loss = train_step(*next(batches))
  float(loss)
  return time.perf_counter() - start


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--models", nargs="+", default=["16-4", "28-10"], choices=sorted(BATCH))
  parser.add_argument("--steps", type=int, default=None,
                      help="timed steps per loop (default: 20 for 16-4, 12 for 28-10)")
  parser.add_argument("--warmup", type=int, default=2)
  args = parser.parse_args()
  peak = matmul_peak_flops()
  print(f"float32 matmul peak (4096^3, best of 3): {peak / 1e9:.1f} GFLOP/s")
  rows = []
  with tempfile.TemporaryDirectory() as scratch:
    files = [os.path.join(scratch, "train.gz")]
    write_records(files[0], 512)
    for name in args.models:
      depth, width = (int(v) for v in name.split("-"))
      steps = args.steps or {"16-4": 20, "28-10": 12}[name]
      config = TrainerConfig(depth=depth, width_multiplier=width, per_core_batch_size=BATCH[name],
                             train_epochs=200, lr_warmup_epochs=0, log_every_steps=10 ** 6,
                             checkpoint_interval=-1)
      train_flops = 3 * forward_flops(wide_resnet(config))
      bare = bare_loop_seconds(config, files, args.warmup, steps)
      ours, checkpoint = trainer_module_seconds(config, files, args.warmup, steps,
                                                os.path.join(scratch, name))
      images = steps * config.per_core_batch_size
      rows.append((name, config.per_core_batch_size, steps, images / bare, images / ours,
                   images / (ours - checkpoint), checkpoint, train_flops))
  print(f"\n{'model':<9}{'batch':>6}{'steps':>6}{'bare img/s':>11}{'trainer img/s':>14}"
        f"{'ratio':>7}{'w/o last ckpt':>14}{'ratio':>7}{'ckpt s':>7}{'GFLOP/s':>9}"
        f"{'of peak':>8}")
  for name, batch, steps, bare, ours, ours_steps, checkpoint, flops in rows:
    print(f"WRN-{name:<5}{batch:>6}{steps:>6}{bare:>11.1f}{ours:>14.1f}{ours / bare:>7.2f}"
          f"{ours_steps:>14.1f}{ours_steps / bare:>7.2f}{checkpoint:>7.1f}"
          f"{ours_steps * flops / 1e9:>9.1f}{ours_steps * flops / peak:>8.0%}")


if __name__ == "__main__":
  main()
