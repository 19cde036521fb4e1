"""The names of the label's classes, in index order, recorded in the run's schema artifact: the
Trainer sizes the model's output by them and the served model returns the predicted class's
name. docs/pipeline.md (ClassSchemaGen) says where they are written and read.
"""
from typing import Optional, Sequence, Tuple

from trainer_module.features import LABEL_KEY

CLASS_NAMES_DOMAIN = "class_names"
CLASS_NAMES_FILE = "class_names.json"  # In a served model's assets.extra: {"class_names": [...]}
DIGITS = tuple(str(digit) for digit in range(10))
# tensorflow-datasets' cifar10 label names, in label order (its ClassLabel feature).
CIFAR10 = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")
DATASET_CLASS_NAMES = {"digits": DIGITS, "cifar10": CIFAR10}  # The built-in datasets'.


def index_names(num_classes: int) -> Tuple[str, ...]:
  """The names of classes known only by index: '0', '1', ..."""
  return tuple(str(index) for index in range(num_classes))


def with_class_names(schema, names: Sequence[str]):
  """A copy of the tensorflow_metadata Schema whose label domain is [0, len(names)) and which
  records `names`."""
  if len(names) < 2 or len(set(names)) != len(names) or not all(names):
    raise ValueError(f"Class names must be at least two distinct non-empty names: {list(names)}")
  result = type(schema)()
  result.CopyFrom(schema)
  label = next((f for f in result.feature if f.name == LABEL_KEY), None)
  if label is None:
    raise ValueError(f"The schema has no '{LABEL_KEY}' feature to name the classes of.")
  label.int_domain.min = 0
  label.int_domain.max = len(names) - 1
  kept = [d for d in result.string_domain if d.name != CLASS_NAMES_DOMAIN]
  del result.string_domain[:]
  result.string_domain.extend(kept)
  result.string_domain.add(name=CLASS_NAMES_DOMAIN, value=list(names))
  return result


def class_names(schema) -> Optional[Tuple[str, ...]]:
  """The names a schema records, or None."""
  for domain in schema.string_domain:
    if domain.name == CLASS_NAMES_DOMAIN:
      return tuple(domain.value)
  return None


def read_class_names(schema_path: str) -> Optional[Tuple[str, ...]]:
  """The names the schema file (text format, local or on object storage) records, or None."""
  import tensorflow as tf
  from google.protobuf import text_format
  from tensorflow_metadata.proto.v0 import schema_pb2
  with tf.io.gfile.GFile(schema_path) as f:
    return class_names(text_format.Parse(f.read(), schema_pb2.Schema()))
