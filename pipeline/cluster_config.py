"""Cluster settings of a run: the `kubeflow` part of the one PipelineConfig.

A config that has them describes a run on Kubeflow Pipelines: the code comes from a container
image, every location is on object storage (gs:// or s3://), and the Trainer can run on Vertex
AI worker pools with GPUs or TPUs. They live beside the rest of the run's config, as the TFX
templates keep their Vertex and Dataflow arguments in `pipeline/configs.py`; the Kubeflow
runner (kubeflow/) reads them, the graph never does. Nothing here imports TFX.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import TYPE_CHECKING

from configs.kubeflow import PIPELINE_NAME as KUBEFLOW_PIPELINE_NAME
from storage.object_storage import is_object_store_uri, object_store_uri_problem
from trainer_module.config import require

if TYPE_CHECKING:  # pipeline.config imports this module.
  from pipeline.config import PipelineConfig

# The Dockerfile's WORKDIR: the project's packages are copied there, and it is on sys.path.
IMAGE_PROJECT_DIR = "/pipeline"
# The packages the pipeline imports at run time; the image must hold every one.
IMAGE_PACKAGES = ("pipeline", "components", "trainer_module", "kubeflow", "storage", "configs")
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Kubeflow V2 pipeline (and TFX KubeflowV2DagRunner) names.
KFP_PIPELINE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")

# Vertex AI AcceleratorType names (google.cloud.aiplatform_v1.types.AcceleratorType).
GPU_TYPES = ("NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4",
             "NVIDIA_TESLA_T4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_L4",
             "NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200")
TPU_TYPES = ("TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD")
ACCELERATOR_TYPES = GPU_TYPES + TPU_TYPES
# Where the compiled pipeline runs: an open-source Kubeflow Pipelines v2 server, or Vertex AI
# Pipelines (which also runs TFX's resolver, pre-cache-check and CustomJob extensions).
KUBEFLOW_TARGETS = ("kfp", "vertex")

GCP_REGION = re.compile(r"[a-z]+-[a-z]+[0-9]")


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
  image: str = ""  # The pipeline's container image (see Dockerfile); every component runs it.
  kubeflow_target: str = "kfp"  # kfp (open-source KFP v2 server) or vertex (Vertex AI).
  # Vertex AI training: with a project, the Trainer runs as a Vertex CustomJob on these pools.
  vertex_project: str = ""  # Google Cloud project of Vertex AI training.
  vertex_region: str = "us-central1"  # Region of the Vertex AI training job.
  machine_type: str = "n1-standard-8"  # Machine type of each training replica.
  accelerator_type: str = ""  # A Vertex AcceleratorType name; empty for CPU only.
  accelerator_count: int = 0  # Per replica.
  # Machines: one chief plus replica_count - 1 workers (Vertex worker pools, or on kfp the
  # nodes of a Kubeflow Trainer TrainJob, kubeflow/trainjob.py).
  replica_count: int = 1
  # Dataflow, the Beam engine of a Kubeflow run's Beam steps with --beam_runner=dataflow
  # (pipeline/beam_engine.py): the image as SDK container.
  dataflow_project: str = ""  # Google Cloud project of the Dataflow jobs.
  dataflow_region: str = ""  # Region of the Dataflow jobs.
  dataflow_temp_location: str = ""  # gs://bucket/path for Dataflow's staging and temp files.

  def __post_init__(self):
    require(bool(self.image.strip()) and not any(c.isspace() for c in self.image), "image",
            self.image, "is required: the container image every component runs "
            "(e.g. gcr.io/my-project/wrn-pipeline:1)")
    require(self.kubeflow_target in KUBEFLOW_TARGETS, "kubeflow_target", self.kubeflow_target,
            f"must be one of {KUBEFLOW_TARGETS}")
    require(not (self.vertex_project and self.kubeflow_target == "kfp"), "vertex_project",
            self.vertex_project, "needs --kubeflow_target=vertex: Vertex AI training runs as a "
            "CustomJob, which an open-source Kubeflow Pipelines server does not run")
    require(self.accelerator_type in ("",) + ACCELERATOR_TYPES, "accelerator_type",
            self.accelerator_type, f"must be one of the Vertex accelerator types {ACCELERATOR_TYPES}")
    require(self.accelerator_count >= 0, "accelerator_count", self.accelerator_count,
            "must be >= 0")
    require((self.accelerator_count > 0) == bool(self.accelerator_type), "accelerator_count",
            self.accelerator_count, "must be > 0 exactly when accelerator_type is set")
    require(self.replica_count >= 1, "replica_count", self.replica_count, "must be >= 1")
    if not self.vertex_project:
      require(not self.accelerator_type, "vertex_project", self.vertex_project,
              "is required for accelerators (the Trainer runs them as a Vertex AI training job)")
      require(self.replica_count == 1 or self.kubeflow_target == "kfp", "vertex_project",
              self.vertex_project, "is required for more than one replica on "
              "kubeflow_target=vertex (the Trainer runs them as a Vertex AI training job; "
              "on kfp, as a Kubeflow Trainer TrainJob)")
    else:
      require(bool(self.vertex_region), "vertex_region", self.vertex_region,
              "is required with vertex_project")
      require(bool(self.machine_type), "machine_type", self.machine_type,
              "is required with vertex_project")
    if self.accelerator_type in TPU_TYPES:
      require(self.replica_count == 1, "replica_count", self.replica_count,
              "must be 1 with a TPU accelerator (one TPU host runs the TPUStrategy)")

  def dataflow_args(self) -> list:
    """Beam arguments running a step on Dataflow."""
    return ["--runner=DataflowRunner", f"--project={self.dataflow_project}",
            f"--region={self.dataflow_region}",
            f"--temp_location={self.dataflow_temp_location}",
            # Workers run the pipeline image (Beam and TFX preinstalled: no SDK staging).
            f"--sdk_container_image={self.image}", "--sdk_location=container",
            "--experiments=use_runner_v2"]

  @property
  def uses_vertex_training(self) -> bool:
    return bool(self.vertex_project)

  @property
  def uses_trainjob(self) -> bool:
    """The Trainer runs as a Kubeflow Trainer TrainJob of replica_count nodes."""
    return self.kubeflow_target == "kfp" and self.replica_count > 1

  def expected_distribution_strategies(self) -> tuple:
    """The tf.distribute strategies that fit these pools; the trainer config must pick one."""
    if self.accelerator_type in TPU_TYPES:
      return ("tpu",)
    if self.replica_count > 1:
      return ("multi_worker_mirrored",)
    if self.accelerator_count > 1:
      return ("mirrored",)
    return ("default", "mirrored")

  def worker_pool_specs(self) -> list:
    """Vertex CustomJob worker pools: the chief, then replica_count - 1 workers, all alike."""
    machine_spec = {"machine_type": self.machine_type}
    if self.accelerator_type:
      machine_spec.update(accelerator_type=self.accelerator_type,
                          accelerator_count=self.accelerator_count)
    pool = {"machine_spec": machine_spec, "container_spec": {"image_uri": self.image}}
    pools = [dict(pool, replica_count=1)]
    if self.replica_count > 1:
      pools.append(dict(pool, replica_count=self.replica_count - 1))
    return pools


def image_path(local_path: str) -> str:
  """Where a file of this project's packages lives inside the image; an object-store URI as is."""
  if is_object_store_uri(local_path):
    return local_path
  relative = os.path.relpath(os.path.abspath(local_path), PROJECT_DIR)
  require(relative.split(os.sep)[0] in IMAGE_PACKAGES, "schema_path", local_path,
          "must be on object storage (gs://, s3://) or inside one of the packages the image "
          f"holds {IMAGE_PACKAGES}")
  return "/".join([IMAGE_PROJECT_DIR] + relative.split(os.sep))


