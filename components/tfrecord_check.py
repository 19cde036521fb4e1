"""Finds the user's empty, unreadable or corrupted TFRecord files, and where in them.

Before the run, every split the pipeline needs must have a readable file holding a record:
ImportExampleGen, statistics and the validation gate all pass an empty split, and the Trainer
then fails after minutes naming neither the split nor the directory.

ImportExampleGen reads with Beam's ReadFromTFRecord, whose reader
(apache_beam/io/tfrecordio.py) fails with "Not a valid TFRecord. Fewer than 12 bytes" or
"Mismatch of length/data mask" inside a long traceback that names neither the file nor the
position. TensorFlow's record reader, run over one file at a time, says "truncated record at
N" or "corrupted record at N" (N: the byte offset of the bad record).
"""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional

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


def _input_files(input_dir: str) -> List[str]:
  """The files ImportExampleGen reads: those of the split directories (pattern `<split>/*`),
  local or on object storage."""
  import tensorflow as tf
  return [path for path in sorted(tf.io.gfile.glob(os.path.join(input_dir, "*", "*")))
          if not tf.io.gfile.isdir(path)]


def files_holding(input_dir: str, keys: Iterable[str]) -> Dict[str, List[str]]:
  """{example key: the input files under input_dir that hold an example with it}, for `keys`:
  a second read of the user's data, made only to name the files of bad examples."""
  import tensorflow as tf
  from trainer_module.features import EXAMPLE_KEY
  wanted, found = set(keys), {}
  for path in _input_files(input_dir):
    compression = "GZIP" if path.endswith(".gz") else ""
    try:
      for record in tf.data.TFRecordDataset(path, compression_type=compression):
        example = tf.train.Example.FromString(record.numpy())
        values = example.features.feature[EXAMPLE_KEY].bytes_list.value
        key = values[0].decode("utf-8", "replace") if values else None
        if key in wanted and path not in found.setdefault(key, []):
          found[key].append(path)
    except tf.errors.OpError:
      continue  # Damaged: reported as such elsewhere; its good records were read.
  return found
