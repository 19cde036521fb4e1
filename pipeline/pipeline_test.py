"""The graph's wiring that nothing else checks: the Pusher publishes the Trainer's model only
with the Evaluator's blessing and the served-model check's, in the graph and in the IR TFX
compiles from it. (TFX's Pusher skips a blessing input that is missing, so a graph without one
would push every model.)"""
import pytest
from tfx.dsl.compiler import compiler as tfx_compiler
from tfx.proto import pusher_pb2
from tfx.utils import proto_utils

from components.drift_check import STEP_ID as DRIFT_CHECK_ID
from local_runner import runner as local_runner
from pipeline.config import from_preset
from pipeline.pipeline import create_pipeline
from test_support.mutation_runs import per_test_while_mapping


@pytest.fixture(scope="module")
def config(tmp_path_factory):
  return from_preset("tiny").replace(output_dir=str(tmp_path_factory.mktemp("outputs")))


@pytest.fixture(scope=per_test_while_mapping)
def graph(config):
  return create_pipeline(config, local_runner.local_parts(config))


def _component(pipeline, component_id):
  (component,) = [c for c in pipeline.components if c.id == component_id]
  return component


def _producer(channel):
  return channel.producer_component_id, channel.output_key


def test_the_pusher_takes_the_evaluators_blessing_and_the_served_checks(graph):
  pusher = _component(graph, "Pusher")
  assert {"model", "model_blessing", "infra_blessing"} <= set(pusher.inputs)
  assert _producer(pusher.inputs["model_blessing"]) == ("Evaluator", "blessing")
  assert _producer(pusher.inputs["infra_blessing"]) == ("ServedModelCheck", "infra_blessing")
  assert _producer(pusher.inputs["model"]) == ("Trainer", "model")
  # The blessing the Pusher reads is of the model it pushes, judged against the model in
  # production, looked up beside that candidate.
  evaluator = _component(graph, "Evaluator")
  assert _producer(evaluator.inputs["baseline_model"]) == ("ProductionModel", "model")
  assert _producer(_component(graph, "ProductionModel").inputs["candidate"]) == \
      ("Trainer", "model")
  assert _producer(evaluator.inputs["model"]) == _producer(pusher.inputs["model"])
  assert _producer(_component(graph, "ServedModelCheck").inputs["model"]) == \
      _producer(pusher.inputs["model"])


def test_the_compiled_ir_feeds_the_pusher_both_blessings(graph):
  ir = tfx_compiler.Compiler().compile(graph)
  (pusher,) = [node.pipeline_node for node in ir.nodes
               if node.pipeline_node.node_info.id == "Pusher"]

  def producer(key):
    assert key in pusher.inputs.inputs, f"the compiled Pusher has no {key} input"
    (channel,) = pusher.inputs.inputs[key].channels
    return channel.producer_node_query.id, channel.output_key

  assert producer("model_blessing") == ("Evaluator", "blessing")
  assert producer("infra_blessing") == ("ServedModelCheck", "infra_blessing")
  assert producer("model") == ("Trainer", "model")
  assert {"Evaluator", "ServedModelCheck"} <= set(pusher.upstream_nodes)


def test_the_pusher_publishes_to_the_configured_serving_directory_with_the_drift_report(
    graph, config):
  """What the Pusher's executor reads: its destination, the config's serving directory (a
  filesystem one), and the DriftCheck's report (--block_on_drift refuses a push through it)."""
  pusher = _component(graph, "Pusher")
  destination = proto_utils.json_to_proto(pusher.exec_properties["push_destination"],
                                          pusher_pb2.PushDestination())
  assert destination.WhichOneof("destination") == "filesystem"
  assert destination.filesystem.base_directory == config.runner.serving_model_dir
  assert _producer(pusher.inputs["drift"]) == (DRIFT_CHECK_ID, "drift_report")
  assert pusher.outputs["pushed_model"].type_name == "PushedModel"


def _ids(pipeline):
  return {component.id for component in pipeline.components}


def test_the_drift_check_and_its_baseline_model_come_before_transform(graph):
  assert {"DriftCheck", "DriftBaselineModel"} <= _ids(graph)
  assert "DriftCheck" in {node.id for node in _component(graph, "Transform").upstream_nodes}


def test_drift_check_off_leaves_the_check_and_its_baseline_model_out(tmp_path):
  config = from_preset("tiny").replace(output_dir=str(tmp_path), drift_check=False)
  pipeline = create_pipeline(config, local_runner.local_parts(config))
  ids = _ids(pipeline)
  assert not {"DriftCheck", "DriftBaselineModel"} & ids
  assert {"Transform", "Trainer", "Pusher", "RunReport"} <= ids
  assert "drift" not in _component(pipeline, "Pusher").inputs
  assert "drift" not in _component(pipeline, "RunReport").inputs
  tfx_compiler.Compiler().compile(pipeline)  # Compiles without the optional inputs.


def test_drift_check_off_keeps_the_warm_start_model(tmp_path):
  config = from_preset("tiny").replace(output_dir=str(tmp_path), drift_check=False,
                                       warm_start="production")
  pipeline = create_pipeline(config, local_runner.local_parts(config))
  assert "WarmStartModel" in _ids(pipeline)
  assert _producer(_component(pipeline, "Trainer").inputs["base_model"]) == \
      ("WarmStartModel", "model")
