import pytest

from kubeflow.cluster_config import from_flags

# A Vertex multi-worker GPU pipeline on the embedded digits, and a TFRecord one without Vertex.
VERTEX_FLAGS = ["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=gs://bucket/wrn",
                "--dataset=digits",
                "--kubeflow_target=vertex", "--vertex_project=proj",
                "--vertex_region=europe-west4",
                "--accelerator_type=NVIDIA_TESLA_V100", "--accelerator_count=2",
                "--replica_count=3", "--distribution_strategy=multi_worker_mirrored"]
TFRECORD_FLAGS = ["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=s3://bucket/wrn",
                  "--dataset=tfrecord", "--tfrecord_dir=s3://data/images",
                  "--pipeline_name=wrn-tfrecord"]
# docs/kubeflow.md's command for an open-source cluster: the flagship recipe, 2 GPUs on the
# Trainer's pod, S3 credentials from a named Secret, GPU nodes selected by a label.
OPEN_SOURCE_GPU_FLAGS = [
    "--image=registry.example.com/wrn-pipeline:1", "--output_dir=s3://wrn/runs",
    "--dataset=cifar10", "--s3_endpoint=http://minio-service.kubeflow:9000",
    "--s3_region=us-east-1", "--credentials_secret=wrn-s3-credentials",
    "--accelerator_type=nvidia.com/gpu", "--accelerator_count=2",
    "--distribution_strategy=mirrored", "--trainer_node_selector=nvidia.com/gpu.present=true",
    "--trainer_tolerations=nvidia.com/gpu:NoSchedule"]


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
  """The three pipelines compiled once by `python -m kubeflow compile`, with their configs."""
  from kubeflow import compiler
  result = {}
  for name, flags in (("vertex", VERTEX_FLAGS), ("tfrecord", TFRECORD_FLAGS),
                      ("gpus", OPEN_SOURCE_GPU_FLAGS)):
    config = from_flags(flags)
    result[name] = (config, compiler.compile_pipeline(config, str(tmp_path_factory.mktemp(name))))
  return result
