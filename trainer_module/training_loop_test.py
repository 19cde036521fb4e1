"""The learning-rate schedule and a training loop that learns."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, learnable_images, plain_trainer
from trainer_module.training_loop import (Training, WarmUpPiecewiseConstantSchedule, fit,
                                  jensen_shannon, learning_rate_schedule, make_optimizer)


def test_schedule_warms_up_linearly_then_decays_at_each_boundary():
  schedule = WarmUpPiecewiseConstantSchedule(steps_per_epoch=10, base_learning_rate=0.4,
                                             decay_ratio=0.2, decay_epochs=[3, 6],
                                             warmup_epochs=2)
  rates = [float(schedule(step)) for step in (0, 5, 10, 20, 29, 30, 59, 60, 100)]
  np.testing.assert_allclose(rates, [0.0, 0.1, 0.2, 0.4, 0.4, 0.08, 0.08, 0.016, 0.016],
                             rtol=1e-6)


def test_learning_rate_scales_with_batch_and_decay_epochs_with_train_epochs():
  config = plain_trainer(base_learning_rate=0.1, per_core_batch_size=64, train_epochs=20,
                         lr_decay_epochs=(60, 120, 160), lr_warmup_epochs=0)
  schedule = learning_rate_schedule(config, steps_per_epoch=10, global_batch_size=64)
  assert schedule.decay_epochs == [6, 12, 16]
  assert float(schedule(0)) == pytest.approx(0.05)
  optimizer = make_optimizer(config, steps_per_epoch=10, global_batch_size=64)
  assert optimizer.nesterov and float(optimizer.momentum) == pytest.approx(0.9)


def test_the_configs_warm_up_rises_linearly_over_its_epochs_then_the_decays_follow():
  """lr_warmup_epochs=2 of 10 steps at 0.1 per 128 examples, batches of 64: the rate climbs
  0.05 / 20 per step to 0.05 at step 20, then falls x0.2 at epochs 6, 12 and 16 (60, 120 and
  160 of a 200-epoch run, scaled to 20 epochs); the warm-up is not scaled."""
  config = plain_trainer(base_learning_rate=0.1, per_core_batch_size=64, train_epochs=20,
                         lr_decay_epochs=(60, 120, 160), lr_decay_ratio=0.2,
                         lr_warmup_epochs=2)
  schedule = learning_rate_schedule(config, steps_per_epoch=10, global_batch_size=64)
  steps = [0, 1, 5, 10, 15, 19, 20, 21, 59, 60, 119, 120, 160, 199]
  np.testing.assert_allclose(
      [float(schedule(step)) for step in steps],
      [0.0, 0.0025, 0.0125, 0.025, 0.0375, 0.0475, 0.05, 0.05, 0.05, 0.01, 0.01, 0.002, 0.0004,
       0.0004], rtol=1e-5, atol=1e-9)


def test_a_fine_tuning_run_warms_up_over_a_tenth_of_its_steps_then_follows_a_cosine():
  """5 epochs of 10 steps: 5 warm-up steps to 0.05, then 0.025 (1 + cos(pi (step - 5) / 45))."""
  config = plain_trainer(base_learning_rate=0.1, per_core_batch_size=64, warm_start_epochs=5)
  schedule = learning_rate_schedule(config, steps_per_epoch=10, global_batch_size=64,
                                    fine_tuning=True)
  steps = [0, 1, 4, 5, 30, 45, 50, 60]
  np.testing.assert_allclose(
      [float(schedule(step)) for step in steps],
      [0.0, 0.01, 0.04, 0.05, 0.0206588, 0.0015077, 0.0, 0.0], rtol=1e-4, atol=1e-7)


def _fit(config, images, views, labels, tmp_path):
  """Trains on in-memory arrays with the default strategy; returns (training, final metrics).
  (The data restarts from the beginning on resume.)"""
  strategy = tf.distribute.get_strategy()
  steps_per_epoch = len(labels) // config.training.per_core_batch_size
  training = Training(config, strategy, steps_per_epoch, str(tmp_path / "checkpoints"))
  training.restore()  # Continues a checkpoint an earlier _fit left in tmp_path.
  train_data = tf.data.Dataset.from_tensor_slices((images, views, labels)).shuffle(
      len(labels), seed=0).repeat().batch(config.training.per_core_batch_size, drop_remainder=True)
  eval_data = tf.data.Dataset.from_tensor_slices(
      (images, labels, np.ones(len(labels), np.float32))).batch(config.training.eval_batch_size)
  metrics = fit(training, strategy.experimental_distribute_dataset(train_data),
                strategy.experimental_distribute_dataset(eval_data),
                tf.summary.create_noop_writer())
  return training, metrics


def test_training_fits_a_learnable_problem(tmp_path):
  images, no_views, labels = learnable_images()
  config = plain_trainer(**TINY_NETWORK, num_classes=2, train_epochs=4,
                         per_core_batch_size=32, eval_batch_size=64, lr_warmup_epochs=0,
                         log_every_steps=8)
  training, metrics = _fit(config, images, no_views, labels, tmp_path)
  assert metrics["eval/accuracy"] >= 0.95
  assert {"train/loss", "train/nll", "train/ece", "eval/nll", "eval/ece"} <= metrics.keys()
  assert training.step == 16 and training.examples_seen == 16 * 32
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-16")


def test_a_spectrally_normalised_model_learns_and_resumes_with_its_power_iteration(tmp_path):
  images, no_views, labels = learnable_images()
  config = plain_trainer(**TINY_NETWORK, num_classes=2, train_epochs=4,
                         per_core_batch_size=32, eval_batch_size=64, lr_warmup_epochs=0,
                         log_every_steps=8, spectral_norm_bound=3.0)
  training, metrics = _fit(config, images, no_views, labels, tmp_path)
  assert metrics["eval/accuracy"] >= 0.95

  def power_vectors(model):
    return {v.name: v.numpy() for v in model.non_trainable_variables if "power_vector" in v.name}

  trained = power_vectors(training.model)
  assert len(trained) == 9  # Every convolution of a WRN-10-1.
  resumed = Training(config, tf.distribute.get_strategy(), 4, str(tmp_path / "checkpoints"))
  resumed.restore()
  assert resumed.step == 16
  for name, vector in power_vectors(resumed.model).items():
    np.testing.assert_array_equal(vector, trained[name], err_msg=name)


def test_jensen_shannon_is_zero_for_agreeing_views_and_matches_numpy():
  logits = tf.constant([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
  agreeing = jensen_shannon(logits, tf.stack([logits, logits], axis=1))
  np.testing.assert_allclose(agreeing, [0.0, 0.0], atol=1e-6)
  views = tf.constant([[[0.0, 2.0, -1.0], [1.0, 1.0, 1.0]], [[0.5, 0.0, 3.0], [0.0, 0.0, 0.0]]])
  p = tf.nn.softmax(tf.concat([logits[:, None], views], axis=1)).numpy()
  mixture = p.mean(axis=1, keepdims=True)
  expected = np.mean(np.sum(p * (np.log(p) - np.log(mixture)), axis=-1), axis=1)
  np.testing.assert_allclose(jensen_shannon(logits, views), expected, rtol=1e-5)


def test_the_loss_of_a_step_with_two_views_adds_the_weighted_jensen_shannon_term():
  """One seeded step on one batch at weights 0 and 12: the losses differ by 12 x the
  Jensen-Shannon term of the step's logits, computed here with numpy."""
  rng = np.random.default_rng(1)
  images = rng.normal(size=(16, 32, 32, 3)).astype(np.float32)
  views = rng.normal(size=(16, 2, 32, 32, 3)).astype(np.float32) * 8  # Far from the images.
  labels = rng.integers(0, 3, 16)
  batch = tf.data.Dataset.from_tensors((images, views, labels))
  losses, divergences = {}, {}
  for weight in (0.0, 12.0):
    config = plain_trainer(**TINY_NETWORK, num_classes=3, per_core_batch_size=16,
                           train_steps=1, augmix=True, aug_count=2, lr_warmup_epochs=0,
                           augmix_jsd_weight=weight)
    training = Training(config, tf.distribute.get_strategy(), 1, "/nonexistent")
    # The step's forward pass: batch statistics, so calling it first changes no logit.
    logits = training.model(np.concatenate([images, views.reshape(-1, 32, 32, 3)]),
                            training=True).numpy().astype(np.float64)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    p = np.stack([p[:16], p[16:].reshape(16, 2, 3)[:, 0], p[16:].reshape(16, 2, 3)[:, 1]], 1)
    mixture = p.mean(axis=1, keepdims=True)
    divergences[weight] = np.mean(np.sum(p * (np.log(p) - np.log(mixture)), axis=-1))
    losses[weight] = float(training.train_step(iter(batch)))
  assert divergences[0.0] == pytest.approx(divergences[12.0], rel=1e-6)  # The same weights.
  assert divergences[0.0] > 0.01  # Views that disagree: a term the difference can show.
  assert losses[12.0] - losses[0.0] == pytest.approx(12 * divergences[0.0], rel=1e-3)


