"""The target seam: a target is its options, its problems and its render, registered once; the CLI and
validation dispatch through the registry and name no target."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from generator import targets as registry
from generator.spec import JobSpec
from generator.targets import Target, register
from generator.templating import Manifest
from tests.generator.helpers import run_main


@dataclass(frozen=True)
class ToyOptions:
    queue: str  # the toy scheduler's queue, from the Kubernetes namespace


class ToyTarget(Target):
    """A third target, defined here only: one line per process, what a scheduler of single commands would run."""

    name = "toy"
    title = "Toy"

    def options(self, values: Mapping[str, Any]) -> ToyOptions:
        return ToyOptions(queue=values["namespace"])

    def option_problems(self, spec: JobSpec) -> Iterable[str]:
        if self.own(spec).queue == "forbidden":
            yield "namespace: the toy scheduler has no queue named forbidden"

    def problems(self, spec: JobSpec) -> Iterable[str]:
        if spec.gpus:
            yield "resources.gpu.accelerator_count: the toy scheduler has no GPUs"

    def render(self, spec: JobSpec) -> list[Manifest]:
        flags = spec.torchrun_flags(node_rank="$NODE", master_addr="head")
        command = " ".join(["torchrun", *(flag.text for flag in flags), *spec.program])
        lines = [f"{self.own(spec).queue} {spec.name}-{node}: {command}\n" for node in range(spec.replicas)]
        return [Manifest("ToyPlan", "plan.txt", "".join(lines))]


@pytest.fixture
def toy():
    register(ToyTarget())
    try:
        yield
    finally:
        registry._REGISTRY.pop("toy", None)


def test_a_target_defined_in_a_test_renders_through_the_cli_with_no_other_change(toy):
    result = run_main("--target", "toy", "--set", "replicas=3", "--set", "namespace=ml")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[2].startswith("ml mnist-train-2: torchrun --nnodes=3 --nproc-per-node=1 "
                                                   "--node-rank=$NODE --master-addr=head --master-port=29500")
    assert lines[0].endswith("--shutdown-timeout=55 -m worker")
    # the keys only other targets use, as the schema's x-targets declare them, are named as ignored
    assert "ignored on Toy: namespace" in result.stderr


def test_its_problems_and_its_options_problems_are_reported_as_every_targets(toy):
    refused = run_main("--target", "toy", "--set", "resources.gpu.accelerator_count=1")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr == "gen-manifests: error: resources.gpu.accelerator_count: the toy scheduler has no GPUs\n"
    # a target's checks of its own options hold whatever the target: a values file stays valid for all
    on_kubernetes = run_main("--set", "namespace=forbidden")
    assert on_kubernetes.exit_code == 2
    assert "namespace: the toy scheduler has no queue named forbidden" in on_kubernetes.stderr


def test_the_help_lists_the_registered_targets(toy):
    assert "[kubernetes|slurm|local|toy]" in run_main("--help").stdout
    unknown = run_main("--target", "nomad")
    assert unknown.exit_code == 2 and "'nomad' is not one of 'kubernetes', 'slurm', 'local', 'toy'" in unknown.stderr


def test_the_local_run_renders_what_kubernetes_renders_and_names_what_local_job_ignores():
    sets = ["--set", "tolerations=[{key: gpu, operator: Exists}]", "--set", "namespace=ml",
            "--set", "active_deadline_seconds=600"]
    local, cluster = run_main("--target", "local", *sets), run_main(*sets)
    assert local.exit_code == cluster.exit_code == 0
    assert local.stdout == cluster.stdout
    kinds = [document["kind"] for document in yaml.safe_load_all(local.stdout)]
    assert kinds == ["PersistentVolumeClaim", "ConfigMap", "Service", "Job"]
    # local-job honours the namespace (its volume root) and activeDeadlineSeconds, not the scheduling keys
    assert local.stderr == "gen-manifests: warning: ignored on local-job: tolerations\n"
    assert cluster.stderr == ""


def test_every_built_in_target_is_registered_once_with_its_options_in_the_spec():
    from generator.resources import default_values

    found = registry.targets()
    assert list(found)[:3] == ["kubernetes", "slurm", "local"]
    spec = registry.spec_of(default_values())
    assert set(spec.options) == set(found)
    assert type(spec.options["kubernetes"]).__name__ == "KubernetesOptions"
    assert type(spec.options["slurm"]).__name__ == "SlurmOptions"
