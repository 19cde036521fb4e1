"""The compiled KFP v2 spec: the local pipeline's components and edges, the image, the runtime
parameters (and that they reach the components), Vertex pools, and no path of this machine."""
import json
import os
import re

import pytest
from google.protobuf import json_format
from kfp.client import client as kfp_client
from kfp.pipeline_spec import pipeline_spec_pb2

from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s_pb2

from kubeflow import cli, compiler, kfp_entrypoint
from kubeflow.conftest import OPEN_SOURCE_GPU_FLAGS, VERTEX_FLAGS
from kubeflow import cluster_config as kubeflow_config
from local_runner import runner as local_runner
from kubeflow.cluster_config import from_flags
from pipeline.config import from_preset
from pipeline.pipeline import create_pipeline
from trainer_module.config import TrainerConfig

def _spec(compiled):
  """The spec as the kfp SDK reads a package (what kfp.Client does before a run)."""
  return kfp_client._extract_pipeline_yaml(compiled.spec_path).pipeline_spec


def _compiled_edges(spec):
  """(upstream, downstream) task pairs."""
  return {(upstream, task) for task, task_spec in spec.root.dag.tasks.items()
          for upstream in task_spec.dependent_tasks}


def _local_pipeline():
  config = from_preset("tiny")
  return create_pipeline(config, local_runner.local_parts(config))


def test_the_spec_has_every_component_and_the_local_pipelines_edges(compiled):
  config, package = compiled["vertex"]
  local = _local_pipeline()
  local_edges = {(upstream.id, component.id) for component in local.components
                 for upstream in component.upstream_nodes}
  spec = _spec(package)
  assert set(spec.root.dag.tasks) == {c.id for c in local.components}
  assert _compiled_edges(spec) == local_edges
  assert spec.pipeline_info.name == config.runner.pipeline_name == "wrn-image-classifier"
  assert spec.default_pipeline_root == "gs://bucket/wrn/pipeline_root/wrn-image-classifier"


@pytest.mark.parametrize("name", ["vertex", "tfrecord", "gpus"])
def test_the_pusher_task_takes_the_evaluators_blessing_and_the_served_checks(compiled, name):
  """TFX's Pusher skips a missing blessing input: without this edge every model is pushed."""
  _, package = compiled[name]
  inputs = _spec(package).root.dag.tasks["Pusher"].inputs.artifacts

  def producer(key):
    output = inputs[key].task_output_artifact
    return output.producer_task, output.output_artifact_key

  assert producer("model_blessing") == ("Evaluator", "blessing")
  assert producer("infra_blessing") == ("ServedModelCheck", "infra_blessing")
  assert producer("model") == ("Trainer", "model")


def test_every_container_runs_the_pipeline_image(compiled):
  _, package = compiled["vertex"]
  executors = json_format.MessageToDict(_spec(package).deployment_spec)["executors"]
  containers = {name: e["container"] for name, e in executors.items() if "container" in e}
  local = _local_pipeline()
  # Every component is a container: none is a resolver, which an open-source KFP server refuses.
  assert len(containers) == len(executors) == len(local.components)
  assert {c["image"] for c in containers.values()} == {"gcr.io/proj/wrn-pipeline:7"}
  # Custom executors are imported from the image's packages.
  classes = {c["args"][c["args"].index("--executor_class_path") + 1] for c in containers.values()}
  assert {"components.example_gen._Executor", "components.pusher.VersionedPusherExecutor",
          "components.data_check.DataCheck_Executor",
          "components.evaluation_set.EvaluationSetGen_Executor",
          "components.production_model.ProductionModelExecutor",
          "components.evaluator.ProductionBaselineExecutor",
          "tfx.extensions.google_cloud_ai_platform.trainer.executor.GenericExecutor"} <= classes
  # Beam components use the pod's cores, and name the image's installed requirements so that
  # TFX builds no sdist of itself in the pod.
  beam_steps = [c["args"] for name, c in containers.items()
                if name.startswith(("ImageDatasetExampleGen", "ValidationGate", "Transform"))]
  assert beam_steps and all("--direct_num_workers=0" in args and
                            "--requirements_file=/pipeline/requirements.lock" in args
                            for args in beam_steps)


