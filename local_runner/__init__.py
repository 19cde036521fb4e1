"""The local runner: TFX's LocalDagRunner on this machine, one run at a time
(`python -m local_runner`)."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
