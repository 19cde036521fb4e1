"""Warm start: matching variables restored exactly and by name, excluded ones left fresh,
mismatches refused before training, resumed runs not warm-started twice, restored variables
fine-tuned at a fraction of the rate of fresh ones, `inspect`."""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import digits_transform_dir
from trainer_module import warm_start
from trainer_module.export import export_serving_model
from trainer_module.model import wide_resnet
from trainer_module.training_loop import Training, learning_rate_schedule

TINY = dict(TINY_NETWORK, seed=1)


def _values(model):
  return {warm_start.variable_name(v): v.numpy() for v in model.variables}


def _trained(tmp_path, steps=3, **config):
  """A tiny WRN's checkpoint directory after `steps` steps of changed weights (not its
  initialisation), written as training writes it; returns (directory, values)."""
  training = Training(plain_trainer(**{**TINY, "seed": 7, **config}),
                      tf.distribute.get_strategy(), steps_per_epoch=10,
                      checkpoint_dir=str(tmp_path / "source"))
  for variable in training.model.variables:
    variable.assign(variable + tf.random.stateless_normal(variable.shape, [0, 1]))
  training.optimizer.iterations.assign(steps)
  training.checkpoints.save(steps)
  return str(tmp_path / "source"), _values(training.model)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """_trained's default source, made once for the module: the tests only read it (its values
  are read-only arrays, warm_start only reads the directory)."""
  source, saved = _trained(tmp_path_factory.mktemp("trained"))
  for value in saved.values():
    value.flags.writeable = False
  return source, saved


def test_every_matching_variable_is_restored_exactly(trained):
  source, saved = trained
  model = wide_resnet(plain_trainer(**TINY))
  record = warm_start.warm_start(model, source, exclude=())
  restored = _values(model)
  assert restored.keys() == saved.keys()
  for name, value in saved.items():
    np.testing.assert_array_equal(restored[name], value, err_msg=name)
  assert record["restored_variables"] == len(saved) and record["excluded_variables"] == []
  assert record["kind"] == "checkpoint" and record["source_step"] == 3


def test_a_savedmodel_is_a_source_too(trained, tmp_path):
  _, saved = trained
  exported = wide_resnet(plain_trainer(**{**TINY, "seed": 7}))
  for variable in exported.variables:
    variable.assign(saved[warm_start.variable_name(variable)])
  # As the Trainer exports it: the serving SavedModel (the network beside the transform graph).
  export_serving_model(exported, tft.TFTransformOutput(digits_transform_dir()),
                       str(tmp_path / "saved_model"))
  model = wide_resnet(plain_trainer(**TINY))
  record = warm_start.warm_start(model, str(tmp_path / "saved_model"), exclude=())
  assert record["kind"] == "saved_model" and record["restored_variables"] == len(saved)
  for name, value in _values(model).items():
    np.testing.assert_array_equal(value, saved[name], err_msg=name)


def test_excluded_head_keeps_its_fresh_initialisation_for_a_new_label_set(trained):
  source, saved = trained
  model = wide_resnet(plain_trainer(**{**TINY, "num_classes": 5}))
  fresh_head = model.get_layer("logits").kernel.numpy()
  record = warm_start.warm_start(model, source, exclude=("head",))
  assert sorted(record["excluded_variables"]) == ["logits/bias", "logits/kernel"]
  np.testing.assert_array_equal(model.get_layer("logits").kernel.numpy(), fresh_head)
  body = {name: value for name, value in _values(model).items()
          if not name.startswith("logits")}
  assert len(body) == len(saved) - 2
  for name, value in body.items():
    np.testing.assert_array_equal(value, saved[name], err_msg=name)


def test_mismatched_variables_fail_with_their_names_and_shapes(trained):
  source, _ = trained
  model = wide_resnet(plain_trainer(**{**TINY, "num_classes": 5}))
  before = _values(model)
  with pytest.raises(warm_start.WarmStartError) as error:
    warm_start.warm_start(model, source, exclude=())
  message = str(error.value)
  assert "2 variable(s) do not match" in message
  assert "logits/kernel: shape [64, 5] here, [64, 10] in the source" in message
  assert "logits/bias: shape [5] here, [10] in the source" in message
  assert all(np.array_equal(v, before[n]) for n, v in _values(model).items()), \
      "nothing is restored when anything mismatches"


def test_spectral_normalisation_can_be_turned_on_or_off_across_a_warm_start(trained, tmp_path):
  """The power-iteration vectors are estimates, not parameters: a normalised model starts its
  own from a source without them, and a plain model ignores a source's. Every weight moves."""
  source, saved = trained
  normalised = wide_resnet(plain_trainer(**TINY, spectral_norm_bound=1.0))
  record = warm_start.warm_start(normalised, source, exclude=())
  vectors = [n for n in _values(normalised) if n.endswith("/power_vector")]
  assert vectors and sorted(record["excluded_variables"]) == sorted(vectors)
  assert record["restored_variables"] == len(saved)
  for name, value in saved.items():
    np.testing.assert_array_equal(_values(normalised)[name], value, err_msg=name)

  normalised_source, normalised_saved = _trained(tmp_path / "sn", spectral_norm_bound=1.0)
  plain = wide_resnet(plain_trainer(**TINY))
  record = warm_start.warm_start(plain, normalised_source, exclude=())
  assert record["restored_variables"] == len(saved) and record["excluded_variables"] == []
  for name, value in _values(plain).items():
    np.testing.assert_array_equal(value, normalised_saved[name], err_msg=name)


