"""A run read back from MLMD: its executions by component, their states and outputs, written
here into a fresh SQLite store as TFX's launcher writes them (a pipeline_run context and a node
context per execution, an OUTPUT event keyed by the output's name)."""
import pytest
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.config import from_flags
from local_runner.run_record import RunRecord

PIPELINE = "wrn_image_classifier"
COMPLETE = metadata_store_pb2.Execution.COMPLETE
CACHED = metadata_store_pb2.Execution.CACHED


class _Store:
  """A fresh MLMD store at the config's metadata path, and a writer of executions."""

  def __init__(self, config):
    import os
    from tfx.orchestration import metadata
    os.makedirs(os.path.dirname(config.runner.metadata_path))
    self.store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(config.runner.metadata_path))
    self.types = {name: self.store.put_context_type(metadata_store_pb2.ContextType(name=name))
                  for name in ("pipeline_run", "node")}
    self.execution_type = self.store.put_execution_type(
        metadata_store_pb2.ExecutionType(name="component"))
    self.artifact_type = self.store.put_artifact_type(
        metadata_store_pb2.ArtifactType(name="Artifact"))
    self.contexts = {}

  def context(self, kind, name):
    if (kind, name) not in self.contexts:
      [context_id] = self.store.put_contexts(
          [metadata_store_pb2.Context(type_id=self.types[kind], name=name)])
      self.contexts[kind, name] = metadata_store_pb2.Context(
          id=context_id, type_id=self.types[kind], name=name)
    return self.contexts[kind, name]

  def execution(self, run, node, state, outputs=()):
    """An execution of `node` ("<pipeline>.<node id>") in `run`, with (key, uri) outputs."""
    execution = metadata_store_pb2.Execution(type_id=self.execution_type,
                                             last_known_state=state)
    artifacts_and_events = []
    for key, uri in outputs:
      event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
      event.path.steps.add().key = key
      artifacts_and_events.append(
          (metadata_store_pb2.Artifact(type_id=self.artifact_type, uri=uri), event))
    self.store.put_execution(execution, artifacts_and_events,
                             [self.context("pipeline_run", run), self.context("node", node)])


@pytest.fixture
def config(tmp_path):
  return from_flags([f"--output_dir={tmp_path}"])


@pytest.fixture
def two_runs(config):
  """run-1 trained one model; run-2, the newer, trained one, selected an ensemble and reused
  the Pusher's result; another pipeline's Trainer ran inside run-2's context."""
  store = _Store(config)
  store.execution("run-1", f"{PIPELINE}.Trainer", COMPLETE, [("model", "/m/run1-trainer")])
  store.execution("run-2", f"{PIPELINE}.Trainer", COMPLETE, [("model", "/m/run2-trainer")])
  store.execution("run-2", f"{PIPELINE}.EnsembleSelector", COMPLETE,
                  [("model", "/m/run2-ensemble")])
  store.execution("run-2", f"{PIPELINE}.Pusher", CACHED, [("pushed_model", "/p/1")])
  store.execution("run-2", "other_pipeline.Trainer", COMPLETE, [("model", "/m/other")])
  return store


def test_the_newest_run_by_default_with_each_component_s_state_and_outputs(config, two_runs):
  run = RunRecord(config)
  assert run.run_id == "run-2"
  assert run.states == {"Trainer": "COMPLETE", "EnsembleSelector": "COMPLETE",
                        "Pusher": "CACHED"}  # Not the other pipeline's Trainer.
  assert [(producer, artifact.uri) for producer, artifact in run.outputs["model"]] == [
      ("Trainer", "/m/run2-trainer"), ("EnsembleSelector", "/m/run2-ensemble")]
  assert run.candidate_model().uri == "/m/run2-ensemble"  # The selected ensemble.
  assert run.latest_output("model", producer="Trainer").uri == "/m/run2-trainer"
  assert run.latest_output("model").uri == "/m/run2-ensemble"
  assert run.latest_output("report") is None


def test_a_named_run_is_read_and_without_an_ensemble_its_trainer_s_model_is_the_candidate(
    config, two_runs):
  run = RunRecord(config, "run-1")
  assert run.run_id == "run-1" and run.states == {"Trainer": "COMPLETE"}
  assert run.candidate_model().uri == "/m/run1-trainer"


def test_the_newest_of_several_outputs_under_a_key_is_the_latest(config):
  store = _Store(config)
  store.execution("run-1", f"{PIPELINE}.RunReport", COMPLETE,
                  [("report", "/r/first"), ("report", "/r/second")])
  assert RunRecord(config).latest_output("report").uri == "/r/second"


def test_a_run_that_is_not_recorded_is_named_with_the_database(config, two_runs):
  with pytest.raises(RuntimeError, match=f"No pipeline run run-3 recorded in "
                                         f"{config.runner.metadata_path}"):
    RunRecord(config, "run-3")


def test_an_empty_database_has_no_latest_run(config):
  _Store(config)
  with pytest.raises(RuntimeError, match="No pipeline run  recorded in .*metadata.sqlite"):
    RunRecord(config)
