"""A Kubeflow run's config: the pipeline's (pipeline/config.py) with the cluster's settings,
which decide each step's pod, the Trainer's machines and the Beam engine's arguments. The graph
never reads them; nothing here imports TFX."""
from __future__ import annotations

import dataclasses
import os
import re
from typing import List, Optional, Sequence, Tuple

from configs import groups
from configs.kubeflow import PIPELINE_NAME as KUBEFLOW_PIPELINE_NAME
from kubeflow import kube_validation
from pipeline import config as config_lib
from pipeline.config import PROJECT_DIR, REQUIREMENTS_FILE, PipelineConfig, check_schema
from storage.object_storage import is_object_store_uri, object_store_uri_problem
from trainer_module.config import require

CLUSTER_PRESET = "kubeflow"  # configs/kubeflow.py: what `python -m kubeflow compile` starts from.

# The Dockerfile's WORKDIR: the project's packages are copied there, and it is on sys.path.
IMAGE_PROJECT_DIR = "/pipeline"
# The packages the pipeline imports at run time; the image must hold every one.
IMAGE_PACKAGES = ("pipeline", "reporting", "components", "trainer_module", "kubeflow", "storage",
                  "configs")

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

# Quantities as resource.ParseQuantity reads them, restricted to what makes sense here.
CPU_QUANTITY = re.compile(r"([0-9]+(\.[0-9]+)?)(m?)")
MEMORY_QUANTITY = re.compile(r"([0-9]+(\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
MEMORY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
                "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
                "Ei": 2**60}
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# KFP's own object-store Secret (manifests of kubeflow/pipelines: every profile namespace has a
# copy) and its keys, as the AWS variables storage/object_storage.py reads.
KFP_MINIO_SECRET = "mlpipeline-minio-artifact"
KFP_MINIO_SECRET_KEYS = "accesskey:AWS_ACCESS_KEY_ID,secretkey:AWS_SECRET_ACCESS_KEY"
# What each step asks of its pod (`step_kind`).
TRAINER_STEP, BEAM_STEP, LIGHT_STEP = "trainer", "beam", "light"
# The Beam steps that read every example or image (the others read statistics or one model).
HEAVY_BEAM_COMPONENTS = ("Transform", "Evaluator", "EvaluationSetGen")


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
  """Cluster (Kubeflow): the image, where it runs, training machines, Dataflow and pods."""
  image: str = ""  # The pipeline's container image (see Dockerfile); every component runs it.
  kubeflow_target: str = "kfp"  # kfp (open-source KFP v2 server) or vertex (Vertex AI).
  # With one (kubeflow_target=vertex), the Trainer runs as a Vertex AI CustomJob.
  vertex_project: str = ""  # Google Cloud project of Vertex AI training.
  vertex_region: str = "us-central1"  # Region of the Vertex AI training job.
  machine_type: str = "n1-standard-8"  # Machine type of each training replica.
  # With kfp, a Kubernetes resource name on its pod (e.g. nvidia.com/gpu); with vertex, a Vertex
  # AcceleratorType name per pool replica (e.g. NVIDIA_TESLA_V100).
  accelerator_type: str = ""  # The Trainer's accelerators (empty for CPU only).
  # With kfp, on the Trainer's pod (each TrainJob node's); with vertex, per replica.
  accelerator_count: int = 0  # Accelerators of the Trainer.
  # One chief plus replica_count - 1 workers (Vertex worker pools, or on kfp the nodes of a
  # Kubeflow Trainer TrainJob, kubeflow/trainjob.py).
  replica_count: int = 1  # Machines the Trainer trains on.
  # Dataflow, the Beam engine of a Kubeflow run's Beam steps with --beam_runner=dataflow
  # (pipeline/beam_engine.py): the image as SDK container.

  dataflow_project: str = ""  # Google Cloud project of the Dataflow jobs.
  dataflow_region: str = ""  # Region of the Dataflow jobs.
  dataflow_temp_location: str = ""  # gs://bucket/path for Dataflow's staging and temp files.
  # What each pod asks for, as Kubernetes quantities (request and limit alike; empty for none):
  # the Trainer's (with kfp, its GPUs are accelerator_type/accelerator_count), and that of the
  # Beam steps reading every example (Transform, Evaluator, EvaluationSetGen).

  trainer_cpu: str = "8"  # CPU cores of the Trainer's pod (e.g. 8, 500m).
  trainer_memory: str = "32Gi"  # Memory of the Trainer's pod (e.g. 32Gi, 64G).
  beam_cpu: str = "4"  # CPU cores of the pod of each Beam step reading every example.
  beam_memory: str = "16Gi"  # Memory of the pod of each Beam step reading every example.
  # kubeflow_target=kfp: the Kubernetes platform section of the spec (no value of a Secret ever
  # enters it).

  credentials_secret: str = KFP_MINIO_SECRET  # Secret holding the object store's credentials.
  # With a location on s3://, every pod's environment maps these keys of credentials_secret.
  credentials_secret_keys: str = KFP_MINIO_SECRET_KEYS  # KEY:ENV_VAR,... pairs.
  s3_endpoint: str = ""  # Each pod's AWS_ENDPOINT_URL_S3 (e.g. http://minio-service.kubeflow:9000).
  s3_region: str = ""  # AWS_REGION of every pod (MinIO: any, e.g. us-east-1).
  trainer_node_selector: str = ""  # LABEL=VALUE,... the Trainer's node must carry.
  trainer_tolerations: str = ""  # KEY[=VALUE][:EFFECT],... taints the Trainer's pod tolerates.
  image_pull_secrets: str = ""  # NAME,... Secrets every pod pulls the image with.

  def __post_init__(self):
    _check_image(self.image)
    require(self.kubeflow_target in KUBEFLOW_TARGETS, "kubeflow_target", self.kubeflow_target,
            f"must be one of {KUBEFLOW_TARGETS}")
    require(not (self.vertex_project and self.kubeflow_target == "kfp"), "vertex_project",
            self.vertex_project, "needs --kubeflow_target=vertex: Vertex AI training runs as a "
            "CustomJob, which an open-source Kubeflow Pipelines server does not run")
    if self.kubeflow_target == "kfp":
      require(not self.accelerator_type or _is_extended_resource(self.accelerator_type),
              "accelerator_type", self.accelerator_type, "must be the Kubernetes resource name "
              "of the Trainer's accelerators with kubeflow_target=kfp, e.g. nvidia.com/gpu, "
              "amd.com/gpu (Vertex accelerator names are for kubeflow_target=vertex)")
    else:
      require(self.accelerator_type in ("",) + ACCELERATOR_TYPES, "accelerator_type",
              self.accelerator_type,
              f"must be one of the Vertex accelerator types {ACCELERATOR_TYPES}")
    require(self.accelerator_count >= 0, "accelerator_count", self.accelerator_count,
            "must be >= 0")
    require((self.accelerator_count > 0) == bool(self.accelerator_type), "accelerator_count",
            self.accelerator_count, "must be > 0 exactly when accelerator_type is set")
    require(self.replica_count >= 1, "replica_count", self.replica_count, "must be >= 1")
    self._check_pods()
    if not self.vertex_project:
      require(self.replica_count == 1 or self.kubeflow_target == "kfp", "vertex_project",
              self.vertex_project, "is required for more than one replica on "
              "kubeflow_target=vertex (the Trainer runs them as a Vertex AI training job; "
              "on kfp, as a Kubeflow Trainer TrainJob)")
      require(self.kubeflow_target == "kfp" or not self.accelerator_type, "vertex_project",
              self.vertex_project, "is required for accelerators with kubeflow_target=vertex "
              "(the Trainer runs them as a Vertex AI training job)")
    else:
      require(bool(self.vertex_region), "vertex_region", self.vertex_region,
              "is required with vertex_project")
      require(bool(self.machine_type), "machine_type", self.machine_type,
              "is required with vertex_project")
    if self.accelerator_type in TPU_TYPES:
      require(self.replica_count == 1, "replica_count", self.replica_count,
              "must be 1 with a TPU accelerator (one TPU host runs the TPUStrategy)")

  def _check_pods(self) -> None:
    for name in ("trainer_cpu", "beam_cpu"):
      value = getattr(self, name)
      require(not value or (cpu_cores(value) or 0) > 0, name, value,
              "must be a Kubernetes CPU quantity above 0 (e.g. 8, 0.5, 500m), or empty")
    for name in ("trainer_memory", "beam_memory"):
      value = getattr(self, name)
      # The spec holds GB as a number, which the driver prints with Go's %v: between 1Mi and
      # 1P it prints as a quantity Kubernetes parses (driver.go getPodResource).
      require(not value or 2**20 <= (memory_bytes(value) or 0) < 10**15, name, value,
              "must be a Kubernetes memory quantity from 1Mi to below 1P (e.g. 32Gi, 64G, "
              "512Mi), or empty")
    problems = kube_validation.dns1123_subdomain_problems(self.credentials_secret)
    require(not self.credentials_secret or not problems, "credentials_secret",
            self.credentials_secret, "must be a Kubernetes Secret name: " + "; ".join(problems))
    settings = pod_settings(self)
    require(bool(self.credentials_secret) or not settings.secret_env, "credentials_secret",
            self.credentials_secret, f"is required with credentials_secret_keys="
            f"{self.credentials_secret_keys!r} (the Secret they are read from); pass "
            "--credentials_secret_keys= too to map no Secret")
    require(not self.s3_endpoint or re.fullmatch(r"https?://[^\s/]+/?", self.s3_endpoint),
            "s3_endpoint", self.s3_endpoint, "must be http(s)://HOST[:PORT], or empty")
    require(re.fullmatch(r"[a-z0-9-]*", self.s3_region) is not None, "s3_region",
            self.s3_region, "must be a region name (e.g. us-east-1), or empty")
    if self.kubeflow_target == "vertex":
      for name in ("s3_endpoint", "s3_region", "trainer_node_selector", "trainer_tolerations",
                   "image_pull_secrets"):
        require(not getattr(self, name), name, getattr(self, name),
                "is for kubeflow_target=kfp (the spec's Kubernetes platform section and "
                "container environment, which Vertex AI does not read)")

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