def test_runtime_parameters_have_defaults_and_feed_the_components(compiled):
  config, package = compiled["tfrecord"]
  spec = _spec(package)
  parameters = spec.root.input_definitions.parameters
  assert set(parameters) == {"trainer_config", "data_root"}
  assert all(p.is_optional for p in parameters.values())
  assert parameters["data_root"].default_value.string_value == "s3://data/images"
  trainer_config = json.loads(parameters["trainer_config"].default_value.string_value)
  assert TrainerConfig.from_dict(trainer_config["trainer"]) == config.trainer
  tasks = spec.root.dag.tasks
  assert tasks["Trainer"].inputs.parameters["custom_config"].component_input_parameter == \
      "trainer_config"
  assert tasks["ImportExampleGen"].inputs.parameters["input_base"].component_input_parameter == \
      "data_root"
  # The Vertex AI PipelineJob carries the same values.
  with open(package.job_path) as f:
    job = json.load(f)
  assert job["runtimeConfig"]["parameterValues"]["data_root"] == "s3://data/images"
  assert job["runtimeConfig"]["gcsOutputDirectory"] == config.runner.pipeline_root


def test_a_changed_trainer_config_reaches_run_fn_on_every_vertex_replica(compiled):
  """What KFP hands the Trainer's container, through TFX's entrypoint and the Vertex job it
  submits, to the exec properties each replica's Trainer executor (and run_fn) reads."""
  from kfp.pipeline_spec import pipeline_spec_pb2 as pb
  from tfx.extensions.google_cloud_ai_platform import training_clients
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
  from tfx.utils import json_utils
  from kubeflow import submit
  _, package = compiled["vertex"]
  spec_dict = submit.load_spec(package.spec_path)
  parameters = submit.run_parameters(spec_dict, ["--train_epochs=3"], None)
  spec = _spec(package)
  executor_input = pb.ExecutorInput()
  for name, parameter in spec.root.dag.tasks["Trainer"].inputs.parameters.items():
    value = (parameters[parameter.component_input_parameter]
             if parameter.component_input_parameter else
             json_format.MessageToDict(parameter.runtime_value.constant))
    executor_input.inputs.parameter_values[name].string_value = value
  exec_properties = kubeflow_v2_entrypoint_utils.parse_execution_properties(
      executor_input.inputs.parameter_values, executor_input.inputs.parameters,
      spec.components["Trainer"].input_definitions)
  custom_config = json_utils.loads(exec_properties["custom_config"])
  job_args = dict(custom_config["ai_platform_training_args"])
  assert job_args.pop("project") == "proj"
  assert custom_config["ai_platform_vertex_region"] == "europe-west4"
  job = object.__new__(training_clients.VertexJobClient).create_training_job(
      {}, {}, exec_properties, "tfx.components.trainer.executor.GenericExecutor", job_args,
      None, None)
  pools = job["job_spec"]["worker_pool_specs"]
  assert [p["replica_count"] for p in pools] == [1, 2]
  for pool in pools:
    assert pool["machine_spec"]["accelerator_type"] == "NVIDIA_TESLA_V100"
    assert pool["container_spec"]["image_uri"] == "gcr.io/proj/wrn-pipeline:7"
    command = pool["container_spec"]["command"]
    replica_properties = json.loads(command[command.index("--exec-properties") + 1])
    replica_custom_config = json_utils.loads(replica_properties["custom_config"])
    trainer = TrainerConfig.from_dict(replica_custom_config["trainer"])  # As run_fn reads it.
    assert trainer.training.train_epochs == 3
    assert trainer.distribution.distribution_strategy == "multi_worker_mirrored"


def test_no_path_of_this_machine_is_in_the_spec(compiled, tmp_path):
  for _, package in compiled.values():
    for path in (package.spec_path, package.job_path):
      with open(path) as f:
        text = f.read()
      for local in {kubeflow_config.PROJECT_DIR, os.getcwd(), os.path.expanduser("~"),
                    str(tmp_path.parent.parent), "/tmp/", "outputs/"}:
        assert local not in text, (path, local)
      assert "/pipeline/components/schema.pbtxt" in text  # The schema inside the image.


