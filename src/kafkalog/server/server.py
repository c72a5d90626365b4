"""The asyncio listener: frames in, handlers, frames out; and ways to run it.

Each connection is served in order, one request at a time, as a Kafka broker mutes a channel
while its request is in flight. A frame is bounded by ``socket.request.max.bytes`` before a
byte of it is buffered; anything that does not parse, an unknown API key or an unsupported
version closes that connection (ApiVersions answers UNSUPPORTED_VERSION first, as Kafka does),
and an unexpected error in a handler is logged and closes only that connection.

Kafka's limits (:mod:`kafkalog.server.limits`): a request's bytes are taken from the
``queued.max.request.bytes`` pool before they are read and given back once it is answered; a
connection that sends nothing for ``connections.max.idle.ms`` is closed, half-way through a
request or not; ``max.connections`` / ``max.connections.per.ip`` close the extra connection; an
acks=0 produce that fails closes its connection, the only way its producer notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import ssl
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kafkalog.server import authorization, zero_copy
from kafkalog.server.broker import HANDLERS, JOIN_GROUP, Broker
from kafkalog.server.codec import (
    API_VERSIONS_KEY,
    ProtocolError,
    Request,
    build,
    decode_request,
    encode_response,
    is_supported,
    peek_header,
    response_type,
    unsupported_api_versions_response,
)
from kafkalog.server.config import ServerConfig
from kafkalog.server.housekeeping import duties, run_duty
from kafkalog.server.limits import ConnectionCount, RequestMemory
from kafkalog.server.offset_store import OffsetRecordCodec
from kafkalog.server.scram import AUTH_FAILED, ScramError, ScramExchange
from kafkalog.server.zero_copy import Piece

log = logging.getLogger("kafkalog.server")
PRODUCE = 0
FETCH = 1
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58


@dataclass
class Session:
    """One connection's SASL state: nothing but ApiVersions and the SASL exchange is served
    before it is authenticated (Kafka's SaslServerAuthenticator)."""

    where: str
    authenticated: bool
    mechanism: str | None = None
    user: str | None = None
    close_after_reply: bool = False
    scram: ScramExchange | None = None
    #: the distinguished name of the client's TLS certificate (client auth), RFC 2253
    certificate_dn: str | None = None

    @property
    def principal(self) -> str:
        """Kafka's principal for ACLs (its DefaultKafkaPrincipalBuilder): ``User:<name>`` once
        SASL authenticated it, else ``User:<certificate DN>`` for a TLS client certificate,
        else ``User:ANONYMOUS``."""
        if self.user is not None:
            return f"User:{self.user}"
        if self.certificate_dn is not None:
            return f"User:{self.certificate_dn}"
        return "User:ANONYMOUS"


#: RFC 2253's keywords for the attributes Python's ``getpeercert`` names
_DN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _dn_value(text: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in text)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def certificate_dn(cert: Any) -> str | None:
    """A peer certificate's subject as RFC 2253 writes it (last RDN first, ``+`` inside a
    multi-valued RDN), the string Java's ``X500Principal.getName()`` gives Kafka for the
    standard attributes; None without a certificate."""
    if not isinstance(cert, dict) or not cert.get("subject"):
        return None
    rdns = [
        "+".join(f"{_DN_KEYWORDS.get(name, name)}={_dn_value(value)}" for name, value in rdn)
        for rdn in cert["subject"]
    ]
    return ",".join(reversed(rdns))


def check_plain(users: dict[str, str], token: bytes) -> str | None:
    """The user a SASL/PLAIN token (``authzid NUL user NUL password``, RFC 4616) authenticates,
    or None. An authorization id, if given, must be the user itself, as Kafka requires."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        return None
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        return None
    expected = users.get(user)
    if expected is None or (authzid and authzid != user):
        hmac.compare_digest(password, password)  # the same work as a wrong password
        return None
    return user if hmac.compare_digest(expected.encode(), password.encode()) else None


#: A request body longer than this is read in pieces, each of which resets the idle timer, so a
#: slow client sending a large request is not taken for an idle one.
READ_PIECE = 1024 * 1024


class _IdleWatch:
    """``connections.max.idle.ms`` for one connection with one timer, not one per read (a
    timeout around each read cost ~15 us, two per request: a tenth of a small produce's time
    on the server). The time counts only while the connection is waiting for bytes; each
    piece read restarts it; a request being handled, or waiting for room in the request
    memory pool, is never idle. On expiry the connection's task is cancelled and its read
    raises a ProtocolError naming the connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle: float, task: asyncio.Task[Any]):
        self.loop = loop
        self.idle = idle
        self.task = task
        self.active = loop.time()
        self.waiting = False
        self.expired = False
        self._handle = loop.call_at(self.active + idle, self._check)

    def reading(self) -> None:
        """Waiting for bytes from now on."""
        self.active = self.loop.time()
        self.waiting = True

    def busy(self) -> None:
        self.waiting = False

    def _check(self) -> None:
        now = self.loop.time()
        if not self.waiting:
            self._handle = self.loop.call_at(now + self.idle, self._check)
            return
        deadline = self.active + self.idle
        if now >= deadline:
            self.expired = True
            self.task.cancel()
            return
        self._handle = self.loop.call_at(deadline, self._check)

    def close(self) -> None:
        self._handle.cancel()


