"""Signed, chained history of every record that decides a verdict or who may act.

Families: ``decisions``, ``waivers``, ``audit_events``, ``baselines``, ``policies``, ``jobs`` (final
states only), ``api_keys`` (creation, role, revocation) and ``signing_keys``. Each time such a record is
added or changed, the ``before_flush`` hook appends a :class:`~clgate.store.models.HistoryEntry` to the
record's family, in the same transaction: its position ``seq``, the record's id (``subject``), the
SHA-256 of the record's canonical content (every column that matters), the time, the hash of the entry
before it and the signing key's id — all of it signed with Ed25519 by a key the database never holds
(:mod:`clgate.store.signing`). A changed record (a key revoked, a job finished) is a new entry; the
latest entry of a subject is its signed state.

:func:`verify` needs only public keys. It walks every family in ``seq`` order (positions, links, hashes,
signatures by a trusted key) and compares each table with its family's latest signed states: a row
added, edited, revived or reordered without the key, and a signed row deleted, is named (family, seq,
record, reason). What a writer could still do unseen — delete a family's newest entries with their
rows, or roll the whole database back — is caught by a signed head (:func:`signed_heads`) kept outside
the database: :func:`check_head` fails when the chain is shorter than the head or differs at its length.

Ideas taken: CloudTrail's digest files (signed, chained digests, verified with the public key only);
Certificate Transparency's signed tree heads (a signed ``(length, head hash, time)`` a verifier keeps,
against which a shorter or forked log is caught); Rekor's public-key rotation (old entries stay valid
under the key that signed them, a rotation is itself an entry signed by the outgoing key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import event, func, insert, inspect, select, update
from sqlalchemy.orm import Session

from clgate.schemas.vocab import JobState
from clgate.store import chain as _chain
from clgate.store.models import (
    ApiKey,
    AuditEvent,
    Baseline,
    Decision,
    HistoryEntry,
    Job,
    Policy,
    SigningKey,
    Waiver,
    utcnow,
)
from clgate.store.signing import Signer, key_id_of, parse_public_key, public_text, verify_signature

GENESIS = _chain.GENESIS
HEAD_PREFIX = "h:"  # the families' rows in chain_heads: "h:decisions" …

JOB_COLUMNS = (
    "id",
    "project",
    "mode",
    "model_name",
    "spec",
    "logs",
    "policy_id",
    "baseline_job_id",
    "source_job_id",
    "state",
    "error",
    "submitted_by",
    "created_at",
    "finished_at",
)


@dataclass(frozen=True)
class Family:
    cls: type[Any]
    subject: Callable[[Any], str]
    columns: tuple[str, ...]
    signed: Callable[[Any], bool] = lambda obj: True  # which rows the family holds a state of


def _order_key(family: Any) -> Callable[[Any], tuple[int, str]]:
    """How the records of ``family`` are sealed: by their sequence (if any), then their subject."""
    return lambda o: (getattr(o, "seq", 0) or 0, family.subject(o))


def _columns(cls: type[Any], *, without: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(a.key for a in inspect(cls).column_attrs if a.key not in without)


def _terminal(job: Any) -> bool:
    return JobState(job.state).terminal


FAMILIES: dict[str, Family] = {
    "signing_keys": Family(SigningKey, lambda o: o.key_id, _columns(SigningKey)),
    "api_keys": Family(ApiKey, lambda o: o.id, _columns(ApiKey)),
    "policies": Family(Policy, lambda o: o.id, _columns(Policy)),
    "jobs": Family(Job, lambda o: o.id, JOB_COLUMNS, _terminal),
    "decisions": Family(Decision, lambda o: o.id, _columns(Decision)),
    "waivers": Family(Waiver, lambda o: o.id, _columns(Waiver)),
    "baselines": Family(Baseline, lambda o: o.model_name, _columns(Baseline)),
    "audit_events": Family(AuditEvent, lambda o: str(o.seq), _columns(AuditEvent, without=("id",))),
}
_FAMILY_OF = {f.cls: name for name, f in FAMILIES.items()}


def content_sha256(family: str, obj: Any) -> str:
    """SHA-256 of the canonical content of ``obj`` (a record of ``family``)."""
    cols = FAMILIES[family].columns
    return _chain.sha256_of({c: _chain._normalised(getattr(obj, c)) for c in cols})


def _message(entry: Mapping[str, Any]) -> bytes:
    payload = {
        "family": entry["family"],
        "seq": entry["seq"],
        "subject": entry["subject"],
        "kind": entry["kind"],
        "content": entry["content_sha256"],
        "at": entry["at"],
        "prev": entry["prev_hash"],
        "key": entry["key_id"],
    }
    return _chain.canonical(payload).encode("utf-8")


# ---------------------------------------------------------------------- appending
def _append(session: Session, signer: Signer, family: str, items: list[tuple[str, str, str]]) -> None:
    """Append ``(subject, kind, content sha256)`` entries to ``family``, signed by ``signer``."""
    seq, prev, _ = _chain._lock_head(session, HEAD_PREFIX + family)
    conn = session.connection()
    for subject, kind, digest in items:
        seq += 1
        at = utcnow()
        entry = {
            "family": family,
            "seq": seq,
            "subject": subject,
            "kind": kind,
            "content_sha256": digest,
            "at": at,
            "prev_hash": prev,
            "key_id": signer.key_id,
        }
        message = _message(entry)
        entry["record_hash"] = prev = hashlib.sha256(message).hexdigest()
        entry["signature"] = signer.sign(message)
        conn.execute(insert(HistoryEntry).values(**entry))
    conn.execute(
        update(_chain.ChainHead)
        .where(_chain.ChainHead.chain == HEAD_PREFIX + family)
        .values(seq=seq, record_hash=prev, at=utcnow())
    )


def _fill_defaults(obj: Any) -> None:
    """Python-side column defaults the signature covers are set now, not at INSERT time."""
    for attr in inspect(type(obj)).column_attrs:
        column = attr.columns[0]
        if getattr(obj, attr.key) is None and column.default is not None:
            default = column.default
            if default.is_callable:
                setattr(obj, attr.key, default.arg(None))
            elif default.is_scalar:
                setattr(obj, attr.key, default.arg)


def _changed(session: Session, obj: Any, columns: tuple[str, ...]) -> bool:
    state = inspect(obj)
    return any(state.attrs[c].history.has_changes() for c in columns)


def _to_sign(session: Session) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    new = sorted((o for o in session.new if type(o) in _FAMILY_OF), key=lambda o: inspect(o).insert_order)
    for obj in new:
        _fill_defaults(obj)
    dirty = [o for o in session.dirty if type(o) in _FAMILY_OF and o not in session.deleted]
    for obj in new + dirty:
        family = FAMILIES[_FAMILY_OF[type(obj)]]
        if obj in session.dirty and not _changed(session, obj, family.columns):
            continue
        if family.signed(obj):
            out.setdefault(_FAMILY_OF[type(obj)], []).append(obj)
    return out


def _sign_flush(session: Session, flush_context, instances) -> None:
    signer: Signer | None = session.info.get("signer")
    if signer is None:
        return
    pending = _to_sign(session)
    deleted = [o for o in session.deleted if type(o) in _FAMILY_OF]
    if not pending and not deleted:
        return
    with session.no_autoflush:
        _ensure_key(session, signer)
    for name in FAMILIES:
        items = []
        for obj in pending.get(name, []):
            for c in FAMILIES[name].columns:
                setattr(obj, c, _chain._normalised(getattr(obj, c)))
            items.append((FAMILIES[name].subject(obj), "state", content_sha256(name, obj)))
        for obj in deleted:
            if _FAMILY_OF[type(obj)] == name:
                items.append((FAMILIES[name].subject(obj), "deleted", GENESIS))
        if items:
            _append(session, signer, name, items)


def _ensure_key(session: Session, signer: Signer) -> None:
    """The signer's public key is in the history; the first key ever also seals the records before it."""
    conn = session.connection()
    if conn.execute(select(SigningKey.key_id).where(SigningKey.key_id == signer.key_id)).first():
        return
    _chain._lock_head(session, HEAD_PREFIX + "signing_keys")
    if conn.execute(select(SigningKey.key_id).where(SigningKey.key_id == signer.key_id)).first():
        return  # another process registered it while we waited
    if conn.execute(select(func.count()).select_from(SigningKey)).scalar() == 0:
        _seal_legacy(session, signer)
    introduce(session, signer, signer)


