"""Hash chains over the append-only records: decisions, waivers and audit events.

Each record carries ``seq`` (its position, from 1), ``prev_hash`` (the hash of the record before it, or
:data:`GENESIS`) and ``record_hash`` = SHA-256 of the canonical JSON (sorted keys, no spaces) of
``{"chain", "seq", "prev", "content"}``, where ``content`` is every column but the chain's own. Editing
a record changes its hash; deleting one leaves a gap in ``seq`` and a ``prev_hash`` that points nowhere;
a record inserted with an older timestamp breaks the chain's time order; :class:`ChainHead` holds the
last link, so a deleted tail shows too. :func:`verify` checks all of it and names the first broken link.

The links are added in one place, a ``before_flush`` hook on every ORM session, so no code path can
append a record without chaining it.

The chain has no secret: someone who can write to the database can recompute every hash after an edit.
What detects that is the signed history (:mod:`clgate.store.history`), which covers these records and
more with an Ed25519 signature, and an anchor kept elsewhere — ``clgate audit verify`` prints each
chain's head (``seq:hash``) and ``--anchor`` checks that a head recorded earlier is still in the chain.

>>> h = link_hash("audit_events", 1, GENESIS, {"action": "x"})
>>> len(h), h == link_hash("audit_events", 1, GENESIS, {"action": "x"})
(64, True)
>>> h == link_hash("audit_events", 1, GENESIS, {"action": "y"})
False
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event, inspect, select, update
from sqlalchemy.orm import Session

from clgate.store.models import (
    DEFAULT_PROJECT,
    AuditEvent,
    ChainHead,
    Decision,
    Job,
    Waiver,
    as_utc,
    new_id,
    utcnow,
)

GENESIS = "0" * 64

# chain name → (record class, content columns, timestamp column)
CHAINS: dict[str, tuple[type[Decision] | type[Waiver] | type[AuditEvent], tuple[str, ...], str]] = {
    "decisions": (
        Decision,
        (
            "id",
            "job_id",
            "policy_id",
            "model_name",
            "verdict",
            "headline",
            "document",
            "created_at",
            "project",
        ),
        "created_at",
    ),
    "waivers": (
        Waiver,
        (
            "id",
            "decision_id",
            "job_id",
            "justification",
            "approver",
            "created_at",
            "expires_at",
            "project",
        ),
        "created_at",
    ),
    "audit_events": (
        AuditEvent,
        ("at", "actor", "action", "subject_type", "subject_id", "details", "project"),
        "at",
    ),
}
_CHAIN_OF = {cls: name for name, (cls, _, _) in CHAINS.items()}


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 kept, datetimes as UTC ISO 8601 with microseconds.

    >>> canonical({"b": 1, "a": [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]})
    '{"a":["2026-01-01T00:00:00.000000+00:00"],"b":1}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return utc(value).isoformat(timespec="microseconds")
    return str(value)


def utc(value: dt.datetime) -> dt.datetime:
    """``value`` in UTC (a naive time is UTC, as SQLite returns them)."""
    return as_utc(value).astimezone(dt.UTC)


def sha256_of(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def content_of(chain: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed content of a record given as a mapping of its columns."""
    _, columns, _ = CHAINS[chain]
    return {c: row.get(c) for c in columns}


def link_hash(chain: str, seq: int, prev: str, content: Mapping[str, Any]) -> str:
    return sha256_of({"chain": chain, "seq": seq, "prev": prev, "content": dict(content)})


def _normalised(value: Any) -> Any:
    """What the database gives back: UTC times, JSON values as JSON reads them."""
    if isinstance(value, dt.datetime):
        return utc(value)
    if isinstance(value, (dict, list, tuple)):
        return json.loads(canonical(value))
    return value


# ---------------------------------------------------------------------- appending
class BackdatedRecord(ValueError):
    pass


def _lock_head(session: Session, chain: str) -> tuple[int, str, dt.datetime | None]:
    conn = session.connection()
    # a write first: SQLite takes its write lock, PostgreSQL locks the head's row, until commit
    conn.execute(update(ChainHead).where(ChainHead.chain == chain).values(seq=ChainHead.seq))
    row = conn.execute(
        select(ChainHead.seq, ChainHead.record_hash, ChainHead.at).where(ChainHead.chain == chain)
    ).first()
    if row is None:
        raise RuntimeError(f"the chain head of {chain} is missing: run `clgate db upgrade`")
    return int(row.seq), row.record_hash, utc(row.at) if row.at is not None else None


def _project_of_job(session: Session, job_id: str) -> str | None:
    for obj in session.new:
        if isinstance(obj, Job) and obj.id == job_id:
            return obj.project
    with session.no_autoflush:
        job = session.get(Job, job_id)
    return job.project if job is not None else None


