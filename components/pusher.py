"""Pusher that publishes numeric versions atomically (also on object storage) and never pushes
the serving model twice, which TFX's Pusher does not guarantee (docs/pipeline.md, "One run at
a time; killed runs").
"""
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import io_utils, proto_utils

from components import drift_baseline
from components import serving_versions as versions_lib
from storage import object_storage
from storage.object_storage import is_object_store_uri
from trainer_module.features import PUSH_INFO_PATH

log = logging.getLogger(__name__)

ALREADY_SERVING_KEY = "already_serving"
_INCOMPLETE_PREFIX = ".incomplete-"
CLAIMS_DIR = ".version-claims"
OWN_HIDDEN_PREFIXES = (_INCOMPLETE_PREFIX, CLAIMS_DIR)  # What pushes write besides versions.
SAVED_MODEL_FILE = "saved_model.pb"  # What TF Serving's loader looks for; written last.
# What a push adds to the model's files, outside its fingerprint: the push record, and the drift
# baseline of the data it was trained on (components/drift_baseline.py).
NOT_OF_THE_MODEL = (PUSH_INFO_PATH, drift_baseline.BASELINE_PATH)
DRIFT_KEY = "drift"  # The Pusher's optional input: the DriftCheck's report and baseline.
REFUSED_FOR_DRIFT_KEY = "refused_for_drift"  # Custom property: why drift blocked the push.


def saved_model_fingerprint(model_dir: str, exclude: Tuple[str, ...] = ()) -> str:
  """SHA-256 over the relative paths and bytes of every file of a SavedModel (but `exclude`,
  relative paths of files or directories)."""
  digest = hashlib.sha256()
  for root, _, files in sorted(fileio.walk(model_dir)):
    for name in sorted(files):
      path = os.path.join(root, name)
      relative = os.path.relpath(path, model_dir)
      if relative in exclude or relative.startswith(tuple(f"{e}/" for e in exclude)):
        continue
      digest.update(relative.encode())
      with fileio.open(path, "rb") as f:
        digest.update(f.read())
  return digest.hexdigest()


def serving_versions(base_directory: str) -> List[int]:
  """The version numbers TF Serving reads under base_directory, ascending
  (components/serving_versions.py)."""
  return list(versions_lib.versions_by_number(base_directory))


class UnusableServingDirectory(ValueError):
  """Nothing can be pushed there: a file in its place, or no version number left after its
  newest (TF Serving parses versions as int64)."""


def serving_directory_problem(base_directory: str) -> Optional[str]:
  """Why nothing can be pushed to base_directory, or None: a file in its place, or a version
  after which none can follow."""
  if fileio.exists(base_directory) and not fileio.isdir(base_directory):
    return f"{base_directory} is a file, not a directory of versions"
  return versions_exhausted(base_directory)


def versions_exhausted(base_directory: str) -> Optional[str]:
  """Why no version can be pushed after those under base_directory, or None."""
  versions = versions_lib.versions_by_number(base_directory)
  if versions and max(versions) >= versions_lib.INT64_MAX:
    return (f"it holds {os.path.join(base_directory, versions[max(versions)])}, version "
            f"{max(versions)}, the largest TF Serving can parse (int64), so no later version can "
            "be pushed; move that entry out of the serving directory")
  return None


def pushed_fingerprint(version_dir: str) -> Optional[str]:
  """The fingerprint a complete version was pushed with; None for a partial one."""
  path = os.path.join(version_dir, PUSH_INFO_PATH)
  if not fileio.exists(path) or not fileio.exists(os.path.join(version_dir, SAVED_MODEL_FILE)):
    return None
  try:
    with fileio.open(path, "r") as f:
      fingerprint = json.load(f).get("model_fingerprint")
  except (ValueError, AttributeError, UnicodeDecodeError):  # Garbled, or not a JSON object.
    return None
  return fingerprint if isinstance(fingerprint, str) else None


