"""`python -m local_runner [--flag=value ...]`: runs the pipeline locally with LocalDagRunner.
The process ends with main's status, past tensorflow-io's abort at exit once s3:// was used
(storage/object_storage.py, end_process)."""
import sys

from local_runner.runner import main
from storage import object_storage

if __name__ == "__main__":
  object_storage.exit_after(lambda: main(sys.argv[1:]))