def test_compile_without_cluster_settings_fails_and_writes_nothing(tmp_path, capsys):
  package_dir = tmp_path / "package"
  assert cli.main(["compile", f"--package_dir={package_dir}",
                   "--output_dir=gs://bucket/wrn"]) == 2
  assert "image='': is required on Kubeflow" in capsys.readouterr().err
  assert cli.main(["compile", f"--package_dir={package_dir}", "--image=i",
                   "--output_dir=/local/out"]) == 2
  assert "output_dir='/local/out': must be on object storage" in capsys.readouterr().err
  assert not package_dir.exists()


def test_the_baseline_is_the_model_in_production_read_afresh_on_every_run(compiled):
  _, package = compiled["vertex"]
  tasks = _spec(package).root.dag.tasks
  baseline = tasks["Evaluator"].inputs.artifacts["baseline_model"].task_output_artifact
  assert (baseline.producer_task, baseline.output_artifact_key) == ("ProductionModel", "model")
  assert not tasks["ProductionModel"].caching_options.enable_cache
  assert tasks["Trainer"].caching_options.enable_cache


@pytest.mark.parametrize("target", ["vertex", "tfrecord"])
def test_the_drift_check_reads_productions_baseline_before_training_and_feeds_the_pusher(
    compiled, target):
  _, package = compiled[target]
  tasks = _spec(package).root.dag.tasks
  baseline = tasks["DriftCheck"].inputs.artifacts["production_model"].task_output_artifact
  assert (baseline.producer_task, baseline.output_artifact_key) == ("DriftBaselineModel",
                                                                    "model")
  assert not tasks["DriftBaselineModel"].caching_options.enable_cache
  assert "DriftCheck" in tasks["Transform"].dependent_tasks
  for consumer in ("Pusher", "RunReport"):
    drift = tasks[consumer].inputs.artifacts["drift"].task_output_artifact
    assert (drift.producer_task, drift.output_artifact_key) == ("DriftCheck", "drift_report")


def test_warm_start_from_production_feeds_the_trainer_without_a_resolver(tmp_path):
  from kubeflow.conftest import TFRECORD_FLAGS
  config = from_flags([*TFRECORD_FLAGS, "--warm_start=production"])
  spec = _spec(compiler.compile_pipeline(config, str(tmp_path)))
  tasks = spec.root.dag.tasks
  base_model = tasks["Trainer"].inputs.artifacts["base_model"].task_output_artifact
  assert (base_model.producer_task, base_model.output_artifact_key) == ("WarmStartModel",
                                                                        "model")
  assert not tasks["WarmStartModel"].caching_options.enable_cache
  assert "candidate" not in tasks["WarmStartModel"].inputs.artifacts
  executors = json_format.MessageToDict(spec.deployment_spec)["executors"]
  assert all("container" in executor for executor in executors.values())


def test_the_kfp_spec_runs_every_container_through_the_compatibility_entrypoint(compiled):
  """kubeflow_target=kfp (the default): only executors an open-source KFP server runs, each
  container started by kubeflow.kfp_entrypoint with its component's own artifact types."""
  config, package = compiled["tfrecord"]
  assert config.kubeflow.kubeflow_target == "kfp"
  spec = json_format.MessageToDict(_spec(package))
  executors = spec["deploymentSpec"]["executors"]
  assert {kind for executor in executors.values() for kind in executor} == {"container"}
  for name, component in spec["components"].items():
    container = executors[component["executorLabel"]]["container"]
    assert tuple(container["command"]) == kfp_entrypoint.COMMAND
    assert "lifecycle" not in container  # The OSS backend never runs preCacheCheck hooks.
    args = container["args"]
    assert args[0] == kfp_entrypoint.ARTIFACT_TYPES_FLAG
    types = json.loads(args[1])
    for direction in ("input", "output"):
      declared = component.get(f"{direction}Definitions", {}).get("artifacts", {})
      assert set(types[direction]) == set(declared), name
    assert args[args.index("--executor_class_path") + 1]  # TFX's own arguments follow.
  assert json.loads(executors["Evaluator_executor"]["container"]["args"][1]) == {
      "input": {"baseline_model": "tfx.Model", "examples": "tfx.Examples",
                "model": "tfx.Model",
                # The span check's decision, which its trigger condition reads.
                "_SpanCheck.decision": "components.SpanDecision"},
      "output": {"blessing": "tfx.ModelBlessing", "evaluation": "tfx.ModelEvaluation"}}


