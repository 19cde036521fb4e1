"""`python -m kubeflow compile|upload|run|schedule|local-run`: the pipeline on Kubeflow
Pipelines, and the compiled spec run here by the KFP SDK's local orchestrator."""
import os
import sys
from typing import Dict, List, Sequence, Tuple

from configs.flags import name_value_pairs, parse_value
from kubeflow import cron
from kubeflow import cluster_config

DEFAULT_PACKAGE_DIR = os.path.join("outputs", "kubeflow")
DEFAULT_LOCAL_PIPELINE_ROOT = os.path.join("outputs", "kubeflow-local-run")
CONNECTION_FLAGS = ("endpoint", "token", "namespace")
COMMAND_FLAGS = {
    "compile": ("package_dir",),
    "upload": ("package", "version") + CONNECTION_FLAGS,
    "run": ("package", "version", "experiment", "run_name", "data_root", "span",
            "allow_concurrent_run") + CONNECTION_FLAGS,
    "schedule": ("package", "version", "experiment", "schedule_name", "cron", "max_concurrency",
                 "data_root", "span") + CONNECTION_FLAGS,
    "local-run": ("package", "runner", "pipeline_root", "data_root", "span"),
}

USAGE = f"""usage: python -m kubeflow COMMAND [--flag=value ...]

  compile   [pipeline flags] [--package_dir=DIR]
            Writes DIR/<pipeline_name>.yaml (the KFP pipeline spec to upload) and .json (the
            PipelineJob, for Vertex AI Pipelines); DIR defaults to {DEFAULT_PACKAGE_DIR}.
            Needs --image and an object-storage --output_dir (gs://... or s3://...).
            An open-source KFP cluster, the Trainer's pod on 2 GPUs of a labelled node, every
            pod's S3 credentials from the Secret wrn-s3-credentials (keys accesskey, secretkey):
              python -m kubeflow compile --image=registry.example.com/wrn-pipeline:1 \\
                --output_dir=s3://wrn/runs --dataset=cifar10 \\
                --s3_endpoint=http://minio-service.kubeflow:9000 --s3_region=us-east-1 \\
                --credentials_secret=wrn-s3-credentials \\
                --accelerator_type=nvidia.com/gpu --accelerator_count=2 \\
                --distribution_strategy=mirrored \\
                --trainer_node_selector=nvidia.com/gpu.present=true \\
                --trainer_tolerations=nvidia.com/gpu:NoSchedule
  upload    --package=FILE.yaml [--version=NAME]
            Uploads the pipeline, or a new version of the pipeline of the same name.
  run       --package=FILE.yaml --experiment=NAME [--run_name=NAME] [--data_root=URI]
            [--span=SPAN] [--allow_concurrent_run=false] [--TRAINER_FLAG=VALUE ...]
            Uploads (as above), then starts one run in the experiment (created when missing).
            Refused while a run on the same pipeline root has not ended, unless
            --allow_concurrent_run=true.
  schedule  --package=FILE.yaml --experiment=NAME --cron="SEC MIN HOUR DOM MON DOW"
            [--schedule_name=NAME] [--max_concurrency=1] [--data_root=URI] [--span=SPAN]
            [--TRAINER_FLAG=VALUE ...]
            Uploads, then creates a recurring run on a 6-field cron schedule (seconds first).
            Over dated folders (--image_dir=gs://b/images/{{YYYY}}-{{MM}}-{{DD}} at compile), each
            run reads the newest day's folder; --span='[[ScheduledTime.2006-01-02]]' makes
            each run read its scheduled day's instead (KFP backend 2.16.0 or later expands it).
  local-run --package=FILE.yaml [--runner=subprocess|docker] [--pipeline_root=DIR]
            [--data_root=URI] [--span=SPAN] [--TRAINER_FLAG=VALUE ...]
            Runs the spec here on the KFP SDK's own local orchestrator (kfp.local): docker runs
            each task in the spec's image (needs a Docker daemon); subprocess (default) runs
            each task's command in this environment. Artifacts go to the local DIR (default
            {DEFAULT_LOCAL_PIPELINE_ROOT}); serving models, schema and data stay where the spec
            names them, read with the object-storage settings of this environment.

Connection (upload, run, schedule): --endpoint=URL or ${{KFP_ENDPOINT}}; --token=TOKEN or
${{KFP_TOKEN}} (else kfp's own credentials); --namespace=NS on multi-user Kubeflow.
Per run, --data_root, --span and trainer flags (e.g. --train_epochs=50) change the runtime
parameters; flags that Transform or the compiled worker pools depend on need a new compile.
--span: with a span pattern compiled into --image_dir or --tfrecord_dir, the span number (or
date YYYY-MM-DD) the run reads; empty: the newest span.

Pipeline flags (compile):
"""


