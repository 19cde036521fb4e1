"""The Trainer step on several nodes of an open-source Kubeflow cluster: launches one Kubeflow
Trainer TrainJob and waits for it, as TFX's Vertex Trainer launches a CustomJob
(docs/kubeflow.md, "Several Trainer nodes").
"""
import json
from typing import Any, Dict, List

# tfx.components, not tfx.v1: v1's extensions import the Vertex AI SDK, 2 s more in every pod.
from tfx import components as tfx_components
from tfx.dsl.components.base import base_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact, artifact_utils, standard_component_specs
from tfx.utils import json_utils, path_utils

from kubeflow import trainjob, trainjob_client, trainjob_node

TRAINJOB_KEY = "kubeflow_trainjob"  # custom_config: {"num_nodes", "image", "placement"}.


def trainjob_settings(num_nodes: int, image: str,
                      placement: trainjob.NodePlacement = trainjob.NodePlacement()) -> dict:
  """The custom_config entry the launcher reads."""
  return {TRAINJOB_KEY: {"num_nodes": num_nodes, "image": image,
                         "placement": placement.to_dict()}}


def build_manifest(input_dict: Dict[str, List[artifact.Artifact]],
                   output_dict: Dict[str, List[artifact.Artifact]],
                   exec_properties: Dict[str, Any], namespace: str) -> dict:
  """The step's TrainJob: its nodes run the Trainer executor on the step's own artifacts."""
  custom_config = json_utils.loads(
      exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null") or {}
  settings = custom_config.get(TRAINJOB_KEY)
  if not settings:
    raise ValueError(f"custom_config has no {TRAINJOB_KEY!r}: the compiler puts the TrainJob's "
                     "node count and image there (kubeflow/cluster.py).")
  model = artifact_utils.get_single_uri(output_dict[standard_component_specs.MODEL_KEY])
  model_run = artifact_utils.get_single_uri(
      output_dict[standard_component_specs.MODEL_RUN_KEY])
  command = trainjob_node.node_command(artifact_utils.jsonify_artifact_dict(input_dict),
                                       artifact_utils.jsonify_artifact_dict(output_dict),
                                       json.dumps(exec_properties, sort_keys=True))
  return trainjob.trainjob_manifest(
      trainjob.trainjob_name(f"{model}\n{model_run}"), namespace, settings["image"], command,
      settings["num_nodes"], trainjob.NodePlacement.from_dict(settings.get("placement", {})),
      labels={"step": "trainer"})


class TrainJobExecutor(base_executor.BaseExecutor):
  """Runs the Trainer as a TrainJob and waits for it; fails naming the node that failed."""

  def Do(self, input_dict: Dict[str, List[artifact.Artifact]],
         output_dict: Dict[str, List[artifact.Artifact]], exec_properties: Dict[str, Any]) -> None:
    self._log_startup(input_dict, output_dict, exec_properties)
    manifest = build_manifest(input_dict, output_dict, exec_properties,
                              trainjob_client.current_namespace())
    job_client = trainjob_client.TrainJobClient(trainjob_client.api_client(),
                                                manifest["metadata"]["namespace"])
    trainjob_client.run_to_completion(job_client, manifest)
    serving_model = path_utils.serving_model_dir(
        artifact_utils.get_single_uri(output_dict[standard_component_specs.MODEL_KEY]))
    if not fileio.exists(serving_model):
      raise RuntimeError(f"TrainJob {manifest['metadata']['name']} completed but its chief "
                         f"node exported no model to {serving_model}.")


class Trainer(tfx_components.Trainer):
  """TFX's Trainer whose executor runs it as a Kubeflow Trainer TrainJob."""
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TrainJobExecutor)