def test_the_kfp_spec_runs_example_gens_driver_and_caches_nothing_that_reads_outside_state(
    compiled):
  _, package = compiled["tfrecord"]
  spec = json_format.MessageToDict(_spec(package))
  args = spec["deploymentSpec"]["executors"]["ImportExampleGen_executor"]["container"]["args"]
  assert kfp_entrypoint.EXAMPLE_GEN_DRIVER_FLAG in args
  tasks = spec["root"]["dag"]["tasks"]
  # New files under the same data_root leave KFP's cache key unchanged: no caching there.
  uncached = {name for name, task in tasks.items()
              if not task.get("cachingOptions", {}).get("enableCache")}
  assert uncached == {"ImportExampleGen", "ProductionModel", "SpanCheck", "DriftBaselineModel"}


def test_an_image_folder_is_read_again_on_every_kubeflow_run(tmp_path):
  """KFP's cache key cannot see new photos under the same image_dir."""
  config = from_flags(["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=s3://bucket/wrn",
                       "--dataset=image_dir", "--image_dir=s3://data/photos",
                       "--pipeline_name=wrn-photos"])
  tasks = compiler.pipeline_job(config)["pipelineSpec"]["root"]["dag"]["tasks"]
  assert tasks["ImageDatasetExampleGen"]["cachingOptions"] == {"enableCache": False}
  assert tasks["ClassSchemaGen"].get("cachingOptions", {}).get("enableCache", True)


def test_the_vertex_spec_keeps_tfxs_own_entrypoint_but_for_the_report(compiled):
  _, package = compiled["vertex"]
  executors = json_format.MessageToDict(_spec(package).deployment_spec)["executors"]
  commands = {name: tuple(e["container"]["command"]) for name, e in executors.items()}
  assert commands.pop("RunReport_executor") == kfp_entrypoint.COMMAND
  assert set(commands.values()) == {
      ("python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor")}


@pytest.mark.parametrize("target", ["vertex", "tfrecord"])
def test_the_report_reaches_the_spec_typed_as_the_kfp_ui_renders_it(compiled, target):
  """TFX's compiler writes a custom type's TYPE_NAME as its schema title (compiler_utils.py,
  get_artifact_schema); the KFP backend records that title as the MLMD type name, which the
  frontend's MetricsVisualizations.tsx renders for system.HTML and system.Markdown."""
  _, package = compiled[target]
  spec = json_format.MessageToDict(_spec(package))
  report = spec["components"][spec["root"]["dag"]["tasks"]["RunReport"]["componentRef"]["name"]]
  outputs = report["outputDefinitions"]["artifacts"]
  assert {name: compiler.artifact_title(o["artifactType"]) for name, o in outputs.items()} == {
      "report": "system.HTML", "report_markdown": "system.Markdown"}
  tasks = spec["root"]["dag"]["tasks"]
  # After the gate, the check and the Pusher, whatever they decide; the check before the Pusher.
  assert {"Evaluator", "ServedModelCheck", "Pusher"} <= set(tasks["RunReport"]["dependentTasks"])
  assert "ServedModelCheck" in tasks["Pusher"]["dependentTasks"]
  assert tasks["Pusher"]["inputs"]["artifacts"]["infra_blessing"]["taskOutputArtifact"] == {
      "producerTask": "ServedModelCheck", "outputArtifactKey": "infra_blessing"}


