"""`python -m local_runner [--flag=value ...]`: runs the pipeline locally with LocalDagRunner;
`python -m local_runner history [--output_dir=...]` prints its run history (local_runner/history.py).
The process ends with main's status, past tensorflow-io's abort at exit once s3:// was used
(storage/object_storage.py, end_process)."""
import sys

from local_runner.runner import main
from storage import object_storage

if __name__ == "__main__":
  if sys.argv[1:2] == ["history"]:
    from local_runner import history
    object_storage.exit_after(lambda: history.main(sys.argv[2:]))
  else:
    object_storage.exit_after(lambda: main(sys.argv[1:]))
