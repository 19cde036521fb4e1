"""A compiled task's trigger condition (`triggerPolicy.condition`, the CEL expression TFX's
Kubeflow V2 compiler writes for a node inside `tfx.dsl.Cond`: tfx/orchestration/kubeflow/v2/
step_builder.py, compiler_utils.placeholder_to_cel), evaluated as the KFP backend's driver does,
for the orchestrators that run the spec here (kubeflow/local_run.py: kfp.local refuses any
condition; test_support/kfp_harness.py).

What the backend does (kubeflow/pipelines backend/src/v2):
- driver/container.go: with the task's inputs resolved, `expr.Condition(executorInput,
  condition)`; false: the task is not run (no outputs provisioned, no cache lookup).
- expression/expression.go Condition: CEL (cel-go) over the ExecutorInput's fields as variables
  (`inputs`, `outputs`, by their proto names); an artifact's `metadata` is a protobuf Struct, so
  every number in it is a double (hence TFX's `== 1.0`); a result that is not a bool is an error.
- compiler/argocompiler/dag.go depends(): a task runs only when each task it depends on
  `.Succeeded`; a skipped task is not, so every task downstream of it is skipped too.
"""
from __future__ import annotations

from typing import Collection, Mapping, Optional

import celpy
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2


class ConditionError(ValueError):
  """The condition does not compile, fails to evaluate, or is not a bool."""


def task_condition(task: Mapping) -> str:
  """The task's trigger condition in the spec (a dict of the YAML), "" for none."""
  return task.get("triggerPolicy", {}).get("condition", "")


def upstream_tasks(task: Mapping) -> set:
  """The tasks this one depends on: its dependentTasks and the producers of its inputs."""
  upstream = set(task.get("dependentTasks", []))
  for section in ("artifacts", "parameters"):
    for spec in task.get("inputs", {}).get(section, {}).values():
      producer = spec.get("taskOutputArtifact") or spec.get("taskOutputParameter") or {}
      if producer.get("producerTask"):
        upstream.add(producer["producerTask"])
  return upstream


def skipped_upstream(task: Mapping, skipped: Collection[str]) -> Optional[str]:
  """The first (by name) task this one depends on that was skipped, or None."""
  return min(upstream_tasks(task) & set(skipped), default=None)


def evaluate(condition: str, executor_input: Mapping) -> bool:
  """Whether a task whose executor input (inputs resolved; a dict as the launcher's JSON) is
  `executor_input` runs under `condition`; raises ConditionError as the driver fails."""
  message = pipeline_spec_pb2.ExecutorInput()
  try:
    json_format.ParseDict(dict(executor_input), message, ignore_unknown_fields=True)
  except json_format.ParseError as error:
    raise ConditionError(f"executor input: {error}") from error
  fields = json_format.MessageToDict(message, preserving_proto_field_name=True)
  variables = {name: celpy.json_to_cel(fields.get(name, {})) for name in ("inputs", "outputs")}
  environment = celpy.Environment()
  try:
    program = environment.program(environment.compile(condition))
    result = program.evaluate(variables)
  except celpy.CELParseError as error:
    raise ConditionError(f"condition {condition!r} does not compile: {error}") from error
  except celpy.CELEvalError as error:
    raise ConditionError(f"evaluation error: {condition!r}: {error.args[0]}") from error
  if not isinstance(result, celpy.celtypes.BoolType):
    raise ConditionError(f"evaluation error: return type is not bool, got {result!r}")
  return bool(result)
