"""Where the pipeline's Trainer keeps checkpoints: the same place for every retry of a run."""
import types

from trainer_module.config import TrainerConfig
from trainer_module.tfx_trainer import checkpoint_dir, warm_start_source

ROOT = "gs://bucket/pipeline_root/wrn"


def _fn_args(execution_id, transform_execution=7, base_model=None, **custom):
  transformed = f"{ROOT}/Transform/transformed_examples/{transform_execution}"
  return types.SimpleNamespace(
      train_files=[f"{transformed}/Split-train/*"], eval_files=[f"{transformed}/Split-eval/*"],
      transform_output=f"{ROOT}/Transform/transform_graph/{transform_execution}",
      model_run_dir=f"{ROOT}/Trainer/model_run/{execution_id}", base_model=base_model,
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
  assert checkpoint_dir(_fn_args(12), TrainerConfig().replace(train_epochs=100)) != reference
  assert checkpoint_dir(_fn_args(12, trainer_module_fingerprint="edited"), config) != reference


def test_a_new_production_model_to_warm_start_from_trains_elsewhere():
  config = TrainerConfig().replace(warm_start="production")
  first = checkpoint_dir(_fn_args(12, base_model=f"{ROOT}/WarmStartModel/model/5/Format-Serving"),
                         config)
  assert checkpoint_dir(_fn_args(13, base_model=f"{ROOT}/WarmStartModel/model/9/Format-Serving"),
                        config) != first


def test_warm_start_production_without_a_model_in_production_trains_from_scratch(tmp_path,
                                                                                  caplog):
  snapshot = tmp_path / "Format-Serving"  # What ProductionModel writes then: no SavedModel.
  with caplog.at_level("INFO"):
    assert warm_start_source(TrainerConfig().replace(warm_start="production"),
                             str(snapshot)) == (None, None)
  assert "no model in production yet; training from scratch" in caplog.text
  (snapshot / "assets.extra").mkdir(parents=True)
  (snapshot / "saved_model.pb").write_bytes(b"")
  (snapshot / "assets.extra" / "push_info.json").write_text('{"model_fingerprint": "ab12"}')
  path, origin = warm_start_source(TrainerConfig().replace(warm_start="production"), str(snapshot))
  assert path == str(snapshot) and "fingerprint ab12" in origin


def test_warm_start_none_or_a_path_ignores_the_base_model():
  assert warm_start_source(TrainerConfig(), "/base") == (None, None)
  assert warm_start_source(TrainerConfig().replace(warm_start="/ckpts"),
                           "/base") == ("/ckpts", None)
