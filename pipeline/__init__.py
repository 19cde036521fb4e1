"""The pipeline graph, its configuration and the local runner."""
import os
import warnings

# TFX 1.16 needs Keras 2; set before TensorFlow resolves tf.keras (see trainer_module).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Quiet TensorFlow's C++ start-up chatter (CUDA plugin registration on CPU-only machines) and
# the Google client libraries' Python-version notices, here and in the Beam workers this
# process starts. C++ errors still surface as Python exceptions; set TF_CPP_MIN_LOG_LEVEL=0
# to see everything.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
warnings.filterwarnings("ignore", category=FutureWarning)