def check_cluster_config(config: PipelineConfig) -> None:
  """What a PipelineConfig with cluster settings must satisfy on top of the local rules."""
  kubeflow = config.kubeflow
  require(KFP_PIPELINE_NAME.fullmatch(config.pipeline_name) is not None, "pipeline_name",
          config.pipeline_name, "must match [a-z0-9][a-z0-9-]{0,127} on Kubeflow "
          f"(e.g. {KUBEFLOW_PIPELINE_NAME})")
  for name in ("output_dir", "tfrecord_dir", "tfds_data_dir", "schema_path"):
    value = getattr(config, name)
    problem = object_store_uri_problem(value)
    require(problem is None, name, value, problem)
    require(kubeflow.kubeflow_target != "vertex" or not is_object_store_uri(value)
            or value.startswith("gs://"), name, value, "must be on Cloud Storage (gs://) "
            "with kubeflow_target=vertex: Vertex AI Pipelines reads and writes only gs:// paths")
  require(is_object_store_uri(config.output_dir), "output_dir", config.output_dir,
          "must be on object storage (gs://bucket/path or s3://bucket/path) on Kubeflow: "
          "the pipeline root and the serving models go under it")
  for name in ("tfrecord_dir", "image_dir", "tfds_data_dir"):
    value = getattr(config, name)
    require(value is None or is_object_store_uri(value), name, value,
            "must be on object storage (gs://bucket/path or s3://bucket/path) on Kubeflow; "
            "the cluster cannot read this machine's files")
  image_path(config.schema_path)
  _check_dataflow(config)
  strategy = config.trainer.distribution_strategy
  expected = kubeflow.expected_distribution_strategies()
  require(strategy in expected, "distribution_strategy", strategy,
          f"must be one of {expected} with replica_count={kubeflow.replica_count}, "
          f"accelerator_type={kubeflow.accelerator_type!r}, "
          f"accelerator_count={kubeflow.accelerator_count}")


def _check_dataflow(config: PipelineConfig) -> None:
  kubeflow = config.kubeflow
  dataflow = {"dataflow_project": kubeflow.dataflow_project,
              "dataflow_region": kubeflow.dataflow_region,
              "dataflow_temp_location": kubeflow.dataflow_temp_location}
  if config.beam_runner != "dataflow":
    for name, value in dataflow.items():
      require(not value, name, value, f"is not used with beam_runner={config.beam_runner}")
    return
  require(bool(kubeflow.dataflow_project), "dataflow_project", kubeflow.dataflow_project,
          "is required with beam_runner=dataflow (the Google Cloud project of the jobs)")
  require(GCP_REGION.fullmatch(kubeflow.dataflow_region) is not None, "dataflow_region",
          kubeflow.dataflow_region, "must be a Google Cloud region with beam_runner=dataflow "
          "(e.g. us-central1)")
  require(kubeflow.dataflow_temp_location.startswith("gs://")
          and is_object_store_uri(kubeflow.dataflow_temp_location), "dataflow_temp_location",
          kubeflow.dataflow_temp_location, "must be on Cloud Storage (gs://bucket/path) with "
          "beam_runner=dataflow: Dataflow stages the job and writes temp files there")
  for name in ("output_dir", "tfrecord_dir", "image_dir", "tfds_data_dir"):
    value = getattr(config, name)
    require(value is None or value.startswith("gs://"), name, value,
            "must be on Cloud Storage (gs://) with beam_runner=dataflow: Dataflow's "
            "workers read and write it without this cluster's S3 credentials")
