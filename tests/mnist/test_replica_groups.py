"""Replica groups on one machine, as a Job's pods would run them: torchft's real Lighthouse and one launcher per group
(trainer_launcher, restarting its workers in place), the MNIST worker in each (worker/mnist/replicated.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, OUTSIDE
from tests.mnist.launch import fault_env, free_port, kill_tree, start, worker_env, workload_env
from trainer_contract import exit_codes, replica_groups

pytestmark = pytest.mark.slow
pytest.importorskip("torchft", reason="replica groups need the [replicas] extra (torchft)")


class Lighthouse:
    """torchft's Lighthouse as the Job's Deployment runs it (trainer_contract.replica_groups.lighthouse_command)."""

    def __init__(self, min_replicas: int = 1):
        self.port = free_port()
        command = replica_groups.lighthouse_command(min_replicas, self.port)
        self.process = subprocess.Popen([str(BIN / command[0]), *command[1:]], env={"RUST_LOG": "warn"},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=OUTSIDE,
                                        start_new_session=True)
        self.address = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Lighthouse:
        return self

    def __exit__(self, *exc) -> None:
        kill_tree(self.process)
        self.process.wait()


def group_command(processes: int, module: str = "worker") -> list[str]:
    """A group's pod: its launcher, restarting its workers in place up to 3 times."""
    return [sys.executable, "-m", "worker.launch", "--standalone", f"--nproc-per-node={processes}",
            "--max-restarts=3", "-m", module]


def run_groups(lighthouse: Lighthouse, data: Path, output: Path, faults: dict[int, str], groups: int = 2,
               processes: int = 1, timeout: float = 300, **settings) -> list[tuple[int, str]]:
    """Every group's launcher on one OUTPUT_DIR (the volume); each group's exit code and output."""
    envs = []
    for group in range(groups):
        # every step lasts 0.1 s at least, so that a group's restart (seconds) is many steps of the others
        spec = "; ".join(part for part in ("ledger@committed; sleep=0.1@batch", faults.get(group)) if part)
        envs.append(worker_env(data, output, EPOCHS=2, BATCH_SIZE=16, LOG_INTERVAL=1, OMP_NUM_THREADS=1,
                               REPLICA_GROUPS=groups, REPLICA_GROUP=group, TORCHFT_LIGHTHOUSE=lighthouse.address,
                               FAULT_INJECT=spec, **settings))
    return run_launchers([group_command(processes)] * groups, envs, timeout)


def run_workload_groups(module: str, settings: dict, model: Path, data: Path, output: Path,
                        faults: dict[int, str] | None = None, groups: int = 2, timeout: float = 300,
                        processes: int = 1) -> list[tuple[int, str]]:
    """The built-in workload ``module`` as ``groups`` replica groups of ``processes`` processes, each its launcher,
    with torchft's Lighthouse; ``faults``: FAULT_INJECT by group. Each group's exit code and output."""
    with Lighthouse() as lighthouse:
        envs = [workload_env({**settings, "REPLICA_GROUPS": str(groups)}, model, data, output,
                             {"REPLICA_GROUP": str(group), "TORCHFT_LIGHTHOUSE": lighthouse.address,
                              **(fault_env(faults[group]) if faults and group in faults else {})})
                for group in range(groups)]
        return run_launchers([group_command(processes, module)] * groups, envs, timeout)


def run_launchers(commands: list[list[str]], envs: list[dict], timeout: float) -> list[tuple[int, str]]:
    """The groups' launchers at once, each waited for; every process tree killed at the end, whatever happened."""
    started = [start(command, env) for command, env in zip(commands, envs, strict=True)]
    results = []
    try:
        for process in started:
            results.append((process.wait(timeout=timeout), process.stdout.read()))
    finally:
        for process in started:
            kill_tree(process)
    return results


def ledger(output: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((output / ".faults").glob("ledger-*.jsonl"))
            for line in path.read_text().splitlines()]


