"""What a run shows afterwards: the console summary, the run report and its charts, a run read back from MLMD."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
