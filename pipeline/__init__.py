"""The pipeline: its configuration, its graph and the gate; the runners are beside it."""
import os
import warnings

import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.

# Quiet TensorFlow's C++ start-up chatter (CUDA plugin registration on CPU-only machines) and
# the Google client libraries' Python-version notices, here and in the Beam workers this
# process starts. C++ errors still surface as Python exceptions; set TF_CPP_MIN_LOG_LEVEL=0
# to see everything.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
warnings.filterwarnings("ignore", category=FutureWarning)
