"""``python -m clgate`` = the ``clgate`` command."""

from clgate.cli import main

if __name__ == "__main__":
    main()
