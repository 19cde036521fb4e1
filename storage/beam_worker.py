"""Imported by every Beam SDK worker at start (`--beam_plugin=storage.beam_worker`): configures
s3:// in the worker from its environment and the pipeline's S3Options, as
storage.object_storage.configure does in each step's own process (docs/kubeflow.md).
"""
import atexit
import os
import sys

from storage import object_storage

_uncaught = []
_report_uncaught = sys.excepthook


def _record_uncaught(*exc_info):
  _uncaught.append(exc_info[0])
  _report_uncaught(*exc_info)


# Beam's boot hands a worker its pipeline options in PIPELINE_OPTIONS.
object_storage.adopt_beam_s3_options(os.environ.get("PIPELINE_OPTIONS"))
object_storage.configure()
# The worker (apache_beam.runners.worker.sdk_worker_main) ends by returning from main or by an
# uncaught exception, never by sys.exit: keep that status while skipping tensorflow-io's abort
# at exit (object_storage.end_process). A worker pool's pod may be given only the credentials,
# so the pipeline's S3Options complete its environment.
sys.excepthook = _record_uncaught
atexit.register(
    lambda: object_storage.end_process(1 if _uncaught else 0, from_atexit=True))
