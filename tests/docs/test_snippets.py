"""Every code block in README.md, CONTRIBUTING.md and docs/*.md runs as pasted, or says it is illustrative.

Blocks fenced ``bash``, ``sh`` or ``shell`` run with bash (``set -euo pipefail``) and blocks fenced
``python`` run with the test's Python, each in a fresh copy of the checkout whose ``.venv`` is this
one, with the venv's ``bin/`` first on ``PATH`` (as after ``source .venv/bin/activate``). Blocks fenced
``console``, ``text`` or a data language (json, yaml, toml …), and any block whose previous non-blank
line is ``<!-- illustrative -->`` (or ``<!-- illustrative: why -->``), are not run. Each runnable block
is one test case, named ``FILE:LINE`` after its opening fence, and has TIMEOUT_S seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py", "python3"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_ILLUSTRATIVE = re.compile(r"^\s*<!--\s*illustrative\b.*-->\s*$")


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    illustrative: bool

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


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs_as_pasted(block: Block, tmp_path, checkout_copier):
    clone = checkout_copier(tmp_path / "clone")
    venv = Path(sys.prefix)
    (clone / ".venv").symlink_to(venv, target_is_directory=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "CLGATE_BROKER_URL", "CLGATE_DATA_DIR", "CLGATE_DATABASE_URL")
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        HOME=str(tmp_path),
        COLUMNS="120",
        MPLBACKEND="Agg",
    )
    if block.lang in SHELL:
        command = ["bash", "-c", "set -euo pipefail\n" + block.code]
    else:
        script = tmp_path / "snippet.py"
        script.write_text(block.code, encoding="utf-8")
        command = [str(venv / "bin" / "python"), str(script)]
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
    assert done.returncode == 0, (
        f"{block.id} ({block.lang}) exited {done.returncode}\n--- block\n{block.code}--- stdout\n"
        f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    )


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
