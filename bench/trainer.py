"""Training throughput: trainer_module's loop against a bare tf.function GradientTape loop.

Both train the same Wide ResNet (trainer_module.model, Uncertainty Baselines' plain network:
no AugMix, spectral normalisation or SNGP layer) with the same optimizer on the same
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

bfloat16: whether this CPU has native bf16 units that oneDNN drives (what
`mixed_precision=auto` checks); if so, the same run also measures bf16 matmul and conv peaks
(the model's group-1 conv shape), trainer_module's images/s under mixed_bfloat16 and its ratio
to float32, and the eval accuracy of a short fixed training run on the digits (the pipeline's
split, WRN-16-2 by default) in both precisions. Without native bf16 it says so and measures
float32 only.

  make bench-trainer                                  # WRN-16-4 and WRN-28-10
  make bench-trainer ARGS="--models 16-4 --steps 10 --accuracy_epochs 3"
"""
import contextlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import trainer_module  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from components import image_sources  # noqa: E402
from pipeline.config import from_preset  # noqa: E402
from trainer_module import data, distribution, preprocessing  # noqa: E402
from test_support.tiny_config import plain_trainer  # noqa: E402
from trainer_module.config import TrainerConfig  # noqa: E402
from trainer_module.features import IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY  # noqa: E402
from trainer_module.model import wide_resnet  # noqa: E402
from trainer_module.training_loop import Training, fit, make_optimizer  # noqa: E402

FEATURE_SPEC = {IMAGE_KEY: tf.io.FixedLenFeature(IMAGE_SHAPE, tf.float32),
                LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}
BATCH = {"16-4": 64, "28-10": 32}
FLAGS = (harness.Flag("models", "16-4,28-10", "comma-separated Wide ResNets (depth-width) whose "
                      f"training throughput is measured, of {', '.join(sorted(BATCH))} (default: "
                      "both)"),
         harness.Flag("steps", None, "timed training steps per loop (default: 20 for 16-4, 12 "
                      "for 28-10)", type=int),
         harness.Flag("warmup", 2, "untimed steps (tracing, allocation) before the timed ones "
                      "(default %(default)s)"),
         harness.Flag("accuracy_model", "16-2", "depth-width of the digits accuracy run "
                      "(default %(default)s, the pipeline's)"),
         harness.Flag("accuracy_epochs", 15, "epochs of the digits accuracy run per precision "
                      "(default %(default)s; 0: skip it)"))


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


def peak_flops(fn, args, flops: int, repeats: int = 5, trials: int = 3) -> float:
  """The best of `trials` timings of `repeats` calls of tf.function(fn) (all cores)."""
  compiled = tf.function(fn)
  compiled(*args).numpy()
  best = min(harness.timed(lambda: [compiled(*args).numpy() for _ in range(repeats)]).wall
             for _ in range(trials))
  return flops * repeats / best


def matmul_peak_flops(dtype: tf.DType, size: int = 4096) -> float:
  a, b = (tf.cast(tf.random.normal([size, size]), dtype) for _ in range(2))
  return peak_flops(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)), (a, b),
                    2 * size ** 3)


def conv_peak_flops(dtype: tf.DType, batch: int = 64, size: int = 32, channels: int = 64) -> float:
  """A 3x3 same-padded NHWC conv of WRN-16-4's first group (64 -> 64 channels at 32x32)."""
  images = tf.cast(tf.random.normal([batch, size, size, channels]), dtype)
  kernel = tf.cast(tf.random.normal([3, 3, channels, channels]), dtype)
  return peak_flops(
      lambda x, k: tf.reduce_sum(tf.cast(tf.nn.conv2d(x, k, 1, "SAME"), tf.float32)),
      (images, kernel), 2 * batch * size * size * 9 * channels * channels)