def seal(sessions: Any, signer: Signer) -> None:
    """Register ``signer``'s key (sealing the records written before any key, once) in a transaction."""
    session = sessions()
    try:
        _ensure_key(session, signer)
        session.commit()
    finally:
        session.close()


def introduce(session: Session, new: Signer | Ed25519PublicKey, by: Signer) -> str:
    """Record the public key ``new`` in the history, signed by ``by`` (itself, or the key it replaces)."""

    public = new.public if isinstance(new, Signer) else new
    row = SigningKey(
        key_id=key_id_of(public),
        public_key=public_text(public),
        created_at=_chain._normalised(utcnow()),
        introduced_by=by.key_id,
    )
    session.connection().execute(
        insert(SigningKey).values(**{c: getattr(row, c) for c in FAMILIES["signing_keys"].columns})
    )
    _append(session, by, "signing_keys", [(row.key_id, "state", content_sha256("signing_keys", row))])
    return row.key_id


def _seal_legacy(session: Session, signer: Signer) -> None:
    """Records written before the history was signed get one signed ``legacy`` entry each, and a
    ``seal`` entry says how many per family: from here on, a change to them is caught."""
    counts = {}
    for name, family in FAMILIES.items():
        if name == "signing_keys":
            continue
        rows = [o for o in session.scalars(select(family.cls)) if family.signed(o) and o not in session.new]
        rows.sort(key=_order_key(family))
        counts[name] = len(rows)
        if rows:
            _append(
                session, signer, name, [(family.subject(o), "legacy", content_sha256(name, o)) for o in rows]
            )
    _append(session, signer, "signing_keys", [("seal", "seal", _chain.sha256_of(counts))])


