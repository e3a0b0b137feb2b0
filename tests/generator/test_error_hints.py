"""Error hints name the path to type: an unknown key points at where it belongs, a name that
is too long states the real limit for the given replicas."""

import pytest

from generator.resources import schema
from tests.generator.helpers import run_main
from trainer_contract.names import MAX_HOSTNAME, longest_name

PREFIX = "gen-manifests: error: "


def name_of(length: int) -> str:
    return ("n" + "x" * 100)[:length]


def errors(*args: str) -> list[str]:
    result = run_main(*args)
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    return sorted(line.removeprefix(PREFIX) for line in result.stderr.splitlines())


# (the --set options, every error they give, exactly)
UNKNOWN_KEYS = [
    (["RESUME=false"], ["RESUME: unknown key (did you mean config_map.RESUME?)"]),
    (["epochs=ten"], ["epochs: unknown key (did you mean config_map.EPOCHS?)"]),
    (["LEARNING_RATE=0.1"], ["LEARNING_RATE: unknown key (did you mean config_map.LEARNING_RATE?)"]),
    (["slurm.EPOCHS=3"], ["slurm.EPOCHS: unknown key (did you mean config_map.EPOCHS?)"]),
    (["accelerator_count=2"], ["accelerator_count: unknown key (did you mean resources.gpu.accelerator_count?)"]),
    (["acelerator_count=2"], ["acelerator_count: unknown key (did you mean resources.gpu.accelerator_count?)"]),
    (["partition=gpu"], ["partition: unknown key (did you mean slurm.partition?)"]),
    (["resources.gpu.cpu=2"], ["resources.gpu.cpu: unknown key (did you mean resources.cpu?)"]),
    (["resources.replicas=2"], ["resources.replicas: unknown key (did you mean replicas at the top level?)"]),
    # a close key of the same mapping comes first
    (["replica=3"], ["replica: unknown key (did you mean 'replicas'?)"]),
    (["Replicas=3"], ["Replicas: unknown key (did you mean 'replicas'?)"]),
    (["resources.gpu.acelerator_count=2"],
     ["resources.gpu.acelerator_count: unknown key (did you mean 'accelerator_count'?)"]),
    # inside a list's item: the same item's key, with its index
    (["env=[{name: X, value: a, secretKeyRef: {name: s, key: k}}]"],
     ["env[0].secretKeyRef: unknown key (did you mean env[0].valueFrom.secretKeyRef?)"]),
    (["extra_volumes=[{name: a, mount_path: /a, secret: s, size: 1}]"],
     ["extra_volumes[0].size: unknown key (did you mean extra_volumes[0].empty_dir.size or shared_volume.size?)"]),
    # nothing like it anywhere: a short list of keys is listed, the top level's 31 are not
    (["extra_volumes=[{name: a, mount_path: /a, hostPath: /x}]"],
     ["extra_volumes[0].hostPath: unknown key (allowed: claim, config_map, empty_dir, mount_path, name, read_only, "
      "secret)"]),
    # left out on purpose: why, and what instead
    (["security.add_capabilities=[IPC_LOCK]"],
     ["security.add_capabilities: unknown key (not offered: capabilities added to a non-root container never reach "
      "its processes (Kubernetes puts them in the bounding set only, and allowPrivilegeEscalation: false ignores "
      "file capabilities); for resources.gpu.network: infiniband NCCL needs an unlimited locked-memory limit "
      "instead, which the node's container runtime sets (containerd: LimitMEMLOCK=infinity) and the launcher "
      "checks)"]),
    (["bogus=1"], [f"bogus: unknown key (none of the {len(schema()['properties'])} keys at the top level is like "
                   "it; see `gen-manifests --print-schema` or the values table in docs/reference.md)"]),
]


@pytest.mark.parametrize("sets, expected", UNKNOWN_KEYS, ids=[sets[0].partition("=")[0] for sets, _ in UNKNOWN_KEYS])
def test_an_unknown_key_names_the_path_it_belongs_at(sets, expected):
    args = [arg for assignment in sets for arg in ("--set", assignment)]
    assert errors(*args) == sorted(expected)


def test_the_same_hint_for_a_values_file(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text('epochs: "ten"\nRESUME: false\n')
    assert errors("--values", str(values)) == [
        "RESUME: unknown key (did you mean config_map.RESUME?)",
        "epochs: unknown key (did you mean config_map.EPOCHS?)",
    ]


def test_the_options_a_hint_points_at_exist():
    assert run_main("--print-schema").exit_code == 0


@pytest.mark.parametrize("replicas, longest", [(1, 61), (2, 61), (10, 61), (11, 60), (100, 60), (101, 59),
                                               (100000, 57)])
def test_the_longest_name_leaves_room_for_the_last_pods_index(replicas, longest):
    assert longest_name(replicas) == longest == MAX_HOSTNAME - len(f"-{replicas - 1}")


@pytest.mark.parametrize("replicas", [1, 2, 10, 11, 12, 100, 101])
def test_a_name_of_the_longest_length_renders_and_one_more_is_refused(replicas):
    longest = longest_name(replicas)
    assert run_main("--check", "--set", f"replicas={replicas}", "--set", f"name={name_of(longest)}").exit_code == 0
    assert errors("--set", f"replicas={replicas}", "--set", f"name={name_of(longest + 1)}")[0].startswith(
        f"name: '{name_of(longest + 1)}' has {longest + 1} characters; with {replicas} replica")


# (name length, replicas as set, every error, exactly; {name} is the name)
NAME_LENGTHS = [
    (62, "2", ["name: '{name}' has 62 characters; with 2 replicas it may have at most 61 (pod hostnames <name>-0 .. "
               "<name>-1 must fit in 63)"]),
    # over the schema's maxLength: the same message, not "must be at most 63 characters long"
    (70, "2", ["name: '{name}' has 70 characters; with 2 replicas it may have at most 61 (pod hostnames <name>-0 .. "
               "<name>-1 must fit in 63)"]),
    (62, "1", ["name: '{name}' has 62 characters; with 1 replica it may have at most 61 (the pod hostname <name>-0 "
               "must fit in 63)"]),
    (61, "12", ["name: '{name}' has 61 characters; with 12 replicas it may have at most 60 (pod hostnames <name>-0 .. "
                "<name>-11 must fit in 63)"]),
    (64, "12", ["name: '{name}' has 64 characters; with 12 replicas it may have at most 60 (pod hostnames <name>-0 .. "
                "<name>-11 must fit in 63)"]),
    # replicas wrong too: its limit is not known, but 61 with up to 10 replicas is
    (70, "many", ["name: '{name}' has 70 characters; it may have at most 61 with up to 10 replicas, fewer with more "
                  "(pod hostnames <name>-<index> must fit in 63)",
                  'replicas: must be integer, not a string ("many")']),
    (62, "0", ["name: '{name}' has 62 characters; it may have at most 61 with up to 10 replicas, fewer with more "
               "(pod hostnames <name>-<index> must fit in 63)",
               "replicas: 0 must be at least 1"]),
    (61, "0", ["replicas: 0 must be at least 1"]),  # fits for up to 10 replicas: not known to be too long
]


@pytest.mark.parametrize("length, replicas, expected", NAME_LENGTHS,
                         ids=[f"{length}-characters-replicas-{replicas}" for length, replicas, _ in NAME_LENGTHS])
def test_a_name_too_long_states_the_limit_for_the_replicas(length, replicas, expected):
    name = name_of(length)
    assert errors("--set", f"name={name}", "--set", f"replicas={replicas}") == sorted(
        line.replace("{name}", name) for line in expected)
