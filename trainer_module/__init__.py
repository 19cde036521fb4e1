"""Everything that runs inside Transform and Trainer, and the standalone trainer.

TFX 1.16, TFT and TFMA need Keras 2 (`tf_keras`). The switch must be set before TensorFlow
resolves `tf.keras`, in every process that imports this package (Beam workers included).
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
