"""prepare.sh, run.sh and clean.sh as a user runs them."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT


def script(name, *args, build: Path, path_prefix: Path | None = None, timeout=120, runs: Path | None = None):
    env = {**os.environ, "BUILD_DIR": str(build), "PATH": f"{BIN}:{os.environ['PATH']}",
           "RUNS_DIR": str(runs or build.parent / "runs"),
           # local-job's default volume roots: never the home directory of whoever runs the tests
           "XDG_STATE_HOME": str(build.parent / "state")}
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run([str(ROOT / name), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


@pytest.fixture
def fake_kubectl(tmp_path):
    """A kubectl that records its arguments: there is no cluster on the machines the tests run on."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    log = tmp_path / "kubectl.log"
    (bin_dir / "kubectl").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexit 0\n')
    (bin_dir / "kubectl").chmod(0o755)
    return bin_dir, log


def test_prepare_renders_into_build_and_keeps_it_on_failure(tmp_path):
    build = tmp_path / "build"
    result = script("prepare.sh", "--set", "replicas=3", build=build)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in build.iterdir()) == [
        ".gen-manifests", "1-persistentvolumeclaim.yaml", "2-configmap.yaml", "3-service.yaml", "4-job.yaml"]
    before = (build / "4-job.yaml").read_text()
    assert "completions: 3" in before
    failed = script("prepare.sh", "--set", "replicas=0", build=build)
    assert failed.returncode == 2
    assert "replicas: 0 must be at least 1" in failed.stderr
    assert (build / "4-job.yaml").read_text() == before
    assert not list(tmp_path.glob("build.tmp.*")), "staging directories are cleaned up"


def test_a_slurm_render_keeps_the_kubernetes_render_and_the_reverse(tmp_path):
    build = tmp_path / "build"
    assert script("prepare.sh", "--set", "replicas=3", build=build).returncode == 0
    job = (build / "4-job.yaml").read_text()
    slurm = script("prepare.sh", "--target", "slurm", build=build)
    assert slurm.returncode == 0, slurm.stderr
    assert (build / "4-job.yaml").read_text() == job and (build / "job.sbatch").is_file()
    assert "kept the other target's earlier render: 1-persistentvolumeclaim.yaml 2-configmap.yaml" in slurm.stderr
    batch = (build / "job.sbatch").read_text()
    assert script("prepare.sh", "--set", "replicas=2", build=build).returncode == 0
    assert (build / "job.sbatch").read_text() == batch and "completions: 2" in (build / "4-job.yaml").read_text()


@pytest.mark.parametrize("name", ["prepare.sh", "run.sh", "clean.sh"])
def test_scripts_have_help(name, tmp_path):
    result = script(name, "--help", build=tmp_path / "build")
    assert result.returncode == 0 and result.stdout.startswith(f"Usage: ./{name}")


def test_run_without_a_render_says_to_prepare(tmp_path):
    result = script("run.sh", build=tmp_path / "none")
    assert result.returncode == 1
    assert "run ./prepare.sh first" in result.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs the kubectl client")
def test_run_without_a_cluster_says_so(tmp_path, monkeypatch):
    build = tmp_path / "build"
    script("prepare.sh", build=build)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    result = script("run.sh", build=build)
    assert result.returncode == 1
    assert "no Kubernetes cluster is reachable" in result.stderr


def test_run_without_kubectl_says_so(tmp_path):
    build = tmp_path / "build"
    script("prepare.sh", build=build)
    # A PATH holding only what run.sh needs before it looks for kubectl.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    result = subprocess.run([str(bin_dir / "bash"), str(ROOT / "run.sh")], capture_output=True, text=True,
                            env={"BUILD_DIR": str(build), "PATH": str(bin_dir)}, cwd=ROOT)
    assert result.returncode == 1 and "kubectl is not installed" in result.stderr


