"""Kubernetes' own rules for the names a compiled spec hands the cluster, and the image reference
grammar the kubelet parses, written once for every flag that carries such a name.

Each function returns the problems with a value (empty when valid), worded as the Go sources
word them:
- k8s.io/apimachinery `pkg/util/validation/validation.go` and `pkg/api/validate/content/`
  (`kube.go`, `dns.go`, `identifier.go`): IsDNS1123Subdomain (Secret names), IsDNS1123Label,
  IsQualifiedName = IsLabelKey (label and toleration keys, extended resource names),
  IsValidLabelValue, IsConfigMapKey (Secret keys), IsCIdentifier (environment variables);
- github.com/distribution/reference `regexp.go`, `reference.go` (Parse) and `normalize.go`
  (ParseNormalizedNamed, which the kubelet calls before pulling: a pod whose image fails it
  waits in InvalidImageName), with the digest check of github.com/opencontainers/go-digest
  (`digest.go` Validate, `algorithm.go`: lowercase hex of the algorithm's size).
Go's regexp package reads `\\w` and `[[:xdigit:]]` as ASCII, hence re.ASCII below.
"""
import re
from typing import List

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_KEY_NAME_MAX = 63  # The name part of a qualified name.
LABEL_VALUE_MAX = 63
REPOSITORY_NAME_MAX = 255  # distribution/reference RepositoryNameTotalLengthMax.

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_LABEL_KEY_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_CONFIG_MAP_KEY = r"[-._a-zA-Z0-9]+"
_C_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def _matches(pattern: str, value: str) -> bool:
  return re.fullmatch(pattern, value, re.ASCII) is not None


def _too_long(value: str, limit: int) -> List[str]:
  return [f"must be no more than {limit} characters"] if len(value) > limit else []


def dns1123_label_problems(value: str) -> List[str]:
  """IsDNS1123Label: namespaces, and the host names of a TrainJob's pods."""
  problems = _too_long(value, DNS1123_LABEL_MAX)
  if not _matches(_DNS1123_LABEL, value):
    problems.append("must not contain dots" if _matches(_DNS1123_SUBDOMAIN, value) else
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character")
  return problems


def dns1123_subdomain_problems(value: str) -> List[str]:
  """IsDNS1123Subdomain: the names of Secrets (and most objects), a label key's prefix."""
  problems = _too_long(value, DNS1123_SUBDOMAIN_MAX)
  if not _matches(_DNS1123_SUBDOMAIN, value):
    problems.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric "
                    "character")
  return problems


def qualified_name_problems(value: str) -> List[str]:
  """IsQualifiedName (IsLabelKey): an optional DNS subdomain prefix and '/', then a name of at
  most 63 characters; label keys, toleration keys, extended resource names."""
  parts = value.split("/")
  if len(parts) > 2:
    return ["a qualified name has at most one '/' (an optional DNS subdomain prefix, e.g. "
            "'example.com/MyName')"]
  problems = []
  name = parts[-1]
  if len(parts) == 2:
    if not parts[0]:
      problems.append("prefix part must be non-empty")
    else:
      problems += ["prefix part " + p for p in dns1123_subdomain_problems(parts[0])]
  if not name:
    problems.append("name part must be non-empty")
  elif len(name) > LABEL_KEY_NAME_MAX:
    problems.append(f"name part must be no more than {LABEL_KEY_NAME_MAX} characters")
  if name and not _matches(_LABEL_KEY_NAME, name):
    problems.append("name part must consist of alphanumeric characters, '-', '_' or '.', and "
                    "must start and end with an alphanumeric character")
  return problems


def label_value_problems(value: str) -> List[str]:
  """IsValidLabelValue: empty, or at most 63 characters of a label key's name alphabet."""
  problems = _too_long(value, LABEL_VALUE_MAX)
  if value and not _matches(_LABEL_KEY_NAME, value):
    problems.append("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character")
  return problems


def _chdir_prefix_problems(value: str) -> List[str]:
  if value in (".", ".."):
    return [f"must not be {value!r}"]
  return ["must not start with '..'"] if value.startswith("..") else []


