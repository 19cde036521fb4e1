"""s3:// from the environment: one set of settings for TensorFlow, TFX, Beam and our Pusher,
checked against a real S3-protocol server (moto) on 127.0.0.1."""
import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from storage import object_storage
from storage.object_storage import S3Settings
from kubeflow.cluster_config import from_flags
from test_support.s3_server import S3Server

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINIO = "http://minio-service.kubeflow:9000"


# Settings: from whichever standard variable is set, to every client's variables.

@pytest.mark.parametrize("variable", object_storage.ENDPOINT_VARIABLES)
def test_any_standard_endpoint_variable_sets_the_endpoint_of_every_client(variable):
  settings = S3Settings.from_environ({variable: MINIO + "/", "AWS_DEFAULT_REGION": "eu-west-1"})
  assert settings == S3Settings(endpoint_url=MINIO, region="eu-west-1")
  assert settings.environ() == {
      "S3_ENDPOINT": MINIO, "AWS_ENDPOINT_URL_S3": MINIO,
      "AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1", "S3_VERIFY_SSL": "1"}
  assert settings.beam_args() == [f"--s3_endpoint_url={MINIO}", "--s3_region_name=eu-west-1"]


def test_beams_s3_client_addresses_buckets_path_style_on_a_custom_endpoint(monkeypatch):
  """No wildcard DNS (bucket.minio-service...) needed; tensorflow-io is path-style always."""
  from apache_beam.io.aws.clients.s3 import boto3_client, messages
  from apache_beam.options.pipeline_options import PipelineOptions
  from botocore.awsrequest import AWSResponse
  monkeypatch.setenv("AWS_ACCESS_KEY_ID", "minio")
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
  settings = S3Settings(endpoint_url=MINIO, region="us-east-1")
  client = boto3_client.Client(PipelineOptions(settings.beam_args()))
  urls = []

  def answer_not_found(request, **_):
    urls.append(request.url)
    return AWSResponse(request.url, 404, {}, None)

  client.client.meta.events.register("before-send", answer_not_found)
  with pytest.raises(messages.S3ClientError):
    client.get_object_metadata(messages.GetRequest("models", "wrn/1/saved_model.pb"))
  assert urls == [f"{MINIO}/models/wrn/1/saved_model.pb"]


def test_no_settings_means_aws_itself_with_tls_checked():
  assert S3Settings.from_environ({}) == S3Settings()
  assert S3Settings().environ() == {"S3_VERIFY_SSL": "1"}
  assert S3Settings().beam_args() == []


def test_a_private_ca_reaches_tensorflow_and_beam(tmp_path):
  ca = tmp_path / "ca.pem"
  ca.write_text("-----BEGIN CERTIFICATE-----\n")
  settings = S3Settings.from_environ({"AWS_CA_BUNDLE": str(ca)})
  assert settings.environ()["S3_CA_FILE"] == str(ca)
  assert settings.beam_args() == [f"--s3_verify={ca}"]


def test_credentials_never_become_settings_or_beam_options():
  secret = "wJalrXUtnFEMI/K7MDENG"
  environ = {"AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": secret, "S3_ENDPOINT": MINIO}
  settings = S3Settings.from_environ(environ)
  # Every field's value, not repr(settings): a field left out of the repr would still hold it.
  fields = [str(getattr(settings, field.name)) for field in dataclasses.fields(settings)]
  assert not [value for value in fields if secret in value]
  assert secret not in repr(settings.environ()) + repr(settings.beam_args())


