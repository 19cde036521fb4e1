"""The versions under a serving directory, named exactly as TF Serving parses them, so the Pusher
and the gate see what TF Serving serves (docs/pipeline.md, "What is in production").
"""
import json
import os
from typing import Dict, List, Optional

from tfx.dsl.io import fileio

from trainer_module.features import PUSH_INFO_PATH

INT64_MAX = 2**63 - 1
INT64_MIN = -2**63
_C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale.
_ASCII_DIGITS = frozenset("0123456789")


def parse_version(name: str) -> Optional[int]:
  """The version TF Serving reads from an entry name (safe_strto64), or None for no version."""
  text = name.strip(_C_SPACE)
  digits = text[1:] if text.startswith("-") else text
  if not digits or not set(digits) <= _ASCII_DIGITS:
    return None
  value = -int(digits) if text.startswith("-") else int(digits)
  return value if INT64_MIN <= value <= INT64_MAX else None


def entry_names(base_directory: str) -> List[str]:
  """The names of the base directory's children as TF Serving sees them (cut at the first '/',
  which object stores' listings append to directories), sorted; [] when it does not exist."""
  if not fileio.exists(base_directory) or not fileio.isdir(base_directory):
    return []
  return sorted({name.split("/", 1)[0] for name in fileio.listdir(base_directory)} - {""})


def versions_by_number(base_directory: str) -> Dict[int, str]:
  """Each version under base_directory -> the name TF Serving loads it from, in ascending
  order of version."""
  chosen = {}
  for name in entry_names(base_directory):  # Sorted: of two names of one number, the last wins.
    version = parse_version(name)
    if version is not None:
      chosen[version] = name
  return dict(sorted(chosen.items()))


def shadowed_names(base_directory: str) -> Dict[str, str]:
  """Entries TF Serving ignores because another name of the same number wins -> that name."""
  chosen = versions_by_number(base_directory)
  return {name: chosen[parse_version(name)] for name in entry_names(base_directory)
          if parse_version(name) is not None and chosen[parse_version(name)] != name}



# What each pushed version's record (PUSH_INFO_PATH, written by components/pusher.py) says the
# model was trained on: the Examples artifact's span and version (TFX's ExampleGen sets both; 0
# when the input pattern has neither) and, when the run trained on several spans, their window.
TRAINED_ON_KEY = "trained_on"
SPAN_KEY = "span"
DATA_VERSION_KEY = "version"
TRAIN_WINDOW_KEY = "train_window"
FINGERPRINT_KEY = "input_fingerprint"  # TFX's fingerprint of the input files, when it has one.


def window_spans(train_window) -> Optional[str]:  # pragma: no mutate block
  """The spans of a train window as "span,span,...": the Examples' `train_window` property is
  JSON, a list of {span, folder, train_examples} (components/example_gen.py); other text is
  kept as it is; None for none."""
  if train_window in (None, ""):
    return None
  try:
    entries = json.loads(train_window) if isinstance(train_window, str) else train_window
    return ",".join(str(int(entry["span"])) for entry in entries) or None
  except (ValueError, TypeError, KeyError):
    return str(train_window)


def trained_on(span, version, train_window=None,
               input_fingerprint=None) -> dict:  # pragma: no mutate block
  """The record's `trained_on` entry; numbers as ints whichever type the orchestrator kept them
  in (Kubeflow hands custom properties back as doubles)."""
  entry = {SPAN_KEY: int(span or 0), DATA_VERSION_KEY: int(version or 0)}
  if window_spans(train_window):
    entry[TRAIN_WINDOW_KEY] = window_spans(train_window)
  if input_fingerprint not in (None, ""):
    entry[FINGERPRINT_KEY] = str(input_fingerprint)
  return entry


def examples_data(examples) -> dict:  # pragma: no mutate block
  """What an Examples artifact was read from, as a `trained_on` entry: TFX's ExampleGen driver
  writes span, version and input_fingerprint as custom properties
  (tfx/components/example_gen/driver.py update_output_artifact); the artifact's own span and
  version properties are read where no custom property is set; train_window, when the run
  reads several spans."""
  def value(name, default=None):
    if examples.has_custom_property(name):
      return examples.get_custom_property(name)
    return getattr(examples, name, default) if name in (examples.PROPERTIES or {}) else default
  return trained_on(value(SPAN_KEY, 0), value(DATA_VERSION_KEY, 0), value(TRAIN_WINDOW_KEY),
                    value(FINGERPRINT_KEY))


def read_push_record(version_dir: str) -> Optional[dict]:  # pragma: no mutate block
  """The push record of a version directory as a dict, or None when it has none readable."""
  path = os.path.join(version_dir, PUSH_INFO_PATH)
  if not fileio.exists(path):
    return None
  try:
    with fileio.open(path, "r") as f:
      record = json.load(f)
  except (ValueError, UnicodeDecodeError):
    return None
  return record if isinstance(record, dict) else None


def recorded_training_data(version_dir: str) -> Optional[dict]:  # pragma: no mutate block
  """The `trained_on` entry of a version's push record ({span, version[, train_window]}), or
  None for a version pushed without one."""
  record = read_push_record(version_dir) or {}
  entry = record.get(TRAINED_ON_KEY)
  if not isinstance(entry, dict) or not isinstance(entry.get(SPAN_KEY), int):
    return None
  return entry
