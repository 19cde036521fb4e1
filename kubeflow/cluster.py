"""The parts of the pipeline graph that differ in a cluster, chosen from the config.

create_pipeline builds one graph for every runner; where a cluster run needs something else
(a runtime parameter instead of a constant, the Vertex AI Trainer, the schema inside the
image, KFP's own metadata store), it asks here. A local config gets what it always had.
"""
import json
from typing import Any, Optional, Union

from tfx import v1 as tfx

from kubeflow.config import (DATA_ROOT_PARAMETER, TRAINER_CONFIG_KEY, TRAINER_CONFIG_PARAMETER,
                             image_path)

Parameter = tfx.dsl.experimental.RuntimeParameter


def tfrecord_input_base(config) -> Union[str, Parameter]:
  """The TFRecord directory; in a cluster a runtime parameter, so a run can read new data."""
  if config.kubeflow is None:
    return config.tfrecord_dir
  return Parameter(name=DATA_ROOT_PARAMETER, ptype=str, default=config.tfrecord_dir)


def schema_file(config) -> str:
  """The curated schema: in a cluster, its copy inside the image (or its object-store URI)."""
  return config.schema_path if config.kubeflow is None else image_path(config.schema_path)


def trainer_config_parameter(trial: int) -> str:
  """The runtime parameter holding a trial Trainer's custom_config (trial 0: the usual one)."""
  return TRAINER_CONFIG_PARAMETER if trial == 0 else f"{TRAINER_CONFIG_PARAMETER}_trial_{trial}"


def trainer_custom_config(config, fingerprint: str, trial: int = 0) -> dict:
  """What the Trainer's executor gets: the trial's trainer config for run_fn and, for Vertex
  training, the CustomJob's worker pools (each running the pipeline image, which calls run_fn)."""
  custom_config = {TRAINER_CONFIG_KEY: config.trials[trial].to_dict(),
                   "trainer_module_fingerprint": fingerprint}
  kubeflow = config.kubeflow
  if kubeflow is not None and kubeflow.uses_vertex_training:
    vertex = tfx.extensions.google_cloud_ai_platform
    custom_config.update({
        vertex.ENABLE_VERTEX_KEY: True,
        vertex.VERTEX_REGION_KEY: kubeflow.vertex_region,
        vertex.TRAINING_ARGS_KEY: {
            "project": kubeflow.vertex_project,
            "job_spec": {"worker_pool_specs": kubeflow.worker_pool_specs()},
        },
    })
  return custom_config


def trainer(config, fingerprint: str, trial: int = 0, **inputs: Any):
  """TFX's Trainer, or its Vertex AI version when the config asks for worker pools, for one
  trial (config.trials). In a cluster its custom_config is a runtime parameter (default: this
  trial's config): `trainer_config`, and `trainer_config_trial_<i>` for the other trials."""
  custom_config: Any = trainer_custom_config(config, fingerprint, trial)
  trainer_class = tfx.components.Trainer
  if config.kubeflow is not None:
    custom_config = Parameter(name=trainer_config_parameter(trial), ptype=str,
                              default=json.dumps(custom_config, sort_keys=True))
    if config.kubeflow.uses_vertex_training:
      trainer_class = tfx.extensions.google_cloud_ai_platform.Trainer
  return trainer_class(run_fn="trainer_module.trainer.run_fn", custom_config=custom_config,
                       **inputs)


def metadata_connection(config) -> Optional[Any]:
  """SQLite MLMD for a local run; Kubeflow Pipelines brings its own metadata store."""
  if config.kubeflow is not None:
    return None
  return tfx.orchestration.metadata.sqlite_metadata_connection_config(config.metadata_path)