def version_problem(version_dir: str) -> Optional[str]:
  """Why `version_dir` is not a complete copy published by this Pusher, or None when it is: a
  real directory (not a file, not a symbolic link) holding saved_model.pb, variables/ and the
  push record, whose files match the fingerprint the record names (the check a push makes of
  its own copy, so a truncated or partly deleted version never passes)."""
  if os.path.islink(version_dir):
    return "a symbolic link, not a version the Pusher published"
  if not fileio.isdir(version_dir):
    return "a file, not a version directory"
  if not fileio.exists(os.path.join(version_dir, SAVED_MODEL_FILE)):
    return f"no {SAVED_MODEL_FILE} (TF Serving cannot load it)"
  if not fileio.isdir(os.path.join(version_dir, "variables")):
    return "no variables/ directory"
  recorded = pushed_fingerprint(version_dir)
  if recorded is None:
    return f"no readable push record ({PUSH_INFO_PATH}): not pushed by this pipeline"
  if saved_model_fingerprint(version_dir, exclude=NOT_OF_THE_MODEL) != recorded:
    return "its files do not match the fingerprint of its push record (truncated or altered)"
  return None


def _staging_name() -> str:  # pragma: no mutate block
  """Unique per push; names its host and pid so only a dead push's leftovers are removed."""
  return f"{_INCOMPLETE_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex}"


def _left_by_dead_push(name: str) -> bool:  # pragma: no mutate block
  parts = name[len(_INCOMPLETE_PREFIX):].rsplit("-", 2)
  if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()):
    return True  # An older naming scheme: from before this code, so from no live push.
  host, pid, _ = parts
  return host == socket.gethostname() and not _process_alive(int(pid))


def _process_alive(pid: int) -> bool:  # pragma: no mutate block
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Alive, another user's.
  return True


def remove_stale_staging_dirs(base_directory: str) -> None:  # pragma: no mutate block
  """Deletes what killed pushes left: hidden `.incomplete-*` directories of pushes whose
  process is gone (on this host; another host's are left alone)."""
  if not fileio.exists(base_directory):
    return
  for name in fileio.listdir(base_directory):
    name = name.rstrip("/")
    if name.startswith(_INCOMPLETE_PREFIX) and _left_by_dead_push(name):
      log.info("Removing %s, left by an interrupted push.", name)
      fileio.rmtree(os.path.join(base_directory, name))


def _rename_if_absent(staging_dir: str, final_dir: str) -> bool:
  """Renames, never over an existing version: a local rename(2) of a directory onto a
  non-empty one fails atomically, so of two pushes that chose one number, one gets it."""
  if fileio.exists(final_dir):
    return False
  try:
    fileio.rename(staging_dir, final_dir, overwrite=False)
  except (OSError, tf.errors.OpError):
    if fileio.exists(final_dir) and fileio.exists(staging_dir):
      return False  # Lost the race for this number.
    raise
  return True


def _next_version(base_directory: str, taken: List[int]) -> int:
  """A number above every taken one, at least the time (versions sort by push time)."""
  version = max(int(time.time()), max(taken) + 1 if taken else 0)
  if version > versions_lib.INT64_MAX:
    raise UnusableServingDirectory(f"Cannot push to {base_directory}: " + (
        versions_exhausted(base_directory) or f"version {max(taken)} is claimed, the largest "
        "TF Serving can parse (int64)") + ".")
  return version


def _push_info(model_dir: str, fingerprint: str, trained_on: Optional[dict] = None) -> str:
  info = {"model_fingerprint": fingerprint, "source": model_dir}
  if trained_on is not None:
    info[versions_lib.TRAINED_ON_KEY] = trained_on
  return json.dumps(info, indent=2)


def push_version(model_dir: str, base_directory: str, fingerprint: str,
                 run_id: Optional[str] = None, trained_on: Optional[dict] = None,
                 baseline_dir: Optional[str] = None) -> str:
  """Publishes the model as the next free numeric version under base_directory and checks the
  published copy against the source fingerprint; returns the version directory. trained_on:
  the data the model was trained on (serving_versions.trained_on), kept in its push record;
  baseline_dir: the drift baseline of that data, kept in the version."""
  problem = serving_directory_problem(base_directory)
  if problem:
    raise UnusableServingDirectory(f"Cannot push to {base_directory}: {problem}.")
  if is_object_store_uri(base_directory):
    return _push_to_object_store(model_dir, base_directory, fingerprint, run_id, trained_on,
                                 baseline_dir)
  remove_stale_staging_dirs(base_directory)
  staging_dir = os.path.join(base_directory, _staging_name())
  io_utils.copy_dir(model_dir, staging_dir)
  io_utils.write_string_file(os.path.join(staging_dir, PUSH_INFO_PATH),
                             _push_info(model_dir, fingerprint, trained_on))
  if baseline_dir:
    drift_baseline.copy_baseline(baseline_dir, drift_baseline.baseline_dir(staging_dir))
  while True:
    final_dir = os.path.join(base_directory,
                             str(_next_version(base_directory, serving_versions(base_directory))))
    if _rename_if_absent(staging_dir, final_dir):
      break
  _verify_published(model_dir, final_dir, fingerprint, withdraw=lambda: fileio.rename(
      # Hidden again, so TF Serving never loads it; the next push removes it.
      final_dir, os.path.join(base_directory, f"{_INCOMPLETE_PREFIX}bad-{uuid.uuid4().hex}")))
  return final_dir


