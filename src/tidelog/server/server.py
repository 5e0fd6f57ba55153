"""KafkaServer: the asyncio listeners in front of a LogManager.

One listening socket per ``listeners`` entry; each accepted connection is served by
:func:`~tidelog.server.connection.serve_connection` on the event loop, and every file operation
runs in the server's thread pool (``io_threads``, Kafka's ``num.io.threads``). The server does not
own the LogManager: whoever opened it shuts it down, after :meth:`KafkaServer.stop`.

TLS listeners get their :class:`ssl.SSLContext` and SASL listeners the credentials file
(:mod:`tidelog.server.security`) before anything listens, so a bad key, certificate or
credentials file fails :meth:`KafkaServer.start`. A failed TLS handshake closes that connection
only.

Connection limits (Kafka's ConnectionQuotas: ``max.connections``, per listener
``listener.name.<name>.max.connections``, ``max.connections.per.ip`` and its overrides) are
checked when a connection is handed over: one beyond a limit is closed at once, before it is
read from, and counted in :attr:`KafkaServer.refused_connections`. (On a TLS listener the
handshake has already run by then: asyncio hands a connection over only once it succeeded.)
A slot is free again as soon as its connection's task ends.

Every connection reserves the bytes of the request frames it receives from one
:class:`~tidelog.server.memory_pool.RequestMemoryPool` (``queued.max.request.bytes``), the server's
:attr:`KafkaServer.request_memory`. Produce validation holds decompressed records within
:attr:`KafkaServer.decompression_memory` (``tidelog.produce.decompression.memory.bytes``).

Before it listens, the server loads its group coordinator (:mod:`tidelog.server.groups`) from
``__consumer_offsets`` and its transaction coordinator (:mod:`tidelog.server.transactions`) from
``__transaction_state``, so every group, committed offset and transaction is back when the first
client comes (transactions found half-completed are finished in the background).

:class:`ServerThread` runs a server on its own event loop thread, for ``tidelog serve`` and tests.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import ssl
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tidelog.errors import ConfigError
from tidelog.manager import LogManager
from tidelog.manager.log_dir import DEFAULT_NODE_ID
from tidelog.server.config import Endpoint, ServerConfig
from tidelog.server.connection import serve_connection
from tidelog.server.context import ApiContext, ConnectionInfo, DataArrival
from tidelog.server.groups.service import GroupService
from tidelog.server.memory_pool import RequestMemoryPool
from tidelog.server.metrics.broker_metrics import ServerMetrics
from tidelog.server.security.credentials import CredentialsFile, credentials_path
from tidelog.server.security.sasl import SaslAuthenticator, SaslSettings
from tidelog.server import staged_writes
from tidelog.server.transactions.coordinator import TransactionCoordinator
from tidelog.server.transactions.service import TransactionsContext, TransactionService
from tidelog.storage.metadata import read_meta_properties

log = logging.getLogger(__name__)
DEFAULT_IO_THREADS = 8  # Kafka's num.io.threads


@dataclass(frozen=True, slots=True)
class BoundListener:
    """A listener as bound (its real port when configured with 0) and as advertised."""

    listener_name: str
    host: str
    port: int
    advertised: Endpoint


class KafkaServer:
    """Serve ``manager``'s partitions over Kafka's protocol. Event-loop methods: :meth:`start`, :meth:`stop`."""

    def __init__(self, manager: LogManager, config: ServerConfig, *, io_threads: int = DEFAULT_IO_THREADS) -> None:
        self._manager = manager
        self._config = config
        self._io_threads = io_threads
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._by_listener: Counter[str] = Counter()
        self._by_ip: Counter[str] = Counter()
        self.refused_connections = 0  # new connections closed at accept by a limit; a gauge, any thread
        self._executor: ThreadPoolExecutor | None = None
        self._context: ApiContext | None = None
        self._groups: GroupService | None = None
        self._transactions: TransactionService | None = None
        self._tls: dict[str, ssl.SSLContext] = {}
        self._sasl: dict[str, SaslSettings] = {}
        self.request_memory = RequestMemoryPool(config.queued_max_request_bytes)  # queued.max.request.bytes
        # tidelog.produce.decompression.memory.bytes: every decompressed byte counts, however few
        self.decompression_memory = RequestMemoryPool(config.decompression_memory_bytes, free_up_to=0)
        self.bound: list[BoundListener] = []
        self.metrics = ServerMetrics()  # BrokerTopicMetrics and RequestMetrics counts (server.metrics)
        self.metrics_url: str | None = None  # the Prometheus endpoint's URL, for the address file

    async def start(self) -> list[BoundListener]:
        """Bind every listener (an address in use raises OSError, nothing left bound) and accept."""
        self._executor = ThreadPoolExecutor(self._io_threads, thread_name_prefix="tidelog-io")
        node_id, cluster_id = self._identity()
        context = ApiContext(self._manager, self._config, node_id, cluster_id, self._executor, DataArrival(),
                             self.decompression_memory, self.metrics)
        try:
            self._prepare_security()
            self._groups = await GroupService.start(context)
            self._transactions = await TransactionService.start(context, self._groups)
            staged_writes.attach(self._manager)  # jobs staged through this broker: their reclaim is scheduled
            self._context = TransactionsContext(self._manager, self._config, node_id, cluster_id, self._executor,
                                                context.arrivals, self.decompression_memory, self.metrics, self._groups,
                                                self._transactions.coordinator)
            for endpoint in self._config.listeners:
                await self._listen(endpoint)
            staged_writes.write_address(self._manager, self.bound, {
                e.listener_name: self._config.security_for(e.listener_name).protocol for e in self._config.listeners},
                metrics=self.metrics_url)
        except BaseException:
            await self.stop()
            raise
        return self.bound

    def _prepare_security(self) -> None:
        """TLS contexts and SASL settings of the listeners that need them (reads key and
        credentials files: raises ConfigError before anything listens)."""
        credentials: CredentialsFile | None = None
        secret = secrets.token_bytes(32)
        for endpoint in self._config.listeners:
            security = self._config.security_for(endpoint.listener_name)
            if security.tls is not None:
                self._tls[endpoint.listener_name] = security.tls.context()
            if security.sasl:
                if credentials is None:
                    credentials = CredentialsFile(credentials_path(self._manager.log_dirs()[0].path))
                    if not credentials.path.exists():
                        log.warning("no SASL users yet (%s does not exist): add some with 'tidelog users add'",
                                    credentials.path)
                self._sasl[endpoint.listener_name] = SaslSettings(security.sasl_mechanisms, credentials, secret,
                                                                  self._config.sasl_max_receive_size)

    def _identity(self) -> tuple[int, str | None]:
        for info in self._manager.log_dirs():
            if info.offline is not None:
                continue
            meta = read_meta_properties(info.path)
            if meta is not None:
                return (meta.node_id if meta.node_id is not None else DEFAULT_NODE_ID), meta.cluster_id
        return DEFAULT_NODE_ID, None

    async def _listen(self, endpoint: Endpoint) -> None:
        server = await asyncio.start_server(lambda r, w: self._accept(endpoint, r, w), endpoint.host or None,
                                            endpoint.port, reuse_address=True,
                                            ssl=self._tls.get(endpoint.listener_name))
        self._servers.append(server)
        port = server.sockets[0].getsockname()[1]
        advertised = self._config.advertised_for(endpoint.listener_name)
        if advertised is None:
            advertised = Endpoint(endpoint.listener_name, _advertised_host(endpoint.host), port)
        self.bound.append(BoundListener(endpoint.listener_name, endpoint.host, port, advertised))
        log.info("listening on %s (advertised as %s)", Endpoint(endpoint.listener_name, endpoint.host, port),
                 advertised)

    def _accept(self, endpoint: Endpoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._context is None:  # not started
            writer.close()
            return
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        refusal = self._over_limit(endpoint.listener_name, ip)
        if refusal is not None:
            self.refused_connections += 1
            log.info("%s/%s: closing new connection: %s", endpoint.listener_name, peer, refusal)
            writer.transport.abort()  # at once: no TLS close_notify exchange holds anything for it
            return
        bound = next((b for b in self.bound if b.listener_name == endpoint.listener_name), None)
        advertised = bound.advertised if bound is not None else endpoint
        conn = ConnectionInfo(endpoint.listener_name, advertised, f"{endpoint.listener_name}/{peer}")
        sasl = self._sasl.get(endpoint.listener_name)
        authenticator = SaslAuthenticator(sasl, self._context.run, conn.peer) if sasl is not None else None
        task = asyncio.get_running_loop().create_task(serve_connection(self._context, conn, reader, writer,
                                                                       authenticator, self.request_memory))
        self._connections.add(task)
        self._by_listener[endpoint.listener_name] += 1
        self._by_ip[ip] += 1
        task.add_done_callback(lambda t: self._release(t, endpoint.listener_name, ip))

    def _over_limit(self, listener_name: str, ip: str) -> str | None:
        """Why a new connection from ``ip`` on ``listener_name`` may not be served, or None."""
        config = self._config
        if len(self._connections) >= config.max_connections:
            return f"max.connections={config.max_connections} reached"
        limit = config.listener_limit(listener_name)
        if self._by_listener[listener_name] >= limit:
            return f"listener.name.{listener_name.lower()}.max.connections={limit} reached"
        limit = config.ip_limit(ip)
        if self._by_ip[ip] >= limit:
            return f"max.connections.per.ip={limit} reached for {ip}"
        return None

    def _release(self, task: asyncio.Task[None], listener_name: str, ip: str) -> None:
        self._connections.discard(task)
        for counter, key in ((self._by_listener, listener_name), (self._by_ip, ip)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    @property
    def connection_count(self) -> int:
        """Open client connections."""
        return len(self._connections)

    def connection_counts(self) -> dict[str, int]:
        """Open client connections per listener name, every bound listener included (0 when none).
        Any thread, no lock: copies the event loop's counts at once (atomic under the GIL)."""
        counts = dict(self._by_listener)
        return {b.listener_name: counts.get(b.listener_name, 0) for b in list(self.bound)}

    def has_topic(self, name: str) -> bool:
        """Whether topic ``name`` exists. Any thread, no lock (:meth:`LogManager.has_topic`)."""
        return self._manager.has_topic(name)

    def group_states(self) -> list[tuple[str, int]]:
        """``(state name, committed offsets)`` of every classic group; empty before the coordinator
        runs. Any thread, no lock (see :meth:`GroupCoordinator.gauges`)."""
        groups = self._groups
        return groups.coordinator.gauges() if groups is not None else []

    @property
    def transactions(self) -> TransactionCoordinator | None:
        """The transaction coordinator once started, else None. Its methods are event-loop only;
        its ``describe``/``list_transactions`` only read dicts, safe enough for tests from any thread."""
        return self._transactions.coordinator if self._transactions is not None else None

    @property
    def delayed_fetches(self) -> int:
        """Fetches waiting for data (long polls); read from any thread, a gauge."""
        return self._context.arrivals.waiting if self._context is not None else 0

    async def stop(self) -> None:
        """Stop accepting, close every connection (requests in flight are abandoned after their
        file call returns), and shut the thread pool down. Idempotent."""
        if self._servers:
            staged_writes.remove_address(self._manager)
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        if self._transactions is not None:
            transactions, self._transactions = self._transactions, None
            await transactions.stop()  # markers in flight land (briefly) before the pool goes
        if self._groups is not None:
            groups, self._groups = self._groups, None
            await groups.stop()  # group writes in flight finish before the pool goes
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, True)  # file calls in flight finish first