@dataclasses.dataclass(frozen=True)
class PodResources:
  """What a step's pod asks for; cpu and memory are Kubernetes quantities (request and limit
  alike), empty for none."""
  cpu: str = ""
  memory: str = ""
  accelerator_type: str = ""  # A Kubernetes resource name (kfp), e.g. nvidia.com/gpu.
  accelerator_count: int = 0

  def __bool__(self) -> bool:
    return bool(self.cpu or self.memory or self.accelerator_count)


@dataclasses.dataclass(frozen=True)
class Toleration:
  """A Kubernetes toleration: Exists without a value, Equal with one; every effect if empty."""
  key: str
  value: str = ""
  effect: str = ""

  @property
  def operator(self) -> str:
    return "Equal" if self.value else "Exists"


@dataclasses.dataclass(frozen=True)
class StepPod:
  """A step's pod on Kubernetes: its resources, the Secret keys mapped into its environment,
  plain variables, node placement and image pull secrets. No Secret value, only names."""
  resources: PodResources = PodResources()
  secret_name: str = ""
  secret_env: Tuple[Tuple[str, str], ...] = ()  # (Secret key, environment variable).
  env: Tuple[Tuple[str, str], ...] = ()  # (variable, value): settings, never credentials.
  node_selector: Tuple[Tuple[str, str], ...] = ()  # (label, value).
  tolerations: Tuple[Toleration, ...] = ()
  image_pull_secrets: Tuple[str, ...] = ()


