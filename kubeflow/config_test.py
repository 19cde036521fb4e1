"""Cluster settings: one config from flags, and every bad value stopped with a clear error."""
import pytest

from kubeflow import config as kubeflow_config
from pipeline import local_runner
from pipeline.config import from_flags

CLUSTER = ["--image=gcr.io/proj/wrn:1", "--output_dir=gs://bucket/wrn",
           "--pipeline_name=wrn-image-classifier"]
VERTEX = CLUSTER + ["--kubeflow_target=vertex"]


def test_cluster_flags_make_one_config_with_everything_on_object_storage():
  config = from_flags(CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=s3://data/tfrecords",
                                 "--train_epochs=7"])
  assert config.kubeflow.image == "gcr.io/proj/wrn:1"
  assert config.pipeline_root == "gs://bucket/wrn/pipeline_root/wrn-image-classifier"
  assert config.serving_model_dir == "gs://bucket/wrn/serving_model/wrn-image-classifier"
  assert config.trainer.train_epochs == 7
  # Beam uses the cores of the pod it runs in, not those of the machine that compiled it.
  assert "--direct_num_workers=0" in config.beam_pipeline_args()
  assert from_flags([]).kubeflow is None


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
     "image=''"),
    (["--image=i", "--output_dir=/data/out", "--pipeline_name=a-b"], "output_dir='/data/out'"),
    (["--image=i", "--output_dir=outputs", "--pipeline_name=a-b"], "output_dir='outputs'"),
    (CLUSTER + ["--dataset=tfrecord", "--tfrecord_dir=/data/tfrecords"],
     "tfrecord_dir='/data/tfrecords'"),
    (CLUSTER + ["--dataset=tfrecord"], "tfrecord_dir=None: is required"),
    (CLUSTER + ["--dataset=cifar10", "--tfds_data_dir=/home/me/tfds"],
     "tfds_data_dir='/home/me/tfds'"),
    (CLUSTER + ["--schema_path=/etc/passwd"], "schema_path='/etc/passwd'"),
    (["--image=i", "--output_dir=gs://bucket/wrn"], "pipeline_name='wrn_image_classifier'"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=GTX_1080", "--accelerator_count=1"],
     "accelerator_type='GTX_1080'"),
    (CLUSTER + ["--accelerator_type=NVIDIA_TESLA_T4", "--accelerator_count=1"],
     "vertex_project=''"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_TESLA_T4"],
     "accelerator_count=0"),
    (VERTEX + ["--vertex_project=p", "--replica_count=4"],
     "distribution_strategy='default': must be one of ('multi_worker_mirrored',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=NVIDIA_TESLA_T4",
               "--accelerator_count=2"], "distribution_strategy='default': must be one of ('mirrored',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=TPU_V3", "--accelerator_count=8"],
     "distribution_strategy='default': must be one of ('tpu',)"),
    (VERTEX + ["--vertex_project=p", "--accelerator_type=TPU_V3", "--accelerator_count=8",
               "--replica_count=2", "--distribution_strategy=tpu", "--tpu=local"],
     "replica_count=2"),
    (CLUSTER + ["--kubeflow_target=argo"], "kubeflow_target='argo': must be one of"),
    # Vertex AI training is a CustomJob executor, which an open-source KFP server refuses.
    (CLUSTER + ["--vertex_project=p"], "vertex_project='p': needs --kubeflow_target=vertex"),
    (CLUSTER + ["--distribution_strategy=multi_worker_mirrored"],
     "distribution_strategy='multi_worker_mirrored'"),
])
def test_bad_cluster_values_name_the_flag_and_value(flags, message):
  with pytest.raises(ValueError, match="Invalid config value " + _escaped(message)):
    from_flags(flags)


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
  assert kubeflow_config.image_path(config.schema_path) == "/pipeline/components/schema.pbtxt"
  # A schema on object storage is read by ImportSchemaGen in the cluster, not here.
  assert from_flags(CLUSTER + ["--schema_path=gs://bucket/schema.pbtxt"]).schema_path == \
      "gs://bucket/schema.pbtxt"
  assert kubeflow_config.image_path("gs://bucket/schema.pbtxt") == "gs://bucket/schema.pbtxt"


def test_the_local_runner_refuses_cluster_flags(capsys):
  assert local_runner.main(CLUSTER) == 2
  assert "python -m kubeflow" in capsys.readouterr().err


def _escaped(text):
  import re
  return re.escape(text)
