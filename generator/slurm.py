"""The Slurm target: the same validated values rendered as one sbatch script (templates/slurm/job.sbatch.j2).

A pure function of the values, like the Kubernetes renderer beside it (render.py): the numbers both targets
share come from render.derive; this module adds Slurm's own and checks what has no meaning there. Every user
string reaches the script through shlex.quote, or through a pattern that admits no shell or #SBATCH syntax.
"""

from __future__ import annotations

import math
import shlex

from generator.errors import ValuesError
from generator.render import Manifest, derive, environment, render_template
from worker import contract

LAUNCHERS = {"indexed-trainer": " ".join(contract.LAUNCHER_COMMAND), "torchrun": "torchrun"}


def slurm_problems(values: dict) -> list[str]:
    """What would be wrong on Slurm (Kubernetes objects the script cannot reach), each naming its key."""
    problems = []
    for index, variable in enumerate(values["env"]):
        if "valueFrom" in variable:
            problems.append(f"env[{index}].valueFrom: Slurm has no Secrets or ConfigMaps; set {variable['name']} "
                            "in the environment sbatch is run from, or in slurm.setup")
    if values["env_from_secrets"]:
        problems.append("env_from_secrets: Slurm has no Secrets; export the variables in slurm.setup instead")
    if values["extra_volumes"]:
        problems.append("extra_volumes: Slurm mounts no volumes; use the path of a shared filesystem instead")
    return problems


def slurm_context(values: dict, derived: dict) -> dict:
    slurm = values["slurm"]
    shared = slurm["shared_dir"]
    shared_dir = shlex.quote(shared) if shared else '"$SLURM_SUBMIT_DIR"'
    config = dict(derived["config"])
    # DATA_DIR and OUTPUT_DIR default to the shared directory, as on Kubernetes to the shared volume
    defaults = {"DATA_DIR": '"$shared_dir/data"', "OUTPUT_DIR": f'"$shared_dir/runs/{values["name"]}"'}
    environment = []
    for key, value in config.items():
        if key in defaults and key not in values["config_map"]:
            environment.append((key, defaults[key]))
        else:
            environment.append((key, shlex.quote(str(value))))
    environment += [(variable["name"], shlex.quote(variable["value"])) for variable in values["env"]]
    entry = values["entrypoint"]
    program = (["-m", entry["module"]] if entry["module"] is not None else [entry["script"]]) + entry["args"]
    options = [f"--{name}={slurm[name]}" for name in ("partition", "account", "qos") if slurm[name]]
    return {
        "cpus": math.ceil(values["resources"]["cpu"]),
        "memory_mib": math.ceil(values["resources"]["memory"] * 1024),
        "time_limit": slurm["time_limit"],
        "options": options + list(slurm["extra_options"]),
        "log_dir": f"{shared}/logs" if shared else "logs",
        "grace": values["termination_grace_period_seconds"],
        "setup": slurm["setup"],
        "shared_dir": shared_dir,
        "environment": environment,
        "launcher": LAUNCHERS[derived["launcher"]],
        "program": shlex.join(program),
    }


def render_slurm(values: dict) -> Manifest:
    """The batch script for validated ``values``; ValuesError for what cannot work on Slurm."""
    problems = slurm_problems(values)
    if problems:
        raise ValuesError(*problems)
    derived = derive(values)
    context = {"v": values, "d": derived, "s": slurm_context(values, derived)}
    return Manifest("BatchScript", "job.sbatch", render_template(environment(), "slurm/job.sbatch.j2", context))