event.listen(Session, "before_flush", _sign_flush)


# ---------------------------------------------------------------------- verifying
@dataclass(frozen=True)
class Problem:
    """The first bad record of a family."""

    family: str
    seq: int | None
    subject: str | None
    reason: str

    def __str__(self) -> str:
        where = _chain.locate(self.seq, self.subject, otherwise="table")
        return f"history {self.family}: {where}: {self.reason}"


@dataclass(frozen=True)
class FamilyReport:
    family: str
    length: int
    head_hash: str
    problem: Problem | None


def _entries(session: Session, family: str) -> Iterator[HistoryEntry]:
    q = select(HistoryEntry).where(HistoryEntry.family == family).order_by(HistoryEntry.seq)
    yield from session.scalars(q.execution_options(yield_per=1000))


def _entry_dict(e: HistoryEntry) -> dict[str, Any]:
    return {
        "family": e.family,
        "seq": e.seq,
        "subject": e.subject,
        "kind": e.kind,
        "content_sha256": e.content_sha256,
        "at": _chain.utc(e.at),
        "prev_hash": e.prev_hash,
        "key_id": e.key_id,
    }


def _walk(
    session: Session, family: str, trusted: dict[str, Ed25519PublicKey]
) -> tuple[int, str, dict[str, HistoryEntry], Problem | None]:
    """Positions, links, hashes and signatures of one family; the latest entry of each subject."""
    expected, prev = 1, GENESIS
    latest: dict[str, HistoryEntry] = {}
    for e in _entries(session, family):
        message = _message(_entry_dict(e))
        if e.seq != expected:
            return (
                expected - 1,
                prev,
                latest,
                Problem(family, expected, None, f"missing (the next entry is seq {e.seq}): deleted?"),
            )
        if e.prev_hash != prev:
            reason = "does not link to the entry before it (inserted, reordered or replaced?)"
        elif hashlib.sha256(message).hexdigest() != e.record_hash:
            reason = "entry does not match its hash (edited?)"
        elif e.key_id not in trusted:
            reason = f"signed by key {e.key_id}, which is not trusted (a key the verifier was not given)"
        elif not verify_signature(trusted, e.key_id, message, e.signature):
            reason = "bad signature (written without the signing key?)"
        else:
            reason = ""
        if reason:
            return expected - 1, prev, latest, Problem(family, e.seq, e.subject, reason)
        if family == "signing_keys" and e.kind == "state":
            _trust(session, e, trusted)
        latest[e.subject] = e
        expected, prev = e.seq + 1, e.record_hash
    return expected - 1, prev, latest, None


def _trust(session: Session, e: HistoryEntry, trusted: dict[str, Ed25519PublicKey]) -> None:
    """A key introduced by a validly signed entry whose row matches it is trusted from then on."""
    row = session.get(SigningKey, e.subject)
    if row is not None and content_sha256("signing_keys", row) == e.content_sha256:
        trusted.setdefault(row.key_id, parse_public_key(row.public_key))


def _compare_rows(session: Session, family: str, latest: dict[str, HistoryEntry]) -> Problem | None:
    """Each table row against its latest signed state; the problem with the lowest ``seq`` first."""
    spec = FAMILIES[family]
    problems: list[Problem] = []
    seen = set()
    for obj in session.scalars(select(spec.cls).execution_options(yield_per=1000)):
        subject = spec.subject(obj)
        seen.add(subject)
        e = latest.get(subject)
        if e is None or e.kind == "deleted":
            if spec.signed(obj):
                problems.append(
                    Problem(family, None, subject, "not in the signed history (written without the key?)")
                )
        elif content_sha256(family, obj) != e.content_sha256:
            problems.append(
                Problem(family, e.seq, subject, "the row differs from its signed state (edited or revived?)")
            )
    for subject, e in latest.items():
        if subject not in seen and e.kind not in ("deleted", "seal"):
            problems.append(
                Problem(family, e.seq, subject, "signed record missing from the table (deleted?)")
            )
    problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
    return problems[0] if problems else None


