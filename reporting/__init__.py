"""What the local runner shows afterwards: a run read back from MLMD, and its summary read from
the run's report artifact."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