def _advertised_host(host: str) -> str:
    """What clients are told when no advertised listener is set: the bound host, or this
    machine's name for a wildcard bind (Kafka's canonical host name)."""
    if host in ("", "0.0.0.0", "::"):
        return socket.getfqdn()
    return host


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind`` (``tidelog.server.event.loop``): ``asyncio``, Python's own, or
    ``uvloop``, libuv's (imported only when chosen; :class:`ConfigError` when it is not installed)."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError as e:
            raise ConfigError(f"tidelog.server.event.loop=uvloop, but the uvloop package cannot be imported: {e}",
                              config="tidelog.server.event.loop") from e
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class ServerThread:
    """A :class:`KafkaServer` on its own event-loop thread, of the kind ``tidelog.server.event.loop``
    names (:func:`new_event_loop`). :meth:`start` returns once every listener is bound (or raises
    what binding raised); :meth:`stop` returns once it is closed."""

    def __init__(self, manager: LogManager, config: ServerConfig, *, io_threads: int = DEFAULT_IO_THREADS) -> None:
        self.server = KafkaServer(manager, config, io_threads=io_threads)
        self._loop = new_event_loop(config.event_loop)
        self._thread = threading.Thread(target=self._run, name="tidelog-server", daemon=True)
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the server runs on: another thread reaches the server's event-loop
        methods through it (``asyncio.run_coroutine_threadsafe``, ``call_soon_threadsafe``)."""
        return self._loop

    def start(self) -> list[BoundListener]:
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self.server.bound

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as e:  # noqa: BLE001 - handed to the thread that called start()
            self._error = e
            self._started.set()
            return
        self._started.set()
        await self._stop.wait()
        await self.server.stop()

    def stop(self) -> None:
        """Close the listeners and connections; idempotent."""
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
