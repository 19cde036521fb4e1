"""The tests here seed Keras with 0 (keras.utils.set_random_seed); TensorFlow's global seed is
cleared after each, so that it does not reach the modules that run next (trainer_module/data.py
cannot shuffle with a tensor seed under global seed 0)."""
import pytest
import tensorflow as tf


@pytest.fixture(autouse=True)
def clear_the_global_seed():
  yield
  tf.random.set_seed(None)
