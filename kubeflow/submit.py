"""Uploads a compiled pipeline and starts one-off or recurring runs on a KFP server: bad input
fails before any network call, and a pipeline root takes one run at a time
(docs/pipeline.md, "One run at a time").
"""
import dataclasses
import json
import os
import re
import time
from typing import Mapping, Optional, Sequence

import yaml

from configs import groups
from components import spans
from kubeflow.parameters import DATA_ROOT_PARAMETER, SPAN_PARAMETER, TRAINER_CONFIG_PARAMETER
from pipeline import config as config_lib
from kubeflow.cluster_config import KubeflowConfig
from storage.object_storage import is_object_store_uri
from trainer_module.config import HYPER_L2_GROUPS, TRAINER_CONFIG_KEY, TrainerConfig

ENDPOINT_ENV = "KFP_ENDPOINT"
TOKEN_ENV = "KFP_TOKEN"
# Trainer fields a run may not change: the Vertex pools compiled into the pipeline fit this
# strategy, and the schema's label domain fits num_classes.
COMPILED_TRAINER_FIELDS = ("distribution_strategy", "tpu", "num_classes")
# KFP v2 run states (V2beta1RuntimeState) of a run that has not ended.
ACTIVE_RUN_STATES = ("PENDING", "RUNNING", "PAUSED", "CANCELING")
# What hyper-deep ensemble trials draw: one flag would erase the trials' differences.
TRIAL_DRAWN_FIELDS = HYPER_L2_GROUPS + ("label_smoothing", "seed", "l2_per_train_example")


@dataclasses.dataclass(frozen=True)
class Connection:
  endpoint: str
  token: Optional[str] = None  # None: kfp's own credentials (IAP client id, kube context).
  namespace: Optional[str] = None  # Multi-user Kubeflow: the profile namespace.

  @classmethod
  def from_flags(cls, endpoint: Optional[str], token: Optional[str], namespace: Optional[str],
                 environ: Mapping[str, str] = os.environ) -> "Connection":
    endpoint = endpoint or environ.get(ENDPOINT_ENV)
    if not endpoint:
      raise ValueError(f"No Kubeflow Pipelines endpoint: pass --endpoint=URL or set "
                       f"{ENDPOINT_ENV} (e.g. http://localhost:8080 with kubectl port-forward).")
    if not endpoint.startswith(("http://", "https://")):
      raise ValueError(f"Invalid --endpoint {endpoint!r}: expected an http:// or https:// URL.")
    return cls(endpoint=endpoint.rstrip("/"), token=token or environ.get(TOKEN_ENV) or None,
               namespace=namespace or None)

  def client(self):
    import kfp
    return kfp.Client(host=self.endpoint, existing_token=self.token,
                      namespace=self.namespace or "kubeflow")


def load_spec(path: str) -> dict:
  """The pipeline spec of a compiled package (the .yaml that `compile` writes)."""
  if not path.endswith((".yaml", ".yml")):
    raise ValueError(f"Invalid --package {path!r}: expected the .yaml pipeline spec that "
                     "`python -m kubeflow compile` writes.")
  if not os.path.isfile(path):
    raise ValueError(f"Invalid --package {path!r}: no such file; run `python -m kubeflow "
                     "compile` first.")
  try:
    with open(path) as f:  # The pipeline spec, then (kfp) the platform section.
      spec = next(yaml.safe_load_all(f), None)
  except yaml.YAMLError as error:
    raise ValueError(f"Invalid --package {path!r}: not YAML ({error}).") from error
  if not isinstance(spec, dict) or "pipelineInfo" not in spec or "root" not in spec:
    raise ValueError(f"Invalid --package {path!r}: not a KFP pipeline spec.")
  return spec


def parameter_defaults(spec: dict) -> dict:
  parameters = spec["root"].get("inputDefinitions", {}).get("parameters", {})
  return {name: parameter.get("defaultValue") for name, parameter in parameters.items()}


