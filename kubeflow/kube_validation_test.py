"""Kubernetes' name rules and the image reference grammar, at their limits (the Go sources
they follow are named in kube_validation.py)."""
import pytest

from kubeflow import kube_validation as kv

HEX64 = "f" * 64


@pytest.mark.parametrize("value, valid", [
    ("a", True), ("mlpipeline-minio-artifact", True), ("a.b-c.d", True), ("0abc", True),
    ("a" * 253, True), ("a" * 254, False), (".".join(["a" * 63] * 3 + ["a" * 61]), True),
    ("Minio_Creds", False), ("-a", False), ("a-", False), ("a..b", False), ("", False),
    ("a b", False), ("é", False)])
def test_dns1123_subdomains_are_at_most_253_lowercase_characters(value, valid):
  assert (not kv.dns1123_subdomain_problems(value)) == valid, value


def test_a_subdomain_over_its_limit_says_so():
  assert kv.dns1123_subdomain_problems("a" * 254) == ["must be no more than 253 characters"]


@pytest.mark.parametrize("value, problems", [
    ("tfx-trainer-0123", []), ("a" * 63, []),
    ("a" * 64, ["must be no more than 63 characters"]),
    ("a.b", ["must not contain dots"])])
def test_dns1123_labels_are_at_most_63_characters_without_dots(value, problems):
  assert kv.dns1123_label_problems(value) == problems


@pytest.mark.parametrize("value, valid", [
    ("gpu", True), ("nvidia.com/gpu.present", True), ("A_b-C.d", True), ("a" * 63, True),
    ("a" * 64, False), ("p" * 253 + "/name", True), ("p" * 254 + "/name", False),
    ("example.com/" + "n" * 63, True), ("example.com/" + "n" * 64, False), ("/name", False),
    ("example.com/", False), ("a/b/c", False), ("Example.com/name", False), ("-a", False),
    ("a-", False), ("", False), ("nvidia.com/gpu\n", False)])
def test_qualified_names_are_an_optional_253_character_prefix_and_a_63_character_name(value,
                                                                                         valid):
  assert (not kv.qualified_name_problems(value)) == valid, value


def test_each_part_of_a_qualified_name_is_named_in_its_problem():
  assert kv.qualified_name_problems("p" * 254 + "/n") == [
      "prefix part must be no more than 253 characters"]
  assert kv.qualified_name_problems("example.com/" + "n" * 64) == [
      "name part must be no more than 63 characters"]


@pytest.mark.parametrize("value, valid", [
    ("", True), ("true", True), ("My_value-1.0", True), ("v" * 63, True), ("v" * 64, False),
    ("-v", False), ("v v", False), ("a/b", False)])
def test_label_values_are_empty_or_at_most_63_characters(value, valid):
  assert (not kv.label_value_problems(value)) == valid, value


@pytest.mark.parametrize("value, valid", [
    ("accesskey", True), ("key.name", True), ("KEY_NAME", True), (".dotfile", True),
    ("k" * 253, True), ("k" * 254, False), ("", False), (".", False), ("..", False),
    ("..data", False), ("a/b", False), ("a:b", False)])
def test_secret_keys_are_config_map_keys(value, valid):
  assert (not kv.config_map_key_problems(value)) == valid, value


@pytest.mark.parametrize("value, valid", [
    ("AWS_ACCESS_KEY_ID", True), ("_x", True), ("x1", True), ("my.env-name", False),
    ("1ABC", False), ("A=B", False), ("", False), ("AWS-KEY", False)])
def test_environment_variables_are_c_identifiers(value, valid):
  assert (not kv.c_identifier_problems(value)) == valid, value


@pytest.mark.parametrize("image", [
    "i", "debian", "gcr.io/my-project/wrn-pipeline:1", "registry.example.com/wrn-pipeline:1",
    "localhost/wrn", "localhost:5000/team/wrn:v1.2_rc-3", "127.0.0.1:5000/wrn",
    "[fc00::1]:5000/wrn", "Registry.Example.com/wrn:1", "index.docker.io/library/debian",
    "docker---rules/dock__er", "wrn:" + "t" * 128, f"wrn@sha256:{HEX64}",
    f"registry/wrn:1@sha256:{HEX64}", f"wrn@sha512:{'0' * 128}"])
def test_image_references_docker_and_the_kubelet_accept(image):
  assert kv.image_reference_problems(image) == [], image


@pytest.mark.parametrize("image, problem", [
    ("", "repository name must have at least one component"),
    ("registry.example.com/Wrn:1", "repository name (Wrn) must be lowercase"),
    ("docker/Docker", "repository name (docker/Docker) must be lowercase"),
    ("wrn:bad:tag", "invalid reference format"),
    ("wrn:" + "t" * 129, "invalid reference format"),
    ("wrn:.tag", "invalid reference format"),
    ("wrn-pipeline 1", "invalid reference format"),
    (" wrn", "invalid reference format"),
    ("wrn\n", "invalid reference format"),
    ("{{$.inputs.parameters['image']}}", "invalid reference format"),
    ("https://registry/wrn", "invalid reference format"),
    ("docker///docker", "invalid reference format"),
    ("-docker/docker", "invalid reference format"),
    ("wrn@sha256:short", "invalid reference format"),
    (f"wrn@sha256:{HEX64[:-1]}", "a sha256 digest is 64 lowercase hexadecimal digits"),
    (f"wrn@sha256:{'f' * 65}", "a sha256 digest is 64 lowercase hexadecimal digits"),
    (f"wrn@sha256:{HEX64.upper()}", "a sha256 digest is 64 lowercase hexadecimal digits"),
    (f"wrn@md5:{'0' * 32}", "unsupported digest algorithm 'md5'"),
    (HEX64, "cannot specify 64-byte hexadecimal strings"),
    ("registry/" + "w" * 256, "repository name must not be more than 255 characters"),
    ("wrn:tâg", "invalid reference format"),
])
def test_image_references_the_kubelet_refuses_say_why(image, problem):
  [said] = kv.image_reference_problems(image)
  assert said.startswith(problem), (image, said)