def test_an_sngp_head_is_excluded_whole_and_restored_whole(trained, tmp_path):
  """`head` leaves every variable of the GP layer fresh (its random features, its precision),
  so a dense body starts an SNGP model; from an SNGP source with nothing excluded the random
  features come too, without which its trained output weights would mean nothing."""
  source, saved = trained
  model = wide_resnet(plain_trainer(**TINY, output_layer="sngp"))
  fresh = {name: value for name, value in _values(model).items() if name.startswith("logits/")}
  record = warm_start.warm_start(model, source, exclude=("head",))
  assert sorted(record["excluded_variables"]) == sorted(fresh) == [
      "logits/bias", "logits/input_norm_offset", "logits/input_norm_scale", "logits/kernel",
      "logits/precision", "logits/random_phase", "logits/random_projection"]
  restored = _values(model)
  for name, value in fresh.items():
    np.testing.assert_array_equal(restored[name], value, err_msg=name)
  for name, value in saved.items():
    if not name.startswith("logits/"):
      np.testing.assert_array_equal(restored[name], value, err_msg=name)

  sngp_source, sngp_saved = _trained(tmp_path / "sngp", output_layer="sngp")
  model = wide_resnet(plain_trainer(**TINY, output_layer="sngp"))
  record = warm_start.warm_start(model, sngp_source, exclude=())
  assert record["restored_variables"] == len(sngp_saved) and record["excluded_variables"] == []
  for name, value in _values(model).items():
    np.testing.assert_array_equal(value, sngp_saved[name], err_msg=name)


def test_variables_are_matched_by_layer_name_not_by_checkpoint_position(tmp_path):
  """The source has an extra layer before the head: every checkpoint key after it moves
  (layer_with_weights-N), the names do not."""
  def toy(extra):
    inputs = keras.Input((3,))
    x = keras.layers.Dense(4, name="body")(inputs)
    if extra:
      x = keras.layers.Dense(4, name="adapter")(x)
    return keras.Model(inputs, keras.layers.Dense(2, name="logits")(x))

  source = toy(extra=True)
  path = tf.train.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
  with pytest.raises(warm_start.WarmStartError, match=r"adapter/kernel \[4, 4\]: in the source"):
    warm_start.warm_start(toy(extra=False), path, exclude=())
  target = toy(extra=False)
  warm_start.warm_start(target, path, exclude=("adapter",))
  for layer in ("body", "logits"):
    np.testing.assert_array_equal(target.get_layer(layer).kernel.numpy(),
                                  source.get_layer(layer).kernel.numpy())


def test_a_missing_source_is_named():
  with pytest.raises(warm_start.WarmStartError, match="warm_start=/nonexistent: no such"):
    warm_start.locate("/nonexistent")


def test_a_resumed_run_continues_its_own_checkpoints_and_does_not_warm_start_again(
    trained, tmp_path, caplog):
  source, saved = trained
  config = plain_trainer(**TINY, warm_start=source)
  first = Training(config, tf.distribute.get_strategy(), 10, str(tmp_path / "run"),
                   warm_start_from=source)
  first.restore()
  assert first.warm_start_record["source"] == source
  assert first.step == 0, "the optimizer (step, momentum) starts fresh"
  kernel = first.model.get_layer("logits").kernel
  np.testing.assert_array_equal(kernel.numpy(), saved["logits/kernel"])
  kernel.assign(kernel + 1.0)  # What this run's own training changed.
  first.optimizer.iterations.assign(4)
  first.checkpoints.save(4)

  resumed = Training(config, tf.distribute.get_strategy(), 10, str(tmp_path / "run"),
                     warm_start_from=source)
  caplog.clear()  # Only what the resume logs (the first restore may have been captured).
  with caplog.at_level(logging.INFO):
    resumed.restore()
  assert resumed.step == 4
  np.testing.assert_array_equal(resumed.model.get_layer("logits").kernel.numpy(),
                                saved["logits/kernel"] + 1.0)
  assert resumed.warm_start_record == first.warm_start_record, "the record survives the resume"
  assert resumed.learning_rate_ratios == first.learning_rate_ratios == [0.1] * len(
      first.model.trainable_variables), "restored variables keep their rate on resume"
  assert "does not warm-start again" in caplog.text and "Warm-started" not in caplog.text


