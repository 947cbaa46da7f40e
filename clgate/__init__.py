"""clgate: validation of class-incremental classifiers on their worst class and worst moment."""

__version__ = "0.1.0"
