"""Cluster settings: one config from flags, and every bad value stopped with a clear error."""
import re

import pytest

from configs import groups
from configs.flags import over_defaults
from configs.kubeflow import CLUSTER_FLAGS
from kubeflow import cli
from kubeflow import cluster_config as kubeflow_config
from local_runner import runner as local_runner
from kubeflow.cluster_config import from_flags
from pipeline import config as config_lib

CLUSTER = ["--image=gcr.io/proj/wrn:1", "--output_dir=gs://bucket/wrn",
           "--pipeline_name=wrn-image-classifier"]
VERTEX = CLUSTER + ["--kubeflow_target=vertex"]


def test_the_local_runner_refuses_exactly_the_cluster_flags():
  assert set(CLUSTER_FLAGS) == set(groups.leaf_paths(kubeflow_config.KubeflowConfig))


def test_cluster_flags_make_one_config_with_everything_on_object_storage():
  config = from_flags(CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=s3://data/tfrecords",
                                 "--train_epochs=7"])
  assert config.kubeflow.image == "gcr.io/proj/wrn:1"
  assert config.runner.pipeline_root == "gs://bucket/wrn/pipeline_root/wrn-image-classifier"
  assert config.runner.serving_model_dir == "gs://bucket/wrn/serving_model/wrn-image-classifier"
  assert config.trainer.training.train_epochs == 7
  # Beam uses the cores of the pod it runs in, not those of the machine that compiled it.
  assert "--direct_num_workers=0" in config.beam_pipeline_args()
  assert "--direct_running_mode=multi_processing" in config.beam_pipeline_args(100)
  # The image's own requirements (Dockerfile: /pipeline), so TFX builds no sdist in each pod.
  assert "--requirements_file=/pipeline/requirements.lock" in config.beam_pipeline_args()
  assert config.beam_step_args(100) == []  # Steps keep the pipeline's engine in a cluster.
  assert not hasattr(config_lib.from_flags([]), "kubeflow")  # A local run has no cluster.


def test_several_replicas_on_kfp_are_the_nodes_of_a_trainjob():
  config = from_flags(CLUSTER + ["--replica_count=3",
                                 "--distribution_strategy=multi_worker_mirrored"])
  assert config.kubeflow.uses_trainjob and not config.kubeflow.uses_vertex_training
  assert not from_flags(CLUSTER).kubeflow.uses_trainjob


def test_worker_pools_are_a_chief_and_the_other_replicas_on_the_pipeline_image():
  config = from_flags(VERTEX + ["--vertex_project=proj", "--machine_type=n1-standard-16",
                                "--accelerator_type=NVIDIA_TESLA_V100", "--accelerator_count=4",
                                "--replica_count=3",
                                "--distribution_strategy=multi_worker_mirrored"])
  machine = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100",
             "accelerator_count": 4}
  image = {"image_uri": "gcr.io/proj/wrn:1"}
  assert config.kubeflow.worker_pool_specs() == [
      {"machine_spec": machine, "container_spec": image, "replica_count": 1},
      {"machine_spec": machine, "container_spec": image, "replica_count": 2}]


