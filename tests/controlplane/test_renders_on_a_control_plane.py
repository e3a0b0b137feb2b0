"""Every values shape the render tests cover, on a real kube-apiserver: admitted by a server-side dry run and by
apply (client-side and server-side, in both orders), then unchanged on a second apply, with an empty kubectl diff:
what the render writes is what the server stores (a PodMonitor against its CRD, installed first). Every example's and guide's values file as it is (the 7B guide's
RDMA resource and InfiniBand beside the GPUs among them) admitted by a server-side dry run. Skipped without
$KUBE_ASSETS (see cluster.py)."""


import pytest

from tests.conftest import ROOT
from tests.custom_resources import CUSTOM_RESOURCES
from tests.generator.test_render import MATRIX
from tests.rendering import gen_manifests

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def render(namespace: str, sets: list[str]) -> str:
    return gen_manifests(*sets, namespace=namespace).decode()


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_the_render_is_admitted_and_stays_unchanged(name, control_plane):
    namespace = f"render-{name}"
    control_plane.kubectl("create", "namespace", namespace)
    stream = render(namespace, MATRIX[name])
    for kind, crd in CUSTOM_RESOURCES.items():  # as the Prometheus Operator's install would have
        if f"\nkind: {kind}\n" in stream:
            control_plane.kubectl("apply", "--server-side", "-f", str(crd))
            control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd))
    control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=stream)
    control_plane.kubectl("apply", "-f", "-", stdin=stream)
    again = control_plane.kubectl("apply", "-f", "-", stdin=stream).stdout.splitlines()
    assert again and all(line.endswith(" unchanged") for line in again), again
    diff = control_plane.kubectl("diff", "-f", "-", stdin=stream, check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    # a server-side apply after the client-side one takes the fields over without a conflict
    control_plane.kubectl("apply", "--server-side", "-f", "-", stdin=stream)


EXAMPLES = sorted((ROOT / "examples").glob("**/values.yaml"))


@pytest.mark.parametrize("values", EXAMPLES, ids=[str(path.parent.relative_to(ROOT / "examples")) for path in EXAMPLES])
def test_every_examples_render_is_admitted(values, control_plane):
    namespace = f"example-{values.parent.name}"
    control_plane.kubectl("create", "namespace", namespace)
    stream = gen_manifests(namespace=namespace, values=values).decode()
    admitted = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=stream).stdout.splitlines()
    kinds = {line.split("/")[0] for line in admitted}
    assert {"persistentvolumeclaim", "configmap", "service", "job.batch"} <= kinds, admitted
