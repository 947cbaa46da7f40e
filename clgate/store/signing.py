"""The Ed25519 key that signs the record history, and the public keys that verify it.

The private key lives in a file given to the API and the workers as a secret (``CLGATE_SIGNING_KEY_FILE``);
the database never holds it, only public keys. Without that setting (embedded or laptop use) the key is
``<data folder>/signing.key``, created with mode 0600 on first start, like ``admin.key``.

A key is named by its id: the first 16 hex digits of the SHA-256 of its 32 raw public bytes. Public keys
travel as one line of text, ``ed25519:<base64 of the raw bytes>`` (``clgate audit public-key``).

>>> signer = Signer.generate()
>>> sig = signer.sign(b"x")
>>> verify_signature({signer.key_id: signer.public}, signer.key_id, b"x", sig)
True
>>> verify_signature({signer.key_id: signer.public}, signer.key_id, b"y", sig)
False
>>> parse_public_key(signer.public_text).public_bytes_raw() == signer.public.public_bytes_raw()
True
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PREFIX = "ed25519:"


class SigningKeyError(ValueError):
    """A key file that cannot be read or is not an Ed25519 key (the message names the file)."""


def key_id_of(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(public.public_bytes_raw()).hexdigest()[:16]


def public_text(public: Ed25519PublicKey) -> str:
    return PREFIX + base64.b64encode(public.public_bytes_raw()).decode("ascii")


def parse_public_key(text: str) -> Ed25519PublicKey:
    """A public key from ``ed25519:<base64>`` or a PEM block (:class:`SigningKeyError` otherwise)."""
    text = text.strip()
    try:
        if text.startswith(PREFIX):
            return Ed25519PublicKey.from_public_bytes(base64.b64decode(text[len(PREFIX) :], validate=True))
        loaded = serialization.load_pem_public_key(text.encode("ascii"))
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise SigningKeyError(f"not an Ed25519 public key ({exc})") from None
    if not isinstance(loaded, Ed25519PublicKey):
        raise SigningKeyError("not an Ed25519 public key")
    return loaded


class Signer:
    """An Ed25519 private key and its id."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private = private
        self.public = private.public_key()
        self.key_id = key_id_of(self.public)
        self.public_text = public_text(self.public)

    @classmethod
    def generate(cls) -> Signer:
        return cls(Ed25519PrivateKey.generate())

    def sign(self, message: bytes) -> str:
        return self.private.sign(message).hex()

    def pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def load_signer(path: Path) -> Signer:
    """The private key in the PEM file ``path`` (:class:`SigningKeyError` naming the file otherwise)."""
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise SigningKeyError(f"signing key file {path}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"signing key file {path}: not a PEM private key ({exc})") from None
    if not isinstance(loaded, Ed25519PrivateKey):
        raise SigningKeyError(f"signing key file {path}: not an Ed25519 key")
    return Signer(loaded)


def write_new_key(path: Path) -> Signer:
    """A new key written to ``path`` with mode 0600 (refuses to overwrite a file)."""
    signer = Signer.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(signer.pem())
        os.link(partial, path)  # whole or absent: another process never reads half a key
    finally:
        partial.unlink(missing_ok=True)
    return signer


def load_or_create(path: Path, *, create: bool) -> Signer:
    """The key in ``path``; when it does not exist and ``create``, a new one written there (0600)."""
    if create and not path.exists():
        try:
            signer = write_new_key(path)
        except FileExistsError:  # another process of this store made it first
            pass
        else:
            logging.getLogger("clgate.store").warning(
                "created the history's signing key: it is in %s (mode 600); its public key is %s "
                "(`clgate audit public-key`)",
                path,
                signer.public_text,
            )
            return signer
    return load_signer(path)


def verify_signature(
    trusted: Mapping[str, Ed25519PublicKey], key_id: str, message: bytes, signature: str
) -> bool:
    """Whether ``signature`` (hex) is ``key_id``'s over ``message`` and ``key_id`` is trusted."""
    public = trusted.get(key_id)
    if public is None:
        return False
    try:
        public.verify(bytes.fromhex(signature), message)
    except (InvalidSignature, ValueError):
        return False
    return True
