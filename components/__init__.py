"""Data ingestion and the custom components of the pipeline."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.


def __getattr__(name):
  """`components.SpanDecision`: the span check's artifact class at the path its type name
  (a KFP schema title, which TFX's Kubeflow entrypoint imports as a class path) names; loaded
  only when asked for."""
  if name == "SpanDecision":
    from components.span_check import SpanDecision
    return SpanDecision
  raise AttributeError(f"module 'components' has no attribute {name!r}")
