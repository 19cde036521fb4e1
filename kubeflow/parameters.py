"""Runtime parameters of the compiled pipeline: what a user may change per run without
recompiling. Each one is an execution property its component reads."""
TRAINER_CONFIG_PARAMETER = "trainer_config"  # The Trainer's custom_config, as JSON.
DATA_ROOT_PARAMETER = "data_root"  # ImportExampleGen's input_base (dataset=tfrecord).


def trainer_config_parameter(trial: int) -> str:
  """The runtime parameter holding a trial Trainer's custom_config (trial 0: the usual one)."""
  return TRAINER_CONFIG_PARAMETER if trial == 0 else f"{TRAINER_CONFIG_PARAMETER}_trial_{trial}"
