"""Runs the pipeline on Kubeflow Pipelines: cluster config, compiler, and a client CLI."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
