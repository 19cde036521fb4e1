"""Where the pipeline's Trainer keeps checkpoints: the same place for every retry of a run."""
import types

from trainer_module.config import TrainerConfig
from trainer_module.trainer import checkpoint_dir

ROOT = "gs://bucket/pipeline_root/wrn"


def _fn_args(execution_id, transform_execution=7, **custom):
  transformed = f"{ROOT}/Transform/transformed_examples/{transform_execution}"
  return types.SimpleNamespace(
      train_files=[f"{transformed}/Split-train/*"], eval_files=[f"{transformed}/Split-eval/*"],
      transform_output=f"{ROOT}/Transform/transform_graph/{transform_execution}",
      model_run_dir=f"{ROOT}/Trainer/model_run/{execution_id}",
      custom_config={"trainer": TrainerConfig().to_dict(), **custom})


def test_a_retried_execution_finds_the_checkpoints_of_the_one_it_replaces():
  config = TrainerConfig()
  first, retry = checkpoint_dir(_fn_args(12), config), checkpoint_dir(_fn_args(13), config)
  assert first == retry
  assert first.startswith(f"{ROOT}/Trainer/checkpoints/")


def test_other_inputs_or_config_train_elsewhere():
  config = TrainerConfig()
  reference = checkpoint_dir(_fn_args(12), config)
  assert checkpoint_dir(_fn_args(12, transform_execution=8), config) != reference
  assert checkpoint_dir(_fn_args(12), TrainerConfig(train_epochs=100)) != reference
  assert checkpoint_dir(_fn_args(12, trainer_module_fingerprint="edited"), config) != reference
