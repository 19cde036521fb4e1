"""Data ingestion and the custom components of the pipeline."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
