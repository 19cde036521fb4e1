"""A compiled spec with a trigger condition, as TFX writes one for the nodes inside a
`tfx.dsl.Cond` (tfx/orchestration/kubeflow/v2/step_builder.py): Decide writes an artifact whose
`train` metadata is the run's `train` parameter; Gated runs only when it is 1 (its condition
reads that artifact, an input of its own); After consumes Gated's output; Other depends on
nothing. Each task appends its name to a record file when it runs, so a test sees which ran,
under kfp.local (kubeflow/local_run.py) and the harness (test_support/kfp_harness.py) alike."""
# The task's command: python -c SCRIPT NAME RECORD --json_serialized_invocation_args {{$}}.
SCRIPT = """
import json, os, sys
name, record = sys.argv[1], sys.argv[2]
executor_input = json.loads(sys.argv[sys.argv.index("--json_serialized_invocation_args") + 1])
with open(record, "a") as f:
  f.write(name + "\\n")
train = executor_input["inputs"].get("parameterValues", {}).get("train", 1)
outputs = {}
for key, artifacts in executor_input["outputs"].get("artifacts", {}).items():
  (out,) = artifacts["artifacts"]
  out["metadata"] = {"train": int(train)}
  outputs[key] = {"artifacts": [out]}
os.makedirs(os.path.dirname(executor_input["outputs"]["outputFile"]), exist_ok=True)
with open(executor_input["outputs"]["outputFile"], "w") as f:
  json.dump({"artifacts": outputs}, f)
"""
ARTIFACT = {"artifactType": {"instanceSchema": "title: tfx.Examples\ntype: object\n"}}
DECISION_INPUT = "_Decide.decision"  # TFX's key for a Cond's channel (implicit_channel_key).
CONDITION = f"(inputs.artifacts['{DECISION_INPUT}'].artifacts[0].metadata['train'] == 1.0)"


def gated_spec(record_path: str, condition: str = CONDITION) -> dict:
  def container(name):
    return {"container": {"image": "localhost/wrn-pipeline:test", "command": [
        "python", "-c", SCRIPT, name, record_path], "args": [
            "--json_serialized_invocation_args", "{{$}}"]}}

  def component(name, inputs=None, outputs=None, parameters=None):
    spec = {"executorLabel": f"{name}_executor"}
    if inputs or parameters:
      spec["inputDefinitions"] = {
          **({"artifacts": {key: ARTIFACT for key in inputs}} if inputs else {}),
          **({"parameters": parameters} if parameters else {})}
    if outputs:
      spec["outputDefinitions"] = {"artifacts": {key: ARTIFACT for key in outputs}}
    return spec

  def from_task(producer, key):
    return {"taskOutputArtifact": {"producerTask": producer, "outputArtifactKey": key}}

  return {
      "pipelineInfo": {"name": "gated"}, "schemaVersion": "2.1.0",
      "defaultPipelineRoot": "s3://bucket/root",
      "deploymentSpec": {"executors": {f"{name}_executor": container(name)
                                       for name in ("Decide", "Gated", "After", "Other")}},
      "components": {
          "comp-Decide": component("Decide", outputs=["decision"],
                                   parameters={"train": {"parameterType": "NUMBER_INTEGER"}}),
          "comp-Gated": component("Gated", inputs=[DECISION_INPUT], outputs=["model"]),
          "comp-After": component("After", inputs=["model"], outputs=["report"]),
          "comp-Other": component("Other", outputs=["other"])},
      "root": {
          "inputDefinitions": {"parameters": {"train": {"parameterType": "NUMBER_INTEGER",
                                                        "defaultValue": 1}}},
          "dag": {"tasks": {
              "Decide": {"componentRef": {"name": "comp-Decide"}, "taskInfo": {"name": "Decide"},
                         "inputs": {"parameters": {"train": {
                             "componentInputParameter": "train"}}}},
              "Gated": {"componentRef": {"name": "comp-Gated"}, "taskInfo": {"name": "Gated"},
                        "dependentTasks": ["Decide"],
                        "inputs": {"artifacts": {DECISION_INPUT: from_task("Decide",
                                                                           "decision")}},
                        "triggerPolicy": {"condition": condition}},
              "After": {"componentRef": {"name": "comp-After"}, "taskInfo": {"name": "After"},
                        "dependentTasks": ["Gated"],
                        "inputs": {"artifacts": {"model": from_task("Gated", "model")}}},
              "Other": {"componentRef": {"name": "comp-Other"}, "taskInfo": {"name": "Other"}},
          }}}}


def skipped_when(train: int) -> dict:
  """The tasks a run of gated_spec skips, each with why, as both orchestrators report it."""
  if train:
    return {}
  return {"Gated": f"condition {CONDITION} is false", "After": "upstream task Gated was skipped"}


def ran(record_path: str) -> list:
  """The tasks that ran, in order."""
  try:
    with open(record_path) as f:
      return f.read().split()
  except FileNotFoundError:
    return []
