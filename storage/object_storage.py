"""s3:// for every process of the pipeline, configured from the environment, never from source:
`configure()` gives TensorFlow (tensorflow-io), Beam and boto3 the same checked settings, and
`create_if_absent` makes the exclusive create that tf.io.gfile lacks. docs/kubeflow.md,
"Object storage", lists the variables each client reads.
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import logging
import os
import re
import sys
import time
import traceback
from typing import Callable, Dict, List, MutableMapping, Optional, Sequence
from urllib.parse import urlsplit

# Each client reads its own names. TensorFlow (tf.io.gfile: TFX fileio, TFT, TFMA, the Trainer,
# the Pusher) through tensorflow-io's S3 plugin, registered by importing tensorflow_io: S3_ENDPOINT
# (a URL; the scheme picks http or https), AWS_REGION, S3_VERIFY_SSL, S3_CA_FILE and the AWS
# credential chain, buckets always path-style (`S3Client(..., useVirtualAddressing=false)`;
# tensorflow/io tensorflow_io/core/filesystems/s3/s3_filesystem.cc, v0.37.1). Beam
# (apache_beam.io.aws, boto3): S3Options --s3_endpoint_url, --s3_region_name, --s3_verify, else
# boto3's AWS_ENDPOINT_URL_S3, AWS_DEFAULT_REGION, AWS_CA_BUNDLE; botocore addresses a custom
# endpoint path-style. Credentials stay in the environment (or the pod's IAM role), never in
# pipeline options or the compiled spec, which anyone who can read the pipeline can read.
# Where each setting may come from, first found wins; every name of a setting must agree.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "S3_ENDPOINT")
S3_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "S3_ENDPOINT")  # boto3's, tensorflow-io's.
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
VERIFY_TLS_VARIABLE = "S3_VERIFY_SSL"  # tensorflow-io's switch; only 1 (the default) is kept.
CA_BUNDLE_VARIABLES = ("AWS_CA_BUNDLE", "S3_CA_FILE")  # The CA of a store's own certificate.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
# Everything a step's pod reads its object storage from (docs/kubeflow.md, "Object storage").
POD_VARIABLES = (ENDPOINT_VARIABLES + REGION_VARIABLES + (VERIFY_TLS_VARIABLE,) +
                 CA_BUNDLE_VARIABLES + CREDENTIAL_VARIABLES)
BEAM_PLUGIN = "storage.beam_worker"
OBJECT_STORE_URI = re.compile(r"(gs|s3)://[a-z0-9][a-z0-9._-]{1,221}(/.*)?")
# One listing asks whether an s3:// folder can be read, where tensorflow-io retries an
# unreachable endpoint for about 100 s and then calls the folder missing.
PROBE_CONNECT_TIMEOUT_SECONDS = 5
PROBE_READ_TIMEOUT_SECONDS = 15
# S3 answers 409 ConditionalRequestConflict while a concurrent write of the key is in flight;
# the request is to be retried, after which one of the two gets 412.
CONFLICT_RETRIES = 10
CONFLICT_BACKOFF_SECONDS = 0.05


def is_object_store_uri(path) -> bool:
  return isinstance(path, str) and OBJECT_STORE_URI.fullmatch(path) is not None


def object_store_uri_problem(path) -> Optional[str]:
  """Why a gs:// or s3:// path is not an object-store URI this project reads (its bucket name),
  or None (also for any other path)."""
  scheme, separator, rest = path.partition("://") if isinstance(path, str) else ("", "", "")
  if not separator or scheme not in ("gs", "s3") or is_object_store_uri(path):
    return None
  bucket = rest.split("/", 1)[0]
  return (f"{bucket!r} is not a bucket name: buckets are named by 3-63 lowercase letters, "
          "digits, '.', '-' (and on Cloud Storage '_'; up to 222 there with dots), starting with "
          "a letter or digit")


@dataclasses.dataclass(frozen=True)
class S3Settings:
  endpoint_url: Optional[str] = None  # http(s)://host[:port] of MinIO etc.; None: AWS S3.
  region: Optional[str] = None
  ca_bundle: Optional[str] = None  # PEM file of the CA that signed the endpoint's certificate.

  @classmethod
  def from_environ(cls, environ: Optional[MutableMapping[str, str]] = None) -> "S3Settings":
    """The settings in the environment; raises ValueError naming the variable on a bad value."""
    environ = os.environ if environ is None else environ
    endpoint_url = _agreed_value(environ, ENDPOINT_VARIABLES)
    if endpoint_url is not None:
      parts = urlsplit(endpoint_url)
      if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
        raise ValueError(f"Invalid environment value {_source(environ, ENDPOINT_VARIABLES)}="
                         f"{endpoint_url!r}: must be the URL of an S3 endpoint, "
                         "http(s)://host[:port] (e.g. http://minio-service.kubeflow:9000).")
      endpoint_url = endpoint_url.rstrip("/")
    verify = environ.get(VERIFY_TLS_VARIABLE, "1").strip()
    if verify != "1":
      raise ValueError(f"Invalid environment value {VERIFY_TLS_VARIABLE}={verify!r}: "
                       "certificates are always checked, as Beam's S3 filesystem cannot skip the "
                       "check (its --s3_verify takes a CA bundle, not false); for a store with "
                       "a self-signed or private certificate, set AWS_CA_BUNDLE to its CA file.")
    ca_bundle = _agreed_value(environ, CA_BUNDLE_VARIABLES)
    if ca_bundle is not None and not os.path.isfile(ca_bundle):
      raise ValueError(f"Invalid environment value {_source(environ, CA_BUNDLE_VARIABLES)}="
                       f"{ca_bundle!r}: no such file (the PEM bundle of the endpoint's CA).")
    return cls(endpoint_url=endpoint_url, region=_agreed_value(environ, REGION_VARIABLES),
               ca_bundle=ca_bundle)

  def environ(self) -> Dict[str, str]:
    """Every client's variables for these settings (credentials are not settings: see above)."""
    variables = {VERIFY_TLS_VARIABLE: "1"}
    if self.endpoint_url:  # Not AWS_ENDPOINT_URL: it would redirect every AWS service (STS).
      variables.update({name: self.endpoint_url for name in S3_ENDPOINT_VARIABLES})
    if self.region:
      variables.update({name: self.region for name in REGION_VARIABLES})
    if self.ca_bundle:
      variables.update({name: self.ca_bundle for name in CA_BUNDLE_VARIABLES})
    return variables

  def beam_args(self) -> List[str]:
    """Beam's S3Options for these settings: what remote workers, which do not share this
    process's environment, need besides credentials."""
    args = []
    if self.endpoint_url:
      args.append(f"--s3_endpoint_url={self.endpoint_url}")
    if self.region:
      args.append(f"--s3_region_name={self.region}")
    if self.ca_bundle:
      args.append(f"--s3_verify={self.ca_bundle}")
    return args


