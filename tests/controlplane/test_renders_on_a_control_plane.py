"""Every values shape the render tests cover, on a real kube-apiserver: admitted by a server-side dry run and by
apply (client-side and server-side, in both orders), then unchanged on a second apply, with an empty kubectl diff:
what the render writes is what the server stores. Skipped without $KUBE_ASSETS (see cluster.py)."""

import subprocess

import pytest

from tests.conftest import BIN
from tests.generator.test_render import MATRIX

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def render(namespace: str, sets: list[str]) -> str:
    args = [str(BIN / "gen-manifests"), "--set", f"namespace={namespace}"]
    for item in sets:
        args += ["--set", item]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_the_render_is_admitted_and_stays_unchanged(name, control_plane):
    namespace = f"render-{name}"
    control_plane.kubectl("create", "namespace", namespace)
    stream = render(namespace, MATRIX[name])
    control_plane.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", stdin=stream)
    control_plane.kubectl("apply", "-f", "-", stdin=stream)
    again = control_plane.kubectl("apply", "-f", "-", stdin=stream).stdout.splitlines()
    assert again and all(line.endswith(" unchanged") for line in again), again
    diff = control_plane.kubectl("diff", "-f", "-", stdin=stream, check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    # a server-side apply after the client-side one takes the fields over without a conflict
    control_plane.kubectl("apply", "--server-side", "-f", "-", stdin=stream)