def test_run_applies_the_build_directory_and_explains_how_to_follow(tmp_path, fake_kubectl):
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    script("prepare.sh", "--set", "namespace=ml", "--set", "name=digits", build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert f"apply -f {build}" in calls
    assert "get namespace ml" in calls
    assert "kubectl -n ml logs -f -l app.kubernetes.io/instance=digits" in result.stderr


def cluster_without(tmp_path, *missing: str, forbidden: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A kubectl whose cluster lacks the objects named (`get KIND NAME` fails for them with the API server's
    NotFound, as kubectl prints it), and refuses the user reading those ``forbidden`` (Forbidden), recording its
    calls."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "kubectl.log"
    bin_dir.mkdir()
    cases = "".join(f'  *"get {what}"*) echo \'Error from server (NotFound): {what.split()[0]} "{what.split()[-1]}" '
                    f'not found\' >&2; exit 1;;\n' for what in missing)
    cases += "".join(f'  *"get {what}"*) echo \'Error from server (Forbidden): {what.split()[0]} "{what.split()[-1]}" is '
                     f'forbidden: User "alice" cannot get resource "{what.split()[0]}s" at the cluster scope\' >&2; '
                     f'exit 1;;\n' for what in forbidden)
    (bin_dir / "kubectl").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\ncase "$*" in\n{cases}esac\nexit 0\n')
    (bin_dir / "kubectl").chmod(0o755)
    return bin_dir, log


@pytest.mark.parametrize("sets, missing, expected", [
    (["service_account_name=trainer"], ["serviceaccount trainer"],
     ["service_account_name 'trainer' is not a ServiceAccount of namespace default; create it "
      "(kubectl -n default create serviceaccount trainer) or set service_account_name: null"]),
    (["priority_class_name=urgent"], ["priorityclass urgent"],
     ["priority_class_name 'urgent' is not a PriorityClass of this cluster"]),
    (["queue_name=team-a"], ["crd localqueues.kueue.x-k8s.io"],
     ["queue_name 'team-a' needs Kueue, which this cluster does not have"]),
    (["queue_name=team-a"], ["localqueues.kueue.x-k8s.io team-a"],
     ["queue_name 'team-a' is not a LocalQueue of namespace default"]),
    (["namespace=ml", "priority_class_name=urgent"], ["namespace ml", "priorityclass urgent"],
     ["namespace 'ml' does not exist", "priority_class_name 'urgent' is not a PriorityClass"]),
])
def test_run_refuses_values_that_leave_the_job_without_pods(tmp_path, sets, missing, expected):
    """A missing ServiceAccount, PriorityClass, namespace or Kueue queue: the Job would be created and never get
    a pod. run.sh says so, one line each, and applies nothing."""
    bin_dir, log = cluster_without(tmp_path, *missing)
    build = tmp_path / "build"
    script("prepare.sh", *[arg for item in sets for arg in ("--set", item)], build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("run.sh: error: ") and "nothing was applied" not in line]
    assert len(errors) == len(expected) and all(want in line for want, line in zip(expected, errors, strict=True))
    assert "nothing was applied" in result.stderr
    assert not [call for call in log.read_text().splitlines() if call.startswith("apply")]


def test_run_tells_a_check_it_may_not_make_from_an_object_that_is_missing(tmp_path):
    """A submitter whose Role may not read PriorityClasses (cluster-scoped) is told that, in kubectl's words, not
    that the PriorityClass does not exist; nothing is applied."""
    bin_dir, log = cluster_without(tmp_path, forbidden=("priorityclass urgent",))
    build = tmp_path / "build"
    script("prepare.sh", "--set", "priority_class_name=urgent", build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 1
    assert ("run.sh: error: cannot check what the Job needs: kubectl get priorityclass urgent was refused: Error from "
            'server (Forbidden): priorityclass "urgent" is forbidden: User "alice" cannot get') in result.stderr
    assert "is not a PriorityClass" not in result.stderr
    assert not [call for call in log.read_text().splitlines() if call.startswith("apply")]


def test_run_applies_when_the_cluster_has_what_the_job_names(tmp_path, fake_kubectl):
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    script("prepare.sh", "--set", "service_account_name=trainer", "--set", "priority_class_name=urgent",
           "--set", "queue_name=team-a", build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert {"get namespace default", "-n default get serviceaccount trainer", "get priorityclass urgent",
            "get crd localqueues.kueue.x-k8s.io", "-n default get localqueues.kueue.x-k8s.io team-a"} <= set(calls)
    assert calls[-1] == f"apply -f {build}"


def test_run_explains_a_job_that_exists_with_other_settings(tmp_path):
    """kubectl apply fails on the Job's immutable template: run.sh says what to do instead."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text('#!/bin/sh\ncase "$*" in apply*) echo "field is immutable" >&2; exit 1;; esac\n'
                                     'exit 0\n')
    (bin_dir / "kubectl").chmod(0o755)
    build = tmp_path / "build"
    script("prepare.sh", "--set", "config_map.EPOCHS='9'", build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 1
    assert "Job default/mnist-train already exists" in result.stderr and "./clean.sh first" in result.stderr


@pytest.mark.parametrize(("sets", "args", "code", "said"), [
    (["fault_tolerance.max_replicas=4"], ["--scale", "4"], 0, "Job default/mnist-train scaled to 4 replica groups"),
    (["fault_tolerance.max_replicas=4"], ["--scale", "5"], 2,
     "scale: 5 groups is outside the job's bounds: from fault_tolerance.min_replicas (1) to "
     "fault_tolerance.max_replicas (4)"),
    ([], ["--scale", "3"], 2, "scale: 3 groups is outside the job's bounds: from fault_tolerance.min_replicas (1) to "
     "fault_tolerance.max_replicas (2)"),
    (["fault_tolerance.max_replicas=4"], ["--scale", "x"], 1, "--scale needs the number of groups"),
    (["fault_tolerance.max_replicas=4"], ["--slurm", "--scale", "3"], 1, "a Slurm allocation does not grow"),
])
def test_run_scale_patches_the_job_of_replica_groups_within_its_bounds(tmp_path, fake_kubectl, sets, args, code, said):
    """./run.sh --scale N: one merge patch of completions, parallelism and maxFailedIndexes (generator/scale.py);
    outside min_replicas..max_replicas, or not a number, it says why and nothing is sent."""
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    sets = ["replicas=2", "fault_tolerance.replica_groups=true", *sets]
    assert script("prepare.sh", *[part for item in sets for part in ("--set", item)], build=build).returncode == 0
    result = script("run.sh", *args, build=build, path_prefix=bin_dir)
    assert result.returncode == code and said in result.stderr.strip().splitlines()[-1], result.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    patches = [call for call in calls if " patch " in f" {call} "]
    assert patches == (['-n default patch job mnist-train --type=merge -p '
                        '{"spec": {"completions": 4, "maxFailedIndexes": 2, "parallelism": 4}}'] if code == 0 else [])


def test_run_scale_refuses_a_job_that_is_one_gang(tmp_path, fake_kubectl):
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    script("prepare.sh", build=build)
    result = script("run.sh", "--scale", "3", build=build, path_prefix=bin_dir)
    assert result.returncode == 2 and "is one gang, whose size is fixed" in result.stderr, result.stderr
    assert not log.exists() or " patch " not in log.read_text()


def test_clean_keeps_the_volume_unless_all(tmp_path, fake_kubectl):
    bin_dir, log = fake_kubectl
    build = tmp_path / "build"
    script("prepare.sh", build=build)
    assert script("clean.sh", build=build, path_prefix=bin_dir).returncode == 0
    calls = log.read_text()
    assert "4-job.yaml" in calls and "--cascade=foreground" in calls and "3-service.yaml" in calls
    # every ConfigMap of the job, the old renders' included (each is immutable, named by its content)
    assert ("delete configmap --ignore-not-found --wait=true -n default "
            "-l app.kubernetes.io/instance=mnist-train,app.kubernetes.io/component=config") in calls
    assert "1-persistentvolumeclaim.yaml" not in calls
    assert script("clean.sh", "--all", build=build, path_prefix=bin_dir).returncode == 0
    assert "1-persistentvolumeclaim.yaml" in log.read_text()


def test_clean_local_removes_every_local_state_of_the_job_and_keeps_the_data_unless_all(tmp_path, fake_kubectl):
    bin_dir, log = fake_kubectl
    build, runs = tmp_path / "build", tmp_path / "runs"
    script("prepare.sh", build=build)
    root = runs / "mnist-train"  # run.sh --local's
    own = tmp_path / "state" / "local-job" / "default" / "mnist-train"  # a `local-job build/` run by hand
    claim = root / "volumes" / "mnist-train-data"
    for path in ("logs/mnist-train-0-abcde.log", "status.json", "image/.keep", "volumes/mnist-train-data/data/t10k",
                 "volumes/mnist-train-data/runs/mnist-train/model.json"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    (own / "volumes" / "mnist-train-data" / "runs").mkdir(parents=True)
    (own / "volumes" / "mnist-train-data" / "runs" / "snapshot.pt").write_text("finished")
    result = script("clean.sh", "--local", build=build, path_prefix=bin_dir)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "volumes", "volumes/mnist-train-data", "volumes/mnist-train-data/data", "volumes/mnist-train-data/data/t10k"]
    assert f"local-job clean: removed {root / 'logs'} (" in said and f"removed {root / 'status.json'} (" in said
    assert f"removed {claim / 'runs'} (" in said and "kept the data in" in said
    assert not own.exists() and f"removed {own / 'volumes' / 'mnist-train-data' / 'runs'} (8 bytes)" in said  # the snapshot a rerun would find
    assert not log.exists()  # no cluster is touched
    assert (claim / "data" / "t10k").read_text() == "x"
    result = script("clean.sh", "--local", "--all", build=build, path_prefix=bin_dir)
    assert result.returncode == 0 and not root.exists()
    again = script("clean.sh", "--local", build=build, path_prefix=bin_dir)
    assert again.returncode == 0 and "nothing to remove" in again.stdout


def test_clean_local_refuses_a_directory_that_is_not_a_volume_root(tmp_path):
    build = tmp_path / "build"
    script("prepare.sh", build=build)
    precious = tmp_path / "runs" / "mnist-train"
    precious.mkdir(parents=True)
    (precious / "thesis.tex").write_text("years of work")
    result = script("clean.sh", "--local", build=build)
    assert result.returncode == 1 and "is not a local-job volume root" in result.stderr
    assert (precious / "thesis.tex").read_text() == "years of work"


SHELL_SCRIPTS = sorted([*ROOT.glob("*.sh"), *ROOT.glob("scripts/*.sh"), *ROOT.glob("bench/*.sh"),
                        *ROOT.glob("tests/**/*.sh"), *ROOT.glob(".ci/*")])


def test_shellcheck_reports_nothing():
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):  # .ci/run installs it; a CI run without it must not pass this silently
            pytest.fail("shellcheck is not installed (apt-get install shellcheck)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = subprocess.run(["shellcheck", "--external-sources", *map(str, SHELL_SCRIPTS)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_values_from_the_user_are_quoted(tmp_path, fake_kubectl):
    """A build directory and values with spaces and glob characters pass through word splitting untouched."""
    bin_dir, log = fake_kubectl
    (tmp_path / "decoy.yaml").write_text("")  # an unquoted * would expand to this
    build = tmp_path / "my build *"
    result = script("prepare.sh", "--set-string", "config_map.NCCL_DEBUG_SUBSYS=a * b  c", build=build)
    assert result.returncode == 0, result.stderr
    assert "\"NCCL_DEBUG_SUBSYS\": \"a * b  c\"" in (build / "2-configmap.yaml").read_text()
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 0, result.stderr
    assert f"apply -f {build}" in log.read_text().splitlines()


def fake_slurm(tmp_path, *job_states: str) -> Path:
    """sbatch, squeue and scontrol standing for a Slurm cluster: sbatch --parsable answers job 812, and each
    `scontrol show job` the next of job_states (its fields), the last one from then on."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for number, state in enumerate(job_states):
        (tmp_path / f"state{number}").write_text(f"JobId=812 JobName=mnist-train Partition=debug NumNodes=2-2 "
                                                 f"MinCPUsNode=2 MinMemoryNode=4G TimeLimit=1-00:00:00 {state}\n")
    last = len(job_states) - 1
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/sbatch.log"\necho "812;cluster"\n')
    (bin_dir / "squeue").write_text('#!/bin/sh\necho 812\n')
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *partition*) echo "PartitionName=debug MaxTime=12:00:00 MinNodes=1 MaxNodes=2"; exit 0;; esac\n'
        f'n=$(cat "{tmp_path}/polls" 2>/dev/null || echo 0)\n'
        f'echo $((n + 1)) > "{tmp_path}/polls"\n'
        f'[ "$n" -gt {last} ] && n={last}\n'
        f'cat "{tmp_path}/state$n"\n')
    for tool in ("sbatch", "squeue", "scontrol"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def test_run_slurm_says_why_the_job_is_pending_and_exits_with_its_code(tmp_path):
    build = tmp_path / "build"
    assert script("prepare.sh", "--target", "slurm", build=build).returncode == 0
    bin_dir = fake_slurm(tmp_path, "JobState=PENDING Reason=PartitionTimeLimit ExitCode=0:0",
                         "JobState=FAILED Reason=NonZeroExitCode ExitCode=78:0 RunTime=00:00:09")
    result = script("run.sh", "--slurm", build=build, path_prefix=bin_dir, timeout=60)
    assert result.returncode == 78, result.stderr
    assert (tmp_path / "sbatch.log").read_text() == f"--parsable {build}/job.sbatch\n"
    lines = result.stderr.splitlines()
    assert "run.sh: submitted Slurm job 812" in lines
    assert ("waiting: Slurm job 812 mnist-train PENDING (PartitionTimeLimit): its time limit (1-00:00:00) is longer "
            "than partition debug allows (MaxTime 12:00:00): lower slurm.time_limit, or choose another "
            "slurm.partition") in lines
    assert "Slurm job 812 mnist-train: FAILED, exit 78 (bad configuration: retrying cannot help, the Job fails) " \
           "after 00:00:09 (restarts 0)" in lines
    assert lines[-1] == "run.sh: Job mnist-train ended with exit code 78"


def test_run_slurm_status_shows_the_jobs_of_the_batch_scripts_name(tmp_path):
    build = tmp_path / "build"
    assert script("prepare.sh", "--target", "slurm", build=build).returncode == 0
    bin_dir = fake_slurm(tmp_path, "JobState=PENDING Reason=Priority ExitCode=0:0")
    for args in (["--slurm", "--status"], ["--status", "--slurm"]):
        result = script("run.sh", *args, build=build, path_prefix=bin_dir)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            "Slurm job 812 mnist-train: PENDING (Priority)",
            "waiting: Slurm job 812 mnist-train PENDING (Priority): jobs of higher priority are ahead of it in "
            "partition debug; it starts after them: nothing to change (slurm.qos or slurm.partition, where the site "
            "offers a faster one)"]


def staging_cluster(tmp_path, outcome: str) -> tuple[Path, Path]:
    """A kubectl whose stage Job (initializer.separate_job) completes after one turn of run.sh's wait
    (``outcome`` complete), or fails (failed), recording its arguments."""
    bin_dir, log, turns = tmp_path / "fakebin", tmp_path / "kubectl.log", tmp_path / "turns"
    bin_dir.mkdir()
    complete = "[ -f \"$turns\" ] && exit 0; touch \"$turns\"; exit 1" if outcome == "complete" else "exit 1"
    failed = "True" if outcome == "failed" else ""
    (bin_dir / "kubectl").write_text(
        f'#!/bin/sh\nturns="{turns}"\necho "$*" >> "{log}"\ncase "$*" in\n'
        f'  *"wait --for=condition=complete"*) {complete} ;;\n'
        f'  *"jsonpath={{.status.conditions[?(@.type==\\"Failed\\")].status}}"*) printf "{failed}" ;;\n'
        '  *"jsonpath={.status.conditions[?(@.type==\\"Failed\\")].reason}"*) '
        'printf "BackoffLimitExceeded: Job has reached the specified backoff limit" ;;\nesac\nexit 0\n')
    (bin_dir / "kubectl").chmod(0o755)
    return bin_dir, log


STAGED = ("--set", "namespace=ml", "--set", "name=digits", "--set", "initializer.separate_job=true",
          "--set", "initializer.model.storage_uri=hf://org/model", "--set", "network_policy.enabled=false")


def test_run_applies_a_stage_job_of_its_own_first_and_the_training_job_once_it_completed(tmp_path):
    """initializer.separate_job: everything but the training Job, then a wait on the stage Job (kubectl wait, a
    line per turn), then the training Job: no GPU is held while the model downloads."""
    bin_dir, log = staging_cluster(tmp_path, "complete")
    build = tmp_path / "build"
    script("prepare.sh", *STAGED, build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    first = next(call for call in calls if call.startswith("apply"))
    assert f"-f {build}/4-stage-job.yaml" in first and "4-job.yaml" not in first
    assert f"-f {build}/1-persistentvolumeclaim.yaml" in first and f"-f {build}/2-configmap.yaml" in first
    waits = [i for i, call in enumerate(calls) if call.startswith("-n ml wait --for=condition=complete")]
    assert len(waits) == 2 and all(calls[i].endswith("job/digits-stage") for i in waits)
    assert calls[-1] == f"apply -f {build}/4-job.yaml" and calls.index(first) < waits[0]
    assert "Job ml/digits-stage still staging (" in result.stderr
    assert "run.sh: Job ml/digits-stage complete" in result.stderr


def test_run_stops_when_the_stage_job_fails_and_says_why(tmp_path):
    bin_dir, log = staging_cluster(tmp_path, "failed")
    build = tmp_path / "build"
    script("prepare.sh", *STAGED, build=build)
    result = script("run.sh", build=build, path_prefix=bin_dir)
    assert result.returncode == 1
    assert ("run.sh: error: Job ml/digits-stage did not complete: BackoffLimitExceeded: Job has reached the "
            "specified backoff limit; see its log (kubectl -n ml logs job/digits-stage)") in result.stderr
    assert not any("4-job.yaml" in call for call in log.read_text().splitlines())
