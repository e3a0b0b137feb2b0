"""The gang's rounds with real processes, beside the simulation of the same size (bench/scale.py): N pods of a
torch-free program (bench/gang_program.py) under the indexed-trainer launcher and torchrun, run by local-job as the
Job controller would, rounds restarted in place, workers SIGKILLed.

    python -m bench.gang                    # 16 pods, 3 faults on index N-1, then 0, then N-1
    python -m bench.gang --quick            # 4 pods, 1 fault (the test suite runs it)
    python -m bench.gang --json PATH

It reports what bench.scale simulates, measured: the volume's namespace operations per node-second in steady
training (inotify on the gang's directory, for ``--steady`` seconds before the first fault), and for each fault
the runtime's own accounting (faults.jsonl: detect, restart, restore; rank 0 of the next round writes it), with the
simulation's phases for the same number of nodes (its detect, and the round re-formed: next round joined,
rendezvous, warm start; its restore is a stated input, this program's is nothing). The program trains by sleeping
(GANG_STEP_SECONDS a step), so what is measured is the launchers', torchrun's and the volume's part.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.local_job_timeline import follow, local_job
from bench.namespace_watch import NamespaceWatch
from bench.recovery import kill_index
from bench.stats import BIN, clean_env
from trainer_contract.gang_ledger import ALIVE, ATTEMPT, DIRECTORY
from trainer_contract.gang_rounds import MAX_RESTARTS_VARIABLE, PROGRESS, RESTART_IN_PLACE_VARIABLE
from trainer_contract.gang_timeline import FAULTS, PHASES, TIMELINE

PROGRAM = Path(__file__).resolve().parent / "gang_program.py"
OUTPUT = "runs/mnist-train"  # OUTPUT_DIR on the volume (the render's default, under the mount)
STEP_SECONDS = 0.5
ENDED = re.compile(r"local-job: Job \S+ (complete|failed)\b")  # local-job's last word on the Job
CHECKPOINT_STEPS = 4


def sizes(quick: bool) -> dict:
    # tail: seconds of training after the last fault's recovery (checkpoints noted after a fault's round)
    if quick:
        return {"nodes": 4, "faults": 1, "steady": 5.0, "interval": 3.0, "tail": 6.0}
    return {"nodes": 16, "faults": 3, "steady": 20.0, "interval": 15.0, "tail": 30.0}


def manifests(directory: Path, nodes: int, steps: int) -> Path:
    import subprocess

    sets = (f"replicas={nodes}", "entrypoint.module=null", f"entrypoint.script={PROGRAM.name}",
            "entrypoint.launcher=indexed-trainer", "resources.cpu=1", "resources.memory=1", "shm_size=0.25",
            "termination_grace_period_seconds=10", "max_restarts=100", f"config_map.GANG_STEPS={steps}",
            f"config_map.GANG_STEP_SECONDS={STEP_SECONDS}", f"config_map.GANG_CHECKPOINT_STEPS={CHECKPOINT_STEPS}")
    args = [str(BIN / "gen-manifests")]
    for item in sets:
        args += ["--set", item]
    import yaml

    documents = list(yaml.safe_load_all(subprocess.run(args, capture_output=True, check=True).stdout))
    for document in documents:
        if document["kind"] == "ConfigMap":  # what the render sets for a built-in program: rounds in place
            document["data"].update({RESTART_IN_PLACE_VARIABLE: "true", MAX_RESTARTS_VARIABLE: "100"})
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench.gang: {what} did not happen within {timeout:g} s")
        time.sleep(0.2)


def faults_of(gang: Path) -> list[dict]:
    found = []
    for path in sorted((gang / TIMELINE).glob(f"*/{FAULTS}")):
        found += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


def run(nodes: int, faults: int, steady: float, interval: float, tail: float, log) -> dict:
    """One Job of ``nodes`` pods: steady training watched, then ``faults`` workers killed ``interval`` s apart."""
    directory = Path(tempfile.mkdtemp(prefix="bench-gang-"))
    try:
        image, claim = directory / "image", directory / "claim"
        image.mkdir()
        claim.mkdir()
        shutil.copy(PROGRAM, image / PROGRAM.name)
        gang = claim / OUTPUT / DIRECTORY
        # long enough for the watch, the faults and their recoveries, then a few checkpoints more
        steps = int((steady + faults * interval + tail) / STEP_SECONDS)
        command = [*local_job(manifests(directory, nodes, steps), claim, directory, backoff=1.0),
                   "--image-dir", str(image)]
        lines: list[str] = []
        measured: dict = {}
        plan = threading.Thread(target=_faults, args=(gang, nodes, faults, steady, interval, directory, measured, log),
                                daemon=True)
        began = time.monotonic()
        plan.start()
        # the Job's lines, this run's only, kept for a look at a run that failed
        with open(Path(tempfile.gettempdir()) / "bench-gang-local-job.log", "w") as kept:
            for _, line in follow(command, clean_env(), timeout=steady + faults * interval + 600):
                lines.append(line)
                kept.write(line)
                kept.flush()
                if ENDED.search(line):
                    break
        plan.join(60)
        wall = time.monotonic() - began
        outcome = next((line.strip() for line in reversed(lines) if "local-job: Job " in line), "no outcome")
        if "error" in measured or "steady_namespace_ops" not in measured:
            raise RuntimeError(measured.get("error", f"the Job ended before it was measured: {outcome}") + "\n"
                               + "".join(lines[-40:]))
        return {"nodes": nodes, "outcome": outcome, "wall_s": round(wall, 1), **measured,
                "faults": faults_of(gang)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _faults(gang: Path, nodes: int, faults: int, steady: float, interval: float, directory: Path, measured: dict,
            log) -> None:
    try:
        wait_for(lambda: any(gang.glob(f"{TIMELINE}/*/1.resumed")), 300, "the first round's first step")
        # steady training begins once every pod wrote its notes: its launcher's first heartbeat comes within a beat of
        # the output directory's making (the first step's), its start note whenever a loaded pod gets to it
        wait_for(lambda: all((gang / f"{node}.{kind}").exists() for node in range(nodes) for kind in (ALIVE, ATTEMPT)),
                 300, "every pod's heartbeat and start note")
        log(f"{nodes} pods train; watching the gang's directory for {steady:g} s")
        watch = NamespaceWatch(gang)
        time.sleep(steady)
        events = watch.read()
        watch.close()
        # the checkpoints' progress note (rank 0's, at each checkpoint: every CHECKPOINT_STEPS steps here, every
        # 30 minutes in a 70B job) apart: the target is for everything else
        others = [name for _, name in events if PROGRESS not in name]
        measured["steady_namespace_ops"] = len(others)
        measured["steady_names"] = sorted(set(others))[:10]  # what to look at when there were any
        measured["checkpoint_note_ops"] = len(events) - len(others)
        measured["metadata_ops_per_node_s"] = round(len(others) / (nodes * steady), 4)
        for number in range(faults):
            index = (nodes - 1) if number % 2 == 0 else 0
            log(f"fault {number + 1}: index {index}'s worker SIGKILLed")
            killed = kill_index(index, whole_pod=False, root=directory / "root")
            if not killed:
                raise RuntimeError(f"no worker of index {index} to kill")
            wait_for(lambda n=number: len(faults_of(gang)) > n, 300, f"fault {number + 1}'s recovery")
            time.sleep(interval)
    except Exception as error:  # said with the Job's last lines
        measured["error"] = f"{type(error).__name__}: {error}"


def simulated(nodes: int) -> dict:
    """bench.scale's phases for one fault on a gang of ``nodes``."""
    from bench.scale import Model, coordinate, measure_store_request

    return coordinate(nodes, Model(store_request_s=measure_store_request()))


