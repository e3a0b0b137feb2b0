"""`./run.sh --slurm --status` and `./run.sh --slurm`'s wait: a Slurm job's state and, while it is PENDING,
squeue's reason in words with the values key to change (status_views/waiting.py). Reads `scontrol show job` (and
`scontrol show partition` for a partition's limits); torch-free.

    python -m status_views.slurm JOBID...         # a line per job, and why a pending one waits
    python -m status_views.slurm --name NAME      # the jobs of that name squeue still knows
    python -m status_views.slurm --wait JOBID     # a line at each change until the job ends; exits with the
                                                      #   job's exit code, as `sbatch --wait` does
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable

from status_views.view import JobGone, JobState, ViewError, follow
from status_views.waiting import slurm_pending, waiting_line
from trainer_contract.exit_codes import meaning

# Slurm's finished states (IS_JOB_FINISHED: past SUSPENDED), whose exit code `sbatch --wait` returns
FINISHED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY")
PARTITION_REASONS = ("PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig")


class SlurmError(ViewError):
    pass


def parse_fields(text: str) -> dict[str, str]:
    """`scontrol show ... -o`'s one line of Key=Value fields (a value may hold '=', as TRES=cpu=4,mem=8G)."""
    return {match[1]: match[2] for match in re.finditer(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)", text.strip())}


def facts(job: dict[str, str], partition: dict[str, str] | None = None) -> dict[str, str]:
    """The job's request as the values set it: for the waiting line's templates."""
    gres = re.search(r"gpu(?::[^:,]+)?:(\d+)", job.get("TresPerNode", "") + "," + job.get("Gres", ""))
    gpus = gres.group(1) if gres else "0"
    partition = partition or {}
    job = {key: "none" if value == "(null)" else value for key, value in job.items()}
    return {
        "job_id": job.get("JobId", "?"), "nodes": job.get("NumNodes", "?").split("-")[0],
        "cpus": job.get("MinCPUsNode", "?"), "memory": job.get("MinMemoryNode", "?"), "gpus": gpus,
        "gpus_part": f", resources.gpu.accelerator_count ({gpus} GPUs per node)" if gpus != "0" else "",
        "time_limit": job.get("TimeLimit", "?"), "partition": job.get("Partition", "?"),
        "qos": job.get("QOS", "?"), "account": job.get("Account", "?"), "features": job.get("Features", "?"),
        "dependency": job.get("Dependency", "?"), "max_time": partition.get("MaxTime", "?"),
        "min_nodes": partition.get("MinNodes", "?"), "max_nodes": partition.get("MaxNodes", "?"),
    }


def exit_code(job: dict[str, str]) -> int:
    """What `sbatch --wait` returns for a finished job: its exit status, or 1 when a signal ended it
    (scontrol's ExitCode=STATUS:SIGNAL)."""
    status, _, signal = job.get("ExitCode", "0:0").partition(":")
    return 1 if signal not in ("", "0") else int(status or 0)


def describe(job: dict[str, str], partition: dict[str, str] | None = None) -> list[str]:
    """The job's state line, and for a pending job the waiting line."""
    state, name, job_id = job.get("JobState", "UNKNOWN"), job.get("JobName", "?"), job.get("JobId", "?")
    head = f"Slurm job {job_id} {name}: {state}"
    if state == "PENDING":
        reason = job.get("Reason", "None").replace(",_", ", ")
        words, change = slurm_pending(reason, facts(job, partition))
        return [f"{head} ({reason})", waiting_line(f"Slurm job {job_id} {name} PENDING ({reason})", words,
                                                    change=change)]
    if state in FINISHED:
        code, signal = exit_code(job), job.get("ExitCode", "0:0").partition(":")[2]
        ended = f"signal {signal}" if signal not in ("", "0") else f"exit {code}" + (f" ({meaning(code)})" if code else "")
        return [f"{head}, {ended} after {job.get('RunTime', '?')} (restarts {job.get('Restarts', '0')})"]
    return [f"{head} for {job.get('RunTime', '?')} on {job.get('NumNodes', '?').split('-')[0]} nodes "
            f"({job.get('NodeList', '')}), "
            f"restarts {job.get('Restarts', '0')}"]


def scontrol(*args: str) -> str:
    result = subprocess.run(["scontrol", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SlurmError(result.stderr.strip() or f"scontrol {' '.join(args)} exited {result.returncode}")
    return result.stdout


def read(job_id: str) -> tuple[dict[str, str], dict[str, str] | None]:
    """The job's fields, and its partition's where its pending reason is about the partition's limits."""
    job = parse_fields(scontrol("show", "job", "-o", job_id).splitlines()[0])
    partition = None
    if job.get("JobState") == "PENDING" and job.get("Reason") in PARTITION_REASONS and job.get("Partition"):
        try:
            partition = parse_fields(scontrol("show", "partition", "-o", job["Partition"]))
        except SlurmError:
            pass  # the reason alone still says what to change
    return job, partition


def read_state(job_id: str, reader: Callable[[str], tuple[dict[str, str], dict[str, str] | None]] = read) -> JobState:
    """The job as every engine's view has it (status_views/view.py): its lines, what a wait reports a change of
    (not the run time, which changes at every poll) and, once it has ended, the exit code sbatch --wait returns."""
    try:
        job, partition = reader(job_id)
    except SlurmError as error:
        if "Invalid job id" in str(error):
            raise JobGone(f"Slurm job {job_id} is no longer known to Slurm: its exit code is unknown") from None
        raise
    change = tuple(job.get(key, "") for key in ("JobState", "Reason", "NodeList", "Restarts"))
    return JobState(describe(job, partition), change, exit_code(job) if job.get("JobState") in FINISHED else None)


def wait(job_id: str, interval: float, say: Callable[[str], None],
         reader: Callable[[str], tuple[dict[str, str], dict[str, str] | None]] = read) -> int:
    """Poll until the job has ended, saying its lines each time its state or reason changes; its exit code."""
    return follow(lambda: read_state(job_id, reader), interval, say, f"Slurm job {job_id}")


def job_ids(name: str) -> list[str]:
    result = subprocess.run(["squeue", "-h", "--states=all", f"--name={name}", "-o", "%i"], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise SlurmError(result.stderr.strip() or f"squeue exited {result.returncode}")
    return result.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m status_views.slurm", description=__doc__.splitlines()[0])
    parser.add_argument("jobs", nargs="*", metavar="JOBID")
    parser.add_argument("--name", help="the jobs of this name that squeue still knows")
    parser.add_argument("--wait", action="store_true", help="poll until the (one) job ends; exit with its code")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls (--wait)")
    args = parser.parse_args(argv)
    try:
        if args.wait:
            if len(args.jobs) != 1:
                parser.error("--wait takes one JOBID")
            return wait(args.jobs[0], args.interval, lambda line: print(line, file=sys.stderr, flush=True))
        ids = args.jobs + (job_ids(args.name) if args.name else [])
        if not ids:
            print(f"no Slurm job named {args.name}" if args.name else "no job id given", file=sys.stderr)
            return 1
        for job_id in ids:
            print("\n".join(read_state(job_id).lines))
    except ViewError as error:
        print(f"run.sh: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.wait:  # as sbatch --wait's own Ctrl-C: killed by SIGINT, so that run.sh stops too
            print(f"stopped waiting; Slurm job {args.jobs[0]} goes on (./clean.sh --slurm cancels it)",
                  file=sys.stderr)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