@pytest.mark.parametrize("flags, message", [
    (["--output_dir=gs://bucket/wrn", "--pipeline_name=a-b", "--kubeflow_target=vertex"],
     "image='': is required: the container image every component runs"),
    (["--image=i", "--output_dir=/data/out", "--pipeline_name=a-b"],
     "output_dir='/data/out': must be on object storage"),
    (["--image=i", "--output_dir=outputs", "--pipeline_name=a-b"],
     "output_dir='outputs': must be on object storage"),
    (CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=/data/tfrecords"],
     "tfrecord_dir='/data/tfrecords': must be on object storage"),
    (CLUSTER + ["--dataset=tfrecord"], "tfrecord_dir=None: is required"),
    (CLUSTER + ["--dataset=cifar10", "--tfds_data_dir=/home/me/tfds"],
     "tfds_data_dir='/home/me/tfds': must be on object storage"),
    (CLUSTER + ["--schema_path=/etc/passwd"], "schema_path='/etc/passwd': must be on object "
     "storage (gs://, s3://) or inside one of the packages the image holds"),
    (["--config=local_digits", "--image=i", "--output_dir=gs://bucket/wrn"],
     "pipeline_name='wrn_image_classifier': must match [a-z0-9][a-z0-9-]{0,127} on Kubeflow"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=GTX_1080", "--accelerator_count=1"],
     "accelerator_type='GTX_1080': must be one of the Vertex accelerator types"),
    (VERTEX + ["--accelerator_type=NVIDIA_TESLA_T4", "--accelerator_count=1"],
     "vertex_project='': is required for accelerators with kubeflow_target=vertex"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_TESLA_T4"],
     "accelerator_count=0: must be > 0 exactly when accelerator_type is set"),
    (VERTEX + ["--vertex_project=p", "--replica_count=4"],
     "distribution_strategy='default': must be one of ('multi_worker_mirrored',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_TESLA_T4",
               "--accelerator_count=2"],
     "distribution_strategy='default': must be one of ('mirrored',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=TPU_V3", "--accelerator_count=8"],
     "distribution_strategy='default': must be one of ('tpu',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=TPU_V3", "--accelerator_count=8",
               "--replica_count=2", "--distribution_strategy=tpu", "--tpu=local"],
     "replica_count=2: must be 1 with a TPU accelerator"),
    (CLUSTER + ["--kubeflow_target=argo"], "kubeflow_target='argo': must be one of"),
    # Vertex AI training is a CustomJob executor, which an open-source KFP server refuses.
    (CLUSTER + ["--vertex_project=p"], "vertex_project='p': needs --kubeflow_target=vertex"),
    (CLUSTER + ["--distribution_strategy=multi_worker_mirrored"],
     "distribution_strategy='multi_worker_mirrored': must be one of ('default', 'mirrored') "
     "with replica_count=1"),
    (VERTEX + ["--replica_count=2", "--distribution_strategy=multi_worker_mirrored"],
     "vertex_project='': is required for more than one replica on kubeflow_target=vertex"),
    (CLUSTER + ["--replica_count=2"],
     "distribution_strategy='default': must be one of ('multi_worker_mirrored',)"),
])
def test_bad_cluster_values_name_the_flag_and_value(flags, message):
  with pytest.raises(ValueError, match="Invalid config value " + _escaped(message)):
    from_flags(flags)


S3 = over_defaults(CLUSTER, ["--output_dir=s3://bucket/wrn"])
KFP_GPUS = S3 + ["--accelerator_type=nvidia.com/gpu", "--accelerator_count=2",
                 "--distribution_strategy=mirrored",
                 "--trainer_node_selector=nvidia.com/gpu.present=true",
                 "--trainer_tolerations=nvidia.com/gpu:NoSchedule,dedicated=ml",
                 "--image_pull_secrets=regcred", "--s3_endpoint=http://minio-service.kubeflow:9000"]
MINIO_KEYS = (("accesskey", "AWS_ACCESS_KEY_ID"), ("secretkey", "AWS_SECRET_ACCESS_KEY"))


def test_on_kfp_the_trainer_pod_gets_its_gpus_placement_and_the_credentials_secret():
  config = from_flags(KFP_GPUS)
  trainer = kubeflow_config.step_pod(config, kubeflow_config.TRAINER_STEP)
  assert trainer == kubeflow_config.StepPod(
      resources=kubeflow_config.PodResources("8", "32Gi", "nvidia.com/gpu", 2),
      secret_name="mlpipeline-minio-artifact", secret_env=MINIO_KEYS,
      env=(("AWS_ENDPOINT_URL_S3", "http://minio-service.kubeflow:9000"),),
      node_selector=(("nvidia.com/gpu.present", "true"),),
      tolerations=(kubeflow_config.Toleration("nvidia.com/gpu", "", "NoSchedule"),
                   kubeflow_config.Toleration("dedicated", "ml", "")),
      image_pull_secrets=("regcred",))
  assert [t.operator for t in trainer.tolerations] == ["Exists", "Equal"]
  # Other steps: the same credentials, endpoint and pull secrets; no GPU, no placement.
  beam = kubeflow_config.step_pod(config, kubeflow_config.BEAM_STEP)
  assert beam.resources == kubeflow_config.PodResources("4", "16Gi")
  assert (beam.secret_env, beam.env, beam.image_pull_secrets) == (
      trainer.secret_env, trainer.env, trainer.image_pull_secrets)
  assert not beam.node_selector and not beam.tolerations
  assert not kubeflow_config.step_pod(config, kubeflow_config.LIGHT_STEP).resources