# The recurring run's macro a schedule may pass as its span: the scheduled day, in Go's layout
# (2006-01-02 for a date pattern, e.g. 20060102 for a {SPAN} of that form).
SCHEDULED_SPAN = re.compile(r"\[\[ScheduledTime\.(2006-01-02|[0-9]+)\]\]")
SPAN_VALUE = re.compile(r"[0-9]+|[0-9]{4}-[0-9]{2}-[0-9]{2}")


def span_value(span: str, recurring: bool) -> str:
  """The `span` parameter a run gets: a span number, a date YYYY-MM-DD, "" (the newest), or
  for a recurring run (schedule) the scheduled day as [[ScheduledTime.2006-01-02]], which
  KFP backends expand from version 2.16.0 on."""
  if not span or SPAN_VALUE.fullmatch(span):
    return span
  if SCHEDULED_SPAN.fullmatch(span):
    if recurring:
      return span
    raise ValueError(f"Invalid --span {span!r}: {spans.SCHEDULED_TIME_MACRO}...]] is expanded "
                     "only in a recurring run's parameters (python -m kubeflow schedule); give "
                     "the span number or date here.")
  raise ValueError(f"Invalid --span {span!r}: expected a span number, a date YYYY-MM-DD"
                   + (", or [[ScheduledTime.2006-01-02]] (the scheduled day; KFP backend "
                      f"{spans.MACRO_BACKEND_VERSION} or later)" if recurring else "")
                   + "; empty: the newest span.")


def run_parameters(spec: dict, trainer_flags: Sequence[str], data_root: Optional[str],
                   span: Optional[str] = None, recurring: bool = False) -> dict:
  """The run's parameter values: the compiled defaults, with trainer fields (`--name=value`
  flags), the data directory and the span changed as asked. What Transform or the compiled
  worker pools depend on cannot change per run: that needs a new compile."""
  values = parameter_defaults(spec)
  if span is not None:
    if SPAN_PARAMETER not in values:
      raise ValueError("--span applies to pipelines compiled with a span pattern in "
                       "--image_dir or --tfrecord_dir (e.g. --image_dir=gs://b/images/"
                       "{YYYY}-{MM}-{DD}); this one reads one dataset.")
    values[SPAN_PARAMETER] = span_value(span, recurring)
  if trainer_flags:
    names = [flag[2:].partition("=")[0] for flag in trainer_flags]
    trial_parameters = [n for n in values if n.startswith(TRAINER_CONFIG_PARAMETER + "_trial_")]
    for name in names:
      if trial_parameters and name in TRIAL_DRAWN_FIELDS:
        raise ValueError(f"--{name} is drawn per trial of this pipeline's hyper-deep ensemble "
                         "sweep; compile again to change it.")
    for parameter in [TRAINER_CONFIG_PARAMETER] + trial_parameters:
      values[parameter] = _with_trainer_flags(values[parameter], trainer_flags, names)
  if data_root is not None:
    if DATA_ROOT_PARAMETER not in values:
      raise ValueError("--data_root applies to pipelines compiled with --dataset=tfrecord; "
                       "this one reads no data directory.")
    if not is_object_store_uri(data_root):
      raise ValueError(f"Invalid --data_root {data_root!r}: must be on object storage "
                       "(gs://bucket/path or s3://bucket/path).")
    values[DATA_ROOT_PARAMETER] = data_root
  return values


def _with_trainer_flags(parameter: str, trainer_flags: Sequence[str], names: Sequence[str]) -> str:
  """A Trainer's custom_config parameter with the flags' trainer fields changed."""
  custom_config = json.loads(parameter)
  compiled = TrainerConfig.from_dict(custom_config[TRAINER_CONFIG_KEY])
  trainer_fields = set(compiled.to_dict())
  for name in names:
    if name not in trainer_fields or name in COMPILED_TRAINER_FIELDS:
      raise ValueError(_fixed_or_unknown(name))
  # Parsed and validated like every config, over the compiled trainer config.
  updated = config_lib.from_flags(
      trainer_flags, base=config_lib.PipelineConfig(trainer=compiled)).trainer
  for name in names:
    changed = compiled.replace(**{name: updated.to_dict()[name]})
    if changed.transform_options() != compiled.transform_options():
      raise ValueError(_fixed_or_unknown(name))
  custom_config[TRAINER_CONFIG_KEY] = updated.to_dict()
  return json.dumps(custom_config, sort_keys=True)


