"""Trigger conditions evaluated as the KFP backend's driver does (cel-go there, CEL for Python
here), over the executor input as protobuf Struct makes it: every metadata number a double."""
import pytest

from kubeflow import conditions
from test_support.condition_specs import CONDITION, DECISION_INPUT, gated_spec


def _inputs(train):
  return {"inputs": {"artifacts": {DECISION_INPUT: {"artifacts": [
      {"name": "7", "uri": "s3://bucket/root/decision", "metadata": {"train": train}}]}}}}


@pytest.mark.parametrize("train, runs", [(1, True), (1.0, True), (0, False), (0.0, False)])
def test_tfxs_condition_on_a_custom_property_holds_for_ints_and_doubles_alike(train, runs):
  """TFX compares with 1.0 because KFP's Struct has no ints (compiler_utils.placeholder_to_cel);
  an int from kfp.local's executor output must compare the same."""
  assert conditions.evaluate(CONDITION, _inputs(train)) is runs


def test_the_tfx_compiled_condition_of_the_span_check_is_what_is_evaluated():
  from test_support.tiny_config import SMALL_MODEL
  from configs.flags import over_defaults
  from kubeflow import compiler
  from kubeflow.cluster_config import from_flags
  config = from_flags(over_defaults(
      ["--image=x", "--output_dir=s3://bucket/out", "--kubeflow_target=kfp"], SMALL_MODEL))
  tasks = compiler.pipeline_job(config)["pipelineSpec"]["root"]["dag"]["tasks"]
  assert not conditions.task_condition(tasks["ImageDatasetExampleGen"])
  assert not conditions.task_condition(tasks["SpanCheck"])
  gated = {name for name, task in tasks.items() if conditions.task_condition(task)}
  assert gated == set(tasks) - {"ImageDatasetExampleGen", "SpanCheck"}
  condition = conditions.task_condition(tasks["Trainer"])
  decision = {"artifacts": [{"name": "3", "uri": "s3://b/d", "metadata": {"train": 0.0}}]}
  inputs = {"inputs": {"artifacts": {"_SpanCheck.decision": decision}}}
  assert conditions.evaluate(condition, inputs) is False
  decision["artifacts"][0]["metadata"]["train"] = 1.0
  assert conditions.evaluate(condition, inputs) is True


@pytest.mark.parametrize("condition, message", [
    ("((", "does not compile"),
    ("inputs.artifacts['missing'].artifacts[0].metadata['train'] == 1.0", "evaluation error"),
    ("inputs.artifacts['_Decide.decision'].artifacts[0].uri", "return type is not bool"),
])
def test_a_condition_that_fails_or_is_not_a_bool_is_an_error(condition, message):
  with pytest.raises(conditions.ConditionError, match=message):
    conditions.evaluate(condition, _inputs(1))


def test_a_task_is_skipped_when_anything_it_depends_on_was():
  tasks = gated_spec("/dev/null")["root"]["dag"]["tasks"]
  assert conditions.upstream_tasks(tasks["After"]) == {"Gated"}
  assert conditions.skipped_upstream(tasks["After"], {"Gated"}) == "Gated"
  assert conditions.skipped_upstream(tasks["Other"], {"Gated"}) is None
  assert conditions.skipped_upstream(tasks["Gated"], set()) is None