@pytest.mark.parametrize("environ, message", [
    ({"S3_ENDPOINT": "minio-service:9000"}, "S3_ENDPOINT='minio-service:9000': must be the URL"),
    ({"AWS_ENDPOINT_URL": "ftp://minio"},
     "AWS_ENDPOINT_URL='ftp://minio': must be the URL of an S3 endpoint"),
    ({"AWS_ENDPOINT_URL_S3": "http://minio:9000/bucket"}, "must be the URL of an S3 endpoint"),
    ({"AWS_ENDPOINT_URL_S3": MINIO, "S3_ENDPOINT": "http://other:9000"},
     "Conflicting environment values AWS_ENDPOINT_URL_S3="),
    ({"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "eu-west-1"}, "Conflicting"),
    ({"S3_VERIFY_SSL": "0"}, "S3_VERIFY_SSL='0': certificates are always checked"),
    ({"AWS_CA_BUNDLE": "/nonexistent/ca.pem"}, "AWS_CA_BUNDLE='/nonexistent/ca.pem': no such file"),
])
def test_bad_settings_name_the_variable_and_value(environ, message):
  with pytest.raises(ValueError, match=_escaped(message)):
    S3Settings.from_environ(environ)


def test_configure_gives_every_client_the_same_settings_and_keeps_credentials():
  environ = {"AWS_ENDPOINT_URL_S3": MINIO, "AWS_REGION": "us-east-1",
             "AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "secret"}
  settings = object_storage.configure(environ)
  assert environ == {**settings.environ(), "AWS_ACCESS_KEY_ID": "minio",
                     "AWS_SECRET_ACCESS_KEY": "secret"}
  assert object_storage.configure(environ) == settings  # Again: nothing changes.


def test_explicit_beam_options_win_over_the_environment():
  settings = S3Settings(endpoint_url=MINIO, region="us-east-1")
  args = object_storage.with_beam_s3_options(
      ["--direct_num_workers=0", "--s3_endpoint_url=http://other:9000"], settings)
  assert args == ["--direct_num_workers=0", "--s3_endpoint_url=http://other:9000",
                  "--s3_region_name=us-east-1"]


# The exit status of a process that used s3:// is its own (see object_storage.end_process).

@pytest.mark.parametrize("body, status, stderr", [
    ("return None", 0, ""),
    ("return 3", 3, ""),
    ("sys.exit('bad flag')", 1, "bad flag"),
    ("raise KeyError('missing')", 1, "KeyError: 'missing'"),
])
def test_exit_after_reports_the_status_python_would(body, status, stderr):
  program = ("import atexit, sys\nfrom storage import object_storage\n"
             "atexit.register(print, 'exit work done')\n"
             f"def main():\n  print('done', flush=False)\n  {body}\n"
             "object_storage.exit_after(main)\n")
  result = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
  assert (result.returncode, result.stdout) == (status, "done\nexit work done\n")
  assert stderr in result.stderr


_USES_S3 = """
import sys
import time
from storage import object_storage
def main():
  object_storage.configure()
  import tensorflow as tf
  with tf.io.gfile.GFile(sys.argv[1], "w") as f:
    f.write("written")
object_storage.exit_after(main)
"""


def test_a_process_that_used_s3_ends_with_its_own_status(s3_server):
  path = s3_server.create_bucket("exit-status") + "/file.txt"
  environ = {**os.environ, **s3_server.environ()}
  plain = subprocess.run([sys.executable, "-c", _USES_S3.replace("object_storage.exit_after(main)",
                                                                 "main()"), path],
                         cwd=REPO, env=environ, capture_output=True, text=True, timeout=300)
  assert plain.returncode == -6, "tensorflow-io's abort at exit is fixed: drop end_process"
  guarded = subprocess.run([sys.executable, "-c", _USES_S3, path], cwd=REPO, env=environ,
                           capture_output=True, text=True, timeout=300)
  assert guarded.returncode == 0, guarded.stderr[-2000:]
  assert s3_server.keys("exit-status") == [("file.txt", 7)]


@pytest.mark.parametrize("body, status", [("pass", 0), ("raise RuntimeError('bundle failed')", 1)])
def test_a_beam_worker_that_used_s3_ends_with_its_own_status(s3_server, body, status):
  path = s3_server.create_bucket(f"worker-status-{status}") + "/file.txt"
  program = ("import sys\nimport storage.beam_worker\nimport tensorflow as tf\n"
             "with tf.io.gfile.GFile(sys.argv[1], 'w') as f:\n  f.write('x')\n" + body + "\n")
  result = subprocess.run([sys.executable, "-c", program, path], cwd=REPO,
                          env={**os.environ, **s3_server.environ()}, capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == status, result.stderr[-2000:]
  assert s3_server.keys(f"worker-status-{status}") == [("file.txt", 1)]


def test_a_worker_given_only_credentials_takes_the_endpoint_from_its_pipeline_options(s3_server):
  """A portable runner's SDK worker gets the pipeline's options from Beam's boot in
  PIPELINE_OPTIONS (portable keys); its pod may hold nothing but the credentials."""
  path = s3_server.create_bucket("worker-options") + "/file.txt"
  options = {f"beam:option:{arg[2:].split('=')[0]}:v1": arg.split("=", 1)[1]
             for arg in S3Settings.from_environ(s3_server.environ()).beam_args()}
  credentials = {name: s3_server.environ()[name]
                 for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
  unset = {name: "" for name in (*object_storage.ENDPOINT_VARIABLES,
                                 *object_storage.REGION_VARIABLES)}
  program = ("import sys\nimport storage.beam_worker\nimport tensorflow as tf\n"
             "with tf.io.gfile.GFile(sys.argv[1], 'w') as f:\n  f.write('xy')\n")
  result = subprocess.run([sys.executable, "-c", program, path], cwd=REPO, env={
      **os.environ, **unset, **credentials, "PIPELINE_OPTIONS": json.dumps(options)},
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert s3_server.keys("worker-options") == [("file.txt", 2)]


def test_a_store_with_a_private_ca_is_verified_by_tensorflow_and_beam_with_its_ca_bundle(
    monkeypatch):
  from apache_beam.io.aws.clients.s3 import boto3_client, messages
  from apache_beam.options.pipeline_options import PipelineOptions
  with S3Server(tls=True) as server:
    path = server.create_bucket("tls") + "/written-by-tensorflow"
    result = subprocess.run([sys.executable, "-c", _USES_S3, path], cwd=REPO,
                            env={**os.environ, **server.environ()}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for name, value in server.environ().items():
      monkeypatch.setenv(name, value)
    request = messages.GetRequest("tls", "written-by-tensorflow")
    with_ca = object_storage.with_beam_s3_options([])
    assert f"--s3_verify={server.ca_bundle}" in with_ca
    assert boto3_client.Client(PipelineOptions(with_ca)).get_object_metadata(request).size == 7
    monkeypatch.delenv("AWS_CA_BUNDLE")  # Without it, the certificate is refused.
    with pytest.raises(messages.S3ClientError, match="CERTIFICATE_VERIFY_FAILED"):
      boto3_client.Client(PipelineOptions(object_storage.with_beam_s3_options([]))
                          ).get_object_metadata(request)


# Against the S3 server, configured only by the environment a pod would get.

def _no_directory_markers(s3_server, bucket):
  """KFP's launcher fails on zero-byte "directory" objects; nothing here may write one."""
  keys = s3_server.keys(bucket)
  assert keys and not [key for key, size in keys if key.endswith("/") or size == 0], keys


def test_tensorflow_reads_and_writes_s3(s3_server, s3):
  root, bucket = s3
  import tensorflow as tf
  tf.io.gfile.makedirs(f"{root}/a/b")
  with tf.io.gfile.GFile(f"{root}/a/b/c.txt", "w") as f:
    f.write("content")
  tf.io.gfile.makedirs(f"{root}/a/b")  # Again, on a directory that exists now.
  assert tf.io.gfile.listdir(f"{root}/a") == ["b"]
  assert tf.io.gfile.isdir(f"{root}/a/b") and not tf.io.gfile.isdir(f"{root}/a/b/c.txt")
  with tf.io.gfile.GFile(f"{root}/a/b/c.txt") as f:
    assert f.read() == "content"
  assert s3_server.keys(bucket) == [("a/b/c.txt", 7)]  # makedirs wrote no marker object.


def test_a_folders_listing_holds_every_object_below_it_with_its_size_time_and_tag(s3_server,
                                                                                 s3):
  _, bucket = s3
  client = s3_server.client()
  for key, body in (("photos/", b""), ("photos/cat/a.png", b"abc"), ("photos/cat/deep/b.png",
                    b"de"), ("photos/empty/", b""), ("photos2/c.png", b"f"), ("d.png", b"g")):
    client.put_object(Bucket=bucket, Key=key, Body=body)
  listed = object_storage.list_s3_folder(f"s3://{bucket}/photos/")
  assert [(o.key, o.size) for o in listed] == [("cat/a.png", 3), ("cat/deep/b.png", 2),
                                               ("empty/", 0)]
  assert listed[0].etag == client.head_object(Bucket=bucket, Key="photos/cat/a.png")["ETag"]
  modified = client.head_object(Bucket=bucket, Key="photos/cat/a.png")["LastModified"]
  assert abs(listed[0].mtime_ns - modified.timestamp() * 10**9) < 10**9  # HEAD: whole seconds.
  assert [o.key for o in object_storage.list_s3_folder(f"s3://{bucket}")] == [
      "d.png", "photos/", "photos/cat/a.png", "photos/cat/deep/b.png", "photos/empty/",
      "photos2/c.png"]


def test_an_empty_file_written_by_tensorflow_does_not_exist_on_s3(s3_server, s3):
  """tensorflow-io uploads a file only when bytes were appended (Sync returns early without):
  code that needs a file on s3:// must write at least one byte."""
  root, bucket = s3
  from tfx.dsl.io import fileio
  with fileio.open(f"{root}/empty", "w"):
    pass
  assert not fileio.exists(f"{root}/empty")
  assert s3_server.keys(bucket) == []


def test_tfx_fileio_copies_walks_and_lists_directories_as_the_pusher_does(s3_server, s3):
  root, bucket = s3
  from tfx.dsl.io import fileio
  from tfx.utils import io_utils
  io_utils.write_string_file(f"{root}/model/variables/variables.data", "weights")
  io_utils.write_string_file(f"{root}/model/saved_model.pb", "graph")
  for directory, _, names in fileio.walk(f"{root}/model"):
    for name in names:
      fileio.copy(f"{directory}/{name}",
                  f"{root}/serving/1700000000/{directory[len(root + '/model/'):]}/{name}")
  assert [name.rstrip("/") for name in fileio.listdir(f"{root}/serving")] == ["1700000000"]
  assert sorted(key for key, _ in s3_server.keys(bucket, "serving/")) == [
      "serving/1700000000/saved_model.pb", "serving/1700000000/variables/variables.data"]
  fileio.rmtree(f"{root}/model")
  assert not fileio.exists(f"{root}/model")
  _no_directory_markers(s3_server, bucket)


def test_our_pusher_pushes_a_blessed_model_to_s3_once(s3_server, s3, tmp_path):
  root, bucket = s3
  from tfx.types import standard_artifacts
  from tfx.utils import io_utils
  from components import pusher

  model = standard_artifacts.Model()
  model.uri = f"{root}/pipeline_root/Trainer/model/7"
  io_utils.write_string_file(f"{model.uri}/Format-Serving/saved_model.pb", "graph")
  io_utils.write_string_file(f"{model.uri}/Format-Serving/variables/variables.data", "weights")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = f"{root}/pipeline_root/Evaluator/blessing/8"
  blessing.set_int_custom_property("blessed", 1)
  serving = f"{root}/serving_model/wrn"

  def push(run):
    pushed = standard_artifacts.PushedModel()
    pushed.uri = f"{root}/pipeline_root/Pusher/pushed_model/{run}"
    pusher.VersionedPusherExecutor().Do(
        {"model": [model], "model_blessing": [blessing]}, {"pushed_model": [pushed]},
        {"push_destination": json.dumps({"filesystem": {"base_directory": serving}})})
    return pushed

  first = push(9)
  assert first.get_int_custom_property("pushed") == 1
  version = first.get_string_custom_property("pushed_version")
  assert pusher.serving_versions(serving) == [int(version)]
  assert sorted(key for key, _ in s3_server.keys(bucket, "serving_model/")) == [
      f"serving_model/wrn/.version-claims/{version}.json"] + [
      f"serving_model/wrn/{version}/{name}" for name in
      (pusher.PUSH_INFO_PATH, "saved_model.pb", "variables/variables.data")]
  second = push(10)  # The same model again: already serving, nothing pushed.
  assert second.get_int_custom_property("pushed") == 0
  assert pusher.serving_versions(serving) == [int(version)]
  _no_directory_markers(s3_server, bucket)


def test_the_model_in_production_on_s3_is_none_before_a_push_then_the_version_pushed(s3_server,
                                                                                    s3):
  """What a run's ProductionModel step hands the Evaluator from an s3:// serving directory."""
  root, _ = s3
  from tfx.types import standard_artifacts
  from tfx.utils import io_utils
  from components import production_model, pusher

  serving = f"{root}/serving_model/wrn"

  def in_production(execution):
    snapshot = standard_artifacts.Model()
    snapshot.uri = f"{root}/pipeline_root/ProductionModel/model/{execution}"
    production_model.ProductionModelExecutor().Do(
        {}, {"model": [snapshot]}, {production_model.SERVING_DIRECTORY_KEY: serving})
    return snapshot

  nothing = in_production(1)
  assert nothing.get_int_custom_property(production_model.IN_PRODUCTION_KEY) == 0
  assert not production_model.holds_model(nothing)
  model = f"{root}/pipeline_root/Trainer/model/2/Format-Serving"
  io_utils.write_string_file(f"{model}/saved_model.pb", "graph")
  io_utils.write_string_file(f"{model}/variables/variables.data", "weights")
  version = pusher.push_version(model, serving, pusher.saved_model_fingerprint(model))
  found = in_production(3)
  assert found.get_int_custom_property(production_model.IN_PRODUCTION_KEY) == 1
  assert found.get_string_custom_property(production_model.PRODUCTION_VERSION_KEY) == version
  assert io_utils.read_string_file(f"{found.uri}/Format-Serving/saved_model.pb") == "graph"


# A worker that exits with a status other than 0 is reported by Beam in a thread.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_beam_writes_and_reads_tfrecords_on_s3_and_its_workers_use_tensorflow_there(s3_server,
                                                                                    s3):
  root, bucket = s3
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.testing.util import assert_that, equal_to
  config = from_flags(["--image=gcr.io/p/wrn:1", f"--output_dir={root}/wrn",
                       "--pipeline_name=wrn", "--beam_workers=1"])
  args = config.beam_pipeline_args()  # A worker process, set up by the Beam plugin.
  assert "--direct_running_mode=multi_processing" in args
  records = [b"record-%d" % i for i in range(50)]

  def written_by_tensorflow(name):
    import tensorflow as tf  # In the worker process.
    with tf.io.gfile.GFile(f"{root}/by-worker/{name}", "w") as f:
      f.write(name)

  with beam.Pipeline(options=PipelineOptions(args)) as pipeline:
    _ = (pipeline | "Records" >> beam.Create(records)
         | beam.io.WriteToTFRecord(f"{root}/records/part", file_name_suffix=".tfrecord"))
    _ = pipeline | "Names" >> beam.Create(["a", "b"]) | beam.Map(written_by_tensorflow)
  assert [key for key, _ in s3_server.keys(bucket, "by-worker/")] == ["by-worker/a", "by-worker/b"]

  # Read back in this process, with the S3 options given to Beam explicitly.
  read_args = object_storage.with_beam_s3_options(["--direct_running_mode=in_memory"])
  assert f"--s3_endpoint_url={s3_server.endpoint_url}" in read_args
  with beam.Pipeline(options=PipelineOptions(read_args)) as pipeline:
    assert_that(pipeline | beam.io.ReadFromTFRecord(f"{root}/records/part*"), equal_to(records))
  _no_directory_markers(s3_server, bucket)


# create_if_absent: the store's own conditional create, the basis of every claim.

def test_of_two_creates_of_one_key_the_second_is_refused_and_changes_nothing(s3_server, s3):
  root, bucket = s3
  assert object_storage.create_if_absent(f"{root}/claims/7.json", b"first")
  assert not object_storage.create_if_absent(f"{root}/claims/7.json", b"second")
  body = s3_server.client().get_object(Bucket=bucket, Key="claims/7.json")["Body"].read()
  assert body == b"first"
  assert object_storage.create_if_absent(f"{root}/claims/8.json", b"other key")


def test_of_many_concurrent_creates_of_one_key_exactly_one_wins(s3_server, s3):
  import concurrent.futures
  import threading
  root, bucket = s3
  barrier = threading.Barrier(8)

  def create(trial, writer):
    barrier.wait(timeout=60)
    return object_storage.create_if_absent(f"{root}/claims/{trial}.json", b"%d" % writer)

  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    for trial in range(10):
      won = [w for w, created in enumerate(pool.map(lambda w: create(trial, w), range(8)))
             if created]
      assert len(won) == 1, f"trial {trial}: {won}"
      body = s3_server.client().get_object(Bucket=bucket, Key=f"claims/{trial}.json")["Body"]
      assert body.read() == b"%d" % won[0]


def test_a_conflicting_concurrent_write_is_retried_until_the_store_decides(monkeypatch):
  """S3 answers 409 ConditionalRequestConflict while another conditional write of the key is
  in flight; the create is retried, and a later 412 means the other writer won."""
  from botocore.exceptions import ClientError

  def error(status, code):
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")

  class FakeS3:
    def __init__(self, answers):
      self.answers, self.calls = list(answers), []

    def put_object(self, **kwargs):
      self.calls.append(kwargs)
      answer = self.answers.pop(0)
      if answer:
        raise answer

  monkeypatch.setattr(object_storage, "CONFLICT_BACKOFF_SECONDS", 0)
  for answers, created in (([error(409, "ConditionalRequestConflict"), None], True),
                           ([error(409, "ConditionalRequestConflict"),
                             error(412, "PreconditionFailed")], False)):
    fake = FakeS3(answers)
    monkeypatch.setattr(object_storage, "s3_client", lambda settings, fake=fake: fake)
    assert object_storage.create_if_absent("s3://bucket/a/b.json", b"x") is created
    assert fake.calls == [{"Bucket": "bucket", "Key": "a/b.json", "Body": b"x",
                           "IfNoneMatch": "*"}] * 2
  fake = FakeS3([error(403, "AccessDenied")])
  monkeypatch.setattr(object_storage, "s3_client", lambda settings: fake)
  with pytest.raises(ClientError, match="AccessDenied"):  # Anything else is the caller's.
    object_storage.create_if_absent("s3://bucket/a/b.json", b"x")


def test_on_cloud_storage_the_create_is_an_upload_that_matches_generation_zero(monkeypatch):
  """No GCS emulator here: a fake client that behaves as GCS documents ifGenerationMatch=0
  (refused with 412 once the object exists) checks the call shape."""
  from google.api_core.exceptions import PreconditionFailed
  objects, calls = {}, []

  class FakeBlob:
    def __init__(self, bucket, name):
      self.bucket, self.name = bucket, name

    def upload_from_string(self, data, **kwargs):
      calls.append((self.bucket, self.name, data, kwargs))
      if kwargs.get("if_generation_match") == 0 and (self.bucket, self.name) in objects:
        raise PreconditionFailed("At least one of the pre-conditions you specified did not hold.")
      objects[(self.bucket, self.name)] = data

  class FakeClient:
    def bucket(self, name):
      return type("FakeBucket", (), {"blob": lambda _, key: FakeBlob(name, key)})()

  monkeypatch.setattr(object_storage, "gcs_client", FakeClient)
  assert object_storage.create_if_absent("gs://models/serving/.version-claims/3.json", b"a")
  assert not object_storage.create_if_absent("gs://models/serving/.version-claims/3.json", b"b")
  assert objects == {("models", "serving/.version-claims/3.json"): b"a"}
  assert calls[0] == ("models", "serving/.version-claims/3.json", b"a",
                      {"if_generation_match": 0})


@pytest.mark.parametrize("uri", ["/local/path", "s3://bucket", "s3://bucket/", "ram://x/y"])
def test_create_if_absent_takes_only_object_uris(uri):
  with pytest.raises(ValueError, match="is not an object URI"):
    object_storage.create_if_absent(uri, b"x")


def _escaped(text):
  import re
  return re.escape(text)


# An s3:// folder asked once, quickly, whether it can be read.

def _closed_endpoint():
  from test_support.s3_server import free_port
  return S3Settings(endpoint_url=f"http://127.0.0.1:{free_port()}", region="us-east-1")


def test_an_unreachable_endpoint_is_named_in_seconds_not_retried_for_minutes(monkeypatch):
  monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
  settings = _closed_endpoint()
  started = time.monotonic()
  problem = object_storage.s3_folder_problem("s3://photos/cats", settings)
  assert problem.startswith(f"cannot be reached: the S3 endpoint {settings.endpoint_url} does "
                            "not answer (Could not connect to the endpoint URL")
  assert time.monotonic() - started < object_storage.PROBE_CONNECT_TIMEOUT_SECONDS


def test_missing_credentials_are_named(monkeypatch, tmp_path):
  for name in object_storage.CREDENTIAL_VARIABLES:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
  monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
  monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # No instance role to ask for.
  assert object_storage.s3_folder_problem("s3://photos/cats", _closed_endpoint()) == (
      "cannot be read: no S3 credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
      "give the process a role)")


def test_a_folder_is_readable_or_its_bucket_or_objects_are_named_missing(s3_server, monkeypatch):
  for name, value in s3_server.environ().items():
    monkeypatch.setenv(name, value)
  bucket = s3_server.create_bucket("probed")
  s3_server.client().put_object(Bucket="probed", Key="cats/a/1.jpg", Body=b"x")
  settings = S3Settings.from_environ()
  assert object_storage.s3_folder_problem(f"{bucket}/cats", settings) is None
  assert object_storage.s3_folder_problem(f"{bucket}/cats/", settings) is None
  assert object_storage.s3_folder_problem(bucket, settings) is None
  where = f"the S3 endpoint {s3_server.endpoint_url}"
  assert object_storage.s3_folder_problem(f"{bucket}/dogs", settings) == (
      f"holds nothing: {where} has no object under it")
  assert object_storage.s3_folder_problem(f"{bucket}/ca", settings) == (
      f"holds nothing: {where} has no object under it")  # A prefix of a name is no folder.
  assert object_storage.s3_folder_problem("s3://no-such-bucket/cats", settings) == (
      f"cannot be read: {where} has no bucket no-such-bucket")


def test_refused_credentials_are_named(monkeypatch):
  """A server that checks signatures (moto with its IAM authentication on from the first
  request) refuses keys it does not know."""
  monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "0")
  with S3Server() as server:
    for name, value in server.environ().items():
      monkeypatch.setenv(name, value)
    problem = object_storage.s3_folder_problem("s3://photos/cats", S3Settings.from_environ())
  assert problem.startswith(f"cannot be read: the S3 endpoint {server.endpoint_url} refuses "
                            "these credentials (InvalidAccessKeyId: authentication failed")
