"""Finds the user's corrupted TFRecord file, and where in it, when reading the input failed.

ImportExampleGen reads with Beam's ReadFromTFRecord, whose reader
(apache_beam/io/tfrecordio.py) fails with "Not a valid TFRecord. Fewer than 12 bytes" or
"Mismatch of length/data mask" inside a long traceback that names neither the file nor the
position. TensorFlow's record reader, run over one file at a time, says "truncated record at
N" or "corrupted record at N" (N: the byte offset of the bad record).
"""
from __future__ import annotations

import glob
import os
import re
from typing import List, Optional

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
  for path in sorted(glob.glob(os.path.join(input_dir, "*", "*"))):
    if os.path.isfile(path):
      problem = record_problem(path)
      if problem:
        problems.append(f"{path}: {problem}")
  return problems
