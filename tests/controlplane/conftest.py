"""The control-plane tier's one control plane, started once for the session when $KUBE_ASSETS has the binaries;
every test here is skipped, with the reason, otherwise."""

import pytest

from tests.controlplane.cluster import ControlPlane, assets_dir


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    assets, why_not = assets_dir()
    if assets is None:
        pytest.skip(why_not)
    plane = ControlPlane(assets, tmp_path_factory.mktemp("control-plane"))
    try:
        yield plane.start()
    finally:
        plane.stop()