def claimed_versions(base_directory: str) -> List[int]:  # pragma: no mutate block
  """The version numbers claimed on object storage, published or not."""
  claims_dir = os.path.join(base_directory, CLAIMS_DIR)
  if not fileio.exists(claims_dir):
    return []
  numbers = (versions_lib.parse_version(name[:-len(".json")])
             for name in fileio.listdir(claims_dir) if name.endswith(".json"))
  return sorted(number for number in numbers if number is not None)


def claim_version(base_directory: str, version: int,
                  claim: dict) -> bool:  # pragma: no mutate block
  """Claims `version` for this push with the store's conditional create; False if taken."""
  return object_storage.create_if_absent(
      os.path.join(base_directory, CLAIMS_DIR, f"{version}.json"),
      json.dumps({**claim, "version": version}, indent=2).encode())


def _push_to_object_store(model_dir: str, base_directory: str, fingerprint: str,
                          run_id: Optional[str], trained_on: Optional[dict] = None,
                          baseline_dir: Optional[str] = None) -> str:  # pragma: no mutate block
  files = sorted(os.path.relpath(os.path.join(root, name), model_dir)
                 for root, _, names in fileio.walk(model_dir) for name in names)
  if SAVED_MODEL_FILE not in files:
    raise ValueError(f"{model_dir} holds no {SAVED_MODEL_FILE}: not a SavedModel.")
  claim = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
           "model_fingerprint": fingerprint, "source": model_dir,
           "claimed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
  version = _next_version(base_directory,
                          serving_versions(base_directory) + claimed_versions(base_directory))
  while not claim_version(base_directory, version, claim):
    version = max(version + 1, _next_version(base_directory, claimed_versions(base_directory)))
  final_dir = os.path.join(base_directory, str(version))
  for relative in files:
    if relative != SAVED_MODEL_FILE:
      fileio.copy(os.path.join(model_dir, relative), os.path.join(final_dir, relative))
  io_utils.write_string_file(os.path.join(final_dir, PUSH_INFO_PATH),
                             _push_info(model_dir, fingerprint, trained_on))
  if baseline_dir:
    drift_baseline.copy_baseline(baseline_dir, drift_baseline.baseline_dir(final_dir))
  fileio.copy(os.path.join(model_dir, SAVED_MODEL_FILE),  # Last: now TF Serving may load it.
              os.path.join(final_dir, SAVED_MODEL_FILE))

  def withdraw():  # saved_model.pb first: from then on TF Serving cannot load what remains.
    fileio.remove(os.path.join(final_dir, SAVED_MODEL_FILE))
    fileio.rmtree(final_dir)

  _verify_published(model_dir, final_dir, fingerprint, withdraw)
  return final_dir


def _verify_published(model_dir: str, final_dir: str, fingerprint: str,
                      withdraw: Callable[[], None]) -> None:
  problem = version_problem(final_dir)
  if problem is None and pushed_fingerprint(final_dir) != fingerprint:
    problem = f"its push record does not name the fingerprint {fingerprint} of the model"
  if problem:
    withdraw()
    raise RuntimeError(f"The copy published as {final_dir} does not match the model {model_dir} "
                       f"({problem}); it was withdrawn.")


# Custom properties of the served-model check's infra blessing (components/served_model_check.py)
# naming the data the candidate was trained on: the Pusher's own inputs stay TFX's.
TRAINED_SPAN_KEY = "trained_span"
TRAINED_VERSION_KEY = "trained_version"
TRAIN_WINDOW_KEY = "train_window"
TRAINED_FINGERPRINT_KEY = "trained_input_fingerprint"


