"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka does them (KIP-84).

The server keeps, per user and mechanism, only what RFC 5802 lets a verifier keep: the salt,
the iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` — never the password nor the salted password,
so a stolen credentials file does not let anyone log in. They live in the data directory
(:data:`CREDENTIALS_FILE`), written atomically with mode 0600, and are re-read when the file
changes, so ``kafkalog scram`` can add a user while the server runs.

The primitives are the standard library's (``hashlib.pbkdf2_hmac`` is RFC 5802's ``Hi``,
``hmac``); this module only arranges the messages.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass

from kafkalog.errors import KafkalogError

#: the credentials file in the data directory
CREDENTIALS_FILE = ".kafkalog-scram.json"

#: Kafka's ScramMechanism: name -> (hash, the type byte of the SCRAM admin APIs)
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MECHANISM_BY_TYPE = {code: name for name, (_, code) in MECHANISMS.items()}
#: Kafka's bounds on the iteration count (ScramMechanism's minIterations / maxIterations)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192

AUTH_FAILED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism {mechanism}"
)


class ScramError(KafkalogError):
    """A SCRAM exchange that fails: the client is answered SASL_AUTHENTICATION_FAILED."""


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of one user's password for one mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict[str, object]:
        return {
            "salt": _b64(self.salt),
            "iterations": self.iterations,
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScramCredential:
        iterations = data["iterations"]
        if not isinstance(iterations, int):
            raise ValueError("iterations is not an integer")
        return cls(
            _unb64(str(data["salt"])),
            iterations,
            _unb64(str(data["stored_key"])),
            _unb64(str(data["server_key"])),
        )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism][0]
    except KeyError:
        raise KafkalogError(f"unknown SCRAM mechanism {mechanism!r}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)``: PBKDF2 with the mechanism's HMAC.
    (Kafka applies no SASLprep normalization either.)"""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode("utf-8"), salt, iterations)


def credential_from_salted(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential for a salted password, as AlterUserScramCredentials sends it."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(
        salt,
        iterations,
        hashlib.new(name, client_key).digest(),
        hmac.digest(salted, b"Server Key", name),
    )


def credential_from_password(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A new credential for ``password`` (a random 32-byte salt unless one is given)."""
    check_iterations(iterations)
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


def check_iterations(iterations: int) -> None:
    if iterations < MIN_ITERATIONS:
        raise KafkalogError(f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})")
    if iterations > MAX_ITERATIONS:
        raise KafkalogError(f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})")


class ScramStore:
    """Every user's SCRAM credentials, in the data directory's :data:`CREDENTIALS_FILE`."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, CREDENTIALS_FILE)
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._seen: tuple[int, int] | None = None
        self._secret = secrets.token_bytes(32)  # salts for users that do not exist
        self.reload()

    def reload(self) -> None:
        """Read the file again if it changed (``kafkalog scram`` may write it meanwhile)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._users, self._seen = {}, None
            return
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._seen:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            users = {
                str(user): {
                    str(m): ScramCredential.from_json(c)
                    for m, c in mechs.items()
                    if m in MECHANISMS
                }
                for user, mechs in data["users"].items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise KafkalogError(f"{self.path}: not a SCRAM credentials file ({e})") from None
        self._users, self._seen = users, seen

    def _save(self) -> None:
        data = {
            "format": 1,
            "users": {
                user: {m: c.to_json() for m, c in sorted(mechs.items())}
                for user, mechs in sorted(self._users.items())
                if mechs
            },
        }
        folder = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=CREDENTIALS_FILE, suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        st = os.stat(self.path)
        self._seen = (st.st_mtime_ns, st.st_size)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        self.reload()
        return {u: dict(m) for u, m in self._users.items() if m}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        self.reload()
        return self._users.get(user, {}).get(mechanism)

    def set(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.set_many([(user, mechanism, credential)], [])

    def set_many(
        self,
        upserts: list[tuple[str, str, ScramCredential]],
        deletions: list[tuple[str, str]],
    ) -> None:
        """Apply the changes and write the file once."""
        self.reload()
        for user, mechanism, credential in upserts:
            self._users.setdefault(user, {})[mechanism] = credential
        for user, mechanism in deletions:
            self._users.get(user, {}).pop(mechanism, None)
        self._users = {u: m for u, m in self._users.items() if m}
        self._save()

    def delete(self, user: str, mechanism: str) -> bool:
        if self.get(user, mechanism) is None:
            return False
        self.set_many([], [(user, mechanism)])
        return True

    def decoy(self, user: str, mechanism: str) -> ScramCredential:
        """A credential for a user that does not exist, the same on every attempt, so the
        exchange fails at its end as a wrong password does and does not tell who exists."""
        name = _hash(mechanism)
        salt = hmac.digest(self._secret, user.encode("utf-8"), "sha256")
        key = hmac.digest(self._secret, salt, name)
        return ScramCredential(salt, MIN_ITERATIONS, key, key)


_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,(?P<bare>n=(?P<name>[^,]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<ext>(?:,[a-zA-Z]+=[^,]*)*))"
)
_CLIENT_FINAL = re.compile(
    r"(?P<without>c=(?P<cbind>[A-Za-z0-9+/]+={0,2}),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[a-zA-Z]=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/]+={0,2})"
)


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: ``=2C`` is a comma, ``=3D`` an equals sign, nothing else escaped."""
    if re.search(r"=(?!2C|3D)", text):
        raise ScramError("invalid username encoding")
    return text.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """One SCRAM authentication on the server side: two client messages, two answers.

    ``step`` takes each client message and returns the server's; the exchange is done (and
    :attr:`user` authenticated) once the second answer is returned. Any mistake raises
    :class:`ScramError`.
    """

    def __init__(self, mechanism: str, store: ScramStore, *, nonce_suffix: str = "") -> None:
        # nonce_suffix: the server's part of the nonce, for RFC test vectors (random if empty)
        self._suffix = nonce_suffix
        self.mechanism = mechanism
        self.store = store
        self.user: str | None = None
        self.done = False
        self._hash = _hash(mechanism)
        self._credential: ScramCredential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""

    def step(self, message: bytes) -> bytes:
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("a SCRAM message that is not UTF-8") from None
        if self._credential is None:
            return self._first(text).encode("utf-8")
        if not self.done:
            return self._final(text).encode("utf-8")
        raise ScramError("the SCRAM exchange is already complete")

    def _first(self, text: str) -> str:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise ScramError("invalid SCRAM client-first-message")
        name = _sasl_name(m["name"])
        if m["authzid"] and _sasl_name(m["authzid"]) != name:
            raise ScramError("the authorization id must be the user name")
        if "tokenauth=true" in m["ext"].split(","):
            raise ScramError("delegation tokens are not supported")
        credential = self.store.get(name, self.mechanism)
        self._credential = credential or self.store.decoy(name, self.mechanism)
        self.user = name if credential is not None else None
        self._gs2 = text[: m.start("bare")]
        self._first_bare = m["bare"]
        self._nonce = m["nonce"] + (self._suffix or secrets.token_urlsafe(24))
        self._server_first = (
            f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        )
        return self._server_first

    def _final(self, text: str) -> str:
        credential = self._credential
        assert credential is not None
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise ScramError("invalid SCRAM client-final-message")
        if m["nonce"] != self._nonce:
            raise ScramError("the nonce does not match")
        if _unb64(m["cbind"]) != self._gs2.encode("utf-8"):
            raise ScramError("channel binding does not match")
        auth_message = f"{self._first_bare},{self._server_first},{m['without']}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        proof = _unb64(m["proof"])
        if len(proof) != len(signature):
            raise ScramError("invalid client proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        ok = hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        )
        if not ok or self.user is None:
            raise ScramError("invalid credentials")
        self.done = True
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        return f"v={_b64(server_signature)}"