def test_the_entrypoint_maps_the_report_titles_to_their_classes():
  from reporting import run_report
  for title, path in kfp_entrypoint.REPORT_TYPE_CLASSES.items():
    artifact_class = kfp_entrypoint._artifact_class(title)  # pylint: disable=protected-access
    assert artifact_class.TYPE_NAME == title and path.endswith(artifact_class.__name__)
  assert {run_report.HtmlReport.TYPE_NAME, run_report.MarkdownReport.TYPE_NAME} == set(
      kfp_entrypoint.REPORT_TYPE_CLASSES)


@pytest.mark.parametrize("kind, message", [
    ("resolver", "executor(s) Baseline_executor (resolver) cannot run on an open-source Kubeflow "
     "Pipelines server"),
    ("customJob", "executor(s) Baseline_executor (customJob) cannot run on an open-source "
     "Kubeflow Pipelines server"),
])
def test_kfp_compile_names_an_executor_the_open_source_backend_refuses(kind, message):
  """backend/src/v2/compiler/argocompiler/dag.go refuses these; the compile fails first."""
  spec = {"deploymentSpec": {"executors": {"Baseline_executor": {kind: {}},
                                           "Trainer_executor": {"container": {}}}},
          "components": {}, "root": {"dag": {"tasks": {}}}}
  with pytest.raises(ValueError, match=re.escape(message) + ".*--kubeflow_target=vertex"):
    compiler.adapt_to_open_source_kfp(spec)


BEAM_STEPS = ("ImageDatasetExampleGen", "StatisticsGen", "Transform", "EvaluationSetGen",
              "Evaluator")


@pytest.mark.parametrize("flags, engine", [
    (["--output_dir=gs://bucket/wrn", "--beam_runner=dataflow", "--dataflow_project=proj",
      "--dataflow_region=us-central1", "--dataflow_temp_location=gs://bucket/tmp"],
     ["--runner=DataflowRunner", "--project=proj", "--region=us-central1",
      "--temp_location=gs://bucket/tmp", "--sdk_container_image=gcr.io/proj/wrn-pipeline:7",
      "--sdk_location=container", "--experiments=use_runner_v2"]),
    (["--output_dir=s3://bucket/wrn", "--beam_runner=portable",
      "--beam_job_endpoint=flink-jobserver.flink:8099"],
     ["--runner=PortableRunner", "--job_endpoint=flink-jobserver.flink:8099",
      "--environment_type=DOCKER", "--environment_config=gcr.io/proj/wrn-pipeline:7",
      "--job_server_timeout=604800", "--sdk_container_image=gcr.io/proj/wrn-pipeline:7",
      "--beam_plugin=storage.beam_worker"]),
])
def test_the_beam_engine_and_no_credential_is_compiled_into_every_beam_step(flags, engine,
                                                                            monkeypatch):
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "compile-me-not")
  monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://minio-service.kubeflow:9000")
  config = from_flags(["--image=gcr.io/proj/wrn-pipeline:7"] + flags)
  job = compiler.pipeline_job(config)
  executors = job["pipelineSpec"]["deploymentSpec"]["executors"]
  for step in BEAM_STEPS:
    args = executors[f"{step}_executor"]["container"]["args"]
    assert args[-len(engine):] == engine, step
    assert not [arg for arg in args if arg.startswith("--direct_")], step
  assert "compile-me-not" not in json.dumps(job)  # Credentials stay in the pods' environment.


