"""Packages are found, never listed: a new module or subpackage cannot be left out of the wheel, and a deleted
one cannot stay in it.

Everything else (metadata, dependencies, package data) lives in setup.cfg. templates/ and variables/ sit at
the top of the repository, where users edit them, and ship inside the generator package (setup.cfg's
package_dir maps them), so that a plain, non-editable install renders.
"""

import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PRODUCT = ("trainer_contract", "trainer_stager", "trainer_launcher", "trainer_runtime", "worker", "generator", "localjob",
           "status_views")


class FreshBuildPy(build_py):
    """Build into an emptied folder: setuptools keeps its build folder between builds, so a module deleted or
    renamed in the tree would otherwise still ship from an earlier build."""

    def run(self):
        shutil.rmtree(self.build_lib, ignore_errors=True)
        super().run()


setup(packages=[*find_packages(include=[f"{name}{suffix}" for name in PRODUCT for suffix in ("", ".*")]),
                "generator.templates", "generator.variables"],
      cmdclass={"build_py": FreshBuildPy})
