"""``clgate audit verify|heads|public-key|new-key|rotate-key``: the signed, tamper-evident history.

``verify`` needs only public keys (``--key``; by default the store's own signing key when its file is
here); ``--head`` checks that signed heads taken earlier (a file, ``decision.json`` or the API's
``/v1/audit/heads``) are still prefixes of the history, which catches truncation and rollback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from clgate.cli.service_cmd import _settings

audit_app = typer.Typer(
    help="The tamper-evident history: hash chains and the signed history of every record that decides "
    "a verdict or who may act.",
    no_args_is_help=True,
)
DATA_DIR = typer.Option(None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR).")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _open_checked(data_dir: Path | None, *, sign: bool):
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store import open_store
    from clgate.store.db import current_revision, head_revision
    from clgate.store.signing import SigningKeyError

    try:
        store = open_store(_settings(data_dir), sign=sign)
    except SigningKeyError as exc:
        raise _fail(f"CLGATE_SIGNING_KEY_FILE: {exc}") from None
    revision, head = current_revision(store.engine), head_revision()
    if revision != head:
        store.close()
        raise _fail(
            f"the database is at revision {revision or '(none)'}, not {head}: run `clgate db upgrade` "
            "(or point CLGATE_DATA_DIR / CLGATE_DATABASE_URL at the service's store)"
        )
    return store


def _anchors(anchor: list[str]) -> list[tuple[str, int, str]]:
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.chain import CHAINS

    out = []
    for text in anchor:
        parts = text.split(":")
        if len(parts) != 3 or parts[0] not in CHAINS or not parts[1].isdigit() or len(parts[2]) != 64:
            raise _fail(f"--anchor: {text!r} is not CHAIN:SEQ:HASH with CHAIN one of {', '.join(CHAINS)}")
        out.append((parts[0], int(parts[1]), parts[2]))
    return out


def _trusted(keys: list[Path], store) -> dict[str, Any]:
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.history import trusted_keys
    from clgate.store.signing import SigningKeyError, parse_public_key

    publics = []
    for path in keys:
        try:
            publics.append(parse_public_key(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, SigningKeyError) as exc:
            raise _fail(f"--key: {path}: {exc}") from None
    if not publics:
        if store.signer is None:
            raise _fail(
                f"no public key to verify with: give --key FILE (from `clgate audit public-key`); "
                f"{store.settings.signing_key_path()} does not exist here"
            )
        publics.append(store.signer.public)
    return trusted_keys(publics)


def _reason_of(response: Any) -> str:
    """The ``reason`` of an API error answer, or its text."""
    try:
        return str(response.json()["reason"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase


def _load_heads(sources: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``(source, head)`` pairs from files or URLs holding a list of heads, ``{"heads": [...]}`` or a
    ``decision.json`` with ``history_heads``."""
    out: list[tuple[str, Any]] = []
    for source in sources:
        try:
            if source.startswith(("http://", "https://")):
                import os

                import httpx

                key = os.environ.get("CLGATE_API_KEY")
                r = httpx.get(source, headers={"X-API-Key": key} if key else {}, timeout=30)
                if r.is_error:  # the API's reason (a project's key is refused the deployment's heads)
                    raise ValueError(f"HTTP {r.status_code}: {_reason_of(r)}")
                document = r.json()
            else:
                document = json.loads(Path(source).read_text(encoding="utf-8"))
        except Exception as exc:  # a file or a URL given by the operator: any failure is a bad option
            raise _fail(f"--head: {source}: {exc}") from None
        if isinstance(document, dict):  # {"heads": …} (API, `audit heads`) or a decision.json
            provenance = document.get("provenance")
            inner = provenance.get("history_heads") if isinstance(provenance, dict) else None
            document = document.get("heads", inner)
        if not isinstance(document, list) or not all(isinstance(h, dict) for h in document):
            raise _fail(
                f"--head: {source}: holds no signed heads (a list, 'heads' or provenance.history_heads)"
            )
        out.extend((source, h) for h in document)
    return out


@audit_app.command("verify")
def audit_verify(
    anchor: list[str] = typer.Option(
        [],
        "--anchor",
        help="CHAIN:SEQ:HASH printed by an earlier run (kept outside the database): that link "
        "must still be in the chain. Repeatable.",
    ),
    head: list[str] = typer.Option(
        [],
        "--head",
        help="FILE or URL of signed heads taken earlier (`clgate audit heads`, decision.json, "
        "/v1/audit/heads, read with the global_admin key in CLGATE_API_KEY): each must still be a prefix "
        "of the history. Repeatable.",
    ),
    key: list[Path] = typer.Option(
        [],
        "--key",
        help="A trusted public key file (`clgate audit public-key`); repeat for rotated keys. Default: "
        "the store's own signing key, when its file is here.",
    ),
    decision: list[Path] = typer.Option(
        [],
        "--decision",
        help="A decision.json written beside the reports: check its sha256 instead (no "
        "database needed). Repeatable.",
    ),
    data_dir: Path = DATA_DIR,
) -> None:
    """Check the hash chains and the signed history; name the first bad record of each family.

    Exit 0 when everything verifies (each head is printed, as an anchor for a later run), 1 when a record
    or a head does not, 2 for bad options.
    """
    if decision:
        raise typer.Exit(_verify_decision_files(decision))
    anchors = _anchors(anchor)
    heads = _load_heads(head)
    store = _open_checked(data_dir, sign=False)
    try:
        trusted = _trusted(key, store)
        with store.sessions() as s:
            broken = _report(s, trusted, anchors, heads)
    finally:
        store.close()
    raise typer.Exit(1 if broken else 0)