def test_a_warm_started_run_follows_the_fine_tuning_schedule():
  """The schedule is the fresh variables' rate: the from-scratch peak, warm-up, cosine."""
  config = plain_trainer(**TINY, train_epochs=20, warm_start_lr_ratio=0.1)
  scratch = Training(config, tf.distribute.get_strategy(), 10, "/tmp/unused-scratch")
  tuned = Training(config, tf.distribute.get_strategy(), 10, "/tmp/unused-tuned",
                   warm_start_from="/somewhere")
  assert scratch.total_steps == 200 and tuned.total_steps == 50  # A quarter of train_epochs.
  schedule = learning_rate_schedule(config, steps_per_epoch=10, global_batch_size=64,
                                    fine_tuning=True)
  peak = 0.1 * 64 / 128
  rates = [float(schedule(step)) for step in (0, 2, 5, 50)]
  np.testing.assert_allclose(rates, [0.0, peak * 2 / 5, peak, 0.0], atol=1e-7)
  assert float(schedule(27.5)) == pytest.approx(peak / 2, rel=1e-5)  # Cosine midpoint.


def _one_step_moves(source, tmp_path, strategy, ratio, batch):
  """{variable name: change} of one 5-class fine-tuning step from `source` with the head
  excluded, and the run's per-variable ratios. No warm-up: 5 steps of one epoch. A large rate,
  so that moves stand far above the rounding of the weights (~1e-7)."""
  config = plain_trainer(**TINY,
                                   num_classes=5,
                                   warm_start=source,
                                   warm_start_exclude=("head",),
                                   warm_start_lr_ratio=ratio,
                                   warm_start_epochs=1,
                                   per_core_batch_size=len(batch[2]),
                                   base_learning_rate=10.0)
  training = Training(config, strategy, 5, str(tmp_path / f"run-{ratio}"),
                      warm_start_from=source)
  training.restore()
  before = {warm_start.variable_name(v): v.numpy() for v in training.model.trainable_variables}
  data = tf.data.Dataset.from_tensors(batch).repeat()
  training.train_step(iter(strategy.experimental_distribute_dataset(data)))
  moves = {warm_start.variable_name(v): v.numpy() - before[warm_start.variable_name(v)]
           for v in training.model.trainable_variables}
  return moves, training.learning_rate_ratios


@pytest.mark.parametrize("strategy,policy", [("default", "float32"), ("mirrored", "float32"),
                                             ("default", "mixed_float16")])
def test_restored_variables_move_by_the_ratio_times_the_step_of_fresh_ones(
    trained, tmp_path, strategy, policy, caplog):
  """The same first step at ratio 0.1 and at 1: the fresh head moves the same, every restored
  variable a tenth (with Nesterov SGD a scaled gradient is a scaled rate), also through a
  MirroredStrategy's update and loss scaling."""
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0"]) if strategy == "mirrored"
              else tf.distribute.get_strategy())
  source, _ = trained
  # A batch of 2: a float16 training step on CPU costs ~0.2 CPU-s an image, and the ratio of
  # two moves does not depend on the batch.
  rng = np.random.default_rng(0)
  batch = (rng.normal(size=(2, 32, 32, 3)).astype(np.float32),
           np.zeros((2, 0, 32, 32, 3), np.float32), rng.integers(0, 5, 2))
  keras.mixed_precision.set_global_policy(policy)
  try:
    with caplog.at_level(logging.INFO):
      tenth, ratios = _one_step_moves(source, tmp_path, strategy, 0.1, batch)
    full, _ = _one_step_moves(source, tmp_path, strategy, 1.0, batch)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  head = {"logits/kernel", "logits/bias"}
  assert sorted(ratios) == [0.1] * (len(ratios) - 2) + [1.0, 1.0]
  assert f"{len(ratios) - 2} restored variables at lr x0.1, 2 new at full lr" in caplog.text
  for name, move in full.items():
    assert np.abs(move).max() > 0, name
    expected = move if name in head else 0.1 * move
    assert np.linalg.norm(tenth[name]) == pytest.approx(np.linalg.norm(expected), rel=1e-3), name
    np.testing.assert_allclose(tenth[name], expected, rtol=1e-2, atol=1e-6, err_msg=name)


def test_inspect_lists_variables_step_and_config(tmp_path):
  source, saved = _trained(tmp_path, steps=5)
  text = warm_start.inspect(source)
  assert text.splitlines()[0] == f"checkpoint: {os.path.join(source, 'ckpt-5')}"
  assert "step: 5" in text
  config = json.loads(text.split("trainer config: ")[1].splitlines()[0])
  assert config["depth"] == 10 and config["seed"] == 7
  assert f"model variables: {len(saved)}" in text
  assert any(line.split() == ["logits/kernel", "[64,", "10]", "float32"]
             for line in text.splitlines())


def test_a_source_of_another_depth_is_refused_before_training_naming_both(trained):
  source, _ = trained  # depth 10, width 1
  warm_start.check_source(source, plain_trainer(**TINY).to_dict())
  with pytest.raises(warm_start.WarmStartError, match=r"another architecture \(depth=10 there, "
                     r"16 here\)"):
    warm_start.check_source(source, plain_trainer(**{**TINY, "depth": 16}).to_dict())
