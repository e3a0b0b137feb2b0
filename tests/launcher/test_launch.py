"""worker.launch: torchrun's own launcher, exiting with the worker's code, and its checks before the rendezvous."""

import os
import resource
import signal
import sys
import time

import pytest
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from tests.mnist.launch import as_node, free_port, read_until, run, snapshot, start, worker_env
from trainer_contract import exit_codes
from trainer_launcher import launch
from trainer_launcher.launch import container_code, root_cause


def launch_command(*torchrun_args: str) -> list[str]:
    return [sys.executable, "-m", "worker.launch", *torchrun_args, "-m", "worker"]


def failure(local_rank: int, exitcode: int, timestamp: int) -> ProcessFailure:
    result = ProcessFailure(local_rank=local_rank, pid=1000 + local_rank, exitcode=exitcode, error_file="")
    result.timestamp = timestamp
    return result


# -- pure logic ------------------------------------------------------------------------------------------


def test_a_signal_death_reads_as_a_container_runtime_reports_it():
    assert container_code(-9) == 137 and container_code(-15) == 143 and container_code(69) == 69


def test_the_root_cause_wins_over_its_victims():
    # rank 1 died of an error; rank 0 saw the peer go (75) and torchrun stopped rank 2 (SIGTERM): all at once
    rank, chosen = root_cause({0: failure(0, 75, 100), 1: failure(1, 69, 100), 2: failure(2, -15, 100)})
    assert (rank, chosen.exitcode) == (1, 69)
    # the first failure by time, then by rank
    assert root_cause({0: failure(0, 1, 101), 1: failure(1, 69, 100)})[0] == 1
    assert root_cause({0: failure(0, 1, 100), 1: failure(1, 69, 100)})[0] == 0
    # only victims: the pod reports a victim, and nothing is counted
    assert container_code(root_cause({0: failure(0, 75, 100), 1: failure(1, -15, 100)})[1].exitcode) == 75


# -- real torchrun ---------------------------------------------------------------------------------------



@pytest.mark.slow
def test_the_pod_exits_with_the_code_of_the_worker_that_failed(tmp_path, small_dir):
    env = worker_env(small_dir, tmp_path / "out", EPOCHS=1, BATCH_SIZE=32, FAULT_INJECT="exit=69@batch=1.2,rank=1")
    result = run(launch_command("--standalone", "--nproc-per-node=2"), env, timeout=180)
    assert result.returncode == 69, result.stdout[-3000:] + result.stderr[-3000:]  # torchrun alone: 1
    assert "launcher: worker rank 1 failed first with exit code 69" in result.stderr
    assert "the pod exits 69" in result.stderr


@pytest.mark.slow
def test_a_killed_worker_reads_as_137(tmp_path, small_dir):
    env = worker_env(small_dir, tmp_path / "out", EPOCHS=1, BATCH_SIZE=32, FAULT_INJECT="sigkill@batch=1.2,rank=0")
    result = run(launch_command("--standalone", "--nproc-per-node=2"), env, timeout=180)
    assert result.returncode == 137, result.stderr[-3000:]


