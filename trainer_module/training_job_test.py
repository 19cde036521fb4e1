"""A run that stops part-way resumes in-process, in seconds on the tiny network: the checkpoint
is restored, the input starts past the examples already trained on, and the step counter goes on
from where it stopped. (tests/standalone_trainer_test.py kills real processes, end to end.)"""
import copy
import json
import os
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf
import tf_keras as keras

from test_support.mutation_runs import per_test_while_mapping
from test_support.tiny_config import TINY_NETWORK, plain_trainer
from trainer_module import training_job
from trainer_module.checkpoints import Preempted

BATCH = 16
TRAIN_EXAMPLES = 64  # 4 steps an epoch.


@pytest.fixture(scope="module")
def inputs():
  # Imported here, not at the top: the two-replica child process imports this module, and
  # Beam's import costs it seconds of CPU it does not need.
  from test_support.transform_runs import transformed_digits
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


def _spy(monkeypatch):
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


def _signalled_during_second_step(fit, steps):
  """`fit`, with a SIGTERM sent to this process during the run's second step (how a scheduler
  preempts a worker); `steps` collects the step each train_step call started at."""
  def fit_signalled(training, *args, **kwargs):
    train_step = training.train_step

    def step(batches):
      steps.append(training.step)
      if len(steps) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
      return train_step(batches)

    training.train_step = step
    return fit(training, *args, **kwargs)
  return fit_signalled


def _snapshot(seen, paths):
  return {**copy.deepcopy(seen),
          "checkpoint": os.path.basename(tf.train.latest_checkpoint(paths.checkpoint_dir))}


# Per test while mutmut maps which test calls which function (test_support/mutation_runs.py):
# every test below then meets the mutants of the code these runs call.
@pytest.fixture(scope=per_test_while_mapping)
def lifetime(inputs, tmp_path_factory):
  """One run's life in five runs over one checkpoint directory, what each saw recorded for the
  tests below (each training run costs seconds of model building and tracing):
  1. `stopped`: train_steps=3 stops it after 3 of its 8 steps;
  2. `preempted`: the same run without train_steps, sent SIGTERM during its second step (5);
  3. `resumed`: to its end, with an eval split;
  4. `evaluated_again`: run again with the eval split;
  5. `again`: run again without it."""
  paths = _paths(inputs, tmp_path_factory.mktemp("lifetime"))
  history = {}
  with pytest.MonkeyPatch.context() as monkeypatch:
    seen = _spy(monkeypatch)
    training_job.run(_config(train_steps=3), paths)
    history["stopped"] = _snapshot(seen, paths)

    steps, spied_fit = [], training_job.fit
    monkeypatch.setattr(training_job, "fit", _signalled_during_second_step(spied_fit, steps))
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted) as preempted:
      training_job.run(_config(), paths)
    history["preempted"] = {**_snapshot(seen, paths), "message": str(preempted.value),
                            "steps": steps,
                            "handler_restored": signal.getsignal(signal.SIGTERM) == handler}
    monkeypatch.setattr(training_job, "fit", spied_fit)

    metrics = training_job.run(_config(mode="train_and_eval"), paths)
    history["resumed"] = {**_snapshot(seen, paths), "metrics": metrics}
    metrics = training_job.run(_config(mode="train_and_eval"), paths)
    history["evaluated_again"] = {**_snapshot(seen, paths), "metrics": metrics}
    metrics = training_job.run(_config(), paths)
    history["again"] = {**_snapshot(seen, paths), "metrics": metrics}
  return history


def test_a_stopped_run_resumes_from_its_checkpoint_past_the_examples_it_trained_on(lifetime):
  assert lifetime["stopped"] == {"restores": [0], "start_examples": [0], "fit_from": [(0, 0)],
                                 "fit_to": 3, "checkpoint": "ckpt-3"}
  # Continued (preempted at step 5, then to its end): each run restores the last checkpoint,
  # starts its input past the examples trained on, and its step counter goes on.
  resumed = lifetime["resumed"]
  assert resumed["restores"] == [0, 3, 5]
  assert resumed["start_examples"] == [0, 3 * BATCH, 5 * BATCH]
  assert resumed["fit_from"] == [(0, 0), (3, 3 * BATCH), (5, 5 * BATCH)]
  assert resumed["fit_to"] == 8
  assert resumed["checkpoint"] == "ckpt-8"


def test_sigterm_stops_the_run_after_the_current_step_with_a_checkpoint_it_resumes_from(
    lifetime):
  """The signal arrives during step 5 of 8 (the second step of a run resumed at 3)."""
  preempted = lifetime["preempted"]
  assert re.match(r"^Stopped at step 5 of 8 on request", preempted["message"])
  assert preempted["steps"] == [3, 4]  # No step after the one the signal arrived in.
  assert preempted["checkpoint"] == "ckpt-5"
  assert preempted["handler_restored"]  # The run's handler is gone with it.
  assert lifetime["resumed"]["restores"][1:] == [3, 5]
  assert lifetime["resumed"]["start_examples"][1:] == [3 * BATCH, 5 * BATCH]


def test_a_finished_run_is_not_trained_again(lifetime):
  again = lifetime["again"]
  assert again["restores"][-1] == 8 and again["checkpoint"] == "ckpt-8"
  assert again["fit_from"] == lifetime["resumed"]["fit_from"]  # It restores and stops.
  assert again["metrics"] == {}


def test_a_finished_run_with_an_eval_split_is_only_evaluated_again(lifetime):
  again = lifetime["evaluated_again"]
  assert again["restores"][-1] == 8
  assert again["fit_from"] == lifetime["resumed"]["fit_from"]  # Not trained again...
  evaluated = {name: value for name, value in lifetime["resumed"]["metrics"].items()
               if name.startswith("eval/")}
  assert evaluated and again["metrics"] == pytest.approx(evaluated, abs=1e-6)  # ...scored.


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
  from test_support.transform_runs import REPO
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