def step_kind(component_id: str) -> str:
  """TRAINER_STEP, BEAM_STEP (the heavy Beam steps) or LIGHT_STEP, from a component's id."""
  if component_id == "Trainer" or component_id.startswith("Trainer_trial_"):
    return TRAINER_STEP
  return BEAM_STEP if component_id in HEAVY_BEAM_COMPONENTS else LIGHT_STEP


def step_pod(config: ClusterConfig, kind: str, training_node: bool = False) -> StepPod:
  """The pod of a step of this kind (`step_kind`) on config's cluster; with training_node, the
  pod a Trainer's launcher (a Kubeflow Trainer TrainJob) gives each training node. A Trainer
  step that launches a TrainJob or a Vertex CustomJob only submits and watches it, so its own
  pod asks for nothing."""
  kubeflow = config.kubeflow
  resources = PodResources()
  launcher = kubeflow.uses_vertex_training or (kubeflow.uses_trainjob and not training_node)
  if kind == TRAINER_STEP and not launcher:
    accelerator = kubeflow.kubeflow_target == "kfp" and kubeflow.accelerator_count > 0
    resources = PodResources(
        kubeflow.trainer_cpu, kubeflow.trainer_memory,
        kubeflow.accelerator_type if accelerator else "",
        kubeflow.accelerator_count if accelerator else 0)
  elif kind == BEAM_STEP:
    resources = PodResources(kubeflow.beam_cpu, kubeflow.beam_memory)
  if kubeflow.kubeflow_target != "kfp":
    return StepPod(resources=resources)
  settings = pod_settings(kubeflow)
  secret_env = settings.secret_env if config.uses_s3 else ()
  env = tuple((name, value) for name, value in (("AWS_ENDPOINT_URL_S3", kubeflow.s3_endpoint),
                                                ("AWS_REGION", kubeflow.s3_region)) if value)
  trainer = kind == TRAINER_STEP
  return StepPod(
      resources=resources, secret_name=kubeflow.credentials_secret if secret_env else "",
      secret_env=secret_env, env=env,
      node_selector=settings.node_selector if trainer else (),
      tolerations=settings.tolerations if trainer else (),
      image_pull_secrets=settings.image_pull_secrets)