def test_host_loops_end_at_each_log_epoch_and_checkpoint_step():
  config = plain_trainer(**TINY_NETWORK, train_steps=30, steps_per_loop=8,
                         log_every_steps=10, checkpoint_steps=7)
  training = Training(config, tf.distribute.get_strategy(), steps_per_epoch=12,
                      checkpoint_dir="/nonexistent")
  ends, step = [], 0
  while step < training.total_steps:
    step += training.loop_steps(step)
    ends.append(step)
  assert ends == [7, 10, 12, 14, 20, 21, 24, 28, 30]


def test_n_steps_per_call_give_the_weights_of_n_calls(tmp_path):
  rng = np.random.default_rng(4)
  images = rng.normal(size=(128, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 3, 128)
  no_views = np.zeros((128, 0, 32, 32, 3), np.float32)
  runs = {}
  for steps_per_loop in (1, 4):
    config = _tiny_config(train_steps=8, train_epochs=2, steps_per_loop=steps_per_loop,
                          log_every_steps=100)
    runs[steps_per_loop] = _fit(config, images, no_views, labels, tmp_path / str(steps_per_loop))
  (single, single_metrics), (looped, looped_metrics) = runs[1], runs[4]
  assert "train_loop" not in vars(single) and "train_step" not in vars(looped)  # What ran.
  assert looped.step == 8 and looped.examples_seen == 8 * 16
  # Equal up to the order of multi-threaded sums; bit-identical under op determinism (the
  # preemption test in tests/standalone_trainer_test.py resumes with loops against one step per
  # call).
  for expected, actual in zip(single.model.variables + single.optimizer.variables(),
                              looped.model.variables + looped.optimizer.variables()):
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=0, atol=1e-6,
                               err_msg=expected.name)
  assert looped_metrics == pytest.approx(single_metrics, rel=1e-5)