def config_map_key_problems(value: str) -> List[str]:
  """IsConfigMapKey: the keys of a ConfigMap or a Secret."""
  problems = _too_long(value, DNS1123_SUBDOMAIN_MAX)
  if not _matches(_CONFIG_MAP_KEY, value):
    problems.append("a valid config key must consist of alphanumeric characters, '-', '_' or "
                    "'.'")
  return problems + _chdir_prefix_problems(value)


def c_identifier_problems(value: str) -> List[str]:
  """IsCIdentifier: an environment variable a shell and the AWS SDKs read. Stricter than the
  container's IsEnvVarName, which also takes '-' and '.' that no shell exports."""
  return [] if _matches(_C_IDENTIFIER, value) else [
      "a valid C identifier must start with alphabetic character or '_', followed by a string "
      "of alphanumeric characters or '_'"]


# distribution/reference regexp.go, piece by piece.
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6_ADDRESS = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = rf"(?:{_DOMAIN_NAME}|{_IPV6_ADDRESS})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}"
_REFERENCE = re.compile(
    rf"((?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?", re.ASCII)
_NAME = re.compile(rf"(?:({_DOMAIN_AND_PORT})/)?({_REMOTE_NAME})", re.ASCII)
# go-digest's registered algorithms and their sizes in hex digits.
_DIGEST_HEX_DIGITS = {"sha256": 64, "sha384": 96, "sha512": 128}
_DEFAULT_DOMAIN, _LEGACY_DEFAULT_DOMAIN = "docker.io", "index.docker.io"


def _split_docker_domain(name: str):
  """normalize.go splitDockerDomain: (domain, remainder) of a familiar or full name."""
  maybe_domain, slash, rest = name.partition("/")
  if not slash:
    return _DEFAULT_DOMAIN, "library/" + name
  if maybe_domain == "localhost" or any(c in maybe_domain for c in ".:") or (
      maybe_domain.lower() != maybe_domain):
    domain, remainder = maybe_domain, rest
  else:
    domain, remainder = _DEFAULT_DOMAIN, name
  if maybe_domain == _LEGACY_DEFAULT_DOMAIN:
    domain = _DEFAULT_DOMAIN
  if domain == _DEFAULT_DOMAIN and "/" not in remainder:
    remainder = "library/" + remainder
  return domain, remainder


def _digest_problems(digest: str) -> List[str]:
  algorithm, _, encoded = digest.partition(":")
  digits = _DIGEST_HEX_DIGITS.get(algorithm)
  if digits is None:
    return [f"unsupported digest algorithm {algorithm!r} (one of "
            f"{sorted(_DIGEST_HEX_DIGITS)})"]
  if re.fullmatch(f"[a-f0-9]{{{digits}}}", encoded) is None:
    return [f"a {algorithm} digest is {digits} lowercase hexadecimal digits"]
  return []


def image_reference_problems(image: str) -> List[str]:
  """What ParseNormalizedNamed says of an image reference ([DOMAIN[:PORT]/]PATH[:TAG][@DIGEST]):
  lowercase path components, a tag of [\\w][\\w.-]{0,127}, a digest algorithm:hex."""
  if not image:
    return ["repository name must have at least one component"]
  if re.fullmatch(r"[a-f0-9]{64}", image):
    return ["cannot specify 64-byte hexadecimal strings"]
  domain, remainder = _split_docker_domain(image)
  remote = remainder.split(":", 1)[0]
  if remote.lower() != remote:
    return [f"repository name ({remote}) must be lowercase"]
  full = f"{domain}/{remainder}"
  match = _REFERENCE.fullmatch(full)
  if match is None:
    lower = full.lower()
    return ["repository name must be lowercase" if lower != full and _REFERENCE.fullmatch(lower)
            else "invalid reference format"]
  name = _NAME.fullmatch(match.group(1))
  if len(name.group(2)) > REPOSITORY_NAME_MAX:
    return [f"repository name must not be more than {REPOSITORY_NAME_MAX} characters"]
  return _digest_problems(match.group(3)) if match.group(3) else []
