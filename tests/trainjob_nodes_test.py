"""The Trainer step's TrainJob nodes as local processes (test_support/trainjob_nodes.py):
MultiWorkerMirroredStrategy over loopback on CPU, each node started with the command of the
TrainJob the launcher builds and exactly its pod's environment (the TrainJob's env plus
Kubernetes' JOB_COMPLETION_INDEX); the one override maps the nodes' DNS names to 127.0.0.1
ports (TRAINJOB_ADDRESS_OVERRIDE)."""
import json
import os
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from kubeflow.trainjob_launcher import build_manifest, trainjob_settings
from pipeline.pipeline import TRAINER_RUN_FN
from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.trainjob_nodes import start_nodes, wait_nodes
from test_support.transform_runs import transformed_digits
from trainer_module.config import TRAINER_CONFIG_KEY

pytestmark = pytest.mark.e2e

GLOBAL_BATCH = 48  # 1 x 48, 2 x 24, 3 x 16; 128 training examples: 2 steps per epoch.
TRAIN_STEPS = 8


@pytest.fixture(scope="module")
def step_inputs(tmp_path_factory):
  """The Trainer step's input artifacts: Transform's examples (train/eval) and graph."""
  root = tmp_path_factory.mktemp("step")
  paths = transformed_digits(count=160, eval_count=32)
  examples = standard_artifacts.Examples()
  examples.uri = str(root / "examples")
  examples.split_names = json.dumps(["train", "eval"])
  for split in ("train", "eval"):
    shutil.copytree(os.path.dirname(paths[f"{split}_files"]),
                    os.path.join(examples.uri, f"Split-{split}"))
  graph = standard_artifacts.TransformGraph()
  graph.uri = paths["transform_output"]
  return {"examples": [examples], "transform_graph": [graph]}


def step_manifest(step_inputs, output_root, num_nodes, **trainer):
  """The TrainJob the launcher builds for a Trainer step with these outputs and config."""
  config = plain_trainer(**TINY_NETWORK, lr_warmup_epochs=0, log_every_steps=1,
                         train_epochs=4, train_steps=TRAIN_STEPS, checkpoint_steps=2,
                         checkpoint_interval=-1, mixed_precision="float32", mode="train",
                         temperature_fit="clean", per_core_batch_size=GLOBAL_BATCH // num_nodes,
                         distribution_strategy=("multi_worker_mirrored" if num_nodes > 1
                                                else "default"), **trainer)
  model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
  model.uri = os.path.join(output_root, "Trainer", "model", "7")
  model_run.uri = os.path.join(output_root, "Trainer", "model_run", "7")
  exec_properties = {
      "train_args": json.dumps({"splits": ["train"]}),
      "eval_args": json.dumps({"splits": ["eval"]}), "run_fn": TRAINER_RUN_FN,
      "custom_config": json_utils.dumps({TRAINER_CONFIG_KEY: config.to_dict(),
                                         **trainjob_settings(num_nodes, "registry/wrn:1")})}
  return build_manifest(step_inputs, {"model": [model], "model_run": [model_run]},
                        exec_properties, "ns")


def finished(nodes):
  """The nodes' logs once every node exited 0."""
  codes = wait_nodes(nodes, timeout=600)
  logs = [open(path).read() for _, path in nodes]
  assert codes == [0] * len(nodes), "\n".join(log[-3000:] for log in logs)
  return logs


def final_variables(checkpoint_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith(("model/", "optimizer/"))}


def checkpoint_dir(output_root):
  [key] = os.listdir(os.path.join(output_root, "Trainer", "checkpoints"))
  return os.path.join(output_root, "Trainer", "checkpoints", key)


@pytest.fixture(scope="module")
def runs(step_inputs, tmp_path_factory):
  """One node, two nodes and three nodes of the same global batch, trained to the end."""
  result = {}
  for num_nodes in (1, 2, 3):
    root = str(tmp_path_factory.mktemp(f"nodes-{num_nodes}"))
    manifest = step_manifest(step_inputs, root, num_nodes)
    result[num_nodes] = (root, manifest, finished(start_nodes(manifest, root)))
  return result


@pytest.mark.parametrize("num_nodes", [2, 3])
def test_nodes_train_like_one_worker_and_only_the_chief_exports(runs, num_nodes):
  root, manifest, logs = runs[num_nodes]
  assert manifest["spec"]["trainer"]["numNodes"] == num_nodes
  for log in logs:
    assert f"Strategy multi_worker_mirrored: {num_nodes} replica(s)" in log
    assert f"step {TRAIN_STEPS}/{TRAIN_STEPS}" in log
  assert "Exported the serving model" in logs[0]
  assert not any("Exported the serving model" in log for log in logs[1:])
  model_dir = os.path.join(root, "Trainer", "model", "7", "Format-Serving")
  assert os.path.isfile(os.path.join(model_dir, "saved_model.pb"))
  # Only the chief wrote summaries and checkpoints (the others used scratch space).
  assert os.listdir(os.path.join(root, "Trainer", "checkpoints")) == [
      os.path.basename(checkpoint_dir(root))]

  one_worker = final_variables(checkpoint_dir(runs[1][0]))
  distributed = final_variables(checkpoint_dir(root))
  assert one_worker.keys() == distributed.keys()
  for name, value in one_worker.items():
    assert_close_to_scale(distributed[name], value, name)


def assert_close_to_scale(actual, expected, name):
  """Within 1e-4 + 0.2% of the variable's largest value: batch norm's moving statistics differ
  that much (the synchronized layer's one-pass variance across replicas), the rest by less.
  The one-worker run's checkpoint two steps before its end is off in half the variables."""
  if expected.dtype.kind != "f":
    np.testing.assert_array_equal(actual, expected, err_msg=name)
    return
  bound = 1e-4 + 2e-3 * float(np.abs(expected).max())
  assert float(np.abs(actual - expected).max()) <= bound, name


def test_a_node_killed_mid_run_then_every_node_restarted_resumes_at_the_saved_step(
    runs, step_inputs, tmp_path):
  """What the runtime's JobSet does when a node fails: every node restarts (failurePolicy),
  and training goes on from the chief's last checkpoint on shared storage."""
  root = str(tmp_path / "out")
  manifest = step_manifest(step_inputs, root, 2)
  nodes = start_nodes(manifest, str(tmp_path))
  first_checkpoint = "Saved checkpoint"
  deadline = time.monotonic() + 600
  while first_checkpoint not in open(nodes[0][1]).read():
    assert nodes[0][0].poll() is None and time.monotonic() < deadline, open(nodes[0][1]).read()
    time.sleep(0.05)
  nodes[1][0].send_signal(signal.SIGKILL)  # The failed node.
  nodes[0][0].send_signal(signal.SIGKILL)  # JobSet deletes the others (past their grace).
  assert [process.wait(timeout=60) for process, _ in nodes] == [-signal.SIGKILL] * 2
  saved = tf.train.latest_checkpoint(checkpoint_dir(root))
  saved_step = int(saved.rsplit("-", 1)[1])
  assert 0 < saved_step < TRAIN_STEPS, open(nodes[0][1]).read()[-3000:]

  logs = finished(start_nodes(manifest, str(tmp_path), attempt=1))
  for log in logs:
    assert f"Resuming from {saved} at step {saved_step} " in log
    assert f"step {TRAIN_STEPS}/{TRAIN_STEPS}" in log
  uninterrupted = final_variables(checkpoint_dir(runs[2][0]))
  resumed = final_variables(checkpoint_dir(root))
  for name, value in uninterrupted.items():
    np.testing.assert_allclose(resumed[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
