"""The `tiny` preset (configs/tiny.py) as flags over any other preset: what it changes of the
default, for the tests that pick their own dataset or start from the cluster preset."""
import configs


def _flag(name, value) -> str:
  text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
  return f"--{name}={text}"


SMALL_MODEL = [_flag(name, value) for name, value in configs.get_config("tiny").items()
               if configs.get_config(configs.DEFAULT_PRESET).get(name) != value]
