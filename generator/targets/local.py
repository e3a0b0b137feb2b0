"""The local run: local-job runs the Kubernetes objects on this machine as the Job controller and kubelets
would, so this target renders exactly what the Kubernetes target renders; what it adds is which keys mean
something there (the schema's x-targets: a key local-job does not honour, such as tolerations, is named as
ignored when set).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from generator.spec import JobSpec
from generator.targets import register
from generator.targets.kubernetes import (
    KubernetesOptions,
    KubernetesTarget,
    credential_problems,
    kubernetes_options,
    render_manifests,
)
from generator.templating import Manifest


class LocalTarget(KubernetesTarget):
    name = "local"
    title = "local-job"

    def options(self, values: Mapping[str, Any]) -> KubernetesOptions:
        return kubernetes_options(values)

    def option_problems(self, spec: JobSpec) -> tuple[str, ...]:
        return ()  # its options are Kubernetes', which that target checks (a problem is reported once)

    def problems(self, spec: JobSpec) -> Iterable[str]:
        return credential_problems(spec, self.own(spec))  # local-job enforces no NetworkPolicy: it is ignored

    def warnings(self, values: Mapping[str, Any], spec: JobSpec) -> Iterable[str]:
        return ()  # network_policy is named among the keys local-job ignores

    def render(self, spec: JobSpec) -> list[Manifest]:
        return render_manifests(spec, target=self.name)


register(LocalTarget())