def render(result: dict, simulation: dict) -> str:
    faults = result["faults"]
    lines = [f"{result['nodes']} pods under local-job: {result['outcome']} in {result['wall_s']:.0f} s",
             f"steady training: {result['steady_namespace_ops']} namespace operations on the gang's directory "
             f"besides the checkpoints' progress note ({result['checkpoint_note_ops']}): "
             f"{result['metadata_ops_per_node_s']:.3f} per node-second (simulated: "
             f"{simulation['metadata_ops_per_node_s']:.3f})", "",
             "| fault | kind | " + " | ".join(f"{phase} s" for phase in PHASES) + " |",
             "| --- | --- | " + " | ".join("---:" for _ in PHASES) + " |"]
    for fault in faults:
        lines.append(f"| {fault['number']} (round {fault['round']}) | {fault['kind']} | "
                     + " | ".join(f"{fault[phase]:.2f}" for phase in PHASES) + " |")
    phases = simulation["phases"]
    # the simulation's restart: the next round joined, the rendezvous, the new workers' start (an input)
    reformed = phases["next round joined"] + phases["rendezvous"] + phases["warm start"]
    lines.append(f"| simulated, {simulation['nodes']} nodes | worker failed | {phases['detect']:.2f} | "
                 f"{reformed:.2f} | (an input) | (the checkpoint interval's) |")
    return "\n".join(lines)


def say(line: str) -> None:
    print(f"bench.gang: {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gang", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 pods, 1 fault")
    parser.add_argument("--nodes", type=int, help="pods (default 16; --quick 4)")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    size = sizes(args.quick)
    nodes = args.nodes or size["nodes"]
    result = run(nodes, size["faults"], size["steady"], size["interval"], size["tail"], say)
    simulation = simulated(nodes)
    print(render(result, simulation))
    if args.json:
        args.json.write_text(json.dumps({"real": result, "simulated": {
            key: simulation[key] for key in ("nodes", "metadata_ops_per_node_s", "detect_s", "phases")}}, indent=2)
            + "\n")
    ok = " complete after " in result["outcome"] and len(result["faults"]) == size["faults"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
