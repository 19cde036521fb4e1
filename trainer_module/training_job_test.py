"""A run that stops part-way resumes in-process, in seconds on the tiny network: the checkpoint
is restored, the input starts past the examples already trained on, and the step counter goes on
from where it stopped. (tests/standalone_trainer_test.py kills real processes, end to end.)"""
import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import transformed_digits
from trainer_module import training_job

BATCH = 16
TRAIN_EXAMPLES = 64  # 4 steps an epoch.


@pytest.fixture(scope="module")
def inputs():
  return transformed_digits(count=TRAIN_EXAMPLES + BATCH, eval_count=BATCH)


def _config(**fields):
  return plain_trainer(**{**TINY_NETWORK, **dict(
      per_core_batch_size=BATCH, eval_batch_size=BATCH, train_epochs=2, lr_warmup_epochs=0,
      log_every_steps=1, mode="train"), **fields})


def _paths(inputs, tmp_path):
  return training_job.RunPaths(train_files=[inputs["train_files"]],
                               eval_files=[inputs["eval_files"]],
                               transform_output=inputs["transform_output"],
                               checkpoint_dir=str(tmp_path / "checkpoints"),
                               log_dir=str(tmp_path / "logs"))


@pytest.fixture
def spied(monkeypatch):
  """What each run restored, where its input started and the step its training started from."""
  seen = {"restores": [], "start_examples": [], "fit_from": []}
  restore, training_batches, fit = (training_job.Training.restore,
                                    training_job.data.training_batches, training_job.fit)

  def spy_restore(training):
    restore(training)
    seen["restores"].append(training.step)

  def spy_training_batches(files, spec, config, batch_size, start_example=0, *args, **kwargs):
    seen["start_examples"].append(start_example)
    return training_batches(files, spec, config, batch_size, start_example, *args, **kwargs)

  def spy_fit(training, *args, **kwargs):
    seen["fit_from"].append((training.step, training.examples_seen))
    metrics = fit(training, *args, **kwargs)
    seen["fit_to"] = training.step
    return metrics

  monkeypatch.setattr(training_job.Training, "restore", spy_restore)
  monkeypatch.setattr(training_job.data, "training_batches", spy_training_batches)
  monkeypatch.setattr(training_job, "fit", spy_fit)
  return seen


def test_a_stopped_run_resumes_from_its_checkpoint_past_the_examples_it_trained_on(
    inputs, tmp_path, spied):
  paths = _paths(inputs, tmp_path)
  training_job.run(_config(train_steps=3), paths)  # Stops after 3 of the 8 steps.
  assert tf.train.latest_checkpoint(paths.checkpoint_dir).endswith("ckpt-3")
  assert spied == {"restores": [0], "start_examples": [0], "fit_from": [(0, 0)], "fit_to": 3}

  training_job.run(_config(), paths)  # The same run, to its end.
  assert spied["restores"] == [0, 3]
  assert spied["start_examples"] == [0, 3 * BATCH]
  assert spied["fit_from"] == [(0, 0), (3, 3 * BATCH)]
  assert spied["fit_to"] == 8
  assert tf.train.latest_checkpoint(paths.checkpoint_dir).endswith("ckpt-8")


def test_a_finished_run_is_not_trained_again(inputs, tmp_path, spied):
  paths = _paths(inputs, tmp_path)
  training_job.run(_config(), paths)
  training_job.run(_config(), paths)
  assert spied["restores"] == [0, 8]
  assert spied["fit_from"] == [(0, 0)]  # The second run restores and stops.


def test_a_finished_run_with_an_eval_split_is_only_evaluated_again(inputs, tmp_path, spied):
  paths = _paths(inputs, tmp_path)
  trained = training_job.run(_config(mode="train_and_eval"), paths)
  again = training_job.run(_config(mode="train_and_eval"), paths)
  assert spied["fit_from"] == [(0, 0)]  # Not trained again...
  evaluated = {name: value for name, value in trained.items() if name.startswith("eval/")}
  assert evaluated and again == pytest.approx(evaluated, abs=1e-6)  # ...its checkpoint scored.


def test_a_run_trains_in_its_precision_policy_and_leaves_the_global_one_as_it_found_it(
    inputs, tmp_path, monkeypatch):
  """TFX's local runner runs the trial Trainers and then the EnsembleSelector in one process:
  a mixed policy left behind would make the ensemble network compute in 16 bits."""
  policies, fit = [], training_job.fit

  def spy_fit(training, *args, **kwargs):
    policies.append(keras.mixed_precision.global_policy().name)
    return fit(training, *args, **kwargs)

  monkeypatch.setattr(training_job, "fit", spy_fit)
  assert keras.mixed_precision.global_policy().name == "float32"
  training_job.run(_config(mixed_precision="mixed_bfloat16", train_steps=1),
                   _paths(inputs, tmp_path))
  assert policies == ["mixed_bfloat16"]
  assert keras.mixed_precision.global_policy().name == "float32"
  # A run that fails after choosing its policy leaves it behind neither.
  with pytest.raises(ValueError, match="fewer than one global batch"):
    training_job.run(_config(mixed_precision="mixed_bfloat16",
                             per_core_batch_size=4 * TRAIN_EXAMPLES), _paths(inputs, tmp_path))
  assert keras.mixed_precision.global_policy().name == "float32"