def cpu_cores(quantity: str) -> Optional[float]:
  """A Kubernetes CPU quantity (8, 0.5, 500m) in cores; None if it is not one."""
  match = CPU_QUANTITY.fullmatch(quantity)
  if match is None:
    return None
  return float(match.group(1)) / (1000 if match.group(3) else 1)


def memory_bytes(quantity: str) -> Optional[float]:
  """A Kubernetes memory quantity (32Gi, 64G, 512Mi) in bytes; None if it is not one."""
  match = MEMORY_QUANTITY.fullmatch(quantity)
  if match is None:
    return None
  return float(match.group(1)) * MEMORY_UNITS[match.group(3) or ""]


def _is_extended_resource(name: str) -> bool:
  """A prefixed qualified name outside the kubernetes.io domain (resource/helpers.go
  IsExtendedResourceName)."""
  domain, slash, _ = name.partition("/")
  return (bool(slash) and not kube_validation.qualified_name_problems(name) and "." in domain
          and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io")))


def _check_image(image: str) -> None:
  """The image every pod, TrainJob node and Dataflow worker runs, as the kubelet parses it."""
  require(bool(image), "image", image, "is required: the container image every component runs "
          "(e.g. gcr.io/my-project/wrn-pipeline:1)")
  require("{{" not in image, "image", image, "is a template placeholder, not an image "
          "reference: the spec names the image itself (each container's, the TrainJob nodes' "
          "and the Dataflow workers', which no placeholder reaches)")
  problems = kube_validation.image_reference_problems(image)
  require(not problems, "image", image, f"is not an image reference: {'; '.join(problems)} "
          "([REGISTRY[:PORT]/]PATH[:TAG][@sha256:DIGEST], the path in lowercase, e.g. "
          "gcr.io/my-project/wrn-pipeline:1)")


def _list_entries(flag: str, text: str) -> List[str]:
  """The comma-separated entries of a list flag (none when empty). An empty entry, or an entry
  given twice, is refused: either is a typo that would otherwise vanish without a word."""
  if not text:
    return []
  entries = text.split(",")
  require(all(entries), flag, text, "has an empty entry (two commas in a row, or one at an "
          "end)")
  _unique(flag, text, entries, "names {!r} twice")
  return entries


def _unique(flag: str, text: str, values: Sequence[str], saying: str) -> None:
  """Refuses a value given twice in a flag, `saying` which ("... {!r} twice")."""
  seen = set()
  for value in values:
    require(value not in seen, flag, text, saying.format(value))
    seen.add(value)


@dataclasses.dataclass(frozen=True)
class PodSettings:
  """The list flags of the pods, parsed: what a step's pod (step_pod) is built from."""
  secret_env: Tuple[Tuple[str, str], ...]  # (Secret key, environment variable).
  node_selector: Tuple[Tuple[str, str], ...]  # (label, value).
  tolerations: Tuple["Toleration", ...]
  image_pull_secrets: Tuple[str, ...]


def pod_settings(kubeflow: KubeflowConfig) -> PodSettings:
  """The pods' list flags parsed, each name checked by the rule Kubernetes checks it with
  (kube_validation); a bad entry or a duplicate is refused naming its flag."""
  return PodSettings(_secret_env(kubeflow.credentials_secret_keys),
                     _node_selector(kubeflow.trainer_node_selector),
                     _tolerations(kubeflow.trainer_tolerations),
                     _image_pull_secrets(kubeflow.image_pull_secrets))


def _require_name(flag: str, text: str, rule: str, what: str, problems: List[str]) -> None:
  require(not problems, flag, text, f"{rule}; {what}: {'; '.join(problems)}")


def _secret_env(text: str) -> Tuple[Tuple[str, str], ...]:
  flag = "credentials_secret_keys"
  rule = "must be SECRET_KEY:ENV_VAR,... (e.g. accesskey:AWS_ACCESS_KEY_ID), or empty"
  pairs = []
  for entry in _list_entries(flag, text):
    key, found, variable = entry.partition(":")
    require(found, flag, text, f"{rule}; {entry!r} has no ':'")
    _require_name(flag, text, rule, f"Secret key {key!r}",
                  kube_validation.config_map_key_problems(key))
    _require_name(flag, text, rule, f"variable {variable!r}",
                  kube_validation.c_identifier_problems(variable))
    pairs.append((key, variable))
  _unique(flag, text, [key for key, _ in pairs], "maps the Secret key {!r} twice")
  _unique(flag, text, [variable for _, variable in pairs], "sets the variable {!r} twice")
  return tuple(pairs)


def _node_selector(text: str) -> Tuple[Tuple[str, str], ...]:
  flag = "trainer_node_selector"
  rule = ("must be LABEL=VALUE,... with Kubernetes label names and values (e.g. "
          "nvidia.com/gpu.present=true), or empty")
  pairs = []
  for entry in _list_entries(flag, text):
    label, found, value = entry.partition("=")
    require(found, flag, text, f"{rule}; {entry!r} has no '='")
    _require_name(flag, text, rule, f"label name {label!r}",
                  kube_validation.qualified_name_problems(label))
    _require_name(flag, text, rule, f"label value {value!r}",
                  kube_validation.label_value_problems(value))
    pairs.append((label, value))
  _unique(flag, text, [label for label, _ in pairs], "gives the label {!r} twice")
  return tuple(pairs)


def _tolerations(text: str) -> Tuple["Toleration", ...]:
  flag = "trainer_tolerations"
  rule = (f"must be KEY[=VALUE][:EFFECT],... with EFFECT one of {TAINT_EFFECTS} (e.g. "
          "nvidia.com/gpu:NoSchedule)")
  tolerations = []
  for entry in _list_entries(flag, text):
    key_value, _, effect = entry.partition(":")
    key, _, value = key_value.partition("=")
    require(effect in ("",) + TAINT_EFFECTS, flag, text,
            f"{rule}; {entry!r} has the effect {effect!r}")
    # ValidateTolerations (kubernetes pkg/apis/core/validation): the key a label name
    # (IsQualifiedName), an Equal value a label value.
    _require_name(flag, text, rule, f"toleration key {key!r}",
                  kube_validation.qualified_name_problems(key))
    _require_name(flag, text, rule, f"toleration value {value!r}",
                  kube_validation.label_value_problems(value))
    tolerations.append(Toleration(key, value, effect))
  return tuple(tolerations)


def _image_pull_secrets(text: str) -> Tuple[str, ...]:
  flag = "image_pull_secrets"
  names = _list_entries(flag, text)
  for name in names:
    _require_name(flag, text, "must be Kubernetes Secret names, comma-separated",
                  f"Secret name {name!r}", kube_validation.dns1123_subdomain_problems(name))
  return tuple(names)


def image_path(local_path: str) -> str:
  """Where a file of this project's packages lives inside the image; an object-store URI as is."""
  if is_object_store_uri(local_path):
    return local_path
  relative = os.path.relpath(os.path.abspath(local_path), PROJECT_DIR)
  require(relative.split(os.sep)[0] in IMAGE_PACKAGES, "schema_path", local_path,
          "must be on object storage (gs://, s3://) or inside one of the packages the image "
          f"holds {IMAGE_PACKAGES}")
  return "/".join([IMAGE_PROJECT_DIR] + relative.split(os.sep))


@dataclasses.dataclass(frozen=True)
class ClusterConfig(PipelineConfig):
  """A run on Kubeflow Pipelines: the pipeline's fields, and the cluster's settings."""
  kubeflow: Optional[KubeflowConfig] = None  # Required: --image and the other cluster flags.

  def _check_where_it_runs(self) -> None:
    """Every location on object storage (read by the steps, not here), and pools, pods and
    Beam engine that fit the trainer config."""
    require(self.kubeflow is not None, "image", "", "is required on Kubeflow (e.g. "
            "--image=gcr.io/my-project/wrn-pipeline:1), with an object-storage --output_dir "
            "(gs://... or s3://...)")
    require(self.data.dataset != "tfrecord" or bool(self.data.tfrecord_dir), "tfrecord_dir",
            self.data.tfrecord_dir, "is required with dataset=tfrecord")
    require(self.data.dataset != "image_dir" or bool(self.data.image_dir), "image_dir",
            self.data.image_dir, "is required with dataset=image_dir")
    _check_cluster_config(self)
    if not is_object_store_uri(self.data.schema_path):
      check_schema(self)

  def beam_step_args(self, examples: Optional[int]) -> list:
    """Steps keep the pipeline's engine in a cluster."""
    return []

  def beam_pipeline_args(self, examples: Optional[int] = None) -> list:
    """A Beam step's arguments in the pipeline's image: the engine, and s3:// set up in each
    SDK worker; the image installs the project's requirements file (Dockerfile)."""
    image = self.kubeflow.image
    if self.beam.beam_runner == "dataflow":
      return self.kubeflow.dataflow_args() + self.s3_worker_args()
    if self.beam.beam_runner == "portable":
      return (self.beam.portable_args(image) + [f"--sdk_container_image={image}"]
              + self.s3_worker_args())
    mode = self.beam.beam_running_mode
    mode = "multi_processing" if mode == "auto" else mode
    # 0 tells Beam to use the cores of the machine the component runs on.
    workers = 1 if mode == "in_memory" else self.beam.beam_workers
    return ([f"--direct_running_mode={mode}", f"--direct_num_workers={workers}",
             f"--requirements_file={IMAGE_PROJECT_DIR}/{REQUIREMENTS_FILE}"]
            + self.s3_worker_args())


def from_flags(argv: Sequence[str], base: Optional[PipelineConfig] = None) -> ClusterConfig:
  """A Kubeflow run's config from flags, cluster flags included (pipeline.config.from_flags),
  over the `kubeflow` preset unless `--config` or `base` says otherwise."""
  return config_lib.from_flags(argv, base, ClusterConfig, CLUSTER_PRESET)


def usage(command: str, argv: Sequence[str] = ()) -> str:
  """Every flag of a Kubeflow run, grouped, the cluster's too, with the defaults of the preset
  `--config` among `argv` picks (else the cluster preset)."""
  return config_lib.usage(config_lib.preset_named(argv, CLUSTER_PRESET), command, ClusterConfig)


def _check_cluster_config(config: ClusterConfig) -> None:
  """What a cluster config must satisfy on top of the rules of every run."""
  kubeflow = config.kubeflow
  require(KFP_PIPELINE_NAME.fullmatch(config.runner.pipeline_name) is not None, "pipeline_name",
          config.runner.pipeline_name, "must match [a-z0-9][a-z0-9-]{0,127} on Kubeflow "
          f"(e.g. {KUBEFLOW_PIPELINE_NAME})")
  for name in ("output_dir", "tfrecord_dir", "tfds_data_dir", "schema_path"):
    value = groups.flatten(config)[name]
    problem = object_store_uri_problem(value)
    require(problem is None, name, value, problem)
    require(kubeflow.kubeflow_target != "vertex" or not is_object_store_uri(value)
            or value.startswith("gs://"), name, value, "must be on Cloud Storage (gs://) "
            "with kubeflow_target=vertex: Vertex AI Pipelines reads and writes only gs:// paths")
  require(is_object_store_uri(config.runner.output_dir), "output_dir", config.runner.output_dir,
          "must be on object storage (gs://bucket/path or s3://bucket/path) on Kubeflow: "
          "the pipeline root and the serving models go under it")
  for name in ("tfrecord_dir", "image_dir", "tfds_data_dir"):
    value = groups.flatten(config)[name]
    require(value is None or is_object_store_uri(value), name, value,
            "must be on object storage (gs://bucket/path or s3://bucket/path) on Kubeflow; "
            "the cluster cannot read this machine's files")
  image_path(config.data.schema_path)
  _check_dataflow(config)
  strategy = config.trainer.distribution.distribution_strategy
  expected = kubeflow.expected_distribution_strategies()
  require(strategy in expected, "distribution_strategy", strategy,
          f"must be one of {expected} with replica_count={kubeflow.replica_count}, "
          f"accelerator_type={kubeflow.accelerator_type!r}, "
          f"accelerator_count={kubeflow.accelerator_count}")


def _check_dataflow(config: ClusterConfig) -> None:
  kubeflow = config.kubeflow
  dataflow = {"dataflow_project": kubeflow.dataflow_project,
              "dataflow_region": kubeflow.dataflow_region,
              "dataflow_temp_location": kubeflow.dataflow_temp_location}
  if config.beam.beam_runner != "dataflow":
    for name, value in dataflow.items():
      require(not value, name, value, f"is not used with beam_runner={config.beam.beam_runner}")
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
    value = groups.flatten(config)[name]
    require(value is None or value.startswith("gs://"), name, value,
            "must be on Cloud Storage (gs://) with beam_runner=dataflow: Dataflow's "
            "workers read and write it without this cluster's S3 credentials")