def test_ensemble_trials_are_independent_trainer_tasks_on_the_worker_pools(tmp_path):
  from kubeflow import compiler, submit
  config = from_flags(VERTEX_FLAGS + ["--ensemble_size=2", "--hyper_trials=3"])
  # The preset's, for ensembles too.
  assert config.trainer.calibration.temperature_fit == "distance_detail_curve"
  package = compiler.compile_pipeline(config, str(tmp_path))
  spec = _spec(package)
  tasks = spec.root.dag.tasks
  trainers = [f"Trainer_trial_{i}" for i in range(3)]
  assert set(trainers) | {"EnsembleSelector"} <= set(tasks) and "Trainer" not in tasks
  for trainer in trainers:  # No edge between trials: KFP runs them side by side.
    assert set(tasks[trainer].dependent_tasks) == {"Transform", "ClassSchemaGen", "SpanCheck"}
  assert set(trainers) <= set(tasks["EnsembleSelector"].dependent_tasks)
  for consumer in ("Evaluator", "Pusher"):
    assert tasks[consumer].inputs.artifacts["model"].task_output_artifact.producer_task == \
        "EnsembleSelector"
  # Each trial has its own config parameter (its draws), and runs on the configured pools.
  parameters = spec.root.input_definitions.parameters
  defaults = {}
  for i, trainer in enumerate(trainers):
    name = tasks[trainer].inputs.parameters["custom_config"].component_input_parameter
    assert name == ("trainer_config" if i == 0 else f"trainer_config_trial_{i}")
    custom_config = json.loads(parameters[name].default_value.string_value)
    assert TrainerConfig.from_dict(custom_config["trainer"]) == config.trials[i]
    pools = custom_config["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert [p["replica_count"] for p in pools] == [1, 2]
    defaults[name] = custom_config
  assert len({json.dumps(c["trainer"]["seed"]) for c in defaults.values()}) == 3
  # A run may change what all trials share, not what each one draws.
  values = submit.run_parameters(submit.load_spec(package.spec_path), ["--train_epochs=3"], None)
  for name in defaults:
    assert json.loads(values[name])["trainer"]["train_epochs"] == 3
  for drawn in ("--seed=3", "--dense_kernel_l2=0.1"):
    with pytest.raises(ValueError, match="drawn per trial"):
      submit.run_parameters(submit.load_spec(package.spec_path), [drawn], None)


def _documents(compiled):
  """The pipeline spec and the platform section, as kfp.Client reads a package."""
  document = kfp_client._extract_pipeline_yaml(compiled.spec_path)
  return document.pipeline_spec, document.platform_spec


def _kubernetes_configs(platform_spec):
  """Each executor's KubernetesExecutorConfig, read with kfp-kubernetes' own protos."""
  executors = platform_spec.platforms["kubernetes"].deployment_spec.executors
  return {label: json_format.ParseDict(json_format.MessageToDict(config),
                                       k8s_pb2.KubernetesExecutorConfig())
          for label, config in executors.items()}


def _executors(spec):
  """The deployment config's executors as messages (the spec holds it as a Struct)."""
  return json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec),
                               pipeline_spec_pb2.PipelineDeploymentConfig()).executors


GB = 10**9
HEAVY_BEAM_STEPS = ("Transform", "Evaluator", "EvaluationSetGen")


def test_the_documented_open_source_command_gives_the_trainer_gpus_and_every_pod_credentials(
    compiled):
  _, package = compiled["gpus"]
  spec, platform_spec = _documents(package)
  executors = _executors(spec)
  trainer = executors["Trainer_executor"].container.resources
  assert (trainer.accelerator.type, trainer.accelerator.count) == ("nvidia.com/gpu", 2)
  assert trainer.cpu_limit == trainer.cpu_request == 8
  assert trainer.memory_limit == trainer.memory_request == 32 * 2**30 / GB
  for step in HEAVY_BEAM_STEPS:
    resources = executors[f"{step}_executor"].container.resources
    assert (resources.cpu_limit, resources.memory_limit) == (4, 16 * 2**30 / GB), step
    assert not resources.accelerator.count, step
  assert not executors["StatisticsGen_executor"].container.HasField("resources")
  configs = _kubernetes_configs(platform_spec)
  containers = {label for label, executor in executors.items() if executor.HasField("container")}
  assert set(configs) == containers  # Every pod; importers have none of their own.
  for label, config in configs.items():
    (secret,) = config.secret_as_env
    assert secret.secret_name == "wrn-s3-credentials"
    assert {(k.secret_key, k.env_var) for k in secret.key_to_env} == {
        ("accesskey", "AWS_ACCESS_KEY_ID"), ("secretkey", "AWS_SECRET_ACCESS_KEY")}
    env = {e.name: e.value for e in executors[label].container.env}
    assert env == {"AWS_ENDPOINT_URL_S3": "http://minio-service.kubeflow:9000",
                   "AWS_REGION": "us-east-1"}, label
    placed = label == "Trainer_executor"
    assert bool(config.node_selector.labels) == bool(config.tolerations) == placed, label
  assert dict(configs["Trainer_executor"].node_selector.labels) == {
      "nvidia.com/gpu.present": "true"}
  (toleration,) = configs["Trainer_executor"].tolerations
  assert (toleration.key, toleration.operator, toleration.effect) == (
      "nvidia.com/gpu", "Exists", "NoSchedule")