def test_a_killed_group_costs_that_group_and_every_example_is_taken_once_an_epoch(tmp_path, small_dir):
    """Group 1's worker dies before its 10th step; its launcher restarts it in place and the restart takes 4 s
    more to set up. Group 0 steps on alone meanwhile (with the whole step's examples), group 1 joins a later quorum
    with group 0's weights and step, and both finish. Every committed step took exactly its examples: each epoch's
    images once, whatever group took them."""
    output = tmp_path / "out"
    with Lighthouse() as lighthouse:
        (code0, out0), (code1, out1) = run_groups(
            lighthouse, small_dir, output, {1: "sigkill@batch=1.10,attempt=0; sleep=4@start,attempt=1"})
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    assert "FAULT_INJECT: sigkill at batch=1.10" in out1
    assert "Traceback" not in out0 + out1, out0[-3000:] + out1[-3000:]
    # group 0 went on stepping alone while group 1 restarted, and group 1 joined where group 0 had got to (a group
    # that starts first may also step alone until the other joins)
    alone = [int(step) for step in re.findall(r"step (\d+)/\d+ \(epoch \d\), loss=\S+ on this rank's 32 examples, "
                                               r"1 of 2 groups stepping", out0) if int(step) >= 10]
    joins = [int(step) for step in re.findall(r"group1 joined at step (\d+), its state from a peer in [\d.]+ s: 2 of 2 "
                                              r"groups stepping", out1)]
    assert alone and joins, out0[-3000:] + out1[-3000:]
    assert joins[-1] >= max(alone) > 10, (alone, joins)
    assert "1 of 2 groups stepping from step" in out0 and "step 10 did not commit" in out0
    # every committed step took its own examples once, every epoch took every image once
    steps: dict[int, list[int]] = {}
    for line in ledger(output):
        steps.setdefault(line["step"], []).extend(line["examples"])
    per_step = 16 * 2
    images = 1024
    assert sorted(steps) == list(range(2 * images // per_step))
    for epoch in range(2):
        taken = [example for step in range(epoch * 32, (epoch + 1) * 32) for example in steps[step]]
        assert sorted(taken) == list(range(images)), f"epoch {epoch + 1}"
        assert all(len(steps[step]) == per_step for step in range(epoch * 32, (epoch + 1) * 32))
    # the last step's first group wrote the model, naming itself; the other (not under a Job) ended at once
    summary = json.loads((output / "model.json").read_text())
    assert [out0, out1][summary["written_by_group"]].count("model saved to") == 1
    assert "model saved to" not in [out0, out1][1 - summary["written_by_group"]]
    assert summary["replica_groups"] == 2 and summary["world_size"] == 2
    assert summary["accuracy"] > 0.9


def test_every_group_stopped_at_once_loses_no_step_the_last_quorums_first_group_checkpoints_them(tmp_path,
                                                                                               small_dir):
    """Both groups' pods get SIGTERM in the same step of epoch 2 (the Job deleted or preempted whole), long before
    CHECKPOINT_EVERY_SECONDS: each leaves between two steps (82), and the group that was its last quorum's first
    checkpoints the steps it holds, so the next start goes on from the step they stopped at, taking none again."""
    output = tmp_path / "out"
    stopped = {group: "sigterm-pod@batch=2.10,attempt=0" for group in (0, 1)}
    with Lighthouse() as lighthouse:
        first = run_groups(lighthouse, small_dir, output, stopped, CHECKPOINT_EVERY_SECONDS=3600)
    assert [code for code, _ in first] == [exit_codes.GROUP_LEFT] * 2, first[0][1][-3000:] + first[1][1][-3000:]
    assert "checkpointed before it leaves" in first[0][1] + first[1][1]
    last = max(line["step"] for line in ledger(output))  # the last step either group committed
    with Lighthouse() as lighthouse:
        (code0, out0), (code1, out1) = run_groups(lighthouse, small_dir, output, {}, CHECKPOINT_EVERY_SECONDS=3600)
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    resumed = {re.search(r"resuming from ckpt-e(\d{4})-s(\d{6})\.pt", out).groups() for out in (out0, out1)}
    assert len(resumed) == 1, resumed
    epoch, within = resumed.pop()
    assert int(epoch) * 32 + int(within) == last + 1  # every step committed before the stop is in it
    assert {line["step"] for line in ledger(output) if line["attempt"] == 1} == set(range(last + 1, 64))


@pytest.mark.onecore  # two starts one after another, each mostly starting up: 0.88 of a core (17 CPU-s in 19 s)
def test_every_group_lost_at_once_resumes_from_the_checkpoint_of_the_quorums_first_group(tmp_path, small_dir):
    """Both groups' pods die in the same step of epoch 2 (the Lighthouse with them); the next start of both finds
    the newest checkpoint the quorum's first group wrote (CHECKPOINT_EVERY_SECONDS=1) and goes on from there:
    the steps since it are taken again with the same examples, none before it, and the job completes."""
    output = tmp_path / "out"
    lost = {group: "sigkill-pod@batch=2.10,attempt=0" for group in (0, 1)}
    with Lighthouse() as lighthouse:
        first = run_groups(lighthouse, small_dir, output, lost, CHECKPOINT_EVERY_SECONDS=1)
    assert [code for code, _ in first] == [-9, -9] or all(code != 0 for code, _ in first), first[0][1][-2000:]
    written = sorted(path.name for path in (output / "checkpoints").glob("ckpt-*.pt"))
    assert written, first[0][1][-3000:]
    with Lighthouse() as lighthouse:
        second = run_groups(lighthouse, small_dir, output, {}, CHECKPOINT_EVERY_SECONDS=1)
    (code0, out0), (code1, out1) = second
    assert (code0, code1) == (0, 0), out0[-3000:] + out1[-3000:]
    resumed = {re.search(r"resuming from (ckpt-e(\d{4})-s(\d{6})\.pt)", out).groups() for out in (out0, out1)}
    assert len(resumed) == 1, resumed  # both groups found the same newest checkpoint
    name, epoch, within = resumed.pop()
    assert name == written[-1]
    start = int(epoch) * 32 + int(within)
    assert 32 < start <= 41
    taken: dict[tuple[int, int], set[int]] = {}
    for line in ledger(output):
        taken.setdefault((line["attempt"], line["step"]), set()).update(line["examples"])
    assert {step for attempt, step in taken if attempt == 0} == set(range(41))  # killed before step 42's commit
    assert {step for attempt, step in taken if attempt == 1} == set(range(start, 64))  # nothing before the checkpoint
    for step in range(start, 41):  # a step taken again took the same examples
        assert taken[(0, step)] == taken[(1, step)] and len(taken[(0, step)]) == 32
