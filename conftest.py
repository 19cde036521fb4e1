"""Shared by every test directory: one moto S3 server per session, and the process of the tests
that use s3:// in-process (testing/s3_server.py)."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
from testing.s3_server import (  # noqa: F401  (pytest finds them by name)
    pytest_pyfunc_call, pytest_runtest_logreport, pytest_sessionfinish, pytest_unconfigure, s3,
    s3_server)
