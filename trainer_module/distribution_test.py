"""The precision policy `mixed_precision` resolves to, and the CPU's bfloat16 detection."""
import pytest
import tf_keras as keras

from trainer_module import distribution
from trainer_module.config import TrainerConfig
from trainer_module.distribution import cpu_bfloat16_units, resolve_precision

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse2 avx2 avx512f {extra} avx512_vnni
"""


@pytest.fixture
def cpu(tmp_path, monkeypatch):
  """Sets what the CPU reports: cpu(flags, onednn=True)."""
  def set_cpu(flags, onednn=True):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(extra=flags))
    monkeypatch.setattr(distribution, "cpu_bfloat16_units",
                        lambda: cpu_bfloat16_units(str(path)))
    monkeypatch.setattr(distribution, "onednn_enabled", lambda: onednn)
    monkeypatch.setattr(distribution.tf.config, "list_physical_devices", lambda kind: [])
  return set_cpu


def test_cpuinfo_flags_name_the_native_bfloat16_units(tmp_path):
  path = tmp_path / "cpuinfo"
  path.write_text(CPUINFO.format(extra="amx_bf16 amx_tile avx512_bf16"))
  assert cpu_bfloat16_units(str(path)) == ("amx_bf16", "avx512_bf16")
  path.write_text(CPUINFO.format(extra="avx512bw"))
  assert cpu_bfloat16_units(str(path)) == ()
  assert cpu_bfloat16_units(str(tmp_path / "missing")) == ()  # Not Linux: nothing found.


def test_auto_picks_bfloat16_on_a_cpu_with_native_units_and_onednn(cpu):
  cpu("avx512_bf16")
  precision = resolve_precision(TrainerConfig())
  assert precision.policy == "mixed_bfloat16" and "avx512_bf16" in precision.reason


def test_auto_stays_float32_without_native_units_or_without_onednn(cpu):
  cpu("avx512bw")
  assert resolve_precision(TrainerConfig()).policy == "float32"
  cpu("amx_bf16", onednn=False)
  precision = resolve_precision(TrainerConfig())
  assert precision.policy == "float32" and "TF_ENABLE_ONEDNN_OPTS" in precision.reason


def test_auto_picks_float16_on_gpus_and_bfloat16_on_tpus(cpu, monkeypatch):
  cpu("avx512bw")
  assert resolve_precision(TrainerConfig().replace(distribution_strategy="tpu",
                                                   tpu="local")).policy == ("mixed_bfloat16")
  monkeypatch.setattr(distribution.tf.config, "list_physical_devices",
                      lambda kind: ["gpu:0"] if kind == "GPU" else [])
  assert resolve_precision(TrainerConfig()).policy == "mixed_float16"


def test_an_explicit_policy_is_used_as_given_and_set_globally(cpu):
  cpu("avx512_bf16")
  try:
    precision = distribution.set_precision_policy(
        TrainerConfig().replace(mixed_precision="float32"))
    assert precision.policy == "float32" == keras.mixed_precision.global_policy().name
    distribution.set_precision_policy(TrainerConfig().replace(mixed_precision="mixed_float16"))
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
  finally:
    keras.mixed_precision.set_global_policy("float32")


def test_unknown_policies_are_refused():
  with pytest.raises(ValueError, match=r"Invalid config value mixed_precision='true': must be one "
                     r"of \('auto', 'float32', 'mixed_float16', 'mixed_bfloat16'\)"):
    TrainerConfig().replace(mixed_precision="true")