def _report(s, trusted, anchors, heads) -> bool:
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store import history
    from clgate.store.chain import anchored, verify

    broken = False
    for report in verify(s):
        if report.broken is not None:
            broken = True
            typer.echo(f"BROKEN {report.broken}")
        else:
            typer.echo(
                f"ok {report.chain}: {report.records} records, head "
                f"{report.chain}:{report.head_seq}:{report.head_hash}"
            )
    for family in history.verify(s, trusted):
        if family.problem is not None:
            broken = True
            typer.echo(f"BROKEN {family.problem}")
        else:
            typer.echo(f"ok history {family.family}: {family.length} entries, head {family.head_hash}")
    for chain, seq, digest in anchors:
        if not anchored(s, chain, seq, digest):
            broken = True
            typer.echo(
                f"BROKEN {chain}: seq {seq}: no longer has the anchored hash {digest[:12]}… "
                "(history rewritten?)"
            )
    for source, h in heads:
        why = history.check_head(s, h, trusted)
        if why is not None:
            broken = True
            typer.echo(f"BROKEN head from {source}: {why}")
    return broken


def _verify_decision_files(paths: list[Path]) -> int:
    """0 when every file's ``sha256`` matches its content, 1 when one does not, 2 when one is unreadable."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.schemas.decision import decision_sha256

    worst = 0
    for path in paths:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            typer.echo(f"error: --decision: {path}: {exc}", err=True)
            worst = 2
            continue
        if not isinstance(document, dict) or not isinstance(document.get("sha256"), str):
            typer.echo(f"BROKEN {path}: carries no sha256 (not a decision.json written by clgate?)")
            worst = max(worst, 1)
        elif decision_sha256(document) != document["sha256"]:
            typer.echo(f"BROKEN {path}: content does not match its sha256 (edited?)")
            worst = max(worst, 1)
        else:
            typer.echo(f"ok {path}: sha256 {document['sha256']}")
    return worst


@audit_app.command("heads")
def audit_heads(data_dir: Path = DATA_DIR) -> None:
    """Print each family's signed head as JSON: keep it outside the database, give it to
    `clgate audit verify --head FILE` later (needs the signing key)."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.history import signed_heads

    store = _open_checked(data_dir, sign=True)
    try:
        with store.sessions() as s:
            typer.echo(json.dumps({"heads": signed_heads(s, store.signer)}, indent=2))
    finally:
        store.close()


@audit_app.command("public-key")
def audit_public_key(data_dir: Path = DATA_DIR) -> None:
    """Print the public key of the history's signing key (``ed25519:<base64>``), for verifiers."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.signing import SigningKeyError, load_or_create

    settings = _settings(data_dir)
    try:
        signer = load_or_create(settings.signing_key_path(), create=settings.signing_key_file is None)
    except SigningKeyError as exc:
        raise _fail(f"CLGATE_SIGNING_KEY_FILE: {exc}") from None
    typer.echo(signer.public_text)


@audit_app.command("new-key")
def audit_new_key(
    path: Path = typer.Argument(..., help="The private key file to create (mode 0600; never overwritten)."),
) -> None:
    """Create a signing key file for a deployment's secret (CLGATE_SIGNING_KEY_FILE) and print its public
    key (``ed25519:<base64>``), for verifiers. Needs no store: make it before the first start."""
    # lazy: CLI — `clgate --help` loads no cryptography
    from clgate.store.signing import write_new_key

    try:
        signer = write_new_key(path)
    except FileExistsError:
        raise _fail(f"{path}: exists already; a signing key is never overwritten") from None
    except OSError as exc:
        raise _fail(f"{path}: {exc.strerror or exc}") from None
    typer.echo(signer.public_text)


@audit_app.command("rotate-key")
def audit_rotate_key(
    new_key: Path = typer.Argument(..., help="The new private key file (created, mode 0600, if absent)."),
    data_dir: Path = DATA_DIR,
) -> None:
    """Introduce a new signing key, signed by the current one: records signed before stay valid under the
    old key, records after are signed by the new one. Then point CLGATE_SIGNING_KEY_FILE at it."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.db import session_scope
    from clgate.store.history import rotate
    from clgate.store.signing import SigningKeyError, load_or_create

    store = _open_checked(data_dir, sign=True)
    try:
        new = load_or_create(new_key, create=True)
        if new.key_id == store.signer.key_id:
            raise _fail(f"{new_key} is the key in use already")
        with session_scope(store.sessions) as s:
            rotate(s, store.signer, new)
    except SigningKeyError as exc:
        raise _fail(str(exc)) from None
    finally:
        store.close()
    typer.echo(f"key {new.key_id} introduced by {store.signer.key_id}: set CLGATE_SIGNING_KEY_FILE={new_key}")
    typer.echo(new.public_text)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(audit_app, name="audit")
