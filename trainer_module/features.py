"""Names and shapes of the features shared by ingestion, Transform, Trainer and serving."""

IMAGE_KEY = "image"  # Stored: an 8-bit RGB PNG of IMAGE_SHAPE; served: JPEG/PNG, any size.
LABEL_KEY = "label"  # int64 class id in [0, num_classes).
EXAMPLE_KEY = "key"  # Stable string id, unique per example, the same on every run.

IMAGE_SIZE = 32
IMAGE_CHANNELS = 3
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE, IMAGE_CHANNELS)

# Outputs of the serving signatures.
PROBABILITIES_KEY = "probabilities"  # softmax(logits / T), T fitted on the eval split.
UNCALIBRATED_PROBABILITIES_KEY = "uncalibrated_probabilities"  # softmax(logits).
CLASS_IDS_KEY = "class_ids"
CLASS_NAMES_KEY = "class_names"  # string [batch]: the name of the class of class_ids.
# Models calibrated by feature distance (distance_detail_curve) also serve how far each input
# lies from the training data (calibration/distances.py distance_scores).
DISTANCE_SCORE_KEY = "distance_score"
# Models calibrated by distance and detail (distance_detail_curve) also serve each input's detail
# score (calibration/detail.py detail_scores).
DETAIL_SCORE_KEY = "detail_score"

# Transform outputs besides IMAGE_KEY and LABEL_KEY.
# string [augmix_view_sets]: set s is aug_count uint8 views in one PNG (augmix.encode_view_sets).
AUGMIX_VIEWS_KEY = "augmix_views"
CHANNEL_MEAN_KEY = "channel_mean"  # float32 [3]: the training split's per-channel mean ...
CHANNEL_STD_KEY = "channel_std"  # ... and standard deviation, for AugMix in the Trainer.

# Written into a model's copy when the Pusher publishes it (which version, which fingerprint);
# read by the Trainer when it warm-starts from the model in production.
PUSH_INFO_PATH = "assets.extra/push_info.json"
