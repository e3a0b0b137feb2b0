"""One exception hierarchy for the generator, each class carrying the process exit code it maps to."""

from __future__ import annotations


class GeneratorError(Exception):
    """Base class: a problem reported to the user as one or more ``error:`` lines on stderr."""

    exit_code = 1

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


class ValuesError(GeneratorError):
    """The values (files, --set, the combination) are invalid. Every problem is listed, each naming its key."""

    exit_code = 2


class OutputError(GeneratorError):
    """The rendered manifests could not be written (unwritable or invalid --output-dir)."""

    exit_code = 3


class TemplateError(GeneratorError):
    """A template failed to render or produced invalid YAML: a bug in templates/, not in the values."""

    exit_code = 70  # EX_SOFTWARE