def verify(session: Session, trusted: Mapping[str, Ed25519PublicKey]) -> list[FamilyReport]:
    """Every family's report; ``trusted`` (key id → public key) grows with the rotations it signed."""
    keys = dict(trusted)
    reports = []
    for family in FAMILIES:
        length, head, latest, problem = _walk(session, family, keys)
        if problem is None:
            problem = _compare_rows(session, family, latest)
        if problem is None:
            recorded = session.get(_chain.ChainHead, HEAD_PREFIX + family)
            if recorded is None or (recorded.seq, recorded.record_hash) != (length, head):
                problem = Problem(
                    family,
                    None,
                    None,
                    f"the history ends at seq {length} but its head "
                    f"says {recorded.seq if recorded else 'nothing'}: entries deleted?",
                )
        reports.append(FamilyReport(family, length, head, problem))
    return reports


# ---------------------------------------------------------------------- signed heads
def _head_message(head: Mapping[str, Any]) -> bytes:
    return _chain.canonical({k: head[k] for k in ("family", "length", "head_hash", "at", "key_id")}).encode()


def signed_heads(session: Session, signer: Signer) -> list[dict[str, Any]]:
    """Each family's head — ``{family, length, head_hash, at, key_id, signature}`` — signed now."""
    at = utcnow().isoformat(timespec="seconds")
    rows = {
        r.chain[len(HEAD_PREFIX) :]: r
        for r in session.scalars(
            select(_chain.ChainHead).where(_chain.ChainHead.chain.like(HEAD_PREFIX + "%"))
        )
    }
    heads = []
    for family in FAMILIES:
        row = rows.get(family)
        head = {
            "family": family,
            "length": int(row.seq) if row else 0,
            "head_hash": row.record_hash if row else GENESIS,
            "at": at,
            "key_id": signer.key_id,
        }
        head["signature"] = signer.sign(_head_message(head))
        heads.append(head)
    return heads


def heads_now(session: Session) -> dict[str, Any]:
    """``{public_key, key_id, heads}`` signed by the session's key (a store opened to sign)."""
    signer: Signer | None = session.info.get("signer")
    if signer is None:
        raise RuntimeError("this store was opened without its signing key: it cannot sign heads")
    return {"public_key": signer.public_text, "key_id": signer.key_id, "heads": signed_heads(session, signer)}


def store_heads(store: Any) -> list[dict[str, Any]]:
    """The signed heads of ``store`` (a :class:`clgate.store.Store`), for a decision's provenance
    (``history_heads`` in decision.json and the reports); empty when the store holds no signing key."""
    if store.signer is None:
        return []
    with store.sessions() as s:
        return signed_heads(s, store.signer)


def check_head(
    session: Session, head: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey]
) -> str | None:
    """Why the signed ``head`` (taken earlier) is not a prefix of the history now, or ``None``.

    A head of length 0 is a prefix of every chain (an empty family that grew since is fine)."""
    try:
        family, length, digest = str(head["family"]), int(head["length"]), str(head["head_hash"])
        message, key_id, signature = _head_message(head), str(head["key_id"]), str(head["signature"])
    except (KeyError, TypeError, ValueError) as exc:
        return f"not a signed head ({exc!s} missing or malformed)"
    if family not in FAMILIES:
        return f"unknown family {family!r}"
    if not verify_signature(trusted, key_id, message, signature):
        return f"head of {family}: bad signature or untrusted key {key_id}"
    if length == 0:
        return None
    entry = session.scalar(
        select(HistoryEntry).where(HistoryEntry.family == family, HistoryEntry.seq == length)
    )
    if entry is None:
        return (
            f"history {family}: the head says {length} entries, the history is shorter "
            "(truncated or rolled back?)"
        )
    if entry.record_hash != digest:
        return f"history {family}: seq {length} differs from the head's hash (history rewritten?)"
    return None


def lengths(session: Session) -> dict[str, int]:
    """Entries per family (for the gauges)."""
    rows = session.execute(
        select(HistoryEntry.family, func.max(HistoryEntry.seq)).group_by(HistoryEntry.family)
    )
    out = dict.fromkeys(FAMILIES, 0)
    out.update({family: int(n) for family, n in rows})
    return out


def rotate(session: Session, old: Signer, new: Signer) -> str:
    """Introduce ``new`` signed by ``old`` (the key in use): records signed by either verify afterwards."""
    _ensure_key(session, old)
    return introduce(session, new, old)


def trusted_keys(publics: list[Ed25519PublicKey]) -> dict[str, Ed25519PublicKey]:

    return {key_id_of(p): p for p in publics}
