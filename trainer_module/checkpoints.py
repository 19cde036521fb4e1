"""Checkpoints that lose no work: exact-step resume, SIGTERM saves, damaged files skipped.
docs/standalone_trainer.md, "Preemption and resume", says what a checkpoint holds and why.
"""
import logging
import os
import re
import signal
import tempfile
import time
from typing import Callable, List, Optional

import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

log = logging.getLogger(__name__)


class TrainingState(tf.Module):
  """What a checkpoint holds besides model and optimizer."""

  def __init__(self, seed: int, precision: int = 0):
    super().__init__()
    self.examples_seen = tf.Variable(0, dtype=tf.int64, trainable=False)
    self.seed = tf.Variable(seed, dtype=tf.int64, trainable=False)
    # The precision policy's index in config.PRECISION_POLICIES (an integer: TPUs hold no
    # string variables).
    self.precision = tf.Variable(precision, dtype=tf.int64, trainable=False)


class ConfigRecord(tf.Module):
  """The trainer config and the warm start (JSON; "" for none), host strings built outside the
  strategy scope (TPUs hold no string variables)."""

  def __init__(self, config: str):
    super().__init__()
    self.config = tf.Variable(config, dtype=tf.string, trainable=False)
    self.warm_start = tf.Variable("", dtype=tf.string, trainable=False)


class Checkpoints:
  """Saves to `directory` on the chief; other workers save to scratch space (all must save)."""

  def __init__(self, directory: str, max_to_keep: int, is_chief: bool = True,
               check: Optional[Callable[[str], None]] = None, **objects):
    """check(path) raises when an intact checkpoint cannot be restored into this run."""
    self.directory = directory
    self.is_chief = is_chief
    self._check = check
    self.checkpoint = tf.train.Checkpoint(**objects)
    if is_chief:  # Before the manager reads the state file (and would take it for no state).
      repair_state_file(directory)
    # Deleted with this object; max_to_keep bounds what accumulates there meanwhile.
    self._scratch = None if is_chief else tempfile.TemporaryDirectory(prefix="checkpoints-")
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self._scratch.name if self._scratch else directory,
        max_to_keep=max_to_keep, checkpoint_name="ckpt")

  def restore_latest(self) -> Optional[str]:
    """Restores the newest intact checkpoint in `directory` (restore_order); None when there
    is none."""
    if self.is_chief:
      remove_incomplete_saves(self.directory)
    candidates = restore_order(self.directory)
    for path in candidates:
      if self.restore(path):
        return path
    if candidates:
      raise RuntimeError(
          f"No checkpoint in {self.directory} can be restored ("
          + "; ".join(f"{os.path.basename(path)}: {damage(path)}" for path in candidates)
          + "). Repair them, or move them out of the directory to train from scratch.")
    return None

  def restore(self, path: str) -> bool:
    """Restores `path` unless it is damaged (then says so and returns False)."""
    problem = damage(path)
    if problem:
      log.warning("Checkpoint %s is damaged (%s); skipping it.", path, problem)
      return False
    if self._check:
      self._check(path)
    self.checkpoint.restore(path).assert_existing_objects_matched()
    return True

  def save(self, step: int) -> None:
    path = self.manager.save(checkpoint_number=step)
    if self.is_chief:
      log.info("Saved checkpoint %s.", path)


STATE_FILE = "checkpoint"  # TensorFlow's list of a directory's checkpoints.
_INDEX_FILE = re.compile(r"ckpt-(\d+)\.index")


def read_state(directory: str):
  """The state file as TensorFlow reads it (tf.train.get_checkpoint_state: text_format.Merge,
  relative paths joined to `directory`), and why it cannot be used: (state, None), or
  (None, reason), or (None, None) when there is no state file. TensorFlow takes a garbled file
  for no state at all (a run would start again at step 0 and overwrite intact checkpoints),
  raises on binary garbage, and names a checkpoint whose files may be gone."""
  if not tf.io.gfile.exists(os.path.join(directory, STATE_FILE)):
    return None, None
  try:
    state = checkpoint_management.get_checkpoint_state(directory)
  except (ValueError, UnicodeDecodeError) as error:  # No model_checkpoint_path; not text.
    return None, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
  if state is None:
    return None, "TensorFlow cannot parse it (its warning above says where)"
  if not checkpoint_management.checkpoint_exists_internal(state.model_checkpoint_path):
    # tf.train.latest_checkpoint's test: then TensorFlow finds no checkpoint.
    return None, f"it names {state.model_checkpoint_path}, whose files are missing"
  return state, None