def configure(environ: Optional[MutableMapping[str, str]] = None) -> S3Settings:
  """Makes s3:// work in this process (and the processes it starts) with one set of settings:
  sets every client's variables from the standard ones, then registers TensorFlow's S3
  filesystem. Call it before the first s3:// access; calling it again is harmless."""
  environ = os.environ if environ is None else environ
  settings = S3Settings.from_environ(environ)
  environ.update(settings.environ())
  register_tensorflow_s3()
  return settings


def adopt_beam_s3_options(options_json: Optional[str],
                          environ: Optional[MutableMapping[str, str]] = None) -> None:
  """Sets each S3 setting the environment lacks from Beam's S3Options in `options_json`, the
  pipeline options an SDK worker gets from its runner (PIPELINE_OPTIONS, set by Beam's boot:
  sdks/python/container/boot.go): what with_beam_s3_options gave the pipeline reaches
  TensorFlow in a worker whose pod was given only credentials."""
  environ = os.environ if environ is None else environ
  if not options_json:
    return
  data = json.loads(options_json)
  options = data.get("options") or {  # Portable: keys are beam:option:<name>:v1.
      re.sub(r"^beam:option:(.*):v1$", r"\1", key): value for key, value in data.items()}
  for names, name in ((ENDPOINT_VARIABLES, "s3_endpoint_url"),
                      (REGION_VARIABLES, "s3_region_name"), (CA_BUNDLE_VARIABLES, "s3_verify")):
    value = options.get(name)
    if isinstance(value, str) and value and not any(
        environ.get(variable, "").strip() for variable in names):
      environ[names[0]] = value