def _chain_new_records(session: Session, flush_context, instances) -> None:
    pending = [obj for obj in session.new if type(obj) in _CHAIN_OF]
    if not pending:
        return
    pending.sort(key=lambda obj: inspect(obj).insert_order)
    for chain, (_, columns, time_column) in CHAINS.items():
        records = [obj for obj in pending if _CHAIN_OF[type(obj)] == chain]
        if not records:
            continue
        seq, prev, last_at = _lock_head(session, chain)
        for obj in records:
            _fill_defaults(session, obj)
            at = getattr(obj, time_column)
            if at is None:
                at = max(utcnow(), last_at) if last_at else utcnow()  # monotone across skewed clocks
            elif last_at is not None and utc(at) < last_at:
                raise BackdatedRecord(
                    f"{chain}: a record dated {utc(at).isoformat()} would precede the chain's "
                    f"last record ({last_at.isoformat()})"
                )
            setattr(obj, time_column, at)
            for c in columns:
                setattr(obj, c, _normalised(getattr(obj, c)))
            seq += 1
            obj.seq, obj.prev_hash = seq, prev
            obj.record_hash = prev = link_hash(
                chain, seq, obj.prev_hash, {c: getattr(obj, c) for c in columns}
            )
            last_at = utc(getattr(obj, time_column))
        session.connection().execute(
            update(ChainHead).where(ChainHead.chain == chain).values(seq=seq, record_hash=prev, at=last_at)
        )


def _fill_defaults(session: Session, obj: Any) -> None:
    """Column defaults the hash covers are set now, not at INSERT time."""
    if isinstance(obj, (Decision, Waiver)):
        if obj.id is None:
            obj.id = new_id()
        if obj.project is None:
            obj.project = _project_of_job(session, obj.job_id) or DEFAULT_PROJECT
    elif isinstance(obj, AuditEvent):
        if obj.details is None:
            obj.details = {}
        if obj.project is None and obj.subject_type == "job":
            obj.project = _project_of_job(session, obj.subject_id)


event.listen(Session, "before_flush", _chain_new_records)


# ---------------------------------------------------------------------- verifying
@dataclass(frozen=True)
class Break:
    """The first broken link of a chain."""

    chain: str
    seq: int | None
    record: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.chain}: {locate(self.seq, self.record, otherwise='head')}: {self.reason}"


def locate(seq: int | None, record: str | None, *, otherwise: str) -> str:
    """Where a problem sits, for a message: ``seq 4 (record j-1)``, or ``otherwise`` with no seq."""
    where = f"seq {seq}" if seq is not None else otherwise
    return where + (f" (record {record})" if record is not None else "")


@dataclass(frozen=True)
class ChainReport:
    chain: str
    records: int
    head_seq: int
    head_hash: str
    broken: Break | None


def _rows(session: Session, chain: str) -> Iterator[Any]:
    cls, _, _ = CHAINS[chain]
    yield from session.execute(select(cls).order_by(cls.seq).execution_options(yield_per=500)).scalars()


def verify_chain(session: Session, chain: str) -> ChainReport:
    """Walk one chain in ``seq`` order: positions, links, hashes, time order, and its head."""
    _, columns, time_column = CHAINS[chain]
    expected_seq, prev, last_at, n = 1, GENESIS, None, 0
    broken: Break | None = None
    for obj in _rows(session, chain):
        n += 1
        key = str(obj.id)
        content = {c: _normalised(getattr(obj, c)) for c in columns}
        at = content[time_column]
        if obj.seq != expected_seq:
            broken = Break(chain, expected_seq, None, f"missing (the next record is seq {obj.seq}): deleted?")
        elif obj.prev_hash != prev:
            broken = Break(
                chain, obj.seq, key, "does not link to the record before it (inserted or replaced?)"
            )
        elif link_hash(chain, obj.seq, obj.prev_hash, content) != obj.record_hash:
            broken = Break(chain, obj.seq, key, "content does not match its hash (edited?)")
        elif last_at is not None and at is not None and at < last_at:
            broken = Break(
                chain,
                obj.seq,
                key,
                f"dated {at.isoformat()}, before the record preceding it ({last_at.isoformat()}): backdated?",
            )
        if broken is not None:
            break
        expected_seq, prev, last_at = obj.seq + 1, obj.record_hash, at
    head = session.get(ChainHead, chain)
    if broken is None:
        if head is None:
            broken = Break(chain, None, None, "the chain head is missing")
        elif head.seq != expected_seq - 1 or head.record_hash != prev:
            broken = Break(
                chain,
                None,
                None,
                f"the chain ends at seq {expected_seq - 1} but its head is seq "
                f"{head.seq}: records after seq {expected_seq - 1} deleted?",
            )
    return ChainReport(chain, n, head.seq if head else 0, head.record_hash if head else GENESIS, broken)


def verify(session: Session) -> list[ChainReport]:
    """Every chain's report (``broken`` is ``None`` for an intact chain)."""
    return [verify_chain(session, chain) for chain in CHAINS]


def anchored(session: Session, chain: str, seq: int, record_hash: str) -> bool:
    """Whether record ``seq`` of ``chain`` still has ``record_hash`` (a head recorded elsewhere earlier).

    The head of an empty chain (``seq`` 0, the genesis hash) is a prefix of every chain, grown or not.
    """
    if seq == 0:
        return record_hash == GENESIS
    cls, _, _ = CHAINS[chain]
    return session.scalar(select(cls.record_hash).where(cls.seq == seq)) == record_hash
