"""Runs the pipeline on Kubeflow Pipelines: cluster config, compiler, and a client CLI."""
import os

# TFX 1.16 needs Keras 2; set before TensorFlow resolves tf.keras (see trainer_module).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