def register_tensorflow_s3() -> None:
  """Registers tensorflow-io's filesystem plugins (s3:// among them) with TensorFlow.
  (tensorflow-io-gcs-filesystem, which TensorFlow depends on, carries gs:// only.)"""
  import tensorflow_io  # pylint: disable=unused-import,import-outside-toplevel


def with_beam_s3_options(beam_pipeline_args: Sequence[str],
                         settings: Optional[S3Settings] = None) -> List[str]:
  """Beam arguments plus the S3Options of the settings (from the environment by default),
  for options not given already: settings given explicitly to Beam win."""
  settings = settings or S3Settings.from_environ()
  given = {arg.split("=", 1)[0] for arg in beam_pipeline_args}
  return list(beam_pipeline_args) + [arg for arg in settings.beam_args()
                                     if arg.split("=", 1)[0] not in given]


def exit_after(main: Callable[[], Optional[int]]) -> None:
  """Runs main and ends the process with its status, reported as Python would report it.
  Call it outermost: `with` blocks and `finally` clauses around it do not run."""
  status = 1
  try:
    result = main()
    status = result if isinstance(result, int) else 0
  except SystemExit as stop:  # An int is the status; anything else is printed, status 1.
    status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    if status and not isinstance(stop.code, int):
      print(stop.code, file=sys.stderr)
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
  finally:
    end_process(status)


def end_process(status: int, from_atexit: bool = False) -> None:
  """Ends the process now with this status: Python's exit work runs, native destructors don't.

  tensorflow-io 0.37.1's S3 filesystem aborts the process at exit once it has been used
  ("pure virtual method called", status 134: tensorflow/io#2039; the fix, tensorflow/io#2120,
  is in no release), so a step whose work succeeded would be reported failed.
  from_atexit: called by an atexit function, which runs the others itself.
  """
  if not from_atexit:
    atexit._run_exitfuncs()  # pylint: disable=protected-access
  logging.shutdown()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


def create_if_absent(uri: str, content: bytes) -> bool:
  """Creates the object `uri` (s3:// or gs://) holding `content` unless an object of that name
  exists, as one atomic decision of the store; True if this call created it. Of any number of
  concurrent calls for one name, exactly one returns True."""
  scheme, _, path = uri.partition("://")
  bucket, _, key = path.partition("/")
  if not bucket or not key or scheme not in ("s3", "gs"):
    raise ValueError(f"{uri!r} is not an object URI (s3://bucket/key or gs://bucket/key).")
  if scheme == "gs":
    return _gcs_create_if_absent(bucket, key, content)
  return _s3_create_if_absent(bucket, key, content)


def _s3_create_if_absent(bucket: str, key: str, content: bytes) -> bool:
  from botocore.exceptions import ClientError  # pylint: disable=import-outside-toplevel
  client = s3_client(S3Settings.from_environ())
  for attempt in range(CONFLICT_RETRIES + 1):
    try:
      client.put_object(Bucket=bucket, Key=key, Body=content, IfNoneMatch="*")
      return True
    except ClientError as error:
      status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
      if status == 412:  # PreconditionFailed: the object exists.
        return False
      if status != 409 or attempt == CONFLICT_RETRIES:
        raise
      time.sleep(CONFLICT_BACKOFF_SECONDS * (attempt + 1))
  raise AssertionError("unreachable")


@functools.lru_cache(maxsize=None)
def s3_client(settings: S3Settings):
  """A boto3 S3 client for these settings; credentials from the standard AWS chain."""
  import boto3  # pylint: disable=import-outside-toplevel
  return boto3.client("s3", endpoint_url=settings.endpoint_url, region_name=settings.region,
                      verify=settings.ca_bundle)


@dataclasses.dataclass(frozen=True)
class StoredObject:
  """An object under a folder: its key relative to the folder ("/"-separated; a key ending in
  "/" is a folder marker), its size, modification time and entity tag (of its content)."""
  key: str
  size: int
  mtime_ns: int
  etag: str