def test_no_secret_is_mapped_without_s3_nor_on_vertex():
  assert kubeflow_config.step_pod(from_flags(CLUSTER), kubeflow_config.LIGHT_STEP) == \
      kubeflow_config.StepPod()  # gs:// only: the pod's own identity reads it.
  assert not kubeflow_config.step_pod(from_flags(S3 + ["--credentials_secret=",
                                                      "--credentials_secret_keys="]),
                                      kubeflow_config.TRAINER_STEP).secret_env
  vertex = from_flags(VERTEX)  # Vertex reads gs:// only, with the pods' own identity.
  assert kubeflow_config.step_pod(vertex, kubeflow_config.TRAINER_STEP) == \
      kubeflow_config.StepPod(resources=kubeflow_config.PodResources("8", "32Gi"))
  # A Vertex Trainer's pod only submits the CustomJob; its pools have the accelerators.
  pools = from_flags(VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_L4",
                               "--accelerator_count=1"])
  assert not kubeflow_config.step_pod(pools, kubeflow_config.TRAINER_STEP).resources


@pytest.mark.parametrize("component_id, kind", [
    ("Trainer", "trainer"), ("Trainer_trial_2", "trainer"), ("Transform", "beam"),
    ("Evaluator", "beam"), ("EvaluationSetGen", "beam"), ("StatisticsGen", "light"),
    ("Pusher", "light")])
def test_step_kinds(component_id, kind):
  assert kubeflow_config.step_kind(component_id) == kind


@pytest.mark.parametrize("quantity, cores", [("8", 8.0), ("0.5", 0.5), ("500m", 0.5),
                                             ("8 cores", None), ("-1", None), ("1e3", None)])
def test_cpu_quantities(quantity, cores):
  assert kubeflow_config.cpu_cores(quantity) == cores


@pytest.mark.parametrize("quantity, size", [("32Gi", 32 * 2**30), ("64G", 64e9), ("512Mi", 2**29),
                                            ("1.5Ti", 1.5 * 2**40), ("16GB", None),
                                            ("16gi", None), ("16 Gi", None), ("-1Gi", None)])
def test_memory_quantities(quantity, size):
  assert kubeflow_config.memory_bytes(quantity) == size


