"""Shared by every test directory: one moto S3 server per session (testing/s3_server.py)."""
from testing.s3_server import (  # noqa: F401  (pytest finds them by name)
    pytest_collection_modifyitems, pytest_pyfunc_call, pytest_runtest_logreport,
    pytest_sessionfinish, pytest_unconfigure, s3, s3_server)
