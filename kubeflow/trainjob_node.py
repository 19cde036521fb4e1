"""The command of each node of the Trainer's TrainJob: writes TF_CONFIG as Training Operator v1
did, then runs TFX's Trainer executor; node 0 is the chief (docs/kubeflow.md, "Several Trainer
nodes").
"""
import json
import os
import sys
from typing import Any, Dict, List, Mapping

from absl import app
from tfx.components.trainer import executor as trainer_executor
from tfx.components.util import udf_utils
from tfx.scripts import run_executor
from tfx.types import artifact

from kubeflow import trainjob
from storage import object_storage

COMMAND = ("python", "-m", "kubeflow.trainjob_node")
# The one override of the pod's DNS names, for nodes run as local processes (the tests, the
# harness): JSON {hostname: "host:port"}; a hostname it does not name keeps its DNS name.
ADDRESS_OVERRIDE_ENV = "TRAINJOB_ADDRESS_OVERRIDE"


def tf_config(environ: Mapping[str, str]) -> dict:
  """This node's TF_CONFIG: every node a worker at `<pod hostname>.<subdomain>:<port>`, this
  one at its completion index."""
  missing = [name for name in (trainjob.COMPLETION_INDEX_ENV, trainjob.NAME_ENV,
                               trainjob.NUM_NODES_ENV, trainjob.PORT_ENV) if name not in environ]
  if missing:
    raise ValueError(f"A TrainJob node needs {missing} in its environment: Kubernetes sets "
                     f"{trainjob.COMPLETION_INDEX_ENV} in an Indexed Job's pods, the TrainJob "
                     "(kubeflow/trainjob.py) the others.")
  num_nodes = int(environ[trainjob.NUM_NODES_ENV])
  index = int(environ[trainjob.COMPLETION_INDEX_ENV])
  if not 0 <= index < num_nodes:
    raise ValueError(f"{trainjob.COMPLETION_INDEX_ENV}={index} is not a node of "
                     f"{trainjob.NUM_NODES_ENV}={num_nodes}.")
  override = json.loads(environ.get(ADDRESS_OVERRIDE_ENV) or "{}")
  port = environ[trainjob.PORT_ENV]
  workers = [override.get(host, f"{host}:{port}")
             for host in trainjob.node_hostnames(environ[trainjob.NAME_ENV], num_nodes)]
  return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index},
          "environment": "cloud"}


def is_chief_node(environ: Mapping[str, str] = os.environ) -> bool:
  return json.loads(environ["TF_CONFIG"])["task"]["index"] == 0


class NodeExecutor(trainer_executor.GenericExecutor):
  """TFX's Trainer executor on one node. The chief runs it as is; another node runs the same
  run_fn, but not the executor's check that the model is exported, which is the chief's job."""

  def Do(self, input_dict: Dict[str, List[artifact.Artifact]],
         output_dict: Dict[str, List[artifact.Artifact]], exec_properties: Dict[str, Any]) -> None:
    if is_chief_node():
      super().Do(input_dict, output_dict, exec_properties)
      return
    self._log_startup(input_dict, output_dict, exec_properties)
    fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
    udf_utils.get_fn(exec_properties, "run_fn")(fn_args)


def node_command(inputs_json: str, outputs_json: str, exec_properties_json: str) -> List[str]:
  """The node's command: run_executor's arguments, as TFX's Vertex training client builds them
  (tfx/extensions/google_cloud_ai_platform/training_clients.py)."""
  return [*COMMAND, "--executor_class_path", f"{NodeExecutor.__module__}.{NodeExecutor.__name__}",
          "--inputs", inputs_json, "--outputs", outputs_json,
          "--exec-properties", exec_properties_json]


def main(argv: List[str]) -> None:
  os.environ["TF_CONFIG"] = json.dumps(tf_config(os.environ))
  object_storage.configure()
  app.run(run_executor.main, argv=[sys.argv[0]] + argv, flags_parser=run_executor.parse_flags)


if __name__ == "__main__":
  object_storage.exit_after(lambda: main(sys.argv[1:]))
