"""The version of clgate, in one place: pyproject.toml reads it (``[tool.setuptools.dynamic]``).

A module of its own so that every layer can name the version without importing the package root.
"""

__version__ = "0.1.0"
