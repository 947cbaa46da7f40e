"""The shipped examples (jobs, policies, logs, CI snippets), installed as package data of
``clgate.examples``."""