def _policy_run(policy, config, images, labels, tmp_path):
  """_fit under the global Keras `policy` (set back to float32 afterwards)."""
  keras.mixed_precision.set_global_policy(policy)
  try:
    return _fit(config, images, np.zeros((len(labels), 0, 32, 32, 3), np.float32), labels,
                tmp_path)
  finally:
    keras.mixed_precision.set_global_policy("float32")


def _tiny_config(**overrides):
  return plain_trainer(**dict(dict(TINY_NETWORK, num_classes=3,
                                   per_core_batch_size=16, eval_batch_size=16, train_steps=2,
                                   train_epochs=1, lr_warmup_epochs=0), **overrides))


def test_mixed_float16_trains_with_loss_scaling_and_float32_weights(tmp_path):
  """Batches of 2: a float16 training step on CPU costs ~0.2 CPU-s an image, and what is
  checked (the optimizer, the dtypes, finite losses after loss-scaled steps) does not depend on
  the batch."""
  rng = np.random.default_rng(2)
  images = rng.normal(size=(4, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 3, 4)
  training, metrics = _policy_run(
      "mixed_float16", _tiny_config(per_core_batch_size=2, eval_batch_size=2), images, labels,
      tmp_path)
  assert training.step == 2  # Two loss-scaled steps, two batches an epoch.
  assert isinstance(training.optimizer, keras.mixed_precision.LossScaleOptimizer)
  assert training.model.layers[1].compute_dtype == "float16"
  assert all(v.dtype == tf.float32 for v in training.model.trainable_variables)
  assert np.isfinite(metrics["train/loss"]) and np.isfinite(metrics["eval/nll"])


def test_mixed_bfloat16_trains_without_loss_scaling_and_records_its_policy(tmp_path):
  rng = np.random.default_rng(2)
  images = rng.normal(size=(32, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 3, 32)
  training, metrics = _policy_run("mixed_bfloat16", _tiny_config(), images, labels, tmp_path)
  assert not isinstance(training.optimizer, keras.mixed_precision.LossScaleOptimizer)
  assert training.model.layers[1].compute_dtype == "bfloat16"
  assert np.isfinite(metrics["train/loss"]) and np.isfinite(metrics["eval/nll"])
  reader = tf.train.load_checkpoint(str(tmp_path / "checkpoints"))
  assert reader.get_tensor("state/precision/.ATTRIBUTES/VARIABLE_VALUE") == 2


def test_resume_switches_between_float32_and_bfloat16_but_refuses_float16(tmp_path, caplog):
  rng = np.random.default_rng(3)
  images = rng.normal(size=(32, 32, 32, 3)).astype(np.float32)
  labels = rng.integers(0, 3, 32)
  _policy_run("float32", _tiny_config(), images, labels, tmp_path)
  training, _ = _policy_run("mixed_bfloat16", _tiny_config(train_steps=4), images, labels,
                            tmp_path)
  assert training.step == 4 and "trained with float32; continuing with mixed_bfloat16" in (
      caplog.text)
  with pytest.raises(ValueError, match="was trained with mixed_precision=mixed_bfloat16, this "
                                       "run uses mixed_float16.*--mixed_precision=mixed_bf"):
    _policy_run("mixed_float16", _tiny_config(train_steps=6), images, labels, tmp_path)
