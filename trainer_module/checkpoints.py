"""Checkpoints that lose no work: exact-step resume, SIGTERM saves, damaged files skipped.

A checkpoint holds the model, the optimizer (its step counter and momentum), the data position
(examples consumed so far), the seed, and for `inspect` and the record the trainer config and
what the run was warm-started from. All randomness in training is stateless and derived
from (seed, epoch, example key), so seed + data position is the complete RNG state: a resumed
run sees exactly the batches and AugMix views the interrupted one would have seen.

TensorFlow writes each checkpoint under a temporary name and then records it in the
`checkpoint` state file by an atomic rename, so a kill during a save leaves the previous
checkpoint current. A file damaged afterwards (a truncated copy, a lost block) fails its
checksum when read; restore then falls back to the previous checkpoint.
"""
import logging
import os
import re
import signal
import tempfile
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
    """Restores the newest intact checkpoint in `directory`; None when there is none."""
    if self.is_chief:
      remove_incomplete_saves(self.directory)
    candidates = checkpoint_paths(self.directory)
    for path in reversed(candidates):
      if self.restore(path):
        return path
    if candidates:
      raise RuntimeError(f"Every checkpoint in {self.directory} is damaged; remove the "
                         "directory to start training from scratch.")
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


def state_file_problem(directory: str) -> Optional[str]:
  """Why the state file in `directory` cannot be read, or None when it reads (or is absent).
  TensorFlow's reader takes a garbled text file for no checkpoint at all (a run would start
  again at step 0 and overwrite intact checkpoints) and fails on binary garbage."""
  from google.protobuf import text_format
  from tensorflow.python.training import checkpoint_state_pb2
  path = os.path.join(directory, STATE_FILE)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      text = f.read().decode("utf-8")
    state = text_format.Parse(text, checkpoint_state_pb2.CheckpointState())
  except (UnicodeDecodeError, text_format.ParseError, tf.errors.OpError) as error:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
  return None if state.model_checkpoint_path else "it names no checkpoint"


def checkpoint_paths(directory: str) -> List[str]:
  """The checkpoints in `directory`, oldest first: those its state file lists or, when that
  file is unreadable, those whose index files (ckpt-N.index) are there, by N."""
  if state_file_problem(directory) is None:
    state = tf.train.get_checkpoint_state(directory)
    return list(state.all_model_checkpoint_paths) if state else []
  if not tf.io.gfile.isdir(directory):
    return []
  steps = sorted(int(found.group(1)) for found in map(_INDEX_FILE.fullmatch,
                                                      tf.io.gfile.listdir(directory)) if found)
  return [os.path.join(directory, f"ckpt-{step}") for step in steps]


def repair_state_file(directory: str) -> None:
  """Rewrites an unreadable state file from the checkpoint files themselves, so the run
  resumes from the newest of them and keeps counting them (max_to_keep); refuses, naming the
  file, when no checkpoint file is left to rebuild it from."""
  problem = state_file_problem(directory)
  if problem is None:
    return
  state_path = os.path.join(directory, STATE_FILE)
  paths = checkpoint_paths(directory)
  if not paths:
    raise RuntimeError(f"The checkpoint state file {state_path} is unreadable ({problem}) and "
                       f"no ckpt-N.index file is beside it; remove {directory} to start "
                       "training from scratch.")
  log.warning("The checkpoint state file %s is unreadable (%s); rebuilt from the checkpoint "
              "files: %s.", state_path, problem, ", ".join(map(os.path.basename, paths)))
  # With their times, which CheckpointManager needs to count them towards max_to_keep.
  times = [tf.io.gfile.stat(f"{path}.index").mtime_nsec / 1e9 for path in paths]
  checkpoint_management.update_checkpoint_state_internal(
      directory, paths[-1], all_model_checkpoint_paths=paths, save_relative_paths=True,
      all_model_checkpoint_timestamps=times, last_preserved_timestamp=min(times) - 1)


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
