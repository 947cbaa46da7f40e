"""Every docstring example in the package (all layers: clgate, clgate.schemas, workers, service) holds."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import clgate
import clgate.schemas
import clgate.service
import clgate.workers

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names = set()
    for package in (clgate, clgate.schemas, clgate.workers, clgate.service):
        names.add(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names.add(info.name)
    return sorted(n for n in names if ".migrations" not in n and n != "clgate.__main__")


@pytest.mark.parametrize("name", _modules())
def test_module_imports_and_its_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.failed == 0, f"{name}: {result.failed} failing example(s)"
