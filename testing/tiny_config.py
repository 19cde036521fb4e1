"""The `tiny` preset (configs/tiny.py) as flags over any other preset: what it changes of the
default, for the tests that pick their own dataset or start from the cluster preset."""
import configs


def _flag(name, value) -> str:
  text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
  return f"--{name}={text}"


# The tiny preset's network (WRN-10-1), for tests that build a TrainerConfig or a model directly.
TINY_NETWORK = {name: configs.get_config("tiny")[name] for name in ("depth", "width_multiplier")}
TINY_NETWORK_FLAGS = [_flag(name, value) for name, value in TINY_NETWORK.items()]
SMALL_MODEL = [_flag(name, value) for name, value in configs.get_config("tiny").items()
               if configs.get_config(configs.DEFAULT_PRESET).get(name) != value]
