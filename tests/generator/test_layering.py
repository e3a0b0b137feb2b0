"""Layered values files (a platform's, then a team's): keyed lists merge by their key, name lists add up, a null
removes a map's key, "$patch" deletes or replaces; generator.values.LAYERED is the table."""

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.errors import ValuesError
from generator.values import LAYERED, PATCH, KeyedList, layer_values
from tests.conftest import ROOT

SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize("earlier, later, merged", [
    # tolerations: by (key, effect); the later item replaces the earlier in place, new ones are appended
    ({"tolerations": [SPOT]}, {"tolerations": [GPU]}, {"tolerations": [SPOT, GPU]}),
    ({"tolerations": [SPOT, GPU]}, {"tolerations": [{**SPOT, "operator": "Equal", "value": "yes"}]},
     {"tolerations": [{**SPOT, "operator": "Equal", "value": "yes"}, GPU]}),
    # the same key with another effect is another toleration; a missing effect is its own value
    ({"tolerations": [SPOT]}, {"tolerations": [{**SPOT, "effect": "NoExecute"}]},
     {"tolerations": [SPOT, {**SPOT, "effect": "NoExecute"}]}),
    ({"tolerations": [{"key": "spot"}]}, {"tolerations": [{"key": "spot", "value": "x"}]},
     {"tolerations": [{"key": "spot", "value": "x"}]}),
    ({"tolerations": [{"operator": "Exists"}]}, {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]},
     {"tolerations": [{"operator": "Exists"}, {"operator": "Exists", "effect": "NoSchedule"}]}),
    # env: by name, a value replacing a valueFrom
    ({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
     {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, {"name": "C", "value": "3"}]},
     {"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, {"name": "B", "value": "2"},
              {"name": "C", "value": "3"}]}),
    # extra_volumes: by name, the later item whole (not merged field by field)
    ({"extra_volumes": [{"name": "cache", "mount_path": "/cache", "empty_dir": {}}]},
     {"extra_volumes": [{"name": "cache", "mount_path": "/data", "claim": "c"}]},
     {"extra_volumes": [{"name": "cache", "mount_path": "/data", "claim": "c"}]}),
    # name lists: a union, in order, once each
    ({"image_pull_secrets": ["platform", "shared"]}, {"image_pull_secrets": ["shared", "team", "team"]},
     {"image_pull_secrets": ["platform", "shared", "team"]}),
    ({"env_from_secrets": ["proxy"]}, {"env_from_secrets": ["tracking"]}, {"env_from_secrets": ["proxy", "tracking"]}),
    # nothing earlier: the later list as it is
    ({}, {"tolerations": [SPOT, GPU]}, {"tolerations": [SPOT, GPU]}),
    # any other list replaces; maps merge key by key
    ({"entrypoint": {"args": ["a"], "module": "m"}}, {"entrypoint": {"args": ["b"]}},
     {"entrypoint": {"args": ["b"], "module": "m"}}),
    ({"network_policy": {"egress": [{"cidr": "10.0.0.0/8"}]}}, {"network_policy": {"egress": []}},
     {"network_policy": {"egress": []}}),
], ids=["toleration-added", "toleration-replaced-in-place", "other-effect", "missing-effect", "missing-key",
        "env", "extra-volume", "pull-secrets", "env-from-secrets", "nothing-earlier", "args-replace",
        "egress-replaces"])
def test_lists_merge_as_the_table_says(earlier, later, merged):
    assert layer_values(earlier, later, "team.yaml") == merged