def list_s3_folder(uri: str, settings: Optional[S3Settings] = None) -> List[StoredObject]:
  """Every object under the s3:// folder `uri`, from the bucket's listing: a request per 1,000
  keys, where tf.io.gfile asks once per name (isdir, stat) as it walks."""
  bucket, _, prefix = uri[len("s3://"):].partition("/")
  prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
  pages = s3_client(settings or S3Settings.from_environ()).get_paginator(
      "list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
  return [StoredObject(item["Key"][len(prefix):], item["Size"],
                       round(item["LastModified"].timestamp() * 10**6) * 1000, item["ETag"])
          for page in pages for item in page.get("Contents", [])
          if item["Key"] != prefix]


def s3_folder_problem(uri: str, settings: Optional[S3Settings] = None) -> Optional[str]:
  """Why the s3:// folder `uri` cannot be read with this process's settings and credentials
  (the endpoint does not answer, the credentials are missing or refused, no such bucket,
  nothing under it), or None. One listing of one key, with short timeouts and no retry."""
  import boto3  # pylint: disable=import-outside-toplevel
  from botocore import exceptions  # pylint: disable=import-outside-toplevel
  from botocore.config import Config  # pylint: disable=import-outside-toplevel
  settings = settings or S3Settings.from_environ()
  bucket, _, prefix = uri[len("s3://"):].partition("/")
  prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
  where = f"the S3 endpoint {settings.endpoint_url}" if settings.endpoint_url else "AWS S3"
  client = boto3.session.Session().client(  # A new session: today's credentials.
      "s3", endpoint_url=settings.endpoint_url, region_name=settings.region,
      verify=settings.ca_bundle, config=Config(connect_timeout=PROBE_CONNECT_TIMEOUT_SECONDS,
                                               read_timeout=PROBE_READ_TIMEOUT_SECONDS,
                                               retries={"total_max_attempts": 1}))
  try:
    listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
  except exceptions.NoCredentialsError:
    return (f"cannot be read: no S3 credentials (set {CREDENTIAL_VARIABLES[0]} and "
            f"{CREDENTIAL_VARIABLES[1]}, or give the process a role)")
  except (exceptions.ConnectionError, exceptions.HTTPClientError) as error:
    return f"cannot be reached: {where} does not answer ({error})"
  except exceptions.ClientError as error:
    code = error.response.get("Error", {}).get("Code", "")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code == "NoSuchBucket":
      return f"cannot be read: {where} has no bucket {bucket}"
    if status in (401, 403):
      return (f"cannot be read: {where} refuses these credentials ({code}: authentication "
              "failed or access denied)")
    return f"cannot be listed at {where}: {code or status} {error}"
  if not listing.get("KeyCount"):
    return f"holds nothing: {where} has no object under it"
  return None


def _gcs_create_if_absent(bucket: str, key: str, content: bytes) -> bool:
  from google.api_core.exceptions import \
      PreconditionFailed  # pylint: disable=import-outside-toplevel
  try:  # Generation 0 matches only an absent object.
    gcs_client().bucket(bucket).blob(key).upload_from_string(content, if_generation_match=0)
  except PreconditionFailed:
    return False
  return True


@functools.lru_cache(maxsize=None)
def gcs_client():
  """A Cloud Storage client with the pod's default credentials and project."""
  from google.cloud import storage  # pylint: disable=import-outside-toplevel
  return storage.Client()


def _agreed_value(environ: MutableMapping[str, str], names: Sequence[str]) -> Optional[str]:
  values = {name: environ[name].strip() for name in names if environ.get(name, "").strip()}
  if len(set(values.values())) > 1:
    raise ValueError("Conflicting environment values " + ", ".join(
        f"{name}={value!r}" for name, value in values.items()) + ": they name one setting; "
        "set one of them, or all to the same value.")
  return next(iter(values.values()), None)


def _source(environ: MutableMapping[str, str], names: Sequence[str]) -> str:
  return next(name for name in names if environ.get(name, "").strip())

