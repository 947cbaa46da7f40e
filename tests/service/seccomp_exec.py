"""Run a command under a Docker/OCI seccomp profile, as a container runtime would apply it.

    python seccomp_exec.py PROFILE.json [--drop NAME ...] -- COMMAND [ARG ...]

The profile's rules are read the way Docker reads them for a container that holds **no capability**
(``cap_drop: [ALL]``, as clgate's worker containers run): a rule that ``includes`` a capability is left
out, ``includes``/``excludes`` of architectures and ``minKernel`` are honoured, a syscall this machine's
libseccomp does not know is skipped. ``--drop NAME`` removes every rule naming NAME (the tests show that
each syscall the profile adds for bwrap is needed); dropping ``clone`` puts Docker's own clone rule (no
namespace flags) in its place. The filter is loaded (which also sets no_new_privs, like
``no-new-privileges``), then COMMAND replaces this process. libseccomp comes from PyPI ``pyseccomp``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any

import pyseccomp

# Docker's names for the architectures (includes/excludes "arches") of this machine
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
# Docker's default clone rule for a container without CAP_SYS_ADMIN: no namespace flag allowed
CLONE_NAMESPACE_FLAGS = 0x7E020000
DOCKER_CLONE = {
    "names": ["clone"],
    "action": "SCMP_ACT_ALLOW",
    "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
}
OPS = {
    "SCMP_CMP_NE": pyseccomp.NE,
    "SCMP_CMP_LT": pyseccomp.LT,
    "SCMP_CMP_LE": pyseccomp.LE,
    "SCMP_CMP_EQ": pyseccomp.EQ,
    "SCMP_CMP_GE": pyseccomp.GE,
    "SCMP_CMP_GT": pyseccomp.GT,
    "SCMP_CMP_MASKED_EQ": pyseccomp.MASKED_EQ,
}


def _kernel() -> tuple[int, ...]:
    return tuple(int(p) for p in platform.release().split("-")[0].split(".")[:2])


def applies(rule: dict[str, Any], arch: str) -> bool:
    """Whether Docker would install ``rule`` in a container with no capability on ``arch``."""
    includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
    if includes.get("caps"):
        return False
    if includes.get("arches") and arch not in includes["arches"]:
        return False
    if arch in (excludes.get("arches") or []):
        return False
    minimum = includes.get("minKernel")
    return not minimum or _kernel() >= tuple(int(p) for p in minimum.split("."))


def _action(rule: dict[str, Any], default_errno: int) -> int:
    if rule["action"] == "SCMP_ACT_ALLOW":
        return pyseccomp.ALLOW
    if rule["action"] == "SCMP_ACT_ERRNO":
        return pyseccomp.ERRNO(rule.get("errnoRet", default_errno))
    raise ValueError(f"action {rule['action']} not supported by this helper")


def build(profile: dict[str, Any], drop: set[str]) -> pyseccomp.SyscallFilter:
    """The libseccomp filter for ``profile`` on this machine, without the rules naming ``drop``."""
    arch = ARCHES[platform.machine()]
    default_errno = profile.get("defaultErrnoRet", 1)
    filt = pyseccomp.SyscallFilter(_action({"action": profile["defaultAction"]}, default_errno))
    rules = [r for r in profile["syscalls"] if not set(r["names"]) & drop]
    if "clone" in drop:
        rules.append(DOCKER_CLONE)
    for rule in rules:
        if not applies(rule, arch):
            continue
        args = [
            pyseccomp.Arg(a["index"], OPS[a["op"]], a["value"], a.get("valueTwo", 0))
            for a in rule.get("args") or []
        ]
        for name in rule["names"]:
            try:
                filt.add_rule(_action(rule, default_errno), name, *args)
            except (ValueError, OSError, RuntimeError):
                continue  # not a syscall of this architecture or this libseccomp
    return filt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--drop", action="append", default=[])
    split = sys.argv.index("--")
    ns, command = parser.parse_args(sys.argv[1:split]), sys.argv[split + 1 :]
    with open(ns.profile, encoding="utf-8") as f:
        build(json.load(f), set(ns.drop)).load()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