@pytest.mark.parametrize("earlier, later, merged", [
    ({"tolerations": [SPOT, GPU]}, {"tolerations": [{"key": "spot", "effect": "NoSchedule", PATCH: "delete"}]},
     {"tolerations": [GPU]}),
    # deleted and set again in one file: the file's item, appended
    ({"tolerations": [SPOT, GPU]},
     {"tolerations": [{"key": "spot", "effect": "NoSchedule", PATCH: "delete"}, {**SPOT, "value": "v"}]},
     {"tolerations": [GPU, {**SPOT, "value": "v"}]}),
    ({"env": [{"name": "HTTP_PROXY", "value": "p"}]}, {"env": [{"name": "HTTP_PROXY", PATCH: "delete"}]},
     {"env": []}),
    ({"extra_volumes": [{"name": "a", "mount_path": "/a", "empty_dir": {}}]},
     {"extra_volumes": [{"name": "a", PATCH: "delete"}]}, {"extra_volumes": []}),
], ids=["toleration", "delete-then-set", "env", "extra-volume"])
def test_a_delete_marker_removes_the_earlier_item_of_its_key(earlier, later, merged):
    assert layer_values(earlier, later, "team.yaml") == merged


@pytest.mark.parametrize("key, earlier, later, merged", [
    ("tolerations", [SPOT], [GPU], [GPU]),
    ("env", [{"name": "A", "value": "1"}], [], []),
    ("image_pull_secrets", ["platform"], ["team"], ["team"]),
    ("env_from_secrets", ["a", "b"], ["b"], ["b"]),
])
def test_a_first_replace_marker_makes_the_files_list_replace_the_earlier(key, earlier, later, merged):
    assert layer_values({key: earlier}, {key: [{PATCH: "replace"}, *later]}, "team.yaml") == {key: merged}


@pytest.mark.parametrize("key", ["labels", "annotations", "node_selector", "pod_labels", "pod_annotations"])
def test_a_null_in_a_free_form_map_removes_the_earlier_key(key):
    earlier = {key: {"a": "1", "b": "2"}}
    assert layer_values(earlier, {key: {"a": None, "c": "3", "z": None}}, "team.yaml") == {key: {"b": "2", "c": "3"}}


def test_a_null_removes_an_extra_resource_and_stays_in_config_map_for_the_render():
    earlier = {"resources": {"cpu": 2, "extra": {"rdma/ib": 1}}, "config_map": {"EPOCHS": 3, "SEED": 1}}
    later = {"resources": {"extra": {"rdma/ib": None}}, "config_map": {"EPOCHS": None}}
    assert layer_values(earlier, later, "team.yaml") == {"resources": {"cpu": 2, "extra": {}},
                                                         "config_map": {"EPOCHS": None, "SEED": 1}}


@pytest.mark.parametrize("earlier, later, message", [
    ({"tolerations": [GPU]}, {"tolerations": [GPU, {"key": "spot", "effect": "NoSchedule", PATCH: "delete"}]},
     'team.yaml: tolerations[1]: "$patch": delete removes nothing: no earlier file set a toleration with key "spot" '
     'and effect "NoSchedule"'),
    ({"env": [{"name": "A", "value": "1"}]}, {"env": [{"name": "B", PATCH: "delete"}]},
     'team.yaml: env[0]: "$patch": delete removes nothing: no earlier file set a variable with name "B"'),
    ({"tolerations": [SPOT]}, {"tolerations": [{PATCH: "replace"}, {"key": "spot", "effect": "NoSchedule",
                                                                     PATCH: "delete"}]},
     'team.yaml: tolerations[1]: "$patch": delete removes nothing: no earlier file set a toleration with key "spot" '
     'and effect "NoSchedule"'),
    ({}, {"tolerations": ["spot"]},
     "team.yaml: tolerations[0]: must be a mapping (a toleration merges by key, effect), not a string"),
    ({}, {"env": [{"name": "A", PATCH: "merge"}]},
     'team.yaml: env[0]: "$patch": "merge" is not a merge marker: use "delete" to remove the earlier item of this key, '
     'or {"$patch": "replace"} alone as the first item to replace the whole list'),
    ({}, {"env": [{"name": "A", "value": "1"}, {PATCH: "replace"}]},
     'team.yaml: env[1]: "$patch": "replace" is not a merge marker'),
    ({}, {"env": [{PATCH: "replace", "name": "A"}]},
     'team.yaml: env[0]: {"$patch": "replace"} stands alone as the first item'),
    ({}, {PATCH: "delete"}, 'team.yaml: $patch: "$patch" only marks an item of tolerations, env, extra_volumes'),
    ({}, {"labels": {PATCH: "delete"}}, 'team.yaml: labels.$patch: "$patch" only marks an item of'),
    ({}, {"image_pull_secrets": [{PATCH: "delete"}]}, 'team.yaml: image_pull_secrets[0].$patch: "$patch" only marks'),
    ({}, {"entrypoint": {"args": [{PATCH: "replace"}]}}, "team.yaml: entrypoint.args[0].$patch:"),
    ({}, {"env": [{"name": "A", "valueFrom": {PATCH: "delete"}}]}, "team.yaml: env[0].valueFrom.$patch:"),
], ids=["delete-nothing-toleration", "delete-nothing-env", "delete-after-replace", "not-a-mapping",
        "unknown-marker", "replace-not-first", "replace-with-fields", "top-level", "in-a-map", "in-a-name-list",
        "in-another-list", "nested-in-an-item"])
