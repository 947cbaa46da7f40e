"""``python -m clgate`` = the ``clgate`` command."""

from clgate.cli import main

main()