def test_the_open_source_command_is_the_one_the_docs_and_help_give():
  with open(os.path.join(kubeflow_config.PROJECT_DIR, "docs", "kubeflow.md")) as f:
    docs = " ".join(f.read().replace("\\\n", " ").split())
  assert "python -m kubeflow compile " + " ".join(OPEN_SOURCE_GPU_FLAGS) in docs
  assert " ".join(OPEN_SOURCE_GPU_FLAGS) in " ".join(cli.USAGE.replace("\\\n", " ").split())


def test_kfps_own_secret_is_mapped_by_default_and_vertex_has_no_platform_section(compiled):
  _, package = compiled["tfrecord"]
  spec, platform_spec = _documents(package)
  configs = _kubernetes_configs(platform_spec)
  containers = {label for label, executor in _executors(spec).items()
                if executor.HasField("container")}
  assert set(configs) == containers  # Every pod, with no endpoint given (AWS S3 itself).
  for label, config in configs.items():
    assert config.secret_as_env[0].secret_name == "mlpipeline-minio-artifact", label
  trainer = _executors(spec)["Trainer_executor"].container
  assert not trainer.resources.accelerator.count and trainer.resources.cpu_limit == 8
  assert not trainer.env  # No endpoint given: AWS S3 itself.
  _, vertex = compiled["vertex"]
  spec, platform_spec = _documents(vertex)
  assert not platform_spec.platforms
  executors = _executors(spec)
  # The Vertex Trainer's pod submits the CustomJob (its pools have the GPUs); Beam steps ask.
  assert not executors["Trainer_executor"].container.HasField("resources")
  assert executors["Transform_executor"].container.resources.cpu_limit == 4


@pytest.mark.parametrize("flag, message", [
    ("--accelerator_type=tpu",
     "accelerator_type='tpu': must be the Kubernetes resource name of the Trainer's accelerators"),
    ("--accelerator_count=-1", "accelerator_count=-1: must be >= 0"),
    ("--trainer_memory=32GB",
     "trainer_memory='32GB': must be a Kubernetes memory quantity from 1Mi to below 1P"),
    ("--credentials_secret=", "credentials_secret='': is required with credentials_secret_keys="),
])
def test_bad_pod_flags_stop_the_compile_naming_the_flag(flag, message, tmp_path, capsys):
  package_dir = tmp_path / "package"
  assert cli.main(["compile", f"--package_dir={package_dir}",
                   "--image=i", "--output_dir=s3://bucket/wrn", flag]) == 2
  assert message in capsys.readouterr().err
  assert not package_dir.exists()


