"""Packages are found, never listed: a new module or subpackage cannot be left out of the wheel.

Everything else (metadata, dependencies, package data) lives in setup.cfg. templates/ and variables/ sit at
the top of the repository, where users edit them, and ship inside the generator package (setup.cfg's
package_dir maps them), so that a plain, non-editable install renders.
"""

from setuptools import find_packages, setup

PRODUCT = ("generator", "worker", "localjob")

setup(packages=[*find_packages(include=[f"{name}{suffix}" for name in PRODUCT for suffix in ("", ".*")]),
                "generator.templates", "generator.variables"])
