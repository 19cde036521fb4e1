"""Pusher that writes numeric versions atomically and never pushes the serving model twice.

TFX's Pusher copies straight into `<base>/<unix time>`: a kill mid-copy leaves a partial
version that TF Serving would try to load, and re-blessing the model already in production
(an unchanged rerun compares the model with itself) pushes a duplicate version. Here a version
is assembled under a hidden temporary name and renamed into place, and a model whose content
fingerprint equals the latest version's is not pushed again.
"""
import hashlib
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional

from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

log = logging.getLogger(__name__)

PUSH_INFO_PATH = os.path.join("assets.extra", "push_info.json")
ALREADY_SERVING_KEY = "already_serving"
_INCOMPLETE_PREFIX = ".incomplete-"


def saved_model_fingerprint(model_dir: str) -> str:
  """SHA-256 over the relative paths and bytes of every file of a SavedModel."""
  digest = hashlib.sha256()
  for root, _, files in sorted(fileio.walk(model_dir)):
    for name in sorted(files):
      path = os.path.join(root, name)
      digest.update(os.path.relpath(path, model_dir).encode())
      with fileio.open(path, "rb") as f:
        digest.update(f.read())
  return digest.hexdigest()


def serving_versions(base_directory: str) -> List[int]:
  if not fileio.exists(base_directory):
    return []
  return sorted(int(name.rstrip("/")) for name in fileio.listdir(base_directory)
                if name.rstrip("/").isdigit())


def pushed_fingerprint(version_dir: str) -> Optional[str]:
  path = os.path.join(version_dir, PUSH_INFO_PATH)
  if not fileio.exists(path):
    return None
  with fileio.open(path, "r") as f:
    return json.load(f).get("model_fingerprint")


def remove_stale_staging_dirs(base_directory: str) -> None:
  """Deletes what killed pushes left: hidden `.incomplete-*` directories (one pipeline pushes
  to a base directory at a time, so none of them belongs to a live push)."""
  if not fileio.exists(base_directory):
    return
  for name in fileio.listdir(base_directory):
    if name.rstrip("/").startswith(_INCOMPLETE_PREFIX):
      log.info("Removing %s, left by an interrupted push.", name)
      fileio.rmtree(os.path.join(base_directory, name.rstrip("/")))


def push_version(model_dir: str, base_directory: str, fingerprint: str) -> str:
  """Copies the model to a new numeric version under a temporary name, then renames it."""
  versions = serving_versions(base_directory)
  version = max(int(time.time()), versions[-1] + 1 if versions else 0)
  final_dir = os.path.join(base_directory, str(version))
  staging_dir = os.path.join(base_directory, f"{_INCOMPLETE_PREFIX}{version}")
  remove_stale_staging_dirs(base_directory)
  io_utils.copy_dir(model_dir, staging_dir)
  io_utils.write_string_file(
      os.path.join(staging_dir, PUSH_INFO_PATH),
      json.dumps({"model_fingerprint": fingerprint, "source": model_dir}, indent=2))
  fileio.rename(staging_dir, final_dir)
  return final_dir


class VersionedPusherExecutor(pusher_executor.Executor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    model_push = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.PUSHED_MODEL_KEY])
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
    fingerprint = saved_model_fingerprint(model_dir)

    versions = serving_versions(base_directory)
    if versions:
      latest = os.path.join(base_directory, str(versions[-1]))
      if pushed_fingerprint(latest) == fingerprint:
        log.info("The blessed model already serves as %s; nothing pushed.", latest)
        self._MarkNotPushed(model_push)
        model_push.set_string_custom_property(ALREADY_SERVING_KEY, latest)
        return

    serving_dir = push_version(model_dir, base_directory, fingerprint)
    io_utils.copy_dir(model_dir, model_push.uri)
    self._MarkPushed(model_push, pushed_destination=serving_dir,
                     pushed_version=os.path.basename(serving_dir))
    log.info("Pushed the model to %s.", serving_dir)
