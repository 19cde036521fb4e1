"""Clears what a killed local run left (executions still RUNNING in MLMD, their output
directories), which TFX's LocalDagRunner never does (docs/pipeline.md, "Killed runs").
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import List

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.config import PipelineConfig

log = logging.getLogger(__name__)

ABANDONED_BY_KEY = "abandoned_by_run"
_UNFINISHED = (metadata_store_pb2.Execution.NEW, metadata_store_pb2.Execution.RUNNING)
_NODE_CONTEXT_TYPE = "node"  # tfx/dsl/compiler/constants.py NODE_CONTEXT_TYPE_NAME
_EXECUTOR_EXECUTION_DIR = os.path.join(".system", "executor_execution")  # outputs_utils.py


def execution_dirs(pipeline_root: str, node_id: str, execution_id: int) -> List[str]:
  """An execution's output directories and its executor scratch directory (TFX's layout,
  tfx/orchestration/portable/outputs_utils.py)."""
  node_dir = os.path.join(pipeline_root, node_id)
  if not os.path.isdir(node_dir):
    return []
  candidates = [os.path.join(node_dir, key, str(execution_id)) for key in os.listdir(node_dir)]
  candidates.append(os.path.join(node_dir, _EXECUTOR_EXECUTION_DIR, str(execution_id)))
  return [path for path in candidates if os.path.exists(path)]


def abandon_interrupted_executions(config: PipelineConfig, run_id: str) -> List[str]:
  """Marks every unfinished execution CANCELED (custom property `abandoned_by_run`: this
  run's id) and deletes its directories; returns one line per execution for the log."""
  if not os.path.exists(config.runner.metadata_path):
    return []
  from tfx.orchestration import metadata
  store = metadata_store.MetadataStore(
      metadata.sqlite_metadata_connection_config(config.runner.metadata_path))
  unfinished = [e for e in store.get_executions() if e.last_known_state in _UNFINISHED]
  if not unfinished:
    return []
  node_type = store.get_context_type(_NODE_CONTEXT_TYPE)
  prefix = f"{config.runner.pipeline_name}."
  cleared = []
  for execution in unfinished:
    nodes = [c.name for c in store.get_contexts_by_execution(execution.id)
             if c.type_id == node_type.id and c.name.startswith(prefix)]
    removed = []
    for node in nodes:
      for path in execution_dirs(config.runner.pipeline_root, node[len(prefix):], execution.id):
        shutil.rmtree(path)
        removed.append(path)
    execution.last_known_state = metadata_store_pb2.Execution.CANCELED
    execution.custom_properties[ABANDONED_BY_KEY].string_value = run_id
    store.put_executions([execution])
    cleared.append(f"execution {execution.id} of {', '.join(nodes) or 'an unknown node'}, "
                   f"left RUNNING by an interrupted run: marked CANCELED, removed "
                   f"{', '.join(removed) or 'no directories'}")
  for line in cleared:
    log.info("Cleared %s.", line)
  return cleared
