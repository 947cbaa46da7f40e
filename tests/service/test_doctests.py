"""The docstring examples of service/ and workers/ (outside pytest's doctest paths) run and are correct."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import service
import workers


def _modules():
    names = []
    for package in (service, workers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".migrations" not in info.name:
                names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules())
def test_module_imports_and_its_examples_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} failing example(s)"
