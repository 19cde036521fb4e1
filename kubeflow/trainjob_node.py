"""The command of each node of the Trainer's TrainJob: writes TF_CONFIG as Training Operator v1
did, then runs TFX's Trainer executor; node 0 is the chief (docs/kubeflow.md, "Several Trainer
nodes").
"""
import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

from absl import app
from tfx.components.trainer import executor as trainer_executor
from tfx.components.util import udf_utils
from tfx.scripts import run_executor
from tfx.types import artifact

from kubeflow import kube_validation, trainjob
from storage import object_storage

COMMAND = ("python", "-m", "kubeflow.trainjob_node")
# The one override of the pod's DNS names, for nodes run as local processes (the tests, the
# harness): JSON {hostname: "host:port"}; a hostname it does not name keeps its DNS name.
ADDRESS_OVERRIDE_ENV = "TRAINJOB_ADDRESS_OVERRIDE"


def tf_config(environ: Mapping[str, str]) -> dict:
  """This node's TF_CONFIG: every node a worker at `<pod hostname>.<subdomain>:<port>`, this
  one at its completion index. A variable that cannot give it is named with its value."""
  missing = [name for name in (trainjob.COMPLETION_INDEX_ENV, trainjob.NAME_ENV,
                               trainjob.NUM_NODES_ENV, trainjob.PORT_ENV) if name not in environ]
  if missing:
    raise ValueError(f"A TrainJob node needs {missing} in its environment: Kubernetes sets "
                     f"{trainjob.COMPLETION_INDEX_ENV} in an Indexed Job's pods, the TrainJob "
                     "(kubeflow/trainjob.py) the others.")
  num_nodes = _integer(environ, trainjob.NUM_NODES_ENV, 1, None, "is not a number of nodes")
  index = _integer(environ, trainjob.COMPLETION_INDEX_ENV, 0, num_nodes - 1,
                   f"is not a node of {trainjob.NUM_NODES_ENV}={num_nodes}")
  port = _integer(environ, trainjob.PORT_ENV, 1, 65535, "is not a port (1 to 65535)")
  name = environ[trainjob.NAME_ENV]
  hosts = trainjob.node_hostnames(name, num_nodes)
  # Each host name is <pod hostname>.<subdomain>, both DNS labels (the last pod's is longest).
  problems = [f"{label}: {problem}" for label in (hosts[-1].split(".")[0], name)
              for problem in kube_validation.dns1123_label_problems(label)]
  if problems:
    raise ValueError(f"{trainjob.NAME_ENV}={name!r} cannot name the nodes' hosts: "
                     + "; ".join(problems))
  try:
    override = json.loads(environ.get(ADDRESS_OVERRIDE_ENV) or "{}")
  except ValueError as error:
    raise ValueError(f"{ADDRESS_OVERRIDE_ENV} is not JSON {{hostname: \"host:port\"}}: "
                     f"{error}") from error
  for host, address in override.items():
    address_host, _, address_port = str(address).rpartition(":")
    if not address_host or not address_port.isdigit() or not 0 < int(address_port) < 65536:
      raise ValueError(f"{ADDRESS_OVERRIDE_ENV}: {address!r} (for {host}) is not HOST:PORT.")
  workers = [override.get(host, f"{host}:{port}") for host in hosts]
  return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index},
          "environment": "cloud"}


def _integer(environ: Mapping[str, str], name: str, low: int, high: Optional[int],
             rule: str) -> int:
  """The integer in environ[name], within [low, high]; else a ValueError naming the variable."""
  text = environ[name].strip()
  if not (text.isdigit() and low <= int(text) and (high is None or int(text) <= high)):
    raise ValueError(f"{name}={environ[name]!r} {rule}.")
  return int(text)


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
