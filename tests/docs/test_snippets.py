"""Every code block in README.md, CONTRIBUTING.md and docs/*.md runs as pasted, or says it is illustrative.

Each block runs in the state the README's quick start leaves a user in: a fresh copy of the checkout
with ``.venv/`` built and NOT activated (the venv's ``bin/`` is not on ``PATH``, so a block must spell
``.venv/bin/clgate`` and ``.venv/bin/python``), after ``./dev.sh demo`` (its ``clgate-out/`` is there).
Blocks fenced ``bash``, ``sh`` or ``shell`` run with bash (``set -euo pipefail``); blocks fenced
``python`` run with ``.venv/bin/python``. A block that uses ``$API`` talks to an embedded ``clgate
serve`` the test started (``$API``, ``$ADMIN`` its admin key, ``$H`` the key's header, its data folder
as ``CLGATE_DATA_DIR``). A block exits 0 unless the line before it is ``<!-- exit: N -->``; 127
(command not found) never passes. Blocks fenced ``console``, ``text`` or a data language, and any
block whose previous non-blank line is ``<!-- illustrative -->`` (or ``<!-- illustrative: why -->``),
are not run. Each runnable block is one test case, named ``FILE:LINE`` after its opening fence, and
has TIMEOUT_S seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py", "python3"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_ILLUSTRATIVE = re.compile(r"^\s*<!--\s*illustrative\b.*-->\s*$")
_EXIT = re.compile(r"^\s*<!--\s*exit:\s*(?P<status>\d+)\s*-->\s*$")
NOT_FOUND = 127  # the shell's "command not found": never a pass, whatever a block declares


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    illustrative: bool
    expected_exit: int = 0

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def extract_blocks(text: str, file: str) -> list[Block]:
    """The fenced code blocks of a Markdown text: language, code, and whether marked illustrative.

    >>> md = "a\\n<!-- illustrative -->\\n```bash\\nrm -rf /\\n```\\n```python\\nprint(1)\\n```\\n"
    >>> [(b.line, b.lang, b.code, b.illustrative) for b in extract_blocks(md, "x.md")]
    [(3, 'bash', 'rm -rf /\\n', True), (6, 'python', 'print(1)\\n', False)]
    """
    blocks = []
    lines = text.splitlines()
    i = 0
    previous = ""  # the last non-blank line before the current one
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        fence = opening["fence"]
        start = i
        body = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence[0] * len(fence)) and not lines[i].strip().strip(fence[0])
        ):
            body.append(lines[i].removeprefix(opening["indent"]))
            i += 1
        blocks.append(
            Block(
                file,
                start + 1,
                opening["lang"].lower(),
                "\n".join(body) + "\n",
                bool(_ILLUSTRATIVE.match(previous)),
                int(status["status"]) if (status := _EXIT.match(previous)) else 0,
            )
        )
        previous = lines[i] if i < len(lines) else ""
        i += 1
    return blocks


def _documents() -> list[Path]:
    docs = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    return [d for d in docs if d.is_file()]


ALL_BLOCKS = [
    b
    for doc in _documents()
    for b in extract_blocks(doc.read_text(encoding="utf-8"), doc.relative_to(REPO).as_posix())
]
RUNNABLE = [b for b in ALL_BLOCKS if b.lang in SHELL | PYTHON and not b.illustrative]


def test_the_documents_have_runnable_blocks():
    assert RUNNABLE, "no runnable code block found: the extraction is broken"
    ids = [b.id for b in ALL_BLOCKS]
    assert len(ids) == len(set(ids))


@pytest.fixture(scope="session")
def after_demo(tmp_path_factory, checkout_copier) -> Path:
    """``clgate-out/`` as ``./dev.sh demo`` leaves it (run once, copied into each block's clone)."""
    clone = checkout_copier(tmp_path_factory.mktemp("demo") / "clone")
    done = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "clgate"), "demo"],
        cwd=clone,
        env={**_user_env(clone), "HOME": str(clone)},
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return clone / "clgate-out"


def _user_env(clone: Path) -> dict[str, str]:
    """The user's shell after the quick start: no venv on PATH, no VIRTUAL_ENV, no clgate settings."""
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("CLGATE_")
    }
    path = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != Path(venv_bin).resolve()
    ]
    env.update(PATH=os.pathsep.join(path) or "/usr/bin:/bin", COLUMNS="120", MPLBACKEND="Agg")
    return env


