"""``report.pdf``: ``report.html`` printed by headless Chromium (optional; needs a Chromium on the host)."""

from __future__ import annotations

from pathlib import Path


class PdfError(RuntimeError):
    """The PDF could not be written (no Chromium, or Chromium failed); the message says which and why."""


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """``$CLGATE_CHROMIUM`` if set, else the first Chromium or Chrome on ``PATH``."""
    import os
    import shutil

    given = os.environ.get("CLGATE_CHROMIUM")
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def write_pdf(html_path: Path, pdf_path: Path | None = None, *, timeout_s: float = 120.0) -> Path:
    """Print ``report.html`` to ``report.pdf`` beside it with headless Chromium (the report's print
    stylesheet: header on every page, rows not split, provenance printed).

    Raises :class:`PdfError` with a clear message when no Chromium is installed or it fails; callers
    report it and go on (the other report files are already written)."""
    import os
    import subprocess
    import tempfile

    html_path = Path(html_path).resolve()
    pdf_path = Path(pdf_path) if pdf_path is not None else html_path.with_suffix(".pdf")
    chromium = find_chromium()
    if chromium is None:
        raise PdfError(
            "no Chromium found (looked for $CLGATE_CHROMIUM, " + ", ".join(CHROMIUM_NAMES) + " on PATH): "
            "install chromium (Debian: apt-get install chromium) to get report.pdf; "
            "the other reports are written"
        )
    tmp = pdf_path.with_name(pdf_path.name + ".tmp")
    with tempfile.TemporaryDirectory(prefix="clgate-chromium-") as profile:
        # Chromium refuses to run as root with its sandbox (containers); elsewhere the sandbox stays on
        no_sandbox = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        cmd = [
            chromium,
            "--headless",
            *no_sandbox,
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            "--run-all-compositor-stages-before-draw",
            f"--print-to-pdf={tmp}",
            html_path.as_uri(),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PdfError(f"Chromium ({chromium}) could not print the report: {exc}") from None
    if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        raise PdfError(f"Chromium ({chromium}) exited {proc.returncode} without a PDF: " + " | ".join(tail))
    tmp.replace(pdf_path)
    return pdf_path
