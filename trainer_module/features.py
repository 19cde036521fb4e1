"""Names and shapes of the features shared by ingestion, Transform, Trainer and serving."""

IMAGE_KEY = "image"  # PNG-encoded uint8 image, IMAGE_SHAPE.
LABEL_KEY = "label"  # int64 class id in [0, num_classes).
EXAMPLE_KEY = "key"  # Stable string id, unique per example, the same on every run.

IMAGE_SIZE = 32
IMAGE_CHANNELS = 3
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE, IMAGE_CHANNELS)

# Outputs of the serving signatures.
PROBABILITIES_KEY = "probabilities"
CLASS_IDS_KEY = "class_ids"
