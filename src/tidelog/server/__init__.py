"""The Kafka-protocol server: asyncio listeners in front of a LogManager (``tidelog serve``).

Public doors: :class:`KafkaServer`, :class:`ServerThread`, :class:`ServerConfig`; the APIs served
and their versions are in :data:`tidelog.server.codec.SUPPORTED_APIS`.
"""

from tidelog.server.config import Endpoint, ServerConfig
from tidelog.server.server import BoundListener, KafkaServer, ServerThread

__all__ = ["BoundListener", "Endpoint", "KafkaServer", "ServerConfig", "ServerThread"]