def state_file_problem(directory: str) -> Optional[str]:
  """Why the state file in `directory` names no checkpoint there, or None when it does (or
  is absent)."""
  return read_state(directory)[1]


def indexed_checkpoints(directory: str) -> List[str]:
  """The checkpoints whose index files (ckpt-N.index) are in `directory`, by N."""
  if not tf.io.gfile.isdir(directory):
    return []
  steps = sorted(int(found.group(1)) for found in map(_INDEX_FILE.fullmatch,
                                                      tf.io.gfile.listdir(directory)) if found)
  return [os.path.join(directory, f"ckpt-{step}") for step in steps]


def restore_order(directory: str) -> List[str]:
  """The checkpoints to try, newest first: the one TensorFlow resumes from
  (tf.train.latest_checkpoint), the others the state file lists, then every other
  ckpt-N.index file, highest N first (so a state file that lists too little loses nothing)."""
  state, _ = read_state(directory)
  listed = ([state.model_checkpoint_path] + list(reversed(state.all_model_checkpoint_paths))
            if state else [])
  order = []
  for path in listed + list(reversed(indexed_checkpoints(directory))):
    if path in order:
      continue
    if not checkpoint_management.checkpoint_exists_internal(path):
      log.warning("The checkpoint state file lists %s, whose files are missing; skipping it.",
                  path)
      continue
    order.append(path)
  return order


def repair_state_file(directory: str) -> None:
  """Rewrites a state file that names no checkpoint there (read_state) from the checkpoint
  files themselves, so the run resumes from the newest of them and keeps counting them
  (max_to_keep); refuses, naming the file, when no checkpoint file is left to rebuild it from."""
  problem = state_file_problem(directory)
  if problem is None:
    return
  state_path = os.path.join(directory, STATE_FILE)
  paths = indexed_checkpoints(directory)
  if not paths:
    raise RuntimeError(f"The checkpoint state file {state_path} is unusable ({problem}) and "
                       f"no ckpt-N.index file is beside it; restore the checkpoint it names, or "
                       f"move {state_path} away to start training from scratch.")
  log.warning("The checkpoint state file %s is unusable (%s); rebuilt from the checkpoint "
              "files: %s.", state_path, problem, ", ".join(map(os.path.basename, paths)))
  # With their times, which CheckpointManager needs to count them towards max_to_keep: it
  # counts those later than last_preserved_timestamp, and if that is in the future (files
  # dated ahead of this clock) it counts none, so they would pile up past max_to_keep.
  times = [tf.io.gfile.stat(f"{path}.index").mtime_nsec / 1e9 for path in paths]
  checkpoint_management.update_checkpoint_state_internal(
      directory, paths[-1], all_model_checkpoint_paths=paths, save_relative_paths=True,
      all_model_checkpoint_timestamps=times,
      last_preserved_timestamp=min(times + [time.time()]) - 1)


def damage(path: str) -> Optional[str]:
  """Why the checkpoint at `path` cannot be read back, or None when every tensor reads intact
  (TensorFlow checks each tensor's CRC32C as it reads it)."""
  try:
    reader = tf.train.load_checkpoint(path)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (tf.errors.OpError, ValueError, IndexError) as error:  # IndexError: file too short.
    return f"{type(error).__name__}: {str(error).splitlines()[0]}"
  return None


class StopSignal:
  """Records SIGTERM (how schedulers announce preemption) so the loop can checkpoint and stop."""

  def __init__(self):
    self.received = False
    self._previous = None

  def __enter__(self):
    self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    log.warning("Received signal %d: saving a checkpoint and stopping after this step.", signum)
    self.received = True

  def __exit__(self, *exc):
    signal.signal(signal.SIGTERM, self._previous)


class Preempted(Exception):
  """Training stopped on request after saving a checkpoint; run again to resume."""


def remove_incomplete_saves(directory: str) -> None:
  """Deletes temporary files of saves that a kill interrupted (never listed as checkpoints)."""
  if not tf.io.gfile.isdir(directory):
    return
  for name in tf.io.gfile.listdir(directory):
    if "_temp" in name:
      path = os.path.join(directory, name)
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