@pytest.mark.parametrize("flags, message", [
    (CLUSTER + ["--accelerator_type=NVIDIA_TESLA_T4", "--accelerator_count=1"],
     "accelerator_type='NVIDIA_TESLA_T4': must be the Kubernetes resource name"),
    (CLUSTER + ["--accelerator_type=gpu", "--accelerator_count=1"],
     "accelerator_type='gpu': must be the Kubernetes resource name"),
    (CLUSTER + ["--accelerator_type=kubernetes.io/gpu", "--accelerator_count=1"],
     "accelerator_type='kubernetes.io/gpu': must be the Kubernetes resource name"),
    (CLUSTER + ["--accelerator_type=nvidia.com/gpu", "--accelerator_count=-2"],
     "accelerator_count=-2: must be >= 0"),
    (CLUSTER + ["--accelerator_type=nvidia.com/gpu", "--accelerator_count=2"],
     "distribution_strategy='default': must be one of ('mirrored',)"),
    (CLUSTER + ["--trainer_memory=16GB"], "trainer_memory='16GB': must be a Kubernetes memory "
     "quantity"),
    (CLUSTER + ["--beam_memory=4096"],  # Bytes: below 1Mi.
     "beam_memory='4096': must be a Kubernetes memory quantity from 1Mi to below 1P"),
    (CLUSTER + ["--trainer_memory=2P"],
     "trainer_memory='2P': must be a Kubernetes memory quantity from 1Mi to below 1P"),
    (CLUSTER + ["--trainer_cpu=two"], "trainer_cpu='two': must be a Kubernetes CPU quantity"),
    (CLUSTER + ["--beam_cpu=0"], "beam_cpu='0': must be a Kubernetes CPU quantity above 0"),
    (S3 + ["--credentials_secret="], "credentials_secret='': is required with "
     "credentials_secret_keys="),
    (S3 + ["--credentials_secret=Minio_Creds"],
     "credentials_secret='Minio_Creds': must be a Kubernetes Secret name"),
    (S3 + ["--credentials_secret_keys=accesskey"],
     "credentials_secret_keys='accesskey': must be SECRET_KEY:ENV_VAR"),
    (S3 + ["--credentials_secret_keys=accesskey:AWS-KEY"],
     "credentials_secret_keys='accesskey:AWS-KEY': must be SECRET_KEY:ENV_VAR"),
    (S3 + ["--s3_endpoint=minio:9000"], "s3_endpoint='minio:9000': must be http(s)://HOST[:PORT]"),
    (CLUSTER + ["--trainer_node_selector=gpu"],
     "trainer_node_selector='gpu': must be LABEL=VALUE,... with Kubernetes label names"),
    (CLUSTER + ["--trainer_tolerations=nvidia.com/gpu:Never"],
     "trainer_tolerations='nvidia.com/gpu:Never': must be KEY[=VALUE][:EFFECT]"),
    (CLUSTER + ["--image_pull_secrets=Reg_Cred"],
     "image_pull_secrets='Reg_Cred': must be Kubernetes Secret names"),
    (VERTEX + ["--trainer_node_selector=pool=gpu"], "trainer_node_selector='pool=gpu': is for "
     "kubeflow_target=kfp"),
    (VERTEX + ["--s3_endpoint=http://minio:9000"],
     "s3_endpoint='http://minio:9000': is for kubeflow_target=kfp"),
])
def test_bad_pod_values_name_the_flag_and_value(flags, message):
  with pytest.raises(ValueError, match="Invalid config value " + _escaped(message)):
    from_flags(flags)


DATAFLOW = CLUSTER + ["--beam_runner=dataflow", "--dataflow_project=proj",
                      "--dataflow_region=europe-west4", "--dataflow_temp_location=gs://tmp-b/df"]
PORTABLE = CLUSTER + ["--beam_runner=portable", "--beam_job_endpoint=flink-jobserver.flink:8099"]


@pytest.mark.parametrize("flags, message", [
    (CLUSTER + ["--beam_runner=spark"], "beam_runner='spark': must be one of"),
    (CLUSTER + ["--beam_runner=dataflow", "--dataflow_region=us-central1",
                "--dataflow_temp_location=gs://tmp-b/df"], "dataflow_project='': is required"),
    (DATAFLOW[:-1], "dataflow_temp_location='': must be on Cloud Storage"),
    (DATAFLOW[:-1] + ["--dataflow_temp_location=s3://tmp-b/df"],
     "dataflow_temp_location='s3://tmp-b/df': must be on Cloud Storage (gs://bucket/path)"),
    (DATAFLOW[:-1] + ["--dataflow_temp_location=/tmp/df"],
     "dataflow_temp_location='/tmp/df': must be on Cloud Storage (gs://bucket/path)"),
    (over_defaults(DATAFLOW, ["--dataflow_region=Europe West"]),
     "dataflow_region='Europe West': must be a Google Cloud region"),
    (over_defaults(DATAFLOW, ["--output_dir=s3://bucket/wrn"]),
     "output_dir='s3://bucket/wrn': must be on Cloud Storage (gs://) with beam_runner=dataflow"),
    (DATAFLOW + ["--dataset=tfrecord", "--tfrecord_dir=s3://data/tfrecords"],
     "tfrecord_dir='s3://data/tfrecords': must be on Cloud Storage (gs://) with "
     "beam_runner=dataflow"),
    (DATAFLOW + ["--beam_workers=4"], "beam_workers=4: is for the direct runner"),
    (DATAFLOW + ["--beam_job_endpoint=flink:8099"], "beam_job_endpoint='flink:8099': is not used "
     "with beam_runner=dataflow"),
    (CLUSTER + ["--beam_runner=portable"], "beam_job_endpoint='': must be host:port"),
    (CLUSTER + ["--beam_runner=portable", "--beam_job_endpoint=http://flink:8099"],
     "beam_job_endpoint='http://flink:8099': must be host:port of the job server"),
    (PORTABLE + ["--beam_environment_type=LOOPBACK"],
     "beam_environment_type='LOOPBACK': must be one of ('DOCKER', 'EXTERNAL', 'PROCESS')"),
    (PORTABLE + ["--beam_environment_type=EXTERNAL"], "beam_environment_config='': must be "
     "host:port of the SDK worker pool"),
    (PORTABLE + ["--beam_environment_type=PROCESS", "--beam_environment_config=boot"],
     "beam_environment_config='boot': must be JSON"),
    (PORTABLE + ["--dataflow_temp_location=gs://tmp-b/df"],
     "dataflow_temp_location='gs://tmp-b/df': is not used with beam_runner=portable"),
    (CLUSTER + ["--dataflow_project=proj"], "dataflow_project='proj': is not used with "
     "beam_runner=direct"),
    (["--image=i", "--output_dir=/data/out", "--pipeline_name=a-b", "--beam_runner=portable",
      "--beam_job_endpoint=flink:8099"], "output_dir='/data/out': must be on object storage"),
])
def test_bad_beam_engine_values_fail_before_compiling(flags, message):
  with pytest.raises(ValueError, match="Invalid config value " + _escaped(message)):
    from_flags(flags)