async def _read(reader: asyncio.StreamReader, size: int, watch: _IdleWatch | None) -> bytes:
    """``size`` bytes, each piece within ``connections.max.idle.ms`` of the one before."""
    if size <= READ_PIECE:
        return await reader.readexactly(size)
    pieces = []
    left = size
    while left:
        piece = await reader.readexactly(min(left, READ_PIECE))
        if watch is not None:
            watch.reading()
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def _produce_errors(result: dict[str, Any]) -> str:
    """``topic-partition: error code`` of every partition a produce response refuses."""
    return ", ".join(
        f"{t['name']}-{p['index']}: error {p['error_code']}"
        for t in result["responses"]
        for p in t["partition_responses"]
        if p.get("error_code", 0)
    )


class KafkaServer:
    """A single-node Kafka broker over a kafkalog data directory (asyncio API).

    ``await start()`` binds (``port=0`` picks a free one: see :attr:`port`), ``await stop()``
    closes every connection, flushes the logs and marks the directory cleanly shut down.
    """

    def __init__(
        self,
        data_dir: str,
        config: ServerConfig | None = None,
        *,
        offset_codec: OffsetRecordCodec | None = None,
    ) -> None:
        self.data_dir = str(data_dir)
        self.config = config if config is not None else ServerConfig()
        self._offset_codec = offset_codec
        self.broker: Broker | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._timers: asyncio.Task[None] | None = None
        self._duties: list[asyncio.Task[None]] = []
        self.port = self.config.port
        self.request_memory = RequestMemory(self.config.queued_max_request_bytes)
        self.connection_count = ConnectionCount(
            self.config.max_connections, self.config.max_connections_per_ip
        )

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        host = self.config.advertised_host or self.config.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        self.config.check_listener()
        broker = Broker(self.data_dir, self.config, offset_codec=self._offset_codec)
        try:
            # the compiled kernels before the first client: loaded on the loop by the first
            # index lookup instead, they stalled every connection for 1-2 s (numba's import)
            try:
                await asyncio.wrap_future(broker.kernels)
            except Exception as e:  # the Python fallbacks serve, only slower
                log.warning("compiled kernels not loaded (%s: %s)", type(e).__name__, e)
            self._server = await asyncio.start_server(
                self._connection,
                self.config.host,
                self.config.port,
                reuse_address=True,
                ssl=self.config.ssl_context(),
            )
        except BaseException:
            broker.close()
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        broker.advertised = (self.config.advertised_host or self.config.host, self.port)
        broker.groups.start()
        self.broker = broker
        self._timers = asyncio.get_running_loop().create_task(self._expire_transactions())
        self._duties = [
            asyncio.get_running_loop().create_task(run_duty(lambda: self.broker, duty))
            for duty in duties(self.config)
        ]
        log.info(
            "kafkalog serving %s on %s (%s)",
            self.data_dir,
            self.bootstrap,
            self.config.security_protocol,
        )

    async def _expire_transactions(self) -> None:
        """transaction.abort.timed.out.transaction.cleanup.interval.ms, at 1 s."""
        while True:
            await asyncio.sleep(1.0)
            broker = self.broker
            if broker is None:
                return
            for txn_id in broker.transactions.expire(int(time.time() * 1000)):
                log.info("aborted transaction %s: open longer than its timeout", txn_id)
                broker.appended()

    async def stop(self) -> None:
        for task in self._duties:
            task.cancel()
        for task in self._duties:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._duties = []
        if self._timers is not None:
            self._timers.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timers
            self._timers = None
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.broker is not None:
            await self.broker.groups.stop()
            self.broker.close()
            self.broker = None

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        refused = self.connection_count.admit(ip)
        if refused is not None:
            log.info("refusing connection from %s: %s", where, refused)
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        try:
            await self._serve(reader, writer, where)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except ProtocolError as e:
            log.info("closing connection from %s: %s", where, e)
        except ssl.SSLError as e:
            log.info("closing connection from %s: TLS: %s", where, e)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", where)
        finally:
            self.connection_count.leave(ip)
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str
    ) -> None:
        idle_ms = self.config.connections_max_idle_ms
        task = asyncio.current_task()
        assert task is not None
        watch = (
            _IdleWatch(asyncio.get_running_loop(), idle_ms / 1000, task) if idle_ms > 0 else None
        )
        try:
            await self._requests(reader, writer, where, watch)
        except asyncio.CancelledError:
            if watch is None or not watch.expired:
                raise
            task.uncancel()
            raise ProtocolError(
                f"{where}: idle for {idle_ms} ms (connections.max.idle.ms), closing"
            ) from None
        finally:
            if watch is not None:
                watch.close()

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        where: str,
        watch: _IdleWatch | None,
    ) -> None:
        limit = self.config.socket_request_max_bytes
        memory = self.request_memory
        position = 0
        session = Session(where, authenticated=not self.config.sasl_enabled)
        session.certificate_dn = certificate_dn(writer.get_extra_info("peercert"))
        while True:
            if watch is not None:
                watch.reading()
            head = await reader.readexactly(4)
            if watch is not None:
                watch.busy()
            size = int.from_bytes(head, "big", signed=True)
            if size < 0 or size > limit:
                raise ProtocolError(
                    f"{where} at byte {position}: a request of {size} bytes (the limit, "
                    f"socket.request.max.bytes, is {limit})"
                )
            await memory.acquire(size)  # queued.max.request.bytes: stop reading until it fits
            try:
                if watch is not None:
                    watch.reading()
                frame = await _read(reader, size, watch)
                if watch is not None:
                    watch.busy()
                position += 4 + size
                reply = await self._handle(frame, session)
                del frame  # the request is answered: its bytes are no longer held
            finally:
                memory.release(size)
            if isinstance(reply, list):  # a fetch response with file regions
                await zero_copy.send(writer, reply, where)
            elif reply is not None:
                writer.write(reply)
                await writer.drain()
            if session.close_after_reply:
                await asyncio.sleep(self.config.connection_failed_authentication_delay_ms / 1000)
                raise ProtocolError(f"{where}: SASL authentication failed")

    async def _handle(self, frame: bytes, session: Session) -> bytes | list[Piece] | None:
        broker = self.broker
        assert broker is not None
        where = session.where
        key, version, correlation = peek_header(frame)
        if key == API_VERSIONS_KEY and not is_supported(key, version):
            return unsupported_api_versions_response(correlation)
        if not session.authenticated and key not in (
            API_VERSIONS_KEY,
            SASL_HANDSHAKE,
            SASL_AUTHENTICATE,
        ):
            raise ProtocolError(f"{where}: API key {key} before SASL authentication")
        request = decode_request(frame)
        if key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            result = self._sasl(key, request.body, session)
        else:
            result = await self._authorized(key, version, request, session)
        if key == PRODUCE and int(request.body.acks) == 0:
            # acks=0: the producer reads no response, so an error closes the connection, the
            # only way it notices (as Kafka's KafkaApis does)
            failed = _produce_errors(result)
            if failed:
                raise ProtocolError(f"{where}: acks=0 produce failed ({failed}); closing")
            return None
        regions = zero_copy.take_regions(result) if key == FETCH else {}
        frame = encode_response(
            key, version, correlation, build(response_type(key, version), result)
        )
        return zero_copy.splice(frame, regions) if regions else frame

    async def _authorized(
        self, key: int, version: int, request: Request, session: Session
    ) -> dict[str, Any]:
        """The handler's answer, through the ACL gate when an authorizer is configured."""
        broker = self.broker
        assert broker is not None
        host = session.where.rsplit(":", 1)[0]
        body, merge = request.body, None
        if broker.authorizer is not None and key != API_VERSIONS_KEY:
            gate = authorization.Gate(broker.authorizer, session.principal, host)
            body, merge = authorization.check(gate, key, body, broker)
            if body is None:
                return merge({})
        if key == JOIN_GROUP:
            result = await broker.groups.join(body, version, request.client_id or "", host)
        else:
            result = await HANDLERS[key](broker, body, version)
        return merge(result) if merge is not None else result

    def _sasl(self, key: int, body: Any, session: Session) -> dict[str, Any]:
        mechanisms = self.config.sasl_mechanisms
        if key == SASL_HANDSHAKE:
            if not mechanisms or session.authenticated or session.mechanism is not None:
                return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
            if body.mechanism not in mechanisms:
                return {"error_code": UNSUPPORTED_SASL_MECHANISM, "mechanisms": mechanisms}
            session.mechanism = body.mechanism
            return {"error_code": 0, "mechanisms": mechanisms}
        if not mechanisms or session.mechanism is None or session.authenticated:
            session.close_after_reply = True
            return {"error_code": ILLEGAL_SASL_STATE, "error_message": "no SASL handshake"}
        if session.mechanism == "PLAIN":
            return self._sasl_plain(bytes(body.auth_bytes), session)
        return self._sasl_scram(bytes(body.auth_bytes), session)

    def _sasl_plain(self, token: bytes, session: Session) -> dict[str, Any]:
        user = check_plain(self.config.sasl_plain_users or {}, token)
        if user is None:
            log.info("SASL/PLAIN authentication failed from %s", session.where)
            session.close_after_reply = True
            return {
                "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": "Authentication failed: Invalid username or password",
            }
        session.authenticated, session.user = True, user
        return {"error_code": 0, "auth_bytes": b"", "session_lifetime": 0}

    def _sasl_scram(self, token: bytes, session: Session) -> dict[str, Any]:
        """The two SaslAuthenticate rounds of SCRAM (client-first, client-final)."""
        mechanism = session.mechanism
        assert mechanism is not None and self.broker is not None
        if session.scram is None:
            session.scram = ScramExchange(mechanism, self.broker.scram)
        try:
            answer = session.scram.step(token)
        except ScramError as e:
            log.info("SASL/%s authentication failed from %s: %s", mechanism, session.where, e)
            session.close_after_reply = True
            return {
                "error_code": SASL_AUTHENTICATION_FAILED,
                "error_message": AUTH_FAILED.format(mechanism=mechanism),
            }
        if session.scram.done:
            session.authenticated, session.user = True, session.scram.user
            session.scram = None
        return {"error_code": 0, "auth_bytes": answer, "session_lifetime": 0}


class ServerThread:
    """A :class:`KafkaServer` on its own event loop in a background thread: for tests and for
    programs that are not asyncio. ``with ServerThread(dir) as s: ... s.bootstrap``."""

    def __init__(
        self,
        data_dir: str,
        config: ServerConfig | None = None,
        *,
        offset_codec: OffsetRecordCodec | None = None,
    ) -> None:
        if config is None:
            config = ServerConfig(port=0)
        self.server = KafkaServer(data_dir, config, offset_codec=offset_codec)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> ServerThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stopped = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as e:
                failure.append(e)
                ready.set()
                return
            ready.set()
            try:
                await self._stopped.wait()
            finally:
                await self.server.stop()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="kafkalog-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close the listener and every connection, flush and close the data directory."""
        loop, stopped, thread = self._loop, self._stopped, self._thread
        if thread is None or loop is None or stopped is None:
            return
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopped.set)
            thread.join()
        self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def serve(data_dir: str, config: ServerConfig | None = None) -> None:
    """Serve until cancelled (``kafkalog serve``); the directory is closed cleanly on the way
    out."""
    server = KafkaServer(data_dir, config)
    await server.start()
    try:
        assert server._server is not None
        await server._server.serve_forever()
    finally:
        await server.stop()