def test_a_span_pattern_compiles_a_span_parameter_and_the_image_folders_driver(tmp_path):
  """The runtime parameter `span` feeds the ExampleGen, whose driver (span, window,
  fingerprint) runs in the entrypoint before its executor, as TFX's file-based one does."""
  from kubeflow import submit
  from kubeflow.parameters import SPAN_PARAMETER
  flags = ["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=s3://bucket/wrn",
           "--dataset=image_dir", "--image_dir=s3://data/photos/{YYYY}-{MM}-{DD}",
           "--train_spans=2", "--pipeline_name=wrn-photos"]
  package = compiler.compile_pipeline(from_flags(flags), str(tmp_path / "dated"))
  spec = json_format.MessageToDict(_spec(package))
  parameter = spec["root"]["inputDefinitions"]["parameters"][SPAN_PARAMETER]
  assert parameter["isOptional"] and parameter.get("defaultValue", "") == ""
  task = spec["root"]["dag"]["tasks"]["ImageDatasetExampleGen"]
  assert task["inputs"]["parameters"]["requested_span"]["componentInputParameter"] == "span"
  assert not task.get("cachingOptions", {}).get("enableCache")
  args = spec["deploymentSpec"]["executors"]["ImageDatasetExampleGen_executor"]["container"][
      "args"]
  assert kfp_entrypoint.EXAMPLE_GEN_DRIVER_FLAG in args
  loaded = submit.load_spec(package.spec_path)
  assert submit.run_parameters(loaded, [], None, "2026-12-01")[SPAN_PARAMETER] == "2026-12-01"
  assert submit.run_parameters(loaded, [], None, "[[ScheduledTime.2006-01-02]]",
                               recurring=True)[SPAN_PARAMETER] == "[[ScheduledTime.2006-01-02]]"
  with pytest.raises(ValueError, match=r"expanded only in a recurring run's parameters"):
    submit.run_parameters(loaded, [], None, "[[ScheduledTime.2006-01-02]]")
  with pytest.raises(ValueError, match=r"Invalid --span 'today': expected a span number, a "
                     r"date YYYY-MM-DD, or \[\[ScheduledTime.2006-01-02\]\]"):
    submit.run_parameters(loaded, [], None, "today", recurring=True)
  # The same pipeline over the embedded digits has neither the parameter nor the driver.
  digits = json_format.MessageToDict(_spec(compiler.compile_pipeline(
      from_flags(flags[:2] + ["--pipeline_name=wrn-digits"]), str(tmp_path / "digits"))))
  assert SPAN_PARAMETER not in digits["root"]["inputDefinitions"]["parameters"]
  assert kfp_entrypoint.EXAMPLE_GEN_DRIVER_FLAG not in digits["deploymentSpec"]["executors"][
      "ImageDatasetExampleGen_executor"]["container"]["args"]
  with pytest.raises(ValueError, match="--span applies to pipelines compiled with a span "
                     "pattern"):
    submit.run_parameters(digits, [], None, "3")


def test_a_tfrecord_span_pattern_is_data_root_and_split_patterns(tmp_path):
  from kubeflow.parameters import SPAN_PARAMETER
  config = from_flags(["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=s3://bucket/wrn",
                       "--dataset=tfrecord", "--tfrecord_dir=s3://data/daily/{SPAN}",
                       "--span=7", "--pipeline_name=wrn-tfrecord"])
  spec = json_format.MessageToDict(_spec(compiler.compile_pipeline(config, str(tmp_path))))
  parameters = spec["root"]["inputDefinitions"]["parameters"]
  assert parameters["data_root"]["defaultValue"] == "s3://data/daily"
  assert parameters[SPAN_PARAMETER]["defaultValue"] == "7"
  task = spec["root"]["dag"]["tasks"]["ImportExampleGen"]
  input_config = json.loads(task["inputs"]["parameters"]["input_config"]["runtimeValue"][
      "constant"])
  assert [s["pattern"] for s in input_config["splits"]] == ["{SPAN}/train/*", "{SPAN}/eval/*"]


def test_without_the_drift_check_no_task_or_input_of_it_is_compiled(tmp_path):
  """--drift_check=false: the Pusher and the report compile without their optional drift
  input, in the task and in the component's definition: nothing in the spec names an artifact
  no task makes."""
  from kubeflow.conftest import TFRECORD_FLAGS
  spec = _spec(compiler.compile_pipeline(from_flags([*TFRECORD_FLAGS, "--drift_check=false"]),
                                         str(tmp_path)))
  tasks = spec.root.dag.tasks
  assert not {"DriftCheck", "DriftBaselineModel"} & set(tasks)
  assert {"Pusher", "RunReport", "Transform"} <= set(tasks)  # Control: the rest is there.
  for name in ("Pusher", "RunReport"):
    assert "drift" not in tasks[name].inputs.artifacts
    component = spec.components[tasks[name].component_ref.name]
    assert "drift" not in component.input_definitions.artifacts
  for task in tasks.values():
    assert not {"DriftCheck", "DriftBaselineModel"} & set(task.dependent_tasks)
