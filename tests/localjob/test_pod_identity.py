"""Who local-job's pods run as, and that the caller's home never reaches them (localjob/identity.py).

The pods here run /bin/sh (any user can), so that local-job run as root can start them as their securityContext's
user; the Python of this environment may sit where that user cannot go (CI's is under /root), which is the
refusal the second test checks.
"""

import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from localjob.identity import pod_identity
from localjob.manifests import ManifestError, plan
from tests.conftest import BIN, OUTSIDE
from tests.rendering import gen_manifests

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="local-job switches users only when run as root")

REPORT = r"""
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
echo "home=$HOME user=${USER-unset}"
echo "home-holds=$(ls -A "$HOME" | wc -l)"
grep NoNewPrivs /proc/self/status
test -e "$HOME/.aws/credentials" && echo "home-credentials=found" || echo "home-credentials=none"
cat "$CALLER_CREDENTIALS" >/dev/null 2>&1 && echo "read=caller-credentials" || echo "read=nothing"
touch /pvc-home/written && echo "written=$(stat -c '%u %g' /pvc-home/written)"
"""


def shell_job(*sets: str, context: dict | None = None) -> str:
    """The rendered default Job with its container running REPORT under /bin/sh and no init container;
    ``context`` replaces the pod's securityContext."""
    documents = list(yaml.safe_load_all(gen_manifests("replicas=1", *sets)))
    job = next(doc for doc in documents if doc["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    pod.pop("initContainers", None)
    container = pod["containers"][0]
    container["command"], container["args"] = ["/bin/sh", "-c", REPORT], []
    if context is not None:
        pod["securityContext"] = context
    return yaml.safe_dump_all(documents)


def local_job(manifests: str, root: Path, *options: str, home: Path, allow_root: bool = False):
    """local-job as root in a shell whose HOME is ``home``; its image directory one that every user can enter."""
    env = {key: value for key, value in os.environ.items() if key != "LOCAL_JOB_ALLOW_ROOT"}
    env.update(HOME=str(home), USER="root", **({"LOCAL_JOB_ALLOW_ROOT": "1"} if allow_root else {}))
    result = subprocess.run([str(BIN / "local-job"), "--volume-root", str(root), "--backoff-seconds", "0.2",
                             "--image-dir", "/usr", "--env", f"CALLER_CREDENTIALS={home}/.aws/credentials",
                             *options],
                            input=manifests, capture_output=True, text=True, cwd=OUTSIDE, env=env, timeout=120)
    return result, result.stdout + result.stderr


def reported(log: str) -> dict[str, str]:
    """The pod's REPORT lines, key=value."""
    return dict(re.findall(r"\] (\w[\w-]*)=(.*)$", log, re.M))


@pytest.fixture
def caller_home(tmp_path):
    """The caller's home, with credentials in it no pod was given."""
    home = tmp_path / "caller"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = caller-secret\n")
    return home


@pytest.fixture
def open_root():
    """A volume root every user can reach (pytest's tmp_path sits in a directory only root may enter)."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="local-job-identity-") as directory:
        os.chmod(directory, 0o755)
        yield Path(directory) / "root"


@as_root
def test_run_as_root_the_pods_run_as_their_user_with_a_home_of_their_own(open_root, caller_home):
    manifests = shell_job("security.run_as_user=10001", "security.run_as_group=10002", "security.fs_group=10003")
    result, log = local_job(manifests, open_root, home=caller_home)
    assert result.returncode == 0, log[-3000:]
    report = reported(log)
    assert report["uid"] == "10001 gid=10002 groups=10002 10003"
    home = Path(report["home"].split(" user=")[0])
    assert home.parent.parent == open_root / "pods" and home.name == "home" and home != caller_home
    assert report["home"].endswith("user=unset") and report["home-holds"] == "0"
    # the caller's ~/.aws is neither where the pod's libraries look (its HOME) nor readable by its user
    assert report["home-credentials"] == "none" and report["read"] == "nothing"
    assert "NoNewPrivs:\t1" in log  # allowPrivilegeEscalation: false
    claim = open_root / "volumes" / "mnist-train-data"
    assert report["written"] == "10001 10003"  # the claim is fsGroup's, and what the pod writes there too
    assert claim.stat().st_gid == 10003 and claim.stat().st_mode & stat.S_ISGID
    assert "local-job: the pods run as uid 10001, gid 10002, groups 10003 (their securityContext)" in log
    assert ("local-job: securityContext: readOnlyRootFilesystem (the pods can write wherever their user may), "
            "seccompProfile: not enforced here") in log
    assert "caller-secret" not in log


@as_root
def test_run_as_root_a_user_who_cannot_reach_the_pods_directories_is_refused_unless_allow_root(tmp_path, caller_home):
    root = tmp_path / "root"  # under pytest's private directory: uid 10001 cannot enter it
    result, log = local_job(shell_job(), root, home=caller_home)
    assert result.returncode == 2 and result.stdout == ""
    assert (f"local-job: cannot run these manifests: the pods would run as uid 10001 (securityContext.runAsUser), "
            f"which cannot enter {root}; make it reachable for that user, run local-job as that user, or pass "
            "--allow-root (LOCAL_JOB_ALLOW_ROOT=1) to run the pods as root") in log
    assert not root.exists()  # refused before anything was made
    result, log = local_job(shell_job(), root, home=caller_home, allow_root=True)
    assert result.returncode == 0, log[-3000:]
    assert reported(log)["uid"].startswith("0 ")
    assert (f"local-job: the pods run as root (--allow-root): uid 10001 (securityContext.runAsUser), which cannot "
            f"enter {root}; runAsUser and runAsNonRoot are not enforced") in log
    assert "local-job: securityContext capabilities.drop: not enforced for pods running as root" in log
    # root could read any file it is pointed at, but nothing points it at the caller's: HOME is the pod's own
    assert reported(log)["home-credentials"] == "none" and "caller-secret" not in log


@as_root
def test_run_as_non_root_without_a_user_is_refused_as_root_and_a_contradiction_always(tmp_path, caller_home):
    no_user = shell_job(context={"runAsNonRoot": True})
    result, log = local_job(no_user, tmp_path / "root", home=caller_home)
    assert result.returncode == 2
    assert ("runAsNonRoot: the pods name no runAsUser, so they would run as root, as local-job does; set "
            "security.run_as_user, run local-job as another user, or pass --allow-root to run them as root") in log
    result, log = local_job(no_user, tmp_path / "root", home=caller_home, allow_root=True)
    assert result.returncode == 0 and "the pods run as root (--allow-root): runAsNonRoot is not enforced" in log
    root_user = shell_job(context={"runAsNonRoot": True, "runAsUser": 0})
    result, log = local_job(root_user, tmp_path / "other", home=caller_home, allow_root=True)
    assert result.returncode == 2 and "runAsNonRoot with runAsUser 0 (a kubelet refuses this pod too" in log


def identity_of(context: dict | None, euid: int, allow_root: bool = False):
    return pod_identity(plan(list(yaml.safe_load_all(shell_job(context=context)))), allow_root, [], euid=euid)


@pytest.mark.parametrize("context, euid, allow_root, run_as, notes", [
    # not root: the pods run as the caller, who is no root, whatever the context says; a different user is said
    ({"runAsNonRoot": True, "runAsUser": 10001}, 1000, False, None,
     ["runAsUser 10001: the pods run as you (uid 1000): only root can start processes as another user"]),
    ({"runAsNonRoot": True, "runAsUser": 1000}, 1000, False, None, []),
    ({"runAsNonRoot": True}, 1000, False, None, []),
    # root, no user named (the container's runAsNonRoot stays): as root only when allowed, and said
    ({}, 0, True, None, ["the pods run as root (--allow-root): runAsNonRoot is not enforced"]),
    # root, a user every path allows (no needs, /bin/sh): switched
    ({"runAsUser": 4242, "fsGroup": 4343, "supplementalGroups": [4444]}, 0, False, (4242, 4242, (4343, 4444)),
     ["the pods run as uid 4242, gid 4242, groups 4343 4444 (their securityContext)"]),
])
def test_who_the_pods_run_as(context, euid, allow_root, run_as, notes):
    if run_as is not None and os.geteuid() != 0:
        pytest.skip("the probe runs a shell as another user: root only")
    identity = identity_of(context, euid, allow_root)
    assert (identity.run_as and (identity.run_as.uid, identity.run_as.gid, identity.run_as.groups)) == run_as \
        or identity.run_as is run_as
    # the rendered containers' own context (readOnlyRootFilesystem, capabilities.drop) stays
    assert [note for note in identity.notes if not note.startswith("securityContext")] == notes
    assert identity.no_new_privileges  # every container says allowPrivilegeEscalation: false


def test_containers_that_name_different_users_are_refused():
    documents = list(yaml.safe_load_all(shell_job(context={"runAsUser": 10001})))
    job = next(doc for doc in documents if doc["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUser"] = 10005
    job["spec"]["template"]["spec"]["initContainers"] = [{"name": "first", "image": "x", "command": ["/bin/true"]}]
    with pytest.raises(ManifestError, match="the containers name different users"):
        pod_identity(plan(documents), True, [], euid=0)


@as_root
def test_without_fs_group_the_claim_is_the_users_and_what_was_there_stays_whose_it_was(open_root, caller_home):
    claim = open_root / "volumes" / "mnist-train-data"
    claim.mkdir(parents=True)
    (claim / "earlier").write_text("kept")  # a file of an earlier run, root's
    manifests = shell_job(context={"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001})
    result, log = local_job(manifests, open_root, home=caller_home)
    assert result.returncode == 0, log[-3000:]
    assert reported(log)["written"] == "10001 10001"
    assert claim.stat().st_uid == 10001 and (claim / "earlier").stat().st_uid == 0