def test_dataflow_runs_every_beam_step_on_the_pipeline_image():
  assert from_flags(DATAFLOW).beam_pipeline_args() == [
      "--runner=DataflowRunner", "--project=proj", "--region=europe-west4",
      "--temp_location=gs://tmp-b/df", "--sdk_container_image=gcr.io/proj/wrn:1",
      "--sdk_location=container", "--experiments=use_runner_v2"]


@pytest.mark.parametrize("flags, environment", [
    ([], ["--environment_type=DOCKER", "--environment_config=gcr.io/proj/wrn:1"]),
    (["--beam_environment_type=EXTERNAL", "--beam_environment_config=localhost:50000"],
     ["--environment_type=EXTERNAL", "--environment_config=localhost:50000"]),
    (["--beam_environment_type=PROCESS"],
     ["--environment_type=PROCESS", '--environment_config={"command": "/opt/apache/beam/boot"}']),
])
def test_a_portable_job_server_runs_the_pipeline_image_as_sdk_harness(flags, environment):
  # The harness runs the image, so TFX builds no sdist of itself for it to install
  # (tfx/utils/dependency_utils.py) and nothing is staged.
  assert from_flags(PORTABLE + flags).beam_pipeline_args() == [
      "--runner=PortableRunner", "--job_endpoint=flink-jobserver.flink:8099"] + environment + [
          "--job_server_timeout=604800", "--sdk_container_image=gcr.io/proj/wrn:1"]


def test_every_sdk_worker_sets_up_s3_when_a_path_is_on_s3():
  plugin = "--beam_plugin=storage.beam_worker"
  assert plugin not in from_flags(CLUSTER).beam_pipeline_args()  # gs:// is built into TF.
  assert plugin in from_flags(S3).beam_pipeline_args()
  assert plugin in from_flags(CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=s3://data/tf"]
                              ).beam_pipeline_args()
  assert from_flags(over_defaults(PORTABLE, ["--output_dir=s3://bucket/wrn"])
                    ).beam_pipeline_args()[-1] == plugin
  assert plugin not in config_lib.from_flags([]).beam_pipeline_args()


def test_the_consistent_tpu_and_multi_gpu_pools_are_accepted():
  tpu = from_flags(VERTEX + ["--vertex_project=p", "--accelerator_type=TPU_V3",
                             "--accelerator_count=8", "--machine_type=cloud-tpu",
                             "--distribution_strategy=tpu", "--tpu=local"])
  assert tpu.kubeflow.expected_distribution_strategies() == ("tpu",)
  gpus = from_flags(VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_L4",
                              "--accelerator_count=2", "--distribution_strategy=mirrored"])
  assert gpus.kubeflow.uses_vertex_training