def test_the_node_rank_must_be_the_completion_index(tmp_path, small_dir):
    env = {**worker_env(small_dir, tmp_path / "out"), "JOB_COMPLETION_INDEX": "1"}
    started = time.monotonic()
    result = run(as_node(0, 2, free_port()), env, timeout=60)
    assert result.returncode == exit_codes.BAD_CONFIG, result.stderr
    assert "--node-rank=0 but JOB_COMPLETION_INDEX=1" in result.stderr
    assert time.monotonic() - started < 55  # no rendezvous was attempted (its join timeout is 600 s; torch's import
    # alone took 30 s on a loaded 2-CPU machine)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_gang_that_never_assembles_exits_stalled_after_the_join_timeout(tmp_path, small_dir):
    started = time.monotonic()
    result = run(as_node(1, 2, free_port(), join_timeout=3), worker_env(small_dir, tmp_path / "out"), timeout=120)
    assert result.returncode == exit_codes.STALLED, result.stderr[-3000:]  # counted: no endless restarts
    assert "launcher: the gang did not assemble" in result.stderr
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_sigterm_while_waiting_for_the_gang_ends_at_once(tmp_path, small_dir):
    process = start(as_node(1, 2, free_port()), worker_env(small_dir, tmp_path / "out"))
    time.sleep(5)  # torch imported, the rendezvous waiting for pod 0
    assert process.poll() is None
    signalled = time.monotonic()
    os.kill(process.pid, signal.SIGTERM)  # as the kubelet does: to the container's main process
    process.communicate(timeout=30)
    assert time.monotonic() - signalled < 5
    assert process.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_finished_run_exits_at_once_without_a_rendezvous(tmp_path, small_dir):
    out = tmp_path / "out"
    settings = dict(EPOCHS=1, BATCH_SIZE=32)
    trained = run(launch_command("--standalone", "--nproc-per-node=2"), worker_env(small_dir, out, **settings))
    assert trained.returncode == 0, trained.stdout[-3000:]
    before = snapshot(out)
    # pod 1 recreated after its gang finished: alone, its rendezvous would wait the whole join timeout
    started = time.monotonic()
    again = run(as_node(1, 2, free_port()), worker_env(small_dir, out, **settings), timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert time.monotonic() - started < 30
    assert f"the run in {out} is already complete" in again.stderr
    assert snapshot(out) == before
    # the same pod with another learning rate: bad configuration, named, before any rendezvous
    changed = run(as_node(1, 2, free_port()), worker_env(small_dir, out, LEARNING_RATE=0.01, **settings), timeout=120)
    assert changed.returncode == exit_codes.BAD_CONFIG
    assert "LEARNING_RATE: the finished run in" in changed.stderr and "LEARNING_RATE=0.004, now 0.01" in changed.stderr
    assert "another OUTPUT_DIR" in changed.stderr and "RESUME=false" in changed.stderr
    assert snapshot(out) == before


@pytest.mark.slow
def test_sigterm_after_the_run_completed_exits_0(tmp_path, small_dir):
    # rank 0 is preempted after the model is saved and every rank released: the work is done, the pod succeeds
    env = worker_env(small_dir, tmp_path / "out", EPOCHS=1, BATCH_SIZE=32,
                     FAULT_INJECT="sigterm-pod@completed,rank=0; sleep=3@completed,rank=0")
    process = start(launch_command("--standalone", "--nproc-per-node=2"), env)
    seen = []
    assert read_until(process, "FAULT_INJECT: sigterm-pod at completed", 180, seen), "".join(seen)
    output = "".join(seen) + process.communicate(timeout=60)[0]
    assert process.returncode == 0, output[-3000:]
    assert "launcher: SIGTERM received after the run completed; exiting 0" in output


@pytest.mark.parametrize("environ, seen, expected", [
    ({}, 0, None),  # a CPU job is not checked
    ({"INDEXED_TRAINER_GPUS": "2", "INDEXED_TRAINER_CPU_FALLBACK": "false"}, 2, None),
    ({"INDEXED_TRAINER_GPUS": "2", "INDEXED_TRAINER_CPU_FALLBACK": "false"}, 1, exit_codes.GPU_MISSING),
    ({"INDEXED_TRAINER_GPUS": "2"}, 0, exit_codes.GPU_MISSING),  # no word on the fallback: the values' default
    ({"INDEXED_TRAINER_GPUS": "2", "INDEXED_TRAINER_CPU_FALLBACK": "True "}, 0, None),
    ({"INDEXED_TRAINER_GPUS": "2", "INDEXED_TRAINER_CPU_FALLBACK": "yes"}, 0, exit_codes.GPU_MISSING),
])
def test_a_gpu_shortfall_fails_unless_the_fallback_is_asked_for(environ, seen, expected, capsys, monkeypatch):
    monkeypatch.setattr(launch, "_warned", [])  # the pod's warnings, which its termination message repeats
    assert launch.gpu_shortfall(environ, seen) == expected
    said = capsys.readouterr()
    assert ("resources.gpu.cpu_fallback is false" in said.out + said.err) == (expected is not None)


KIB = 1024


@pytest.mark.parametrize("environ, limit, warned", [
    ({"NCCL_IB_DISABLE": "0", "INDEXED_TRAINER_GPUS": "8"}, 64 * KIB, True),  # a runtime's 64 KiB default
    ({"NCCL_IB_DISABLE": "0", "INDEXED_TRAINER_GPUS": "8"}, resource.RLIM_INFINITY, False),  # containerd's
    ({"NCCL_IB_DISABLE": "1", "INDEXED_TRAINER_GPUS": "8"}, 64 * KIB, False),  # network: tcp
    ({"INDEXED_TRAINER_GPUS": "8"}, 64 * KIB, False),  # NCCL chooses: nothing asked of the HCA
    ({"NCCL_IB_DISABLE": "0"}, 64 * KIB, False),  # a CPU job: no NCCL
])
def test_infiniband_in_a_pod_with_a_locked_memory_limit_warns_once_naming_the_limit(environ, limit, warned, capsys,
                                                                                    monkeypatch):
    monkeypatch.setattr(launch, "_warned", [])
    launch.check_locked_memory(environ, limit)
    said = capsys.readouterr().err
    assert said.count("launcher: warning: ") == int(warned), said
    if warned:
        assert "locked-memory limit is 64 KiB (ulimit -l)" in said and "LimitMEMLOCK=infinity" in said
        assert launch._warned and launch.termination_message(1, None).count("; warning: ") == 1


def test_this_machines_own_locked_memory_limit_is_read_when_none_is_given(capsys, monkeypatch):
    monkeypatch.setattr(launch, "_warned", [])
    launch.check_locked_memory({"NCCL_IB_DISABLE": "0", "INDEXED_TRAINER_GPUS": "1"})
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert (f"is {soft // KIB} KiB" in capsys.readouterr().err) == (soft != resource.RLIM_INFINITY)