@contextlib.contextmanager
def precision_policy(name: str):
  """The global Keras policy `name` (what set_precision_policy sets) within the block."""
  keras.mixed_precision.set_global_policy(name)
  try:
    yield
  finally:
    keras.mixed_precision.set_global_policy("float32")


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
                                              config.training.per_core_batch_size,
                                              training.examples_seen, context))
    fit(training, batches, None, writer)

  run_until(warmup)
  seconds = harness.timed(run_until, warmup + steps).wall
  # fit ends with a checkpoint: time one more, the same size.
  return seconds, harness.timed(training.checkpoints.save, training.step).wall


def bare_loop_seconds(config: TrainerConfig, files, warmup: int, steps: int) -> float:
  keras.utils.set_random_seed(config.training.seed)
  model = wide_resnet(config)
  optimizer = make_optimizer(config, steps_per_epoch=10_000,
                             global_batch_size=config.training.per_core_batch_size)
  dataset = (tf.data.TFRecordDataset(files, "GZIP").repeat()
             .batch(config.training.per_core_batch_size, drop_remainder=True)
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

  def run(count):
    for _ in range(count):
      loss = train_step(*next(batches))
    float(loss)  # Drained: the steps are done.
  run(warmup)
  return harness.timed(run, steps).wall


def write_digits(directory: str) -> tuple:
  """The pipeline's digits train and eval splits, normalised as Transform does (train-split
  mean and std per channel), as gzipped transformed records; returns (train, eval) files."""
  config = from_preset()
  splits = {}
  for split in ("train", "eval"):
    records = list(image_sources.digits_records(split, config.data.eval_fraction,
                                                config.data.test_fraction))
    images = np.stack([tf.io.decode_png(png, channels=3).numpy() for _, png, _ in records])
    splits[split] = (images.astype(np.float32) / 255.0, [label for _, _, label in records])
  mean = splits["train"][0].reshape(-1, 3).mean(axis=0)
  std = splits["train"][0].reshape(-1, 3).std(axis=0)
  paths = []
  for split, (images, labels) in splits.items():
    path = os.path.join(directory, f"digits-{split}.gz")
    normalized = preprocessing.normalize(images, mean, std).numpy()
    with tf.io.TFRecordWriter(path, "GZIP") as writer:
      for image, label in zip(normalized, labels):
        feature = {
            IMAGE_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=image.ravel())),
            LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                     .SerializeToString())
    paths.append(path)
  return tuple(paths)


