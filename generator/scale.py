"""The patch that scales a rendered Job of replica groups while it runs (fault_tolerance.max_replicas): ./run.sh
--scale N sends it with `kubectl patch job --type=merge`.

    python -m generator.scale BUILD_DIR N     # prints {"spec": {"completions": N, "parallelism": N, ...}}

The bounds are the rendered ConfigMap's (MIN_REPLICAS, MAX_REPLICAS), so the patch matches the Job that was
applied, not values edited since; the fields are trainer_contract.replica_groups.scaled's, as local-job's `scale`
sets them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from trainer_contract import replica_groups
from trainer_contract.settings import ConfigError


class ScaleError(Exception):
    """Why the Job cannot be scaled: one line naming what to change."""


def patch(build_dir: Path, count: int) -> dict:
    """The merge patch of the Job rendered into ``build_dir`` for ``count`` groups; ScaleError."""
    environment: dict[str, str] = {}
    for path in sorted(build_dir.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "ConfigMap":
                environment.update({str(k): str(v) for k, v in (document.get("data") or {}).items()})
    try:
        bounds = replica_groups.bounds_of(environment)
    except ConfigError as error:
        raise ScaleError(f"the rendered ConfigMap in {build_dir}: {error.problems[0]}") from None
    if bounds is None:
        raise ScaleError(f"the Job in {build_dir} is one gang, whose size is fixed: only replica groups scale while "
                         "they run (fault_tolerance.replica_groups and max_replicas; ./prepare.sh, ./clean.sh, "
                         "./run.sh)")
    try:
        return {"spec": replica_groups.scaled(count, *bounds)}
    except ValueError as error:
        raise ScaleError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) != 2 or not arguments[1].isdigit():
        print("usage: python -m generator.scale BUILD_DIR N (N: the groups, a whole number)", file=sys.stderr)
        return 2
    try:
        print(json.dumps(patch(Path(arguments[0]), int(arguments[1])), sort_keys=True))
    except ScaleError as error:
        print(f"scale: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