def test_malformed_layering_is_one_line_naming_the_file_and_key(earlier, later, message):
    with pytest.raises(ValuesError) as error:
        layer_values(earlier, later, "team.yaml")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_inputs_are_not_modified():
    earlier = {"tolerations": [SPOT], "labels": {"a": "1"}}
    later = {"tolerations": [{"key": "spot", "effect": "NoSchedule", PATCH: "delete"}], "labels": {"a": None}}
    before = json.dumps([earlier, later])
    layer_values(earlier, later, "team.yaml")
    assert json.dumps([earlier, later]) == before


def test_the_table_names_only_keys_the_schema_has_or_is_getting():
    schema = json.loads((ROOT / "variables" / "variables.schema.json").read_text())["properties"]
    pending = {("pod_labels",), ("pod_annotations",)}  # rows ahead of the schema are harmless, but stay few
    for path in LAYERED.keys() - pending:
        node = schema
        for key in path[:-1]:
            node = node[key]["properties"]
        assert path[-1] in node, path


# -- properties ---------------------------------------------------------------------------------------------------

_text = st.sampled_from(["a", "b", "c", "spot", "gpu"])
_toleration = st.fixed_dictionaries({}, optional={"key": _text, "effect": st.sampled_from(["NoSchedule",
                                                                                          "NoExecute"]),
                                                  "value": _text, "operator": st.sampled_from(["Exists", "Equal"])})
_env = st.fixed_dictionaries({"name": _text}, optional={"value": _text})
_keyed = {"tolerations": st.lists(_toleration, max_size=6), "env": st.lists(_env, max_size=6)}
_values = st.fixed_dictionaries({}, optional={**_keyed, "image_pull_secrets": st.lists(_text, max_size=5),
                                              "labels": st.dictionaries(_text, st.one_of(st.none(), _text))})


def _no_marker(value) -> bool:
    text = json.dumps(value)
    return PATCH not in text


@settings(max_examples=150, deadline=None)
@given(earlier=_values, later=_values)
def test_merging_a_file_again_changes_nothing(earlier, later):
    once = layer_values(earlier, later, "team.yaml")
    assert layer_values(once, later, "team.yaml") == once
    assert _no_marker(once)


@settings(max_examples=150, deadline=None)
@given(earlier=_values, later=_values)
def test_the_later_files_items_win_and_the_earlier_ones_of_other_keys_stay(earlier, later):
    merged = layer_values(earlier, later, "team.yaml")
    for name in _keyed:
        rule = LAYERED[(name,)]
        assert isinstance(rule, KeyedList)

        def key(item, rule=rule):
            return tuple(item.get(field) for field in rule.by)

        mine = later.get(name)
        result = merged.get(name, [])
        if mine is None:
            assert result == earlier.get(name, [])
            continue
        later_keys = {key(item) for item in mine}
        for each in later_keys:  # of a key the later file sets, its items and only those, in its order
            assert [item for item in result if key(item) == each] == [item for item in mine if key(item) == each]
        # of the others, the earlier file's, in their order
        assert ([item for item in result if key(item) not in later_keys]
                == [item for item in earlier.get(name, []) if key(item) not in later_keys])


