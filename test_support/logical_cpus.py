"""`python test_support/logical_cpus.py N <trainer flags>`: the standalone trainer with the CPU split
into N logical devices, so MirroredStrategy has N replicas on a machine without GPUs."""
import sys

import tensorflow as tf


def main():
  count = int(sys.argv[1])
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
  from trainer_module.__main__ import main as trainer_main
  sys.exit(trainer_main(sys.argv[2:]))


if __name__ == "__main__":
  main()
