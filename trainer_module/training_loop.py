"""The training loop: SGD with Nesterov momentum, warm-up then step decay (a warm-started run:
short warm-up, cosine decay, restored weights at a fraction of the rate), under any strategy.
Read top to bottom: schedule and losses, `Training`, its replica steps, then `fit`.
"""
import functools
import json
import logging
import math
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf
import tf_keras as keras

from trainer_module import data, sngp, warm_start
from trainer_module.checkpoints import (Checkpoints, ConfigRecord, Preempted, StopSignal,
                                        TrainingState)
from trainer_module.config import PRECISION_POLICIES, TrainerConfig
from trainer_module.metrics import ClassificationMetrics
from trainer_module.model import wide_resnet

log = logging.getLogger(__name__)

_PRECISION_KEY = "state/precision/.ATTRIBUTES/VARIABLE_VALUE"  # TrainingState.precision.


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


class FineTuningSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """For a warm-started run: linear warm-up over the first warmup_steps, then cosine decay
  to 0 at total_steps. This is the rate of freshly initialised variables (a new head); restored
  ones train at warm_start_lr_ratio x it (Training.learning_rate_ratios).

  Why: restored weights start near a minimum, so a full-size step would throw away what the
  warm start gives, while a fresh head has everything to learn (discriminative fine-tuning, as
  in ULMFiT); the fresh momentum and a new head get a short warm-up; a cosine needs no decay
  epochs tuned to the short run and ends at 0, so the last weights settle instead of jumping
  at the last decay step.
  """

  def __init__(self, peak_learning_rate, warmup_steps, total_steps):
    super().__init__()
    self.peak_learning_rate = peak_learning_rate
    self.warmup_steps = warmup_steps
    self.total_steps = total_steps

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    decay_steps = float(max(1, self.total_steps - self.warmup_steps))
    progress = tf.clip_by_value((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
    rate = 0.5 * self.peak_learning_rate * (1.0 + tf.cos(math.pi * progress))
    if self.warmup_steps > 0:
      rate = tf.where(step < self.warmup_steps,
                      self.peak_learning_rate * step / self.warmup_steps, rate)
    return rate

  def get_config(self):
    return dict(peak_learning_rate=self.peak_learning_rate, warmup_steps=self.warmup_steps,
                total_steps=self.total_steps)


# Share of a warm-started run spent warming up (at most one epoch).
FINE_TUNING_WARMUP = 0.1


def learning_rate_schedule(config: TrainerConfig, steps_per_epoch: int, global_batch_size: int,
                           fine_tuning: bool = False):
  """base_learning_rate is per 128 examples; decay epochs are rescaled to train_epochs. A
  fine-tuning run spans fine_tuning_epochs, at the full peak rate (restored variables' share
  of it is applied to their gradients)."""
  base_learning_rate = config.training.base_learning_rate * global_batch_size / 128
  if fine_tuning:
    total_steps = config.training.fine_tuning_epochs * steps_per_epoch
    return FineTuningSchedule(base_learning_rate,
                              min(steps_per_epoch, int(FINE_TUNING_WARMUP * total_steps)),
                              total_steps)
  return WarmUpPiecewiseConstantSchedule(
      steps_per_epoch=steps_per_epoch,
      base_learning_rate=base_learning_rate,
      decay_ratio=config.training.lr_decay_ratio,
      decay_epochs=config.training.scaled_decay_epochs(),
      warmup_epochs=config.training.lr_warmup_epochs)


def make_optimizer(config: TrainerConfig, steps_per_epoch: int, global_batch_size: int,
                   fine_tuning: bool = False):
  """SGD with Nesterov momentum. Its update is linear in rate x gradient (no weight decay or
  clipping inside it; L2 is in the loss), so scaling a variable's gradient by r is scaling its
  rate by r: how restored variables get their share of the fine-tuning rate."""
  schedule = learning_rate_schedule(config, steps_per_epoch, global_batch_size, fine_tuning)
  optimizer = keras.optimizers.SGD(schedule, momentum=1.0 - config.training.one_minus_momentum,
                                   nesterov=True)
  if keras.mixed_precision.global_policy().name == "mixed_float16":
    optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)  # float16 gradients underflow.
  return optimizer


def cross_entropy(labels, logits, config: TrainerConfig):
  """Per-example NLL with label smoothing."""
  return keras.losses.categorical_crossentropy(
      tf.one_hot(labels, config.model.num_classes), logits, from_logits=True,
      label_smoothing=config.model.label_smoothing)


def jensen_shannon(clean_logits, view_logits):
  """Per-example mean KL of each distribution (clean and views) to their mixture, as in AugMix.

  clean_logits: [batch, classes]; view_logits: [batch, views, classes].
  """
  probabilities = tf.nn.softmax(
      tf.concat([clean_logits[:, tf.newaxis], view_logits], axis=1), axis=-1)
  log_mixture = tf.math.log(tf.clip_by_value(tf.reduce_mean(probabilities, axis=1, keepdims=True),
                                             1e-7, 1.0))
  kl = tf.reduce_sum(probabilities * (tf.math.log(tf.clip_by_value(probabilities, 1e-7, 1.0))
                                      - log_mixture), axis=-1)
  return tf.reduce_mean(kl, axis=1)


class Training:
  """Model, optimizer, metrics and checkpoints of one run, built under `strategy`.
  warm_start_from: a checkpoint or SavedModel to start from (then the fine-tuning schedule);
  warm_start_origin: what it is a copy of, for the record."""

  def __init__(self, config: TrainerConfig, strategy: tf.distribute.Strategy,
               steps_per_epoch: int, checkpoint_dir: str, is_chief: bool = True,
               warm_start_from: Optional[str] = None, warm_start_origin: Optional[str] = None):
    self.config = config
    self.strategy = strategy
    self.global_batch_size = config.training.per_core_batch_size * strategy.num_replicas_in_sync
    self.steps_per_epoch = steps_per_epoch
    self.warm_start_from, self.warm_start_origin = warm_start_from, warm_start_origin
    # Per trainable variable, its share of the schedule's rate (restored ones of a warm start);
    # set by restore(), before the train step is traced. None: all at the full rate.
    self.learning_rate_ratios: Optional[List[float]] = None
    fine_tuning = warm_start_from is not None
    epochs = config.training.fine_tuning_epochs if fine_tuning else config.training.train_epochs
    self.total_steps = config.training.train_steps or epochs * steps_per_epoch
    self.steps_per_loop = config.distribution.steps_per_loop or default_steps_per_loop(strategy)
    # The global policy set_precision_policy chose (float32 weights under every policy).
    self.precision_policy = keras.mixed_precision.global_policy().name
    data.set_run_seeds(config.training.seed)  # The same initial weights on every run.
    with strategy.scope():
      self.model = wide_resnet(config)
      self.optimizer = make_optimizer(config, steps_per_epoch, self.global_batch_size,
                                      fine_tuning)
      self.optimizer.build(self.model.trainable_variables)
      self.train_metrics = ClassificationMetrics(config.calibration.num_bins)
      self.eval_metrics = ClassificationMetrics(config.calibration.num_bins)
      self.loss_sum = tf.Variable(0.0, dtype=tf.float64, trainable=False)
      self.state = TrainingState(config.training.seed,
                                 PRECISION_POLICIES.index(self.precision_policy))
    self.record = ConfigRecord(json.dumps(config.to_dict(), sort_keys=True))
    self.checkpoints = Checkpoints(checkpoint_dir, config.training.max_checkpoints_to_keep,
                                   is_chief, check=self._check_precision,
                                   model=self.model, optimizer=self.optimizer, state=self.state,
                                   train_metrics=self.train_metrics, loss_sum=self.loss_sum,
                                   record=self.record)

  @property
  def step(self) -> int:
    return int(_value(self.optimizer.iterations))

  @property
  def examples_seen(self) -> int:
    """The data position: training examples consumed by the steps taken so far."""
    return int(_value(self.state.examples_seen))

  @property
  def warm_start_record(self) -> Optional[dict]:
    """What this run was warm-started from (warm_start.warm_start's record), or None."""
    text = self.record.warm_start.numpy().decode()
    return json.loads(text) if text else None

  def restore(self) -> None:
    """Continues from the newest intact checkpoint, if any (refusing a different seed); a
    resumed run never warm-starts again. Without a checkpoint, warm-starts when asked to.
    Either way, a warm-started run's per-variable rates follow from its warm-start record."""
    path = self.checkpoints.restore_latest()
    if path is None:
      if self.warm_start_from is not None:
        record = warm_start.warm_start(self.model, self.warm_start_from,
                                       self.config.training.warm_start_exclude,
                                       self.warm_start_origin)
        self.record.warm_start.assign(json.dumps(record, sort_keys=True))
        self._set_learning_rate_ratios()
      return
    seed = int(_value(self.state.seed))
    if seed != self.config.training.seed:
      raise ValueError(f"Checkpoint {path} was trained with seed={seed}, this run has "
                       f"seed={self.config.training.seed}: use the same seed or a new checkpoint "
                       "directory.")
    self.record.config.assign(json.dumps(self.config.to_dict(), sort_keys=True))
    self.state.precision.assign(PRECISION_POLICIES.index(self.precision_policy))
    log.info("Resuming from %s at step %d (%d examples consumed)%s.", path, self.step,
             self.examples_seen, ", a warm-started run: it continues its own checkpoints and "
             "does not warm-start again" if self.warm_start_record else "")
    if self.warm_start_record:
      self._set_learning_rate_ratios()

  def start_epoch(self) -> None:
    """An SNGP head's Laplace precision restarts, so the covariance served is the last epoch's
    (a run resumed mid-epoch keeps the checkpointed partial sum)."""
    for layer in sngp.gp_layers(self.model):
      layer.reset_precision()

  def _set_learning_rate_ratios(self) -> None:
    """Restored variables at warm_start_lr_ratio, freshly initialised ones at 1."""
    ratio, record = self.config.training.warm_start_lr_ratio, self.warm_start_record
    restored = [warm_start.was_restored(v, record) for v in self.model.trainable_variables]
    self.learning_rate_ratios = [ratio if r else 1.0 for r in restored]
    log.info("Fine-tuning: %d restored variables at lr x%g, %d new at full lr.", sum(restored),
             ratio, len(restored) - sum(restored))

  def _check_precision(self, path: str) -> None:
    """float32 and mixed_bfloat16 hold the same variables (float32 weights and momentum), so
    either resumes the other; a mixed_float16 optimizer also holds loss-scale state."""
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(_PRECISION_KEY):
      raise ValueError(f"Checkpoint {path} does not record its precision policy (written by an "
                       "older trainer): use a new checkpoint directory.")
    saved = PRECISION_POLICIES[int(reader.get_tensor(_PRECISION_KEY))]
    if saved == self.precision_policy:
      return
    if "mixed_float16" in (saved, self.precision_policy):
      raise ValueError(f"Checkpoint {path} was trained with mixed_precision={saved}, this run "
                       f"uses {self.precision_policy}: a mixed_float16 optimizer carries "
                       "loss-scale state the other policies lack. Set --mixed_precision="
                       f"{saved} or use a new checkpoint directory.")
    log.warning("Checkpoint %s was trained with %s; continuing with %s (the same float32 "
                "weights; not bit-identical to an uninterrupted run).", path, saved,
                self.precision_policy)

  # The steps each replica runs.
  def _replica_train_step(self, images, views, labels):
    config, num_views = self.config, self.config.augmentation.num_views
    batch = tf.shape(images)[0]
    all_images = tf.concat(
        [images, tf.reshape(views, tf.concat([[-1], tf.shape(images)[1:]], 0))], axis=0)
    with tf.GradientTape() as tape:
      logits = tf.cast(self.model(all_images, training=True), tf.float32)
      clean_logits = logits[:batch]
      if num_views >= 2:  # The paper's objective: CE on clean images + consistency of views.
        nll = tf.nn.compute_average_loss(cross_entropy(labels, clean_logits, config),
                                         global_batch_size=self.global_batch_size)
        view_logits = tf.reshape(logits[batch:], [batch, num_views, -1])
        consistency = tf.nn.compute_average_loss(
            jensen_shannon(clean_logits, view_logits), global_batch_size=self.global_batch_size)
        loss = nll + config.augmentation.augmix_jsd_weight * consistency
      else:  # Clean images and their view (if any) as training examples.
        all_labels = tf.concat([labels, tf.repeat(labels, num_views)], axis=0)
        loss = tf.nn.compute_average_loss(
            cross_entropy(all_labels, logits, config),
            global_batch_size=self.global_batch_size * (1 + num_views))
      loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
      loss_scaled = isinstance(self.optimizer, keras.mixed_precision.LossScaleOptimizer)
      scaled_loss = self.optimizer.get_scaled_loss(loss) if loss_scaled else loss
    grads = tape.gradient(scaled_loss, self.model.trainable_variables)
    if loss_scaled:
      grads = self.optimizer.get_unscaled_gradients(grads)
    if self.learning_rate_ratios is not None:  # After unscaling: inf/NaN stay non-finite.
      grads = [grad if ratio == 1.0 else grad * ratio
               for grad, ratio in zip(grads, self.learning_rate_ratios)]
    self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
    self.train_metrics.update(labels, clean_logits)
    return loss

  def _replica_eval_step(self, images, labels, weights):
    self.eval_metrics.update(labels, self.model(images, training=False), weights)

  def _train_step(self, iterator):
    """One step over the next global batch of a distributed iterator; returns the loss."""
    losses = self.strategy.run(self._replica_train_step, args=next(iterator))
    loss = self.strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
    self.loss_sum.assign_add(tf.cast(loss, tf.float64))
    self.state.examples_seen.assign_add(self.global_batch_size)
    return loss

  # The steps are traced without AutoGraph: nothing in them branches in Python on a tensor,
  # and converting the model's and the optimizer's code was most of the first step's time
  # (digits WRN-16-2 with AugMix: 9.2 s -> 1.5 s; the same graph, the same losses).
  @functools.cached_property
  def train_step(self) -> Callable:
    """One step per call."""
    return tf.function(self._train_step, autograph=False)

  @functools.cached_property
  def train_loop(self) -> Callable:
    """train_loop(iterator, steps): `steps` (a tensor, so one trace) steps in one call;
    returns the last step's loss. AutoGraph makes the loop a graph loop; the step inside is
    left as it is."""
    step = tf.autograph.experimental.do_not_convert(self._train_step)

    @tf.function
    def train_loop(iterator, steps):
      loss = tf.zeros([], tf.float32)
      for _ in tf.range(steps):
        loss = step(iterator)
      return loss
    return train_loop

  def loop_steps(self, step: int) -> int:
    """Steps of the host loop after `step`: at most steps_per_loop, ending at the next log,
    epoch end, step checkpoint or the last step (what happens between loops)."""
    # Epochs cover intervals.
    periods = [self.config.training.log_every_steps, self.steps_per_epoch]
    if self.config.training.checkpoint_steps:
      periods.append(self.config.training.checkpoint_steps)
    end = min([self.total_steps, step + self.steps_per_loop]
              + [(step // period + 1) * period for period in periods])
    return end - step

  @functools.cached_property
  def eval_step(self) -> Callable:
    """Traced once per run, not once per evaluation (seconds each epoch); no AutoGraph, as
    the train step."""
    @tf.function(autograph=False)
    def eval_step(batch):
      self.strategy.run(self._replica_eval_step, args=batch)
    return eval_step

  def evaluate(self, eval_dataset: tf.distribute.DistributedDataset) -> Dict[str, float]:
    self.eval_metrics.reset()
    for batch in eval_dataset:
      self.eval_step(batch)
    return self.eval_metrics.result()

  def epoch_train_metrics(self, steps: int) -> Dict[str, float]:
    metrics = self.train_metrics.result()
    metrics["loss"] = _value(self.loss_sum) / steps
    self.train_metrics.reset()
    self.loss_sum.assign(0.0)
    return metrics

  def checkpoint_due(self, step: int) -> bool:
    config = self.config
    if config.training.checkpoint_steps and step % config.training.checkpoint_steps == 0:
      return True
    return (config.training.checkpoint_interval > 0
            and step % (config.training.checkpoint_interval * self.steps_per_epoch) == 0)


def fit(training: Training, train_dataset: tf.distribute.DistributedDataset,
        eval_dataset: Optional[tf.distribute.DistributedDataset],
        writer: tf.summary.SummaryWriter, stop_signal: Optional[StopSignal] = None,
        ) -> Dict[str, float]:
  """Trains from the restored step to the last; returns the last evaluation (or train) metrics.

  `train_dataset` must start at the restored data position. Steps run `loop_steps` at a time;
  logs, evaluations and checkpoints happen between loops, at the same steps as one step per
  call. On SIGTERM the loop saves a checkpoint after the current loop and raises Preempted.
  """
  config, strategy = training.config, training.strategy
  steps_per_epoch, total_steps = training.steps_per_epoch, training.total_steps
  images_per_step = training.global_batch_size * (1 + config.augmentation.num_views)
  stop_requested = _stop_agreement(strategy, stop_signal)
  batches = iter(train_dataset)
  views_note = ""
  if config.augmentation.num_views:
    source = ("made online" if config.augmentation.augmix_online
              else f"from {config.augmentation.augmix_view_sets} Transform view set(s)")
    views_note = (f", {config.augmentation.num_views} AugMix view(s) per image"
                  f"{' with JSD' if config.augmentation.num_views >= 2 else ''} {source}")
  log.info(
      "Training %s (%d trainable parameters, %s) for %d steps (%d per epoch, up to %d per "
      "host call), global batch %d on %d replica(s)%s; starting at step %d.", training.model.name,
      sum(int(v.shape.num_elements()) for v in training.model.trainable_variables),
      training.precision_policy, total_steps, steps_per_epoch, training.steps_per_loop,
      training.global_batch_size, strategy.num_replicas_in_sync, views_note, training.step)
  metrics: Dict[str, float] = {}
  window_start, window_steps = time.time(), 0
  step = training.step
  while step < total_steps:
    if step % steps_per_epoch == 0:
      training.start_epoch()
    steps = training.loop_steps(step)
    loss = (training.train_step(batches) if steps == 1
            else training.train_loop(batches, tf.constant(steps)))
    step += steps
    window_steps += steps
    if step % config.training.log_every_steps == 0 or step == total_steps:
      steps_per_second = window_steps / (time.time() - window_start)
      log.info("step %d/%d  epoch %.2f  loss %.4f  lr %.4f  %.2f steps/s (%.0f images/s)  "
               "ETA %.0fs", step, total_steps, step / steps_per_epoch, float(loss),
               _value(training.optimizer.learning_rate), steps_per_second,
               steps_per_second * images_per_step, (total_steps - step) / steps_per_second)
      window_start, window_steps = time.time(), 0
    end_of_epoch = step % steps_per_epoch == 0 or step == total_steps
    if end_of_epoch:
      pause_start = time.time()
      steps_this_epoch = step - (math.ceil(step / steps_per_epoch) - 1) * steps_per_epoch
      metrics = {f"train/{k}": v for k, v in
                 training.epoch_train_metrics(steps_this_epoch).items()}
      if eval_dataset is not None:
        metrics.update({f"eval/{k}": v for k, v in training.evaluate(eval_dataset).items()})
      log.info("epoch %d  %s", math.ceil(step / steps_per_epoch),
               "  ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
      with writer.as_default(step=step):
        for name, value in metrics.items():
          tf.summary.scalar(name, value)
      window_start += time.time() - pause_start  # Throughput counts training time only.
    stopping = stop_requested()
    if stopping or step == total_steps or training.checkpoint_due(step):
      training.checkpoints.save(step)
    if stopping:
      raise Preempted(f"Stopped at step {step} of {total_steps} on request; the checkpoint in "
                      f"{training.checkpoints.directory} resumes it.")
  return metrics


def default_steps_per_loop(strategy: tf.distribute.Strategy) -> int:
  """1 on CPUs (a step outlasts the host round trip), more where the round trip dominates."""
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return 100
  return 10 if tf.config.list_logical_devices("GPU") else 1


def _value(variable) -> float:
  """A (possibly mirrored) scalar variable's value on the host."""
  return float(tf.convert_to_tensor(variable))


def _stop_agreement(strategy: tf.distribute.Strategy,
                    stop_signal: Optional[StopSignal]) -> Callable[[], bool]:
  """Whether to stop after this step. With several workers, all stop at the same step if any
  was told to (a collective needs every worker)."""
  if stop_signal is None:
    return lambda: False
  if strategy.extended._in_multi_worker_mode():  # pylint: disable=protected-access
    @tf.function
    def any_worker(flag):
      return strategy.reduce(tf.distribute.ReduceOp.SUM,
                             strategy.run(lambda f: f, args=(flag,)), axis=None)
    return lambda: int(any_worker(tf.constant(int(stop_signal.received)))) > 0
  return lambda: stop_signal.received
