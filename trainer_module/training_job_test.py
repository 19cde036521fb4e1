"""A run that stops part-way resumes in-process, in seconds on the tiny network: the checkpoint
is restored, the input starts past the examples already trained on, and the step counter goes on
from where it stopped. (tests/standalone_trainer_test.py kills real processes, end to end.)"""
import json
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import REPO, transformed_digits
from trainer_module import training_job
from trainer_module.checkpoints import Preempted

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


def test_sigterm_stops_the_run_after_the_current_step_with_a_checkpoint_it_resumes_from(
    inputs, tmp_path, monkeypatch, spied):
  """How a scheduler preempts a worker: the signal arrives during step 3 of 8."""
  fit, steps = training_job.fit, []

  def fit_signalled_during_step_3(training, *args, **kwargs):
    train_step = training.train_step

    def step(batches):
      steps.append(training.step)
      if len(steps) == 3:
        os.kill(os.getpid(), signal.SIGTERM)
      return train_step(batches)

    training.train_step = step
    return fit(training, *args, **kwargs)

  monkeypatch.setattr(training_job, "fit", fit_signalled_during_step_3)
  paths = _paths(inputs, tmp_path)
  handler = signal.getsignal(signal.SIGTERM)
  with pytest.raises(Preempted, match=r"^Stopped at step 3 of 8 on request"):
    training_job.run(_config(), paths)
  assert len(steps) == 3
  assert tf.train.latest_checkpoint(paths.checkpoint_dir).endswith("ckpt-3")
  assert signal.getsignal(signal.SIGTERM) == handler  # The run's handler is gone with it.

  monkeypatch.setattr(training_job, "fit", fit)
  training_job.run(_config(), paths)
  assert spied["restores"] == [0, 3]
  assert spied["start_examples"] == [0, 3 * BATCH]


class _FirstStep(Exception):
  """Ends a run at its first step: these tests look at the input, not at the training."""


def _first_step_labels(config, paths):
  """The labels of a run's first step, as each of its replicas receives them."""
  seen, fit = [], training_job.fit

  def first_step(training, train_dataset, *args, **kwargs):
    _, _, labels = next(iter(train_dataset))
    seen.extend(replica.numpy().tolist()
                for replica in training.strategy.experimental_local_results(labels))
    raise _FirstStep()

  training_job.fit = first_step
  try:
    training_job.run(config, paths)
  except _FirstStep:
    pass
  finally:
    training_job.fit = fit
  return seen


# In a process of its own: the CPU must be split into two logical devices before TensorFlow
# starts.
_TWO_REPLICAS = """
import json, pathlib, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from trainer_module.training_job_test import BATCH, _config, _first_step_labels, _paths
print(json.dumps(_first_step_labels(
    _config(per_core_batch_size=BATCH, distribution_strategy="mirrored"),
    _paths(json.loads(sys.argv[1]), pathlib.Path(sys.argv[2])))))
"""


def test_two_replicas_each_train_on_their_half_of_the_global_batch_one_device_trains_on(
    inputs, tmp_path):
  one_device = _first_step_labels(_config(per_core_batch_size=2 * BATCH),
                                  _paths(inputs, tmp_path / "one"))
  assert [len(labels) for labels in one_device] == [2 * BATCH]
  process = subprocess.run([sys.executable, "-c", _TWO_REPLICAS, json.dumps(inputs),
                            str(tmp_path / "two")], cwd=REPO,
                           env={**os.environ, "PYTHONPATH": REPO},
                           capture_output=True, text=True, timeout=300)
  assert process.returncode == 0, process.stderr[-3000:]
  two_replicas = json.loads(process.stdout.strip().splitlines()[-1])
  assert two_replicas == [one_device[0][:BATCH], one_device[0][BATCH:]]
