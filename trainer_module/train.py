"""The training loop: SGD with Nesterov momentum, warm-up then step decay, eval each epoch."""
import logging
import time
from typing import Dict, Optional

import tensorflow as tf
import tf_keras as keras

from trainer_module.config import TrainerConfig

log = logging.getLogger(__name__)


class WarmUpPiecewiseConstantSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warm-up to the base rate, then multiply by decay_ratio at each decay epoch."""

  def __init__(self, steps_per_epoch, base_learning_rate, decay_ratio, decay_epochs,
               warmup_epochs):
    super().__init__()
    self.steps_per_epoch = steps_per_epoch
    self.base_learning_rate = base_learning_rate
    self.decay_ratio = decay_ratio
    self.decay_epochs = list(decay_epochs)
    self.warmup_epochs = warmup_epochs

  def __call__(self, step):
    epoch = tf.cast(step, tf.float32) / self.steps_per_epoch
    decays = tf.reduce_sum(tf.cast(epoch >= tf.constant(self.decay_epochs + [1e30],
                                                         tf.float32), tf.float32))
    rate = self.base_learning_rate * tf.pow(self.decay_ratio, decays)
    if self.warmup_epochs > 0:
      rate = tf.where(epoch < self.warmup_epochs,
                      self.base_learning_rate * epoch / self.warmup_epochs, rate)
    return rate

  def get_config(self):
    return dict(steps_per_epoch=self.steps_per_epoch, base_learning_rate=self.base_learning_rate,
                decay_ratio=self.decay_ratio, decay_epochs=self.decay_epochs,
                warmup_epochs=self.warmup_epochs)


def learning_rate_schedule(config: TrainerConfig, steps_per_epoch: int,
                           global_batch_size: int) -> WarmUpPiecewiseConstantSchedule:
  """base_learning_rate is per 128 examples; decay epochs are rescaled to train_epochs."""
  return WarmUpPiecewiseConstantSchedule(
      steps_per_epoch=steps_per_epoch,
      base_learning_rate=config.base_learning_rate * global_batch_size / 128,
      decay_ratio=config.lr_decay_ratio,
      decay_epochs=config.scaled_decay_epochs(),
      warmup_epochs=config.lr_warmup_epochs)


def make_optimizer(config: TrainerConfig, steps_per_epoch: int, global_batch_size: int):
  schedule = learning_rate_schedule(config, steps_per_epoch, global_batch_size)
  return keras.optimizers.SGD(schedule, momentum=1.0 - config.one_minus_momentum, nesterov=True)


def _cross_entropy(labels, logits, config: TrainerConfig):
  return tf.reduce_mean(keras.losses.categorical_crossentropy(
      tf.one_hot(labels, config.num_classes), logits, from_logits=True,
      label_smoothing=config.label_smoothing))


def jensen_shannon(clean_logits, view_logits):
  """Mean KL of each distribution (clean and views) to their mixture, as in AugMix.

  clean_logits: [batch, classes]; view_logits: [batch, views, classes].
  """
  probabilities = tf.nn.softmax(
      tf.concat([clean_logits[:, tf.newaxis], view_logits], axis=1), axis=-1)
  log_mixture = tf.math.log(tf.clip_by_value(tf.reduce_mean(probabilities, axis=1, keepdims=True),
                                             1e-7, 1.0))
  kl = tf.reduce_sum(probabilities * (tf.math.log(tf.clip_by_value(probabilities, 1e-7, 1.0))
                                      - log_mixture), axis=-1)
  return tf.reduce_mean(kl)


def train_model(config: TrainerConfig, model: keras.Model, train_data: tf.data.Dataset,
                eval_data: tf.data.Dataset, steps_per_epoch: int,
                log_dir: Optional[str] = None) -> Dict[str, float]:
  """Trains `model` in place; returns the final evaluation metrics.

  train_data yields (images, views, labels) forever; eval_data (images, labels) once.
  """
  total_steps = config.train_steps or config.train_epochs * steps_per_epoch
  optimizer = make_optimizer(config, steps_per_epoch, config.per_core_batch_size)
  writer = tf.summary.create_file_writer(log_dir) if log_dir else tf.summary.create_noop_writer()

  num_views = config.num_views
  use_jsd = num_views >= 2

  @tf.function
  def train_step(images, views, labels):
    """Clean images and their AugMix views go through the model as one batch."""
    batch = tf.shape(images)[0]
    all_images = tf.concat([images, tf.reshape(views, tf.concat([[-1], tf.shape(images)[1:]], 0))],
                           axis=0)
    with tf.GradientTape() as tape:
      logits = model(all_images, training=True)
      clean_logits = logits[:batch]
      if use_jsd:  # The paper's objective: CE on clean images + consistency across views.
        nll = _cross_entropy(labels, clean_logits, config)
        view_logits = tf.reshape(logits[batch:], [batch, num_views, -1])
        consistency = jensen_shannon(clean_logits, view_logits)
        loss = nll + config.augmix_jsd_weight * consistency
      else:  # Clean and (at most one) view per image as training examples.
        all_labels = tf.concat([labels, tf.repeat(labels, num_views)], axis=0)
        nll = _cross_entropy(all_labels, logits, config)
        consistency = tf.constant(0.0)
        loss = nll
      loss += tf.add_n(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    accuracy = tf.reduce_mean(tf.cast(tf.argmax(clean_logits, -1) == labels, tf.float32))
    return {"loss": loss, "nll": nll, "jsd": consistency, "accuracy": accuracy}

  @tf.function
  def eval_step(images, labels):
    logits = model(images, training=False)
    nll = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    correct = tf.cast(tf.argmax(logits, -1) == labels, tf.float32)
    return tf.reduce_sum(nll), tf.reduce_sum(correct), tf.cast(tf.size(labels), tf.float32)

  def evaluate():
    totals = [0.0, 0.0, 0.0]
    for images, labels in eval_data:
      totals = [t + float(v) for t, v in zip(totals, eval_step(images, labels))]
    nll_sum, correct, count = totals
    return {"nll": nll_sum / count, "accuracy": correct / count}

  log.info("Training %s (%d parameters) for %d steps (%d per epoch), batch %d%s.",
           model.name, model.count_params(), total_steps, steps_per_epoch,
           config.per_core_batch_size,
           f" + {num_views} AugMix view(s) each{' with JSD' if use_jsd else ''}"
           f"{' made online' if config.augmix_online else ''}" if num_views else "")
  batches = iter(train_data)
  window_start, window_steps = time.time(), 0
  run_start = time.time()
  eval_metrics = {}
  for step in range(1, total_steps + 1):
    images, views, labels = next(batches)
    train_metrics = train_step(images, views, labels)
    window_steps += 1
    if step % config.log_every_steps == 0 or step == total_steps:
      elapsed = time.time() - window_start
      steps_per_second = window_steps / elapsed
      eta = (total_steps - step) / steps_per_second
      log.info("step %d/%d  epoch %.1f  loss %.4f  accuracy %.3f  lr %.4f  "
               "%.1f steps/s (%.0f images/s)  ETA %.0fs",
               step, total_steps, step / steps_per_epoch, float(train_metrics["loss"]),
               float(train_metrics["accuracy"]), float(optimizer.learning_rate),
               steps_per_second, steps_per_second * config.per_core_batch_size * (1 + num_views),
               eta)
      window_start, window_steps = time.time(), 0
    if step % steps_per_epoch == 0 or step == total_steps:
      eval_start = time.time()
      eval_metrics = evaluate()
      log.info("epoch %d  eval accuracy %.4f  eval nll %.4f", -(-step // steps_per_epoch),
               eval_metrics["accuracy"], eval_metrics["nll"])
      with writer.as_default(step=step):
        for name, value in train_metrics.items():
          tf.summary.scalar(f"train/{name}", value)
        for name, value in eval_metrics.items():
          tf.summary.scalar(f"eval/{name}", value)
      window_start += time.time() - eval_start  # Throughput counts training time only.
  log.info("Trained %d steps in %.0fs.", total_steps, time.time() - run_start)
  return eval_metrics
