# The pipeline's image: TFX 1.16's official image plus this project. Every Kubeflow component
# and every Vertex AI training replica runs it. Build from the repository root (docs/kubeflow.md,
# "Running on Kubeflow Pipelines"):
#   docker build -t gcr.io/PROJECT/wrn-pipeline:TAG . && docker push gcr.io/PROJECT/wrn-pipeline:TAG
# BASE_IMAGE: another base with TFX 1.16's Python stack's needs (Debian/Ubuntu with apt, a
# `python` with pip on PATH, running as root); `make kubeflow-image-local` builds this image on
# a Debian base of its own where the official one cannot be pulled (docs/kubeflow.md).
ARG BASE_IMAGE=gcr.io/tfx-oss-public/tfx:1.16.0
FROM ${BASE_IMAGE}

# TFX 1.16, TFT and TFMA need Keras 2 (tf_keras) in every process.
ENV TF_USE_LEGACY_KERAS=1 PYTHONDONTWRITEBYTECODE=1
# kubeflow.cluster_config.IMAGE_PROJECT_DIR: the compiled pipeline reads the schema from here.
WORKDIR /pipeline

# requirements.lock is resolved for Python 3.10, the image's Python. --no-deps installs exactly
# the tested versions; pip skips what the image already has at those versions (TFX, TF, Beam).
# protobuf is the compiled 4.25 line (requirements.overrides) on 3.10 too: ml-metadata 1.16
# requires it there as well, and tensorflow-metadata and TFMA ship one py3 wheel for both.
# The robustness set: ImageMagick (its MagickWand library, which Wand loads for tfds' motion blur
# and snow), opencv's libraries.
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      imagemagick libgl1 libglib2.0-0 && rm -rf /var/lib/apt/lists/*
COPY requirements.lock ./
RUN python -m pip install --no-cache-dir --no-deps -r requirements.lock

COPY pyproject.toml ./
COPY pipeline/ pipeline/
COPY components/ components/
COPY reporting/ reporting/
COPY trainer_module/ trainer_module/
COPY kubeflow/ kubeflow/
COPY storage/ storage/
COPY configs/ configs/
RUN python -m pip install --no-cache-dir --no-deps . \
 && cd / && python -c "import pipeline.pipeline, kubeflow.cluster, kubeflow.kfp_entrypoint, \
                        trainer_module.tfx_trainer, configs.kubeflow" \
 && python -c "from storage import object_storage; object_storage.register_tensorflow_s3()"
# No ENTRYPOINT here: the TFX image's, Beam's SDK harness boot program, makes this image the
# SDK container of Dataflow and portable runners (docs/kubeflow.md, "Beam beyond one pod").
