"""Finds the user's empty, unreadable or corrupted TFRecord files and the byte offset of the bad
record, which Beam's reader does not name (docs/pipeline.md, "Bad input").
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Dict, Iterable, List, Optional, Sequence

_OFFSET = re.compile(r"(truncated|corrupted) record at (\d+)")
_DATA_LOSS_HINTS = ("Not a valid TFRecord", "DataLoss", "truncated record", "corrupted record")


def looks_like_corrupted_input(error_text: str) -> bool:
  return any(hint in error_text for hint in _DATA_LOSS_HINTS)


def record_problem(path: str) -> Optional[str]:
  """None when every record of the file reads back; otherwise what is wrong, and where."""
  import tensorflow as tf
  compression = "GZIP" if path.endswith(".gz") else ""
  records = 0
  try:
    for _ in tf.data.TFRecordDataset(path, compression_type=compression):
      records += 1
  except tf.errors.DataLossError as error:
    found = _OFFSET.search(error.message)
    where = (f"{found.group(1)} record at byte offset {found.group(2)}" if found
             else error.message.splitlines()[0])
    return f"{where} (after {records} good records)"
  return None


def corrupted_files(input_dir: str) -> List[str]:
  """One line per damaged file under input_dir's split directories (train/, eval/, test/)."""
  problems = []
  for path in _input_files(input_dir):
    problem = record_problem(path)
    if problem:
      problems.append(f"{path}: {problem}")
  return problems


def split_problem(split_dir: str) -> Optional[str]:
  """Why the split directory gives the pipeline no records (no files, an unreadable file, or
  every file empty), or None when a file in it holds data. Reads at most one byte per file,
  decompressed as ImportExampleGen reads it (Beam's compression, detected by extension), local
  or on object storage (a Kubeflow run's ExampleGen output)."""
  import tensorflow as tf
  from apache_beam.io.filesystem import CompressedFile, CompressionTypes
  files = [path for path in sorted(tf.io.gfile.glob(os.path.join(split_dir, "*")))
           if not tf.io.gfile.isdir(path)]
  if not files:
    return f"{split_dir} holds no TFRecord files"
  has_data = False
  for path in files:
    if "://" not in path and not os.access(path, os.R_OK):
      return f"{path} cannot be read (permission denied)"
    compression = CompressionTypes.detect_compression_type(path)
    try:
      with tf.io.gfile.GFile(path, "rb") as raw:
        f = (raw if compression == CompressionTypes.UNCOMPRESSED
             else CompressedFile(raw, compression_type=compression))
        has_data = has_data or bool(f.read(1))
    except Exception as error:  # The decompressors raise OSError, EOFError, zlib.error, ...
      return f"{path} cannot be read: {type(error).__name__}: {str(error).splitlines()[0]}"
  return None if has_data else f"every file in {split_dir} is empty: the split has no records"


def schema_problem(example, features: Sequence) -> Optional[str]:
  """How a tf.train.Example breaks the schema's rule for one of `features` (schema_pb2.Feature:
  presence, value kind, scalar shape, int domain), or None."""
  from tensorflow_metadata.proto.v0 import schema_pb2
  value_kinds = {schema_pb2.INT: "int64_list", schema_pb2.FLOAT: "float_list",
                 schema_pb2.BYTES: "bytes_list"}
  for feature in features:
    values = example.features.feature.get(feature.name)
    kind = values.WhichOneof("kind") if values is not None else None
    found = list(getattr(values, kind).value) if kind else []
    if not found:
      if feature.presence.min_fraction >= 1.0:
        return f"feature '{feature.name}' is missing"
      continue
    expected = value_kinds.get(feature.type)
    if expected and kind != expected:
      return f"feature '{feature.name}' holds {kind}, expected {expected}"
    if feature.HasField("shape") and not feature.shape.dim and len(found) != 1:
      return f"feature '{feature.name}' has {len(found)} values, expected 1"
    if feature.HasField("int_domain"):
      domain = feature.int_domain
      outside = [v for v in found if (domain.HasField("min") and v < domain.min) or
                 (domain.HasField("max") and v > domain.max)]
      if outside:
        return (f"feature '{feature.name}' is {outside[0]}, outside the schema's domain "
                f"[{domain.min}, {domain.max}]")
  return None


def first_example_problem(split_dir: str, schema) -> Optional[str]:
  """How the first example of a file in the split breaks the schema (schema_pb2.Schema; a
  feature it does not know counts too), naming the file; None when none does. The first only:
  a file written with a wrong type or feature shows it there, before any step runs (single bad
  examples are the ValidationGate's)."""
  import tensorflow as tf
  from apache_beam.io.filesystem import CompressionTypes
  known = {feature.name for feature in schema.feature}
  for path in sorted(tf.io.gfile.glob(os.path.join(split_dir, "*"))):
    if tf.io.gfile.isdir(path):
      continue
    gzip = CompressionTypes.detect_compression_type(path) == CompressionTypes.GZIP
    first = list(tf.data.TFRecordDataset(path, compression_type="GZIP" if gzip else "").take(1))
    if not first:
      continue
    try:
      example = tf.train.Example.FromString(first[0].numpy())
    except Exception as error:  # google.protobuf.message.DecodeError
      return f"{path}, record 0: not a tf.train.Example ({error})"
    unknown = sorted(set(example.features.feature) - known)
    problem = schema_problem(example, schema.feature) or (
        f"feature '{unknown[0]}' is not in the schema" if unknown else None)
    if problem:
      return f"{path}, record 0 (key {example_id(example)!r}): {problem}"
  return None


def _input_files(input_dir: str) -> List[str]:
  """The files ImportExampleGen reads: those of the split directories (pattern `<split>/*`),
  local or on object storage."""
  import tensorflow as tf
  return [path for path in sorted(tf.io.gfile.glob(os.path.join(input_dir, "*", "*")))
          if not tf.io.gfile.isdir(path)]


def example_id(example) -> str:
  """The example's key; for one without a bytes key, what its key holds instead and a digest
  of its image, so that it can still be told apart and found in the user's files."""
  from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY
  key = example.features.feature.get(EXAMPLE_KEY)
  kind = key.WhichOneof("kind") if key is not None else None
  values = list(getattr(key, kind).value) if kind else []
  if kind == "bytes_list" and values:
    return values[0].decode("utf-8", "replace")
  image = example.features.feature.get(IMAGE_KEY)
  digest = hashlib.sha256(b"".join(image.bytes_list.value) if image else b"").hexdigest()
  held = f"key holds {kind} {values[:3]}" if values else "no key"
  return f"<{held}; image sha256 {digest[:16]}>"


def files_holding(input_dir: str, keys: Iterable[str]) -> Dict[str, List[str]]:
  """{example id (example_id): the input files under input_dir that hold an example with it},
  for `keys`: a second read of the user's data, made only to name the files of bad examples."""
  import tensorflow as tf
  wanted, found = set(keys), {}
  for path in _input_files(input_dir):
    compression = "GZIP" if path.endswith(".gz") else ""
    try:
      for record in tf.data.TFRecordDataset(path, compression_type=compression):
        key = example_id(tf.train.Example.FromString(record.numpy()))
        if key in wanted and path not in found.setdefault(key, []):
          found[key].append(path)
    except tf.errors.OpError:
      continue  # Damaged: reported as such elsewhere; its good records were read.
  return found