@pytest.fixture(scope="session")
def embedded_server(tmp_path_factory) -> Iterator[dict[str, str]]:
    """``clgate serve`` (embedded, SQLite) on a free port, for blocks: ``$API``, ``$ADMIN``, ``$H``."""
    from tests.fixtures.service import free_port

    data = tmp_path_factory.mktemp("server") / "clgate-data"
    port = free_port()
    env = {**_user_env(data.parent), "CLGATE_DATA_DIR": str(data)}
    log = (data.parent / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.prefix) / "bin" / "clgate"), "serve", "--port", str(port)],
        cwd=data.parent, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        import httpx

        for _ in range(120):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (data.parent / "serve.log").read_text()
            time.sleep(0.5)
        admin = (data / "admin.key").read_text().strip()
        yield {
            "API": f"http://127.0.0.1:{port}",
            "ADMIN": admin,
            "H": f"X-API-Key: {admin}",
            "CLGATE_DATA_DIR": str(data),
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs_as_pasted(block: Block, tmp_path, checkout_copier, after_demo, request):
    clone = checkout_copier(tmp_path / "clone")
    (clone / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    shutil.copytree(after_demo, clone / "clgate-out", symlinks=True)
    env = {**_user_env(clone), "HOME": str(tmp_path)}
    if "$API" in block.code and "clgate serve" not in block.code:  # a block that starts none uses ours
        env.update(request.getfixturevalue("embedded_server"))
    if block.lang in SHELL:
        command = ["bash", "-c", "set -euo pipefail\n" + block.code]
    else:
        script = tmp_path / "snippet.py"
        script.write_text(block.code, encoding="utf-8")
        command = [".venv/bin/python", str(script)]
    try:
        done = subprocess.run(
            command,
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=TIMEOUT_S,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.id}: still running after {TIMEOUT_S} s\n{exc.stdout or ''}\n{exc.stderr or ''}")
    report = (
        f"{block.id} ({block.lang}) exited {done.returncode}, expected {block.expected_exit}\n--- block\n"
        f"{block.code}--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )
    assert done.returncode != NOT_FOUND, report
    assert done.returncode == block.expected_exit, report


def test_a_command_that_is_not_found_never_passes():
    """The state the blocks run in really lacks the venv: a bare ``clgate`` is not found there."""
    done = subprocess.run(
        ["bash", "-c", "command -v clgate || exit 127"], env=_user_env(REPO), capture_output=True, check=False
    )
    if shutil.which("clgate", path=_user_env(REPO)["PATH"]) is None:  # a clgate installed system-wide is fine
        assert done.returncode == NOT_FOUND


def test_extract_blocks_reads_exit_markers():
    md = "<!-- exit: 1 -->\n```bash\nfalse\n```\n```bash\ntrue\n```\n"
    assert [(b.expected_exit, b.illustrative) for b in extract_blocks(md, "t.md")] == [(1, False), (0, False)]


def test_extract_blocks_reads_languages_lines_and_markers():
    md = (
        "# t\n\n<!-- illustrative: needs a server -->\n\n```bash\ncurl x\n```\ntext\n"
        "````python\nprint('```')\n````\n```console\n$ ls\n```\n   ```sh\n   echo indented\n   ```\n"
    )
    blocks = extract_blocks(md, "t.md")
    assert [(b.line, b.lang, b.illustrative) for b in blocks] == [
        (5, "bash", True),
        (9, "python", False),
        (12, "console", False),
        (15, "sh", False),
    ]
    assert blocks[1].code == "print('```')\n" and blocks[3].code == "echo indented\n"


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: d.relative_to(REPO).as_posix())
def test_links_stay_inside_the_repository_and_resolve(doc):
    text = doc.read_text(encoding="utf-8")
    for outside in ("shared/spec", "shared/design", "../shared", "/work/"):
        assert outside not in text, f"{doc.name} mentions {outside}, which is not part of the repository"
    for match in _LINK.finditer(text):
        target = match["target"].split("#")[0]
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # an anchor, or http:, mailto: …
            continue
        assert (doc.parent / target).exists(), f"{doc.name}: link to {target}, which does not exist"
