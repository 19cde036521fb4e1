"""Everything that runs inside Transform and Trainer, and the standalone trainer.

The one place TF_USE_LEGACY_KERAS is set: TFX 1.16, TFT and TFMA need Keras 2 (`tf_keras`),
chosen when TensorFlow first resolves `tf.keras`. Every project package imports this one first,
and child processes (Beam workers) inherit the variable; the image's ENV (Dockerfile) repeats
it for the processes that load TensorFlow before any project code.
"""
import os

LEGACY_KERAS = ("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault(*LEGACY_KERAS)