def _fixed_or_unknown(name: str) -> str:
  config_fields = {*groups.leaf_paths(config_lib.PipelineConfig),
                   *groups.leaf_paths(KubeflowConfig)}
  if name not in config_fields:
    return f"Unknown flag --{name}."
  return (f"--{name} is fixed when the pipeline is compiled (Transform, the schema or the "
          "training pools depend on it); compile again with it.")


def default_version_name(spec: dict) -> str:
  return f"{spec['pipelineInfo']['name']}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def pipeline_root(spec: dict) -> str:
  return spec["defaultPipelineRoot"]


def upload(client, package: str, spec: dict, version_name: str, namespace: Optional[str],
           pipeline_id: Optional[str]) -> tuple:
  """Uploads the package as a new pipeline (pipeline_id None: none of that name exists yet), or
  as a new version of the pipeline; returns (pipeline id, version id)."""
  name = spec["pipelineInfo"]["name"]
  if pipeline_id is None:
    pipeline_id = client.upload_pipeline(package, pipeline_name=name,
                                         namespace=namespace).pipeline_id
    versions = client.list_pipeline_versions(pipeline_id).pipeline_versions
    return pipeline_id, versions[0].pipeline_version_id
  version = client.upload_pipeline_version(package, version_name, pipeline_id=pipeline_id)
  return pipeline_id, version.pipeline_version_id


def active_runs(client, pipeline_id: Optional[str], root: str,
                namespace: Optional[str]) -> list:
  """The runs that have not ended on this pipeline root, newest first: those that record the
  root, and those of this pipeline that record none (started elsewhere, e.g. in the UI, so on
  the root compiled into their version, which for this pipeline's name is this one)."""
  state_filter = json.dumps({"predicates": [{
      "operation": "IN", "key": "state", "string_values": {"values": list(ACTIVE_RUN_STATES)}}]})
  found, page_token = [], ""
  while True:
    page = client.list_runs(page_token=page_token, page_size=100, sort_by="created_at desc",
                            namespace=namespace, filter=state_filter)
    for run in page.runs or []:
      run_root = run.runtime_config.pipeline_root if run.runtime_config else None
      reference = run.pipeline_version_reference
      same_pipeline = reference is not None and reference.pipeline_id == pipeline_id
      if run.state in ACTIVE_RUN_STATES and (
          run_root == root or (not run_root and pipeline_id and same_pipeline)):
        found.append(run)
    page_token = page.next_page_token
    if not page_token:
      return found


def describe_run(run) -> str:
  return (f"run {run.run_id} ({run.display_name!r}, {run.state}, created {run.created_at}, "
          f"experiment {run.experiment_id})")


def start_run(client, experiment: str, run_name: str, pipeline_id: str, version_id: str,
              parameters: dict, root: str, namespace: Optional[str]) -> str:
  experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
  run = client.run_pipeline(experiment_id, run_name, params=parameters, pipeline_id=pipeline_id,
                            version_id=version_id, pipeline_root=root)
  return run.run_id


def schedule_runs(client, experiment: str, schedule_name: str, cron: str, pipeline_id: str,
                  version_id: str, parameters: dict, max_concurrency: int, root: str,
                  namespace: Optional[str]) -> str:
  """A recurring run; a missed slot is not caught up (each run trains on the data of its day),
  and KFP starts no run of the schedule while max_concurrency of its runs are active."""
  experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
  recurring = client.create_recurring_run(
      experiment_id, schedule_name, cron_expression=cron, params=parameters,
      pipeline_id=pipeline_id, version_id=version_id, max_concurrency=max_concurrency,
      no_catchup=True, pipeline_root=root)
  return recurring.recurring_run_id
