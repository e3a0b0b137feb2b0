"""The Slurm target: the same validated values rendered as one sbatch script (templates/slurm/job.sbatch.j2).

A pure function of the values, like the Kubernetes renderer beside it (kubernetes.py): what both targets mean comes
from the job's description (generator/job.py); this module adds Slurm's own options and spellings and refuses
what cannot work there (which keys it ignores, the schema declares). Every user string reaches the script
through shlex.quote, or through a pattern that admits no shell or #SBATCH syntax.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable

from generator.errors import ValuesError
from generator.job import JobDescription, describe
from generator.templating import Manifest, environment, render_template
from generator.values import describe_value
from trainer_contract import launcher

LAUNCHERS = {"indexed-trainer": " ".join(launcher.LAUNCHER_COMMAND), "torchrun": "torchrun"}


# sbatch options a site may add (slurm.extra_options); the others are set from the values, or would break the
# script's contract (one task per node, the output files, the signal before the time limit, requeue).
SLURM_EXTRA_OPTIONS = frozenset({
    "--constraint", "--exclusive", "--reservation", "--nodelist", "--exclude", "--mail-type", "--mail-user",
    "--comment", "--wckey", "--licenses", "--begin", "--dependency", "--hint", "--gpus-per-node",
    "--gpu-bind", "--mem-bind", "--cpu-freq", "--switches", "--network", "--prefer", "--priority", "--nice",
    "--core-spec", "--thread-spec", "--tmp", "--spread-job", "--use-min-nodes", "--oversubscribe",
})
_SBATCH_OPTION = re.compile(r"^(--[a-z][a-z-]*)(=[A-Za-z0-9._:,@%+/=-]+)?$")


def value_problems(values: dict) -> Iterable[str]:
    """What is wrong with the slurm.* values themselves, whatever the target (validation reports them with the
    rest, so a values file stays valid for both targets)."""
    for index, option in enumerate(values["slurm"]["extra_options"]):
        match = _SBATCH_OPTION.match(option)
        if not match:
            yield (f"slurm.extra_options[{index}]: {describe_value(option)} must be --name or --name=value (value: "
                   "letters, digits and ._:,@%+/=-)")
        elif match.group(1) not in SLURM_EXTRA_OPTIONS:
            yield (f"slurm.extra_options[{index}]: {match.group(1)} is not an option gen-manifests lets you add "
                   f"(allowed: {', '.join(sorted(SLURM_EXTRA_OPTIONS))})")
        elif match.group(1) == "--constraint" and values["resources"]["gpu"]["accelerator"] is not None:
            yield (f"slurm.extra_options[{index}]: --constraint and resources.gpu.accelerator (rendered as "
                   "--constraint on Slurm) both constrain the nodes; keep one")
    shared = values["slurm"]["shared_dir"]
    if shared and "//" in shared:
        yield (f"slurm.shared_dir: {describe_value(shared)} has an empty path component ('//'), as an unset "
               "variable leaves it (/scratch/$USER/mnist with USER empty); write the whole path")


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


def slurm_context(values: dict, job: JobDescription) -> dict:
    """What the batch script needs beyond the job's description: Slurm's own options and spellings."""
    slurm = values["slurm"]
    shared = slurm["shared_dir"]
    shared_dir = shlex.quote(shared) if shared else '"$SLURM_SUBMIT_DIR"'
    # DATA_DIR and OUTPUT_DIR default to the shared directory (expanded by the script's shell), as on
    # Kubernetes to the shared volume
    placement = {key: f'"{path}"' for key, path in job.placement("$shared_dir").items()}
    quoted = {key: shlex.quote(str(value)) for key, value in job.environment.items()}
    environment = sorted({**placement, **quoted}.items())
    environment += [(variable["name"], shlex.quote(variable["value"])) for variable in values["env"]]
    options = [f"--{name}={slurm[name]}" for name in ("partition", "account", "qos") if slurm[name]]
    # the GPU model: a node feature on Slurm, as a node label on Kubernetes (sbatch refuses a feature the
    # cluster does not define, at once and by name)
    accelerator = values["resources"]["gpu"]["accelerator"]
    if accelerator is not None and job.gpus:
        options.append(f"--constraint={accelerator}")
    return {
        "cpus": math.ceil(job.cpu_cores),
        "memory_mib": math.ceil(job.memory_gib * 1024),
        "time_limit": slurm["time_limit"],
        "options": options + list(slurm["extra_options"]),
        "log_dir": f"{shared}/logs" if shared else "logs",
        "grace": job.grace_seconds,
        "setup": slurm["setup"],
        "shared_dir": shared_dir,
        "environment": environment,
        "launcher": LAUNCHERS[job.launcher],
        "program": shlex.join(job.program),
    }


def render_slurm(values: dict) -> Manifest:
    """The batch script for validated ``values``; ValuesError for what cannot work on Slurm."""
    problems = slurm_problems(values)
    if problems:
        raise ValuesError(*problems)
    job = describe(values)
    context = {"v": values, "job": job, "s": slurm_context(values, job)}
    return Manifest("BatchScript", "job.sbatch", render_template(environment(), "slurm/job.sbatch.j2", context))