def digits_accuracy(config: TrainerConfig, train_file: str, eval_file: str,
                    scratch: str) -> tuple:
  """(eval accuracy, seconds) of training `config` on the digits from scratch, as the
  Trainer does (same seed, so the same initial weights and batches under every policy)."""
  strategy = tf.distribute.get_strategy()
  steps_per_epoch = data.count_examples([train_file]) // config.training.per_core_batch_size
  training = Training(config, strategy, steps_per_epoch, os.path.join(scratch, "checkpoints"))
  batches = strategy.distribute_datasets_from_function(
      lambda context: data.training_batches([train_file], FEATURE_SPEC, config,
                                            config.training.per_core_batch_size, 0, context))
  eval_batches = strategy.distribute_datasets_from_function(
      lambda context: data.eval_batches([eval_file], FEATURE_SPEC, config.training.eval_batch_size,
                                        context))
  trained = harness.timed(fit, training, batches, eval_batches, tf.summary.create_noop_writer())
  return trained.value["eval/accuracy"], trained.wall


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main():
  parser = build_parser()
  args = parser.parse_args()
  models = [name for name in args.models.split(",") if name]
  unknown = [name for name in models if name not in BATCH]
  if unknown:
    parser.error(f"--models: {unknown} unknown; known: {', '.join(sorted(BATCH))}")
  units, onednn = distribution.cpu_bfloat16_units(), distribution.onednn_enabled()
  native_bf16 = bool(units) and onednn
  print(f"native bfloat16: {'yes' if native_bf16 else 'no'} (CPU flags: "
        f"{', '.join(units) or 'none of ' + ', '.join(distribution.BFLOAT16_CPU_FLAGS)}; "
        f"oneDNN {'on' if onednn else 'off'})"
        + ("" if native_bf16 else ": measuring float32 only"))
  policies = ["float32"] + (["mixed_bfloat16"] if native_bf16 else [])
  dtypes = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16}
  peaks = {}
  for policy in policies:
    peaks[policy] = (matmul_peak_flops(dtypes[policy]), conv_peak_flops(dtypes[policy]))
    print(f"{dtypes[policy].name:>8} peaks (best of 3): matmul 4096^3 "
          f"{peaks[policy][0] / 1e9:.1f} GFLOP/s, conv 3x3 64x32x32x64 "
          f"{peaks[policy][1] / 1e9:.1f} GFLOP/s")
  if native_bf16:
    print(f"bf16/float32 peak ratios: matmul {peaks['mixed_bfloat16'][0] / peaks['float32'][0]:.2f}"
          f"x, conv {peaks['mixed_bfloat16'][1] / peaks['float32'][1]:.2f}x")
  rows = []
  with tempfile.TemporaryDirectory() as scratch:
    files = [os.path.join(scratch, "train.gz")]
    write_records(files[0], 512)
    for name in models:
      depth, width = (int(v) for v in name.split("-"))
      steps = args.steps or {"16-4": 20, "28-10": 12}[name]
      config = plain_trainer(depth=depth,
                                       width_multiplier=width,
                                       per_core_batch_size=BATCH[name],
                                       train_epochs=200,
                                       lr_warmup_epochs=0,
                                       log_every_steps=10**6,
                                       checkpoint_interval=-1)
      train_flops = 3 * forward_flops(wide_resnet(config))
      bare = bare_loop_seconds(config, files, args.warmup, steps)
      images = steps * config.training.per_core_batch_size
      for policy in policies:
        with precision_policy(policy):
          ours, checkpoint = trainer_module_seconds(config, files, args.warmup, steps,
                                                    os.path.join(scratch, name, policy))
        rows.append((name, policy, config.training.per_core_batch_size, steps, images / bare,
                     images / ours, images / (ours - checkpoint), checkpoint, train_flops,
                     peaks[policy][0]))
    accuracies = {}
    if args.accuracy_epochs:
      depth, width = (int(v) for v in args.accuracy_model.split("-"))
      train_file, eval_file = write_digits(scratch)
      for policy in policies:
        config = plain_trainer(depth=depth, width_multiplier=width,
                               train_epochs=args.accuracy_epochs, log_every_steps=10 ** 6,
                               checkpoint_interval=-1)
        with precision_policy(policy):
          accuracies[policy] = digits_accuracy(config, train_file, eval_file,
                                               os.path.join(scratch, "digits", policy))
  float32_speed = {}
  table = []
  for name, policy, batch, steps, bare, ours, ours_steps, checkpoint, flops, peak in rows:
    float32_speed.setdefault(name, ours_steps)
    table.append((f"WRN-{name}", policy, batch, steps, f"{bare:.1f}", f"{ours:.1f}",
                  f"{ours / bare:.2f}", f"{ours_steps:.1f}", f"{ours_steps / bare:.2f}",
                  f"{checkpoint:.1f}", f"{ours_steps * flops / 1e9:.1f}",
                  f"{ours_steps * flops / peak:.0%}", f"{ours_steps / float32_speed[name]:.2f}x"))
  print()
  print(harness.table(["model", "policy", "batch", "steps", "bare img/s", "trainer img/s",
                       "ratio", "w/o last ckpt", "ratio", "ckpt s", "GFLOP/s", "of peak",
                       "vs f32"], table))
  if accuracies:
    print(f"\ndigits, WRN-{args.accuracy_model}, {args.accuracy_epochs} epochs from the same "
          "seed (eval split):")
    for policy, (accuracy, seconds) in accuracies.items():
      print(f"{policy:>15}  eval accuracy {accuracy:.2%}  {seconds:.0f} s")
    if len(accuracies) == 2:
      difference = accuracies["mixed_bfloat16"][0] - accuracies["float32"][0]
      print(f"{'difference':>15}  {difference * 100:+.2f} points; time ratio "
            f"{accuracies['float32'][1] / accuracies['mixed_bfloat16'][1]:.2f}x")


if __name__ == "__main__":
  main()
