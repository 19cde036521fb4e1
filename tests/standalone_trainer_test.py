"""`python -m trainer_module` as GPU/TPU workers run it: modes, strategies, preemption."""
import json
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from configs.flags import over_defaults
from tests.conftest import REPO
from test_support.tiny_config import PLAIN_FLAGS, TINY_NETWORK_FLAGS
from test_support.transform_runs import transformed_digits
from trainer_module.__main__ import main as trainer_main

pytestmark = pytest.mark.e2e  # Training processes killed and resumed, several workers.

# The plain network on inputs transformed without AugMix views (test_support/transform_runs.py).
TINY = [*TINY_NETWORK_FLAGS, *PLAIN_FLAGS, "--lr_warmup_epochs=0", "--log_every_steps=1"]


@pytest.fixture(scope="module")
def inputs():
  paths = transformed_digits(count=160, eval_count=32)
  return [f"--{name}={value}" for name, value in paths.items()]


# The run several tests start from (two epochs of 8 steps, a checkpoint every 4): trained once
# per module, copied by each test that writes to it.
TRAINED = ["--per_core_batch_size=16", "--train_epochs=2", "--checkpoint_steps=4"]


class TrainedRun(NamedTuple):
  output_dir: pathlib.Path
  log: str

  @property
  def serving_model(self) -> str:
    return str(self.output_dir / "serving_model")


@pytest.fixture(scope="module")
def trained(inputs, tmp_path_factory):
  """One run with the TRAINED flags."""
  output_dir = tmp_path_factory.mktemp("trained")
  return TrainedRun(output_dir, run_trainer(inputs, output_dir, *TRAINED))


def copy_of(trained, path):
  shutil.copytree(trained.output_dir, path)
  return path


def trainer_command(inputs, output_dir, *flags):
  return [sys.executable, "-m", "trainer_module",
          *over_defaults([*inputs, f"--output_dir={output_dir}", *TINY], flags)]


def run_trainer(inputs, output_dir, *flags, env=None, timeout=300):
  process = subprocess.run(trainer_command(inputs, output_dir, *flags), cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=timeout)
  assert process.returncode == 0, process.stderr[-3000:]
  return process.stderr


def final_variables(output_dir):
  """{name: value} of the model and optimizer in the newest checkpoint."""
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(
      os.path.join(output_dir, "checkpoints")))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith(("model/", "optimizer/"))}


def _start_then_interrupt(inputs, output_dir, flags, kill_with, delay, log_path):
  """Starts the trainer, sends `kill_with` `delay` s after its first step; returns its log."""
  with open(log_path, "w") as log:
    process = subprocess.Popen(trainer_command(inputs, output_dir, *flags), cwd=REPO,
                               stdout=log, stderr=subprocess.STDOUT, text=True)
    while " step " not in log_path.read_text() and process.poll() is None:
      time.sleep(0.05)
    time.sleep(delay)
    process.send_signal(kill_with)
    returncode = process.wait(timeout=120)
  return returncode, log_path.read_text()


def test_killed_and_preempted_runs_resume_to_bit_identical_weights(inputs, tmp_path):
  """The interrupted runs take 3 steps per host call (loops end at logs every 5 steps and
  checkpoints every 7), the reference one per call: the same weights, bit for bit."""
  flags = ["--per_core_batch_size=16", "--train_epochs=20", "--checkpoint_steps=7",
           "--op_determinism=true"]
  reference = tmp_path / "reference"
  run_trainer(inputs, reference, *flags)
  flags += ["--steps_per_loop=3", "--log_every_steps=5"]

  resumed = tmp_path / "resumed"
  moments = random.Random(0)
  logs = []
  for attempt, kill_with in enumerate([signal.SIGKILL, signal.SIGTERM, signal.SIGKILL]):
    returncode, output = _start_then_interrupt(inputs, resumed, flags, kill_with,
                                               moments.uniform(0.2, 1.2),
                                               tmp_path / f"log-{attempt}.txt")
    if kill_with == signal.SIGTERM:
      assert returncode == 143 and "Stopped at step" in output, output[-2000:]
    else:
      assert returncode == -signal.SIGKILL
    logs.append(output)
  stopped_at = logs[1].split("Stopped at step ")[1].split()[0]
  assert f"at step {stopped_at} " in logs[2], "resume must start at the step SIGTERM saved"
  output = run_trainer(inputs, resumed, *flags)
  assert "Resuming from" in output

  expected, actual = final_variables(reference), final_variables(resumed)
  assert expected.keys() == actual.keys()
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)
  assert os.path.isfile(resumed / "serving_model" / "saved_model.pb")