def test_accelerator_names_are_vertex_accelerator_types():
  from google.cloud.aiplatform_v1.types import AcceleratorType
  assert set(kubeflow_config.ACCELERATOR_TYPES) <= set(AcceleratorType.__members__)


def test_the_schema_maps_to_its_copy_in_the_image():
  config = from_flags(CLUSTER)
  assert kubeflow_config.image_path(config.data.schema_path) == "/pipeline/components/schema.pbtxt"
  # A schema on object storage is read by ImportSchemaGen in the cluster, not here.
  assert from_flags(CLUSTER + ["--schema_path=gs://bucket/schema.pbtxt"]).data.schema_path == \
      "gs://bucket/schema.pbtxt"
  assert kubeflow_config.image_path("gs://bucket/schema.pbtxt") == "gs://bucket/schema.pbtxt"


def test_the_local_runner_refuses_cluster_flags(capsys):
  assert local_runner.main(CLUSTER) == 2
  assert "python -m kubeflow" in capsys.readouterr().err


def _escaped(text):
  import re
  return re.escape(text)


@pytest.mark.parametrize("flags, message", [
    (["--image=i", "--output_dir=gs://b/wrn", "--pipeline_name=a-b"],
     "output_dir='gs://b/wrn': 'b' is not a bucket name: buckets are named by 3-63"),
    (CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=s3://My_Bucket/data"],
     "tfrecord_dir='s3://My_Bucket/data': 'My_Bucket' is not a bucket name"),
    (["--image=i", "--output_dir=s3://bucket/wrn", "--pipeline_name=a-b",
      "--kubeflow_target=vertex"],
     "output_dir='s3://bucket/wrn': must be on Cloud Storage (gs://) with kubeflow_target=vertex"),
    (VERTEX + ["--dataset=tfrecord", "--tfrecord_dir=s3://data/tfrecords"],
     "tfrecord_dir='s3://data/tfrecords': must be on Cloud Storage (gs://) with "
     "kubeflow_target=vertex"),
], ids=["one-letter-bucket", "uppercase-bucket", "vertex-s3-output", "vertex-s3-input"])
def test_an_object_store_path_is_judged_by_its_bucket_and_by_the_target(flags, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    from_flags(flags)


LONG_PREFIX = "p" * 254  # One over a DNS subdomain's 253 characters.
HEX64 = "0" * 64


@pytest.mark.parametrize("flag, message", [
    # Names over Kubernetes' limits (k8s.io/apimachinery validation).
    (f"--credentials_secret={'s' * 254}", "must be a Kubernetes Secret name: must be no more "
     "than 253 characters"),
    (f"--image_pull_secrets=regcred,{'s' * 254}", f"Secret name {'s' * 254!r}: must be no "
     "more than 253 characters"),
    (f"--trainer_node_selector={LONG_PREFIX}/gpu=true", "label name "
     f"'{LONG_PREFIX}/gpu': prefix part must be no more than 253 characters"),
    (f"--credentials_secret_keys={'k' * 254}:AWS_ACCESS_KEY_ID",
     f"Secret key {'k' * 254!r}: must be no more than 253 characters"),
    (f"--trainer_node_selector={'n' * 64}=true",
     f"label name {'n' * 64!r}: name part must be no more than 63 characters"),
    (f"--trainer_node_selector=pool={'v' * 64}",
     f"label value {'v' * 64!r}: must be no more than 63 characters"),
    (f"--trainer_tolerations={'k' * 64}:NoSchedule",
     f"toleration key {'k' * 64!r}: name part must be no more than 63 characters"),
    (f"--trainer_tolerations={LONG_PREFIX}/gpu",
     "prefix part must be no more than 253 characters"),
    (f"--trainer_tolerations=dedicated={'v' * 64}",
     f"toleration value {'v' * 64!r}: must be no more than 63 characters"),
    (f"--accelerator_type=nvidia.com/{'g' * 64}", "must be the Kubernetes resource name"),
    # Duplicates, empty parts and repeated entries.
    ("--credentials_secret_keys=accesskey:AWS_ACCESS_KEY_ID,secretkey:AWS_ACCESS_KEY_ID",
     "sets the variable 'AWS_ACCESS_KEY_ID' twice"),
    ("--credentials_secret_keys=accesskey:AWS_ACCESS_KEY_ID,accesskey:AWS_SECRET_ACCESS_KEY",
     "maps the Secret key 'accesskey' twice"),
    ("--trainer_node_selector=a=b,a=c", "gives the label 'a' twice"),
    ("--image_pull_secrets=a,,b", "has an empty entry"),
    ("--image_pull_secrets=a,b,", "has an empty entry"),
    ("--credentials_secret_keys=,accesskey:AWS_ACCESS_KEY_ID", "has an empty entry"),
    ("--trainer_tolerations=a:NoSchedule,,b", "has an empty entry"),
    ("--image_pull_secrets=a,a", "names 'a' twice"),
    ("--trainer_tolerations=gpu:NoSchedule,gpu:NoSchedule", "names 'gpu:NoSchedule' twice"),
    # Image references the kubelet refuses (InvalidImageName).
    ("--image=registry.example.com/Wrn:1", "is not an image reference: repository name (Wrn) "
     "must be lowercase"),
    ("--image=wrn:bad:tag", "is not an image reference: invalid reference format"),
    ("--image=wrn@sha256:short", "is not an image reference: invalid reference format"),
    (f"--image=wrn@sha256:{HEX64}0", "is not an image reference: a sha256 digest is 64 "
     "lowercase hexadecimal digits"),
    (f"--image=registry.example.com/wrn:{'t' * 200}",
     "is not an image reference: invalid reference format"),
    ("--image={{$.inputs.parameters['image']}}", "is a template placeholder"),
    ("--image=wrn pipeline:1", "is not an image reference: invalid reference format"),
], ids=lambda value: value[:60])
def test_a_name_kubernetes_would_refuse_stops_the_compile_naming_the_flag(flag, message,
                                                                         tmp_path, capsys):
  package_dir = tmp_path / "package"
  flags = over_defaults(["--image=registry.example.com/wrn-pipeline:1",
                         "--output_dir=s3://bucket/wrn", "--pipeline_name=wrn"], [flag])
  assert cli.main(["compile", f"--package_dir={package_dir}"] + flags) == 2
  error = capsys.readouterr().err
  name = flag[2:].partition("=")[0]
  assert f"error: Invalid config value {name}=" in error, error
  assert message in error, error
  assert "is required" not in error
  assert not package_dir.exists()


def test_consistent_names_at_kubernetes_limits_compile_to_the_pods_they_name():
  prefix = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters.
  config = from_flags(over_defaults(S3, [
      f"--credentials_secret={prefix}",
      f"--credentials_secret_keys={'k' * 253}:AWS_ACCESS_KEY_ID,secret.key:AWS_SECRET_ACCESS_KEY",
      f"--trainer_node_selector={prefix}/{'n' * 63}={'v' * 63},pool=",
      f"--trainer_tolerations={prefix}/{'t' * 63}={'v' * 63}:NoSchedule,gpu:NoSchedule,gpu",
      f"--image_pull_secrets={prefix},regcred",
      f"--image=registry.example.com:5000/team/wrn:{'t' * 128}@sha256:{HEX64}"]))
  pod = kubeflow_config.step_pod(config, kubeflow_config.TRAINER_STEP)
  assert pod.secret_name == prefix
  assert pod.secret_env == (("k" * 253, "AWS_ACCESS_KEY_ID"),
                            ("secret.key", "AWS_SECRET_ACCESS_KEY"))
  assert pod.node_selector == ((f"{prefix}/{'n' * 63}", "v" * 63), ("pool", ""))
  assert pod.tolerations == (
      kubeflow_config.Toleration(f"{prefix}/{'t' * 63}", "v" * 63, "NoSchedule"),
      kubeflow_config.Toleration("gpu", "", "NoSchedule"), kubeflow_config.Toleration("gpu"))
  assert pod.image_pull_secrets == (prefix, "regcred")
