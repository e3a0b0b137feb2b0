"""gen-manifests: values in, Kubernetes manifests (or a Slurm batch script) out.

    gen-manifests --values variables/variables.json | kubectl apply -f -
    gen-manifests --values my.yaml --set replicas=4 --set config_map.EPOCHS=3 --output-dir build/
    gen-manifests --check --values my.yaml          # validate only
    gen-manifests --target slurm --values my.yaml > job.sbatch && sbatch job.sbatch
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from generator import __version__, sizing
from generator.errors import GeneratorError
from generator.targets import Target, ignored_keys, targets

values_option = click.option(
    "--values",
    "-f",
    "values_files",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Values file (JSON or YAML), merged over the shipped defaults; repeat it: later files win.",
)
set_option = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set one value, typed as YAML (replicas=4, config_map.EPOCHS=3); dots separate keys, '\\.' is a "
    "literal dot. Applied after the files.",
)
set_string_option = click.option(
    "--set-string",
    "set_strings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Like --set, but VALUE is always a string (config_map.SEED=0042). Applied last.",
)


class TargetChoice(click.ParamType):
    """--target: one of the registered targets (generator/targets/), looked up when the option is read, so a
    target registered after this module was imported is a choice too."""

    name = "target"

    def get_metavar(self, *args, **kwargs) -> str:
        return "[" + "|".join(targets()) + "]"

    def convert(self, value, param, ctx) -> Target:
        if isinstance(value, Target):
            return value
        found = targets()
        if value not in found:
            self.fail(f"{value!r} is not one of {', '.join(repr(name) for name in found)}.", param, ctx)
        return found[value]


def _warn(target, values: dict, spec) -> None:
    """What renders but is likely not meant, on stderr: the target's own warnings, what will not fit the model's
    size (generator.sizing), and the keys it ignores."""
    for warning in (*target.warnings(values, spec), *sizing.warnings(values, spec, target.name)):
        click.echo(f"gen-manifests: warning: {warning}", err=True)
    ignored = ignored_keys(values, target.name)
    if ignored:
        click.echo(f"gen-manifests: warning: ignored on {target.title}: {', '.join(ignored)}", err=True)


def _write_stdout(text: str) -> None:
    # Bytes, not text: an emoji in a value must not depend on the terminal's locale.
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def _report(error: GeneratorError) -> None:
    for problem in error.problems:
        click.echo(f"gen-manifests: error: {problem}", err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@values_option
@set_option
@set_string_option
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per object (0-networkpolicy.yaml with network_policy.enabled, "
    "1-persistentvolumeclaim.yaml ... 4-job.yaml) instead of printing the stream; files are replaced atomically, "
    "and only files an earlier render wrote there (listed in DIR/.gen-manifests) are removed.",
)
@click.option("--target", type=TargetChoice(), default="kubernetes", show_default=True,
              help="What to render the same values for: the Kubernetes objects, one Slurm batch script "
                   "(job.sbatch with --output-dir), or the objects local-job runs (local).")
@click.option("--check", is_flag=True, help="Validate and render, print nothing; exit 2 on invalid values.")
@click.option("--print-values", is_flag=True, help="Print the resolved values (defaults, files, --set) as JSON.")
@click.option("--print-schema", is_flag=True, help="Print the values' JSON Schema and exit.")
@click.version_option(__version__, prog_name="gen-manifests")
def gen_manifests(values_files, sets, set_strings, output_dir, target, check, print_values, print_schema):
    """Render the Indexed Job, headless Service, ConfigMap and PersistentVolumeClaim for a training run.

    Prints one YAML stream in apply order, ready for `kubectl apply -f -` (or `local-job`). Invalid values
    are all reported on stderr, each naming its key; then the exit code is 2 and nothing is printed.
    """
    from generator.resources import default_values_path, schema_path
    from generator.values import resolve_values

    if print_schema:
        _write_stdout(schema_path().read_text(encoding="utf-8"))
        return
    values = resolve_values(default_values_path(), values_files, sets, set_strings)

    from generator.validation import validate_values

    spec = validate_values(values)
    manifests = target.render_checked(spec)
    _warn(target, values, spec)
    if print_values:
        _write_stdout(json.dumps(values, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    elif check:
        click.echo(f"gen-manifests: values are valid ({len(manifests)} objects)", err=True)
    elif output_dir is not None:
        from generator.output import write_manifests

        for path in write_manifests(manifests, output_dir):
            click.echo(f"wrote {path}", err=True)
    else:
        _write_stdout(target.stream(manifests))


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps the generator's errors to their exit codes, without a traceback."""
    try:
        gen_manifests.main(args=argv, prog_name="gen-manifests", standalone_mode=False)
    except GeneratorError as error:
        _report(error)
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        click.echo("gen-manifests: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except BrokenPipeError:
        # the reader (head, kubectl) went away: not our error, and no traceback
        sys.stderr.close()
        sys.exit(141)
