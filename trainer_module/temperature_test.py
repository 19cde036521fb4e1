"""Temperature scaling: the fit finds the NLL minimum, deterministically, and fails loudly."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from trainer_module import temperature


def _overconfident(rng, count=4000, true_temperature=2.0, classes=10):
  """Logits whose labels are drawn from softmax(logits / true_temperature)."""
  logits = rng.normal(0.0, 4.0, (count, classes))
  p = np.exp(logits / true_temperature)
  p /= p.sum(axis=1, keepdims=True)
  labels = np.array([rng.choice(classes, p=row) for row in p])
  return logits, labels


def test_the_fit_is_the_nll_minimum_and_recovers_the_true_temperature():
  logits, labels = _overconfident(np.random.default_rng(0))
  fitted = temperature.fit_temperature(logits, labels)
  grid = np.linspace(0.5, 5.0, 901)
  best = grid[np.argmin([temperature.nll(logits, labels, t) for t in grid])]
  assert fitted == pytest.approx(best, abs=0.01)
  assert fitted == pytest.approx(2.0, rel=0.1)
  assert temperature.nll(logits, labels, fitted) < temperature.nll(logits, labels)


def test_the_fit_is_deterministic():
  logits, labels = _overconfident(np.random.default_rng(1), count=500)
  assert temperature.fit_temperature(logits, labels) == temperature.fit_temperature(
      logits.copy(), labels.copy())


def test_separable_data_sharpens_to_the_lower_bound():
  logits = np.eye(3)[[0, 1, 2, 0]] * 10.0
  assert temperature.fit_temperature(logits, np.array([0, 1, 2, 0])) == \
      temperature.MIN_TEMPERATURE


@pytest.mark.parametrize("logits, labels, message", [
    (np.zeros((0, 10)), np.zeros(0, np.int64), "No eval examples"),
    (np.array([[0.0, np.nan], [1.0, 0.0]]), np.array([0, 1]), "1 of 2 eval examples have "
     "non-finite logits"),
    (np.array([[0.0, np.inf]]), np.array([0]), "non-finite"),
    (np.zeros((2, 3)), np.array([0, 3]), r"Labels must be in \[0, 3\)"),
    (np.zeros((2, 3)), np.array([0]), "2 logits but 1 labels"),
])
def test_a_fit_that_cannot_work_fails_loudly(logits, labels, message):
  with pytest.raises(temperature.TemperatureFitError, match=message):
    temperature.fit_temperature(logits, labels)


def test_calibrate_reads_the_models_logits_and_an_empty_eval_split_fails(tmp_path):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
  images = np.random.default_rng(2).normal(size=(50, 3)).astype(np.float32)
  labels = np.arange(50) % 4
  batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
  info = temperature.calibrate(model, batches)
  logits = model(images).numpy()
  assert info["eval_examples"] == 50
  assert info["temperature"] == temperature.fit_temperature(logits, labels)
  assert info["eval_nll_after"] <= info["eval_nll_before"]
  temperature.write_calibration_info(str(tmp_path), info)
  assert temperature.read_calibration_info(str(tmp_path)) == info
  with pytest.raises(temperature.TemperatureFitError, match="eval split is empty"):
    temperature.calibrate(model, batches.take(0))


def test_padding_rows_of_weighted_batches_are_left_out():
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
  images = np.random.default_rng(3).normal(size=(10, 3)).astype(np.float32)
  labels = np.array([0, 1, 2, 3, 0, 1, 2, -1, -1, -1])  # The last three are padding.
  weights = np.array([1.0] * 7 + [0.0] * 3, np.float32)
  batches = tf.data.Dataset.from_tensor_slices((images, labels, weights)).batch(4)
  logits, kept_labels = temperature.model_logits(model, batches)
  np.testing.assert_array_equal(kept_labels, labels[:7])
  np.testing.assert_allclose(logits, model(images[:7]).numpy(), rtol=1e-6)
  with pytest.raises(temperature.TemperatureFitError, match="eval split is empty"):
    temperature.model_logits(model, tf.data.Dataset.from_tensor_slices(
        (images[7:], labels[7:], weights[7:])).batch(4))