def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(inputs, trained, tmp_path):
  output_dir = copy_of(trained, tmp_path / "run")
  newest = tf.train.latest_checkpoint(str(output_dir / "checkpoints"))
  assert newest.startswith(str(output_dir)), "the copy's own checkpoints"
  data_file = newest + ".data-00000-of-00001"
  with open(data_file, "r+b") as f:
    f.truncate(os.path.getsize(data_file) // 2)
  output = run_trainer(inputs, output_dir, *TRAINED)
  assert f"Checkpoint {newest} is damaged" in output
  assert "Resuming from" in output and "ckpt-12" in output  # 16 steps; kept: 8, 12, 16.


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_mirrored_and_multi_worker_runs_match_one_device_with_the_same_global_batch(inputs,
                                                                                    tmp_path):
  # float32: the comparison is about distribution; bfloat16's rounding depends on the order of
  # the cross-replica sums, far beyond these tolerances.
  steps = ["--train_epochs=1", "--train_steps=4", "--checkpoint_steps=2", "--mode=train",
           "--mixed_precision=float32"]
  run_trainer(inputs, tmp_path / "one", "--per_core_batch_size=32", *steps)

  process = subprocess.run(
      [sys.executable, os.path.join("test_support", "logical_cpus.py"), "2", *inputs,
       f"--output_dir={tmp_path / 'mirrored'}", *TINY, "--per_core_batch_size=16",
       "--distribution_strategy=mirrored", *steps],
      cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True,
      timeout=300)
  assert process.returncode == 0, process.stderr[-3000:]
  assert "Strategy mirrored: 2 replica(s)" in process.stderr

  cluster = {"worker": [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]}
  workers = []
  for index in range(2):
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                  "task": {"type": "worker", "index": index}})}
    workers.append(subprocess.Popen(
        trainer_command(inputs, tmp_path / "multi_worker", "--per_core_batch_size=16",
                        "--distribution_strategy=multi_worker_mirrored", *steps),
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  outputs = [worker.communicate(timeout=300)[0] for worker in workers]
  assert [worker.returncode for worker in workers] == [0, 0], outputs[0][-3000:]
  assert "Strategy multi_worker_mirrored: 2 replica(s)" in outputs[0]

  one_device = final_variables(tmp_path / "one")
  for distributed in ("mirrored", "multi_worker"):
    weights = final_variables(tmp_path / distributed)
    assert weights.keys() == one_device.keys()
    for name, value in one_device.items():
      np.testing.assert_allclose(weights[name], value, rtol=1e-4, atol=1e-5,
                                 err_msg=f"{distributed}: {name}")


def test_eval_and_continuous_eval_score_the_checkpoints_train_and_eval_wrote(inputs, trained,
                                                                           tmp_path):
  output_dir = copy_of(trained, tmp_path / "run")
  last_epoch = [line for line in trained.log.splitlines() if "epoch 2 " in line][-1]
  trained_accuracy = last_epoch.split("eval/accuracy ")[1].split()[0]

  evaluated = run_trainer(inputs, output_dir, *TRAINED, "--mode=eval")
  assert f"eval/accuracy {trained_accuracy}" in evaluated
  continuous = run_trainer(inputs, output_dir, *TRAINED, "--mode=continuous_eval",
                           "--continuous_eval_timeout_secs=5")
  assert f"step 16  eval/accuracy {trained_accuracy}" in continuous

  # Training wrote logs/train (its epochs' eval figures too); each eval run a file in logs/eval.
  assert not (trained.output_dir / "logs" / "eval").exists()
  assert {"train/ece", "train/nll", "train/accuracy", "train/loss", "eval/ece", "eval/nll",
          "eval/accuracy", "_hparams_/session_start_info"} <= _summary_tags(output_dir, "train")
  eval_files = tf.io.gfile.glob(str(output_dir / "logs" / "eval" / "events.out.tfevents.*"))
  assert len(eval_files) == 2, eval_files
  assert {"eval/ece", "eval/nll", "eval/accuracy",
          "_hparams_/session_start_info"} <= _summary_tags(output_dir, "eval")


def _summary_tags(output_dir, subdir):
  tags = set()
  for event_file in tf.io.gfile.glob(str(output_dir / "logs" / subdir / "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      tags.update(value.tag for value in event.summary.value)
  return tags


@pytest.mark.parametrize("flag, message", [
    ("--label_smoothing=1.5", "label_smoothing=1.5: must be in [0, 1]"),
    ("--distribution_strategy=gpu", "distribution_strategy='gpu': must be one of"),
    ("--mode=predict", "mode='predict': must be one of"),
    ("--per_core_batch_size=many", "--per_core_batch_size: 'many' is not a valid int"),
    ("--warm_start=production", "warm_start='production': production is a pipeline setting"),
    ("--warm_start_lr_ratio=2", "warm_start_lr_ratio=2.0: must be in (0, 1]"),
    ("--train_files=/nonexistent/part-*", "train_files='/nonexistent/part-*': matches no file"),
    ("--transform_output=/nonexistent", "transform_output='/nonexistent': is not a directory"),
    ("--warm_start=/nonexistent", "warm_start=/nonexistent: no such checkpoint or SavedModel"),
])
def test_bad_flags_exit_2_naming_the_flag(inputs, tmp_path, capsys, flag, message):
  """Flags are checked before anything runs, so here in this process (the command's own exit
  status: the next test)."""
  assert trainer_main(trainer_command(inputs, tmp_path, flag)[3:]) == 2
  assert message in capsys.readouterr().err
  assert not os.path.exists(tmp_path / "checkpoints")


def test_the_command_exits_2_on_a_bad_flag(inputs, tmp_path):
  process = subprocess.run(trainer_command(inputs, tmp_path, "--label_smoothing=1.5"), cwd=REPO,
                           capture_output=True, text=True, timeout=120)
  assert process.returncode == 2 and "label_smoothing=1.5: must be in [0, 1]" in process.stderr
  assert not os.path.exists(tmp_path / "checkpoints")


def test_multi_worker_without_tf_config_is_a_clear_error(inputs, tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
  process = subprocess.run(trainer_command(inputs, tmp_path, "--per_core_batch_size=16",
                                           "--distribution_strategy=multi_worker_mirrored"),
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
  assert process.returncode != 0 and "needs the TF_CONFIG environment variable" in process.stderr


def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step_with_a_checkpoint(inputs,
                                                                                    tmp_path):
  cluster = {"worker": [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]}
  flags = ["--per_core_batch_size=8", "--train_epochs=50", "--checkpoint_interval=-1",
           "--distribution_strategy=multi_worker_mirrored"]
  logs = [tmp_path / f"worker-{index}.txt" for index in range(2)]
  workers = []
  for index, log_path in enumerate(logs):
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster,
                                                  "task": {"type": "worker", "index": index}})}
    with open(log_path, "w") as log:
      workers.append(subprocess.Popen(trainer_command(inputs, tmp_path / "out", *flags),
                                      cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
  while " step " not in logs[1].read_text() and workers[1].poll() is None:
    time.sleep(0.05)
  workers[1].send_signal(signal.SIGTERM)  # Only the non-chief worker is told to stop.
  assert [worker.wait(timeout=300) for worker in workers] == [143, 143], logs[0].read_text()[-3000:]
  stopped = [log.read_text().split("Stopped at step ")[1].split()[0] for log in logs]
  assert stopped[0] == stopped[1]
  assert tf.train.latest_checkpoint(str(tmp_path / "out" / "checkpoints")).endswith(
      f"ckpt-{stopped[0]}")


def _ensemble_command(inputs, output_dir, members, *flags):
  data = [flag for flag in inputs if not flag.startswith("--train_files=")]
  return [sys.executable, "-m", "trainer_module", "ensemble", *data,
          f"--members={','.join(members)}", f"--output_dir={output_dir}", *flags]


def test_the_ensemble_command_selects_and_exports_over_members_trained_elsewhere(inputs, trained,
                                                                               tmp_path):
  """The members: the shared run (seed 42) and one trained here with seed 2."""
  run_trainer(inputs, tmp_path / "member_2", "--train_epochs=1", "--seed=2",
              "--per_core_batch_size=32", timeout=900)
  members = [trained.serving_model, str(tmp_path / "member_2" / "serving_model")]
  train_files = next(flag for flag in inputs if flag.startswith("--train_files="))
  process = subprocess.run(_ensemble_command(inputs, tmp_path / "ensemble", members,
                                             "--ensemble_size=2",
                                             "--temperature_fit=distance_detail_curve",
                                             train_files, "--validation_corruption_examples=5"),
                           cwd=REPO, capture_output=True, text=True, timeout=600)
  assert process.returncode == 0, process.stderr[-3000:]
  assert "Ensemble of" in process.stderr
  model_dir = tmp_path / "ensemble" / "serving_model"
  record = json.loads((model_dir / "assets.extra" / "ensemble.json").read_text())
  assert [t["hyperparameters"]["seed"] for t in record["trials"]] == [42, 2]
  assert [t["name"] for t in record["trials"]] == members
  calibration = json.loads((model_dir / "assets.extra" / "temperature.json").read_text())
  assert calibration["temperature_fit"] == "distance_detail_curve"
  assert calibration["distance_curve"]["slope"] >= 0
  signatures = tf.saved_model.load(str(model_dir)).signatures
  assert {"serving_default", "serving_images"} <= set(signatures)


@pytest.mark.parametrize("second_member, flag, message", [
    ("not_a_model", "--temperature_fit=clean", "No SavedModel in ensemble member directory "),
    ("", "--ensemble_objective=brier",
     "ensemble_objective='brier': must be one of ('nll', 'acc', 'nll-acc', 'shift_nll')"),
    ("", "--temperature_fit=distance_detail_curve", "temperature_fit=distance_detail_curve: the "
                                                    "ensemble's feature support is measured on "
                                                    "the training split"),
])
def test_the_ensemble_command_exits_2_naming_a_missing_member_or_a_bad_flag(
    inputs, trained, tmp_path, capsys, second_member, flag, message):
  """Checked here in this process, before anything is written (the command's exit status
  itself: the test above and test_the_command_exits_2_on_a_bad_flag)."""
  members = [trained.serving_model,
             str(tmp_path / second_member) if second_member else trained.serving_model]
  assert trainer_main(_ensemble_command(inputs, tmp_path / "bad", members, flag)[3:]) == 2
  error = capsys.readouterr().err
  assert message in error and (not second_member or members[1] in error)
  assert not os.path.exists(tmp_path / "bad" / "serving_model")


def _inspect(path):
  process = subprocess.run([sys.executable, "-m", "trainer_module", "inspect", str(path)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
  assert process.returncode == 0, process.stderr[-2000:]
  return process.stdout


def test_warm_start_from_an_exported_model_inspect_and_a_mismatch_refused(inputs, trained,
                                                                          tmp_path):
  source = trained.output_dir
  listing = _inspect(source / "serving_model")
  assert listing.startswith("saved_model: ") and "step: 16" in listing
  assert "warm-started from: null" in listing and '"checkpoint_steps": 4' in listing
  assert re.search(r"^  logits/kernel +\[64, 10\] +float32$", listing, re.M)
  assert "tft_layer" not in listing, "only the classifier's variables, not Transform's"

  log = run_trainer(inputs, tmp_path / "warm", "--train_steps=2", "--per_core_batch_size=16",
                    f"--warm_start={source / 'serving_model'}")
  assert re.search(r"Warm-started from \S+serving_model \(saved_model at step 16\): restored "
                   r"(\d+) of \1 model variables", log), log[-3000:]
  assert re.search(r"Fine-tuning: \d+ restored variables at lr x0\.1, 0 new at full lr", log)
  listing = _inspect(tmp_path / "warm" / "checkpoints")
  assert "step: 2" in listing and f'"source": "{source / "serving_model"}"' in listing

  refused = subprocess.run(
      trainer_command(inputs, tmp_path / "refused", "--num_classes=5",
                      f"--warm_start={source / 'serving_model'}"),
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert refused.returncode == 2, refused.stderr[-3000:]
  assert "logits/kernel: shape [64, 5] here, [64, 10] in the source" in refused.stderr
  assert "Training wrn" not in refused.stderr, "refused before training"
  assert not tf.io.gfile.glob(str(tmp_path / "refused" / "checkpoints" / "ckpt-*"))
