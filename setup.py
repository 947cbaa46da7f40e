"""Package layout only (metadata lives in pyproject.toml).

The repository's top-level folders are the project's layers; they install under one import root:
``schemas/`` as ``clgate.schemas``, ``workers/`` as ``clgate.workers``, ``service/`` as
``clgate.service``. Generic names such as ``schemas`` never land in users' site-packages.
"""

from setuptools import find_namespace_packages, setup

LAYERS = ("schemas", "workers", "service")


def _packages(root: str, folder: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """``root`` and every folder below ``folder`` (data folders too: templates, migrations)."""
    found = find_namespace_packages(folder, exclude=["*__pycache__*", *exclude])
    return [root, *(f"{root}.{name}" for name in found)]


package_dir = {"clgate": "clgate"}
packages = _packages("clgate", "clgate")
# The shipped examples (jobs, policies, logs) are package data, so `clgate demo` runs from a wheel.
for layer in (*LAYERS, "examples"):
    package_dir[f"clgate.{layer}"] = layer
    # examples/plugins/ holds distributions of their own (plug-in packages), not part of clgate's wheel
    packages += _packages(f"clgate.{layer}", layer, ("plugins", "plugins.*") if layer == "examples" else ())

setup(package_dir=package_dir, packages=packages)