@settings(max_examples=150, deadline=None)
@given(earlier=_values, deleted=st.lists(_toleration, min_size=1, max_size=3))
def test_the_result_never_holds_a_marker(earlier, deleted):
    present = {(item.get("key"), item.get("effect")) for item in earlier.get("tolerations", [])}
    later = {"tolerations": [{**item, PATCH: "delete"} for item in deleted]}
    if all((item.get("key"), item.get("effect")) in present for item in deleted):
        merged = layer_values(earlier, later, "team.yaml")
        assert _no_marker(merged)
        assert not {(item.get("key"), item.get("effect")) for item in merged["tolerations"]} & {
            (item.get("key"), item.get("effect")) for item in deleted}
    else:
        with pytest.raises(ValuesError, match="removes nothing"):
            layer_values(earlier, later, "team.yaml")


# -- the command as users run it ----------------------------------------------------------------------------------

def _job(stdout: bytes) -> dict:
    return next(doc for doc in yaml.safe_load_all(stdout) if doc and doc["kind"] == "Job")


def test_a_teams_toleration_keeps_the_platforms(gen, tmp_path):
    (tmp_path / "platform.yaml").write_text(
        "tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]\n"
        "env: [{name: HTTP_PROXY, value: 'http://proxy:3128'}, {name: NO_PROXY, value: .svc}]\n")
    (tmp_path / "team.yaml").write_text(
        "tolerations: [{key: team, operator: Equal, value: nlp, effect: NoSchedule}]\n"
        "env: [{name: NO_PROXY, value: '.svc,tracking'}]\n")
    result = gen("-f", str(tmp_path / "platform.yaml"), "-f", str(tmp_path / "team.yaml"))
    assert result.returncode == 0, result.stderr
    pod = _job(result.stdout)["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
                                  {"key": "team", "operator": "Equal", "value": "nlp", "effect": "NoSchedule"}]
    worker = next(c for c in pod["containers"] if c["name"] == "worker")
    env = {item["name"]: item.get("value") for item in worker["env"]}
    assert env["HTTP_PROXY"] == "http://proxy:3128" and env["NO_PROXY"] == ".svc,tracking"


def test_the_platform_example_renders_as_its_readme_says(gen):
    example = ROOT / "examples" / "platform"
    result = gen("-f", str(example / "platform.yaml"), "-f", str(example / "team.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    pod = _job(result.stdout)["spec"]["template"]["spec"]
    assert [item["key"] for item in pod["tolerations"]] == ["node-pool.example.com/spot", "team.example.com/reserved"]
    assert pod["imagePullSecrets"] == [{"name": "platform-registry"}, {"name": "team-nlp-registry"}]
    assert pod["nodeSelector"] == {"node-pool.example.com/class": "spot-gpu"}
    worker = next(c for c in pod["containers"] if c["name"] == "worker")
    env = [item["name"] for item in worker["env"] if "PROXY" in item["name"] or item["name"] == "TRACKING_URI"]
    assert env == ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "TRACKING_URI"]
    assert next(item for item in worker["env"] if item["name"] == "NO_PROXY")["value"].endswith("tracking.team-nlp")


def test_the_readmes_way_off_the_spot_nodes_removes_the_platforms_toleration_and_selector(gen, tmp_path):
    example = ROOT / "examples" / "platform"
    readme = (example / "README.md").read_text()
    block = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "no-spot.yaml").write_text(block)
    result = gen("-f", str(example / "platform.yaml"), "-f", str(example / "team.yaml"), "-f",
                 str(tmp_path / "no-spot.yaml"))
    assert result.returncode == 0, result.stderr
    pod = _job(result.stdout)["spec"]["template"]["spec"]
    assert [item["key"] for item in pod["tolerations"]] == ["team.example.com/reserved"]
    assert "node-pool.example.com/class" not in pod.get("nodeSelector", {})