def training_data_of(blessing: Optional[types.Artifact]) -> Optional[dict]:
  """The `trained_on` record entry the served-model check put on its blessing, or None (an
  infra blessing of another producer)."""
  if blessing is None or not blessing.has_custom_property(TRAINED_SPAN_KEY):
    return None
  def get(key, default=None):
    return blessing.get_custom_property(key) if blessing.has_custom_property(key) else default
  return versions_lib.trained_on(get(TRAINED_SPAN_KEY), get(TRAINED_VERSION_KEY, 0),
                                 get(TRAIN_WINDOW_KEY), get(TRAINED_FINGERPRINT_KEY))


class VersionedPusherExecutor(pusher_executor.Executor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    model_push = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.PUSHED_MODEL_KEY])
    drift = input_dict.get(DRIFT_KEY) or []
    # Read from the artifact's file, not its custom properties: a Kubeflow run hands those over
    # in its own types.
    result = drift_baseline.read_result(drift[0].uri) if drift else None
    if result and result.get("blocks_push"):
      log.warning("Not pushed: the data drifted from production's (--block_on_drift): %s",
                  "; ".join(result["moved"]))
      self._MarkNotPushed(model_push)
      model_push.set_string_custom_property(REFUSED_FOR_DRIFT_KEY, json.dumps(result["moved"]))
      return
    if not self.CheckBlessing(input_dict):
      self._MarkNotPushed(model_push)
      return
    destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY],
                              destination)
    if destination.WhichOneof("destination") != "filesystem":
      raise ValueError("VersionedPusherExecutor pushes to a filesystem destination only.")
    base_directory = destination.filesystem.base_directory
    model_dir = self.GetModelPath(input_dict)
    baseline = (os.path.join(drift[0].uri, drift_baseline.OUTPUT_DIR) if drift else None)
    if baseline and not drift_baseline.holds_baseline(baseline):
      baseline = None
    fingerprint = saved_model_fingerprint(model_dir)

    versions = versions_lib.versions_by_number(base_directory)
    if versions:
      latest = os.path.join(base_directory, versions[max(versions)])
      if pushed_fingerprint(latest) == fingerprint and version_problem(latest) is None:
        log.info("The blessed model already serves as %s; nothing pushed.", latest)
        self._MarkNotPushed(model_push)
        model_push.set_string_custom_property(ALREADY_SERVING_KEY, latest)
        return

    run_id = self._context.pipeline_run_id if self._context else None
    blessings = input_dict.get(standard_component_specs.INFRA_BLESSING_KEY) or []
    trained_on = training_data_of(blessings[0] if blessings else None)
    serving_dir = push_version(model_dir, base_directory, fingerprint, run_id, trained_on,
                               baseline)
    io_utils.copy_dir(model_dir, model_push.uri)
    self._MarkPushed(model_push, pushed_destination=serving_dir,
                     pushed_version=os.path.basename(serving_dir))
    log.info("Pushed the model to %s.", serving_dir)


class VersionedPusherSpec(standard_component_specs.PusherSpec):
  """TFX's Pusher's spec, and the DriftCheck's report: its baseline is kept with the pushed
  version, and with --block_on_drift a drift refuses the push."""
  INPUTS = {**standard_component_specs.PusherSpec.INPUTS,
            DRIFT_KEY: ChannelParameter(type=drift_baseline.DriftReport, optional=True)}


class VersionedPusher(base_component.BaseComponent):
  """TFX's Pusher with VersionedPusherExecutor, to a filesystem directory, taking `drift`."""
  SPEC_CLASS = VersionedPusherSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(VersionedPusherExecutor)

  def __init__(self, model: types.BaseChannel, model_blessing: types.BaseChannel,
               infra_blessing: types.BaseChannel, base_directory: str,
               drift: Optional[types.BaseChannel] = None):
    destination = pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base_directory))
    super().__init__(spec=VersionedPusherSpec(
        model=model, model_blessing=model_blessing, infra_blessing=infra_blessing,
        push_destination=destination, custom_config=None, drift=drift,
        pushed_model=types.Channel(type=standard_artifacts.PushedModel)))
