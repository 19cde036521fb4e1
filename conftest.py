"""Shared by every test directory: one moto S3 server per session (testing/s3_server.py)."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from testing.s3_server import (  # noqa: F401  (pytest finds them by name)
    pytest_sessionfinish, pytest_unconfigure, s3, s3_server)
