"""A pipeline run as MLMD recorded it: its executions by component, their states and outputs."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.config import PipelineConfig


class RunRecord:
  """One pipeline run in MLMD (the `pipeline_run` context named run_id; None: the most recent,
  for inspecting a finished output directory): its executions by component and its outputs."""

  def __init__(self, config: PipelineConfig, run_id: Optional[str] = None):
    from tfx.orchestration import metadata
    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(config.runner.metadata_path))
    if run_id is None:
      runs = store.get_contexts_by_type("pipeline_run")
      run = max(runs, key=lambda c: c.id) if runs else None
    else:
      run = store.get_context_by_type_and_name("pipeline_run", run_id)
    if run is None:
      raise RuntimeError(
          f"No pipeline run {run_id or ''} recorded in {config.runner.metadata_path}.")
    self.run_id = run.name
    executions = store.get_executions_by_context(run.id)
    # Execution -> its node id (the component's id: "Trainer", "Trainer_trial_1",
    # "WarmStartModel"), from the `node` contexts named "<pipeline>.<node id>".
    in_run = {e.id for e in executions}
    prefix = config.runner.pipeline_name + "."
    producers = {}
    for node in store.get_contexts_by_type("node"):
      if node.name.startswith(prefix):
        for execution in store.get_executions_by_context(node.id):
          if execution.id in in_run:
            producers[execution.id] = node.name[len(prefix):]
    state_names = metadata_store_pb2.Execution.State.Name
    # Node id -> its execution's state (COMPLETE, CACHED, FAILED, ...).
    self.states: Dict[str, str] = {producers[e.id]: state_names(e.last_known_state)
                                   for e in executions if e.id in producers}
    # Output key ("examples", "transformed_examples", "model", "blessing", ...) ->
    # (producing node, artifact), oldest first; of this pipeline's nodes, as the states are.
    events = [e for e in store.get_events_by_execution_ids([x.id for x in executions])
              if e.type == metadata_store_pb2.Event.OUTPUT and e.execution_id in producers]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    self.outputs: Dict[str, List[Tuple[str, Any]]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.artifact_id):
      self.outputs[event.path.steps[0].key].append(
          (producers[event.execution_id], artifacts[event.artifact_id]))

  def candidate_model(self):
    """The model this run evaluated: the ensemble when trials were selected, else the Trainer's."""
    return (self.latest_output("model", producer="EnsembleSelector")
            or self.latest_output("model", producer="Trainer"))

  def latest_output(self, key: str, producer: Optional[str] = None):
    """The newest artifact under an output key (of one component, when several use the key)."""
    matching = [a for p, a in self.outputs.get(key, []) if producer in (None, p)]
    return matching[-1] if matching else None
