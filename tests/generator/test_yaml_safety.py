"""Property tests: any string in any string value is either refused with an error naming its key, or comes
back unchanged from yaml.safe_load of the output, with the documents' shape (keys and types) untouched."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from generator.errors import ValuesError
from generator.resources import default_values_path
from generator.targets.kubernetes import render_manifests, to_stream
from generator.validation import validate_values
from generator.values import load_values_file
from generator.yamlsafe import to_yaml

DEFAULTS = load_values_file(default_values_path())
PLACEHOLDER = "placeholder"  # valid in every field

def _everywhere(field: str, key: str) -> list:
    """Labels and annotations go on every object's metadata and on the pod template's."""
    return [(kind, ["metadata", field, key]) for kind in ("PersistentVolumeClaim", "ConfigMap", "Service", "Job")] + [
        ("Job", ["spec", "template", "metadata", field, key])]


def _own_program(values: dict) -> dict:
    """Another entry point than the built-in worker: its config_map is free-form."""
    values["entrypoint"]["module"] = "train"
    return values


CONTAINER = ["spec", "template", "spec", "containers", 0]
TORCHRUN_FLAGS = 8  # the launcher's own arguments before the program (templates/kubernetes/job.yaml.j2)

# Each case: how to place the string into the values, and where it must come back in the output.
# A location is (kind, path); "<S>" in a path stands for the string itself used as a key.
VALUE_CASES = {
    "name": (lambda v, s: v.update(name=s), [("Job", ["metadata", "name"])]),
    "namespace": (lambda v, s: v.update(namespace=s), [("Job", ["metadata", "namespace"])]),
    "image": (lambda v, s: v.update(image=s),
              [("Job", ["spec", "template", "spec", "containers", 0, "image"])]),
    "annotation value": (lambda v, s: v["annotations"].update(note=s),
                         _everywhere("annotations", "note")),
    "label value": (lambda v, s: v["labels"].update(team=s), _everywhere("labels", "team")),
    "config value": (lambda v, s: _own_program(v)["config_map"].update(NOTE=s), [("ConfigMap", ["data", "NOTE"])]),
    "script": (lambda v, s: v["entrypoint"].update(module=None, script=s),
               [("Job", CONTAINER + ["args", TORCHRUN_FLAGS])]),
    "program argument": (lambda v, s: v["entrypoint"].update(args=["--note", s]),
                         [("Job", CONTAINER + ["args", TORCHRUN_FLAGS + 3])]),
    "working dir": (lambda v, s: v.update(working_dir="/" + s), []),
    "env value": (lambda v, s: v["env"].append({"name": "NOTE", "value": s}),
                  [("Job", CONTAINER + ["env", 3, "value"])]),
    "env secret key": (lambda v, s: v["env"].append({"name": "NOTE", "valueFrom": {"secretKeyRef": {
        "name": "creds", "key": s}}}), [("Job", CONTAINER + ["env", 3, "valueFrom", "secretKeyRef", "key"])]),
    "env secret": (lambda v, s: v["env_from_secrets"].append(s), [("Job", CONTAINER + ["envFrom", 1, "secretRef", "name"])]),
    "mount path": (lambda v, s: v["extra_volumes"].append({"name": "extra", "mount_path": "/" + s, "empty_dir": {}}),
                   []),
    "queue name": (lambda v, s: v.update(queue_name=s),
                   [("Job", ["metadata", "labels", "kueue.x-k8s.io/queue-name"])]),
    "accelerator": (lambda v, s: (v["resources"]["gpu"].update(accelerator=s, accelerator_count=1)),
                    [("Job", ["spec", "template", "spec", "nodeSelector", "nvidia.com/gpu.product"])]),
    "storage class": (lambda v, s: v["shared_volume"].update(storage_class=s),
                      [("PersistentVolumeClaim", ["spec", "storageClassName"])]),
    "existing claim": (lambda v, s: v["shared_volume"].update(existing_claim=s),
                       [("Job", ["spec", "template", "spec", "volumes", 0, "persistentVolumeClaim", "claimName"])]),
    "priority class": (lambda v, s: v.update(priority_class_name=s),
                       [("Job", ["spec", "template", "spec", "priorityClassName"])]),
    "service account": (lambda v, s: v.update(service_account_name=s),
                        [("Job", ["spec", "template", "spec", "serviceAccountName"])]),
    "node selector value": (lambda v, s: v["node_selector"].update(zone=s),
                            [("Job", ["spec", "template", "spec", "nodeSelector", "zone"])]),
    "pull secret": (lambda v, s: v.update(image_pull_secrets=[s]),
                    [("Job", ["spec", "template", "spec", "imagePullSecrets", 0, "name"])]),
    "toleration value": (lambda v, s: v.update(tolerations=[{"key": "k", "operator": "Equal", "value": s}]),
                         [("Job", ["spec", "template", "spec", "tolerations", 0, "value"])]),
    "annotation key": (lambda v, s: v["annotations"].update({s: "x"}), _everywhere("annotations", "<S>")),
    "label key": (lambda v, s: v["labels"].update({s: "x"}), _everywhere("labels", "<S>")),
    "config key": (lambda v, s: _own_program(v)["config_map"].update({s: "x"}), [("ConfigMap", ["data", "<S>"])]),
    "node selector key": (lambda v, s: v["node_selector"].update({s: "x"}),
                          [("Job", ["spec", "template", "spec", "nodeSelector", "<S>"])]),
}
TOP_KEY = {
    "name": "name", "namespace": "namespace", "image": "image", "annotation value": "annotations",
    "label value": "labels", "config value": "config_map", "queue name": "queue_name",
    "accelerator": "resources.gpu.accelerator", "storage class": "shared_volume.storage_class",
    "existing claim": "shared_volume.existing_claim", "priority class": "priority_class_name",
    "service account": "service_account_name", "node selector value": "node_selector",
    "pull secret": "image_pull_secrets", "toleration value": "tolerations", "annotation key": "annotations",
    "label key": "labels", "config key": "config_map", "node selector key": "node_selector",
    "script": "entrypoint.script", "program argument": "entrypoint.args", "working dir": "working_dir",
    "env value": "env", "env secret key": "env", "env secret": "env_from_secrets", "mount path": "extra_volumes",
}

HOSTILE = [
    "line one\nline two", "key: value", "# comment", "&anchor", "*alias", "no", "on", "0755", "1:30", "{{ name }}",
    "{% if %}", "🙂 emoji", "- item", "[a, b]", "{a: b}", "'single'", '"double"', "trailing space ", " lead",
    "tab\there", "back\\slash", "\u2028line-separator", "\x85nel", "\ufeffbom", "null", "~", "", "---", "...",
    "a\r\nb", "%TAG", "!!python/object", "é", "\x00nul", "\x7fdel", "=", "<<",
]


def shape(documents: list, token: str, case: str) -> set:
    """Every path with the type of its leaf; ``token`` used as a key where the case puts it reads as <S>."""
    key_parents = {(kind, *path[:-1]) for kind, path in VALUE_CASES[case][1] if path[-1] == "<S>"}
    paths = set()

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, path + ("<S>" if key == token and path in key_parents else key,))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, path + (index,))
        else:
            paths.add((path, type(node).__name__))

    for document in documents:
        walk(document, (document["kind"],))
    return paths


def lookup(documents, kind, path, token):
    node = next(doc for doc in documents if doc["kind"] == kind)
    for part in path:
        node = node[token if part == "<S>" else part]
    return node


def render_with(case: str, text: str):
    values = copy.deepcopy(DEFAULTS)
    VALUE_CASES[case][0](values, text)
    return list(yaml.safe_load_all(to_stream(render_manifests(validate_values(values)))))


def check(case: str, text: str) -> None:
    try:
        documents = render_with(case, text)
    except ValuesError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.startswith(TOP_KEY[case]), problem
        return
    for kind, path in VALUE_CASES[case][1]:
        # a string used as a key must come back as that key, holding its value "x"
        assert lookup(documents, kind, path, text) == ("x" if "<S>" in path else text)
    baseline = render_with(case, PLACEHOLDER)
    assert shape(documents, text, case) == shape(baseline, PLACEHOLDER, case)


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_every_case_renders_a_plain_string(case):
    """The properties below test preservation, not only refusal: a plain string goes through every case."""
    render_with(case, PLACEHOLDER)


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_are_refused_or_preserved(case, text):
    check(case, text)


@pytest.mark.parametrize("case", sorted(VALUE_CASES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(st.characters(codec=None, exclude_categories=["Cs"]), max_size=40))
def test_any_string_is_refused_or_preserved(case, text):
    check(case, text)


@given(st.text(max_size=60))
@example("\U0001f642 emoji")  # tojson writes it as a surrogate pair, which PyYAML decodes wrongly
def test_to_yaml_round_trips_any_string(text):
    assert yaml.safe_load(to_yaml(text)) == text


def test_lone_surrogate_is_refused_naming_the_key():
    values = copy.deepcopy(DEFAULTS)
    values["annotations"]["note"] = "\ud800"
    with pytest.raises(ValuesError, match=r"^annotations.note: holds an unpaired UTF-16 surrogate"):
        validate_values(values)