def split_flags(argv: Sequence[str], names: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
  """Our flags by name, and the rest (config flags) untouched, as `--name=value` strings."""
  ours, rest = {}, []
  for name, value in name_value_pairs(argv):
    if name in names:
      ours[name] = value
    else:
      rest.append(f"--{name}={value}")
  return ours, rest




def _required(flags: dict, name: str, example: str) -> str:
  if not flags.get(name):
    raise ValueError(f"--{name} is required (e.g. --{name}={example}).")
  return flags[name]


def main(argv: Sequence[str]) -> int:
  if not argv or argv[0] in ("-h", "--help") or "--help" in argv:
    flags = argv[1:] if argv and not argv[0].startswith("-") else argv  # After the command.
    try:
      print(USAGE + cluster_config.usage("python -m kubeflow compile", flags))
    except ValueError as error:
      print(f"error: {error}", file=sys.stderr)
      return 2
    return 0
  command, args = argv[0], argv[1:]
  if command not in COMMAND_FLAGS:
    print(f"error: unknown command {command!r}; expected one of {sorted(COMMAND_FLAGS)}.",
          file=sys.stderr)
    return 2
  try:
    flags, rest = split_flags(args, COMMAND_FLAGS[command])
    if command == "compile":
      return _compile(flags, rest)
    if command == "local-run":
      return _local_run(flags, rest)
    return _submit(command, flags, rest)
  except ValueError as error:  # Bad input: nothing written, nothing sent.
    print(f"error: {error}", file=sys.stderr)
    return 2


def _compile(flags: dict, rest: List[str]) -> int:
  config = cluster_config.from_flags(rest)
  from kubeflow import compiler
  compiled = compiler.compile_pipeline(config, flags.get("package_dir", DEFAULT_PACKAGE_DIR))
  print(f"Compiled {config.runner.pipeline_name} for Kubeflow Pipelines:\n"
        f"  pipeline spec (upload):  {compiled.spec_path}\n"
        f"  PipelineJob (Vertex AI): {compiled.job_path}\n"
        f"  pipeline root:           {config.runner.pipeline_root}\n"
        f"  serving models:          {config.runner.serving_model_dir}")
  return 0


def _local_run(flags: dict, rest: List[str]) -> int:
  from kubeflow import local_run, submit
  package = _required(flags, "package", "outputs/kubeflow/wrn-image-classifier.yaml")
  spec = submit.load_spec(package)
  pipeline_spec = local_run.load_pipeline_spec(package, spec)
  arguments = submit.run_parameters(spec, rest, flags.get("data_root"), flags.get("span"))
  pipeline_root = local_run.check_pipeline_root(
      flags.get("pipeline_root", DEFAULT_LOCAL_PIPELINE_ROOT))
  runner = local_run.make_runner(flags.get("runner", "subprocess"))
  missing = local_run.paths_missing_here(spec)
  if missing and flags.get("runner", "subprocess") == "subprocess":
    raise ValueError(f"{package} names files inside the image that this machine does not have "
                     f"({'; '.join(missing)}), and --runner=subprocess runs each task here: use "
                     "--runner=docker, or compile with those paths on object storage (e.g. "
                     "--schema_path=s3://bucket/schema.pbtxt).")
  try:
    run = local_run.run(pipeline_spec, runner, pipeline_root, arguments)
  except RuntimeError as error:  # kfp.local's one line naming the failed task.
    print(f"error: {error}", file=sys.stderr)
    return 1
  for task in run.tasks.values():
    print(f"  {task.name:<24} {task.seconds:6.1f} s"
          f"{f' (skipped: {task.skipped})' if task.skipped else ''}")
  print(f"kfp.local ran {spec['pipelineInfo']['name']}: {len(run.tasks)} tasks in "
        f"{run.seconds:.0f} s\n  artifacts: {run.run_root}")
  return 0


def _submit(command: str, flags: dict, rest: List[str]) -> int:
  from kubeflow import submit
  package = _required(flags, "package", "outputs/kubeflow/wrn-image-classifier.yaml")
  spec = submit.load_spec(package)
  parameters = {}
  if command in ("run", "schedule"):
    experiment = _required(flags, "experiment", "wrn")
    parameters = submit.run_parameters(spec, rest, flags.get("data_root"), flags.get("span"),
                                       recurring=command == "schedule")
  elif rest:
    raise ValueError(f"upload takes no pipeline flags (got {rest[0]}); they go to compile.")
  allow_concurrent_run = parse_value(
      "allow_concurrent_run", flags.get("allow_concurrent_run", "false"), bool)
  if command == "schedule":
    cron_expression = cron.check_cron(_required(flags, "cron", "'0 0 3 * * *'"))
    max_concurrency = flags.get("max_concurrency", "1")
    if not max_concurrency.isdigit() or int(max_concurrency) < 1:
      raise ValueError(f"Invalid --max_concurrency {max_concurrency!r}: must be an integer >= 1.")
  connection = submit.Connection.from_flags(flags.get("endpoint"), flags.get("token"),
                                            flags.get("namespace"))
  version = flags.get("version") or submit.default_version_name(spec)

  name, root = spec["pipelineInfo"]["name"], submit.pipeline_root(spec)
  try:
    client = connection.client()
    pipeline_id = client.get_pipeline_id(name)
    if command == "run" and not allow_concurrent_run:
      active = submit.active_runs(client, pipeline_id, root, connection.namespace)
      if active:
        print(f"error: {root} is in use by {submit.describe_run(active[0])}"
              + (f" and {len(active) - 1} more" if len(active) > 1 else "") + ". Two runs "
              "on one pipeline root would both compare their model with the same production "
              "model and push, the later push serving whichever model it holds. Wait for that "
              "run to end, or terminate it (kfp.Client().terminate_run(RUN_ID), or the UI), "
              "or pass --allow_concurrent_run=true to start this run anyway.", file=sys.stderr)
        return 1
    pipeline_id, version_id = submit.upload(client, package, spec, version, connection.namespace,
                                            pipeline_id)
    print(f"Pipeline {name}: id {pipeline_id}, version {version_id}")
    if command == "run":
      run_id = submit.start_run(client, experiment, flags.get("run_name") or version,
                                pipeline_id, version_id, parameters, root, connection.namespace)
      print(f"Run {run_id} started in experiment {experiment}.")
    elif command == "schedule":
      recurring_id = submit.schedule_runs(
          client, experiment, flags.get("schedule_name") or f"{name}-cron", cron_expression,
          pipeline_id, version_id, parameters, int(max_concurrency), root, connection.namespace)
      print(f"Recurring run {recurring_id} created in experiment {experiment}: "
            f"{cron_expression}.")
  except Exception as error:  # What the server (or the network) said is what the user needs.
    print(f"error: Kubeflow Pipelines at {connection.endpoint}: {type(error).__name__}: "
          f"{error}", file=sys.stderr)
    return 1
  return 0
