"""The TLS side of ``SSL://`` and ``SASL_SSL://`` listeners: Kafka's ``ssl.*`` broker keys, PEM only.

Kafka's keystores are Java's (JKS, PKCS12); tidelog reads Kafka's PEM form of the same keys
(KIP-651), which needs ``ssl.keystore.type=PEM`` (and ``ssl.truststore.type=PEM``):

* the server's key and certificate chain: ``ssl.keystore.location``, one PEM file holding the
  private key and the chain, or ``ssl.keystore.key`` plus ``ssl.keystore.certificate.chain``,
  the PEM text itself; ``ssl.key.password`` when the key is encrypted;
* the CAs that verify client certificates: ``ssl.truststore.location`` (a PEM file of
  certificates) or ``ssl.truststore.certificates`` (the PEM text);
* ``ssl.client.auth``: ``none`` (default), ``requested`` (a certificate is asked for and checked
  if sent) or ``required`` (a client without a valid one is refused); needs a truststore;
* ``ssl.enabled.protocols``: TLSv1.2 and TLSv1.3 by default.

Each key may be given for one listener as ``listener.name.<listener>.<key>`` (Kafka's prefix),
which wins over the unprefixed key. The secret keys (``ssl.key.password``, ``ssl.keystore.key``,
...) are read untyped, so DescribeConfigs never shows them.

PEM text in a properties file may lose its line breaks; blocks are re-wrapped before OpenSSL
reads them. :meth:`TlsSettings.context` builds the :class:`ssl.SSLContext` (reading the files);
a wrong file, key or password is a :class:`ConfigError` at start, naming the key.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
import textwrap
from dataclasses import dataclass
from typing import Any

from tidelog.errors import ConfigError
from tidelog.storage.config import BROKER_CONFIGS, BrokerConfig

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def listener_value(broker: BrokerConfig, listener_name: str, key: str) -> Any:
    """``listener.name.<listener>.<key>`` if set, else ``key`` (typed when it is a known broker key;
    None when an unknown key is not set)."""
    prefixed = broker.unknown.get(f"listener.name.{listener_name.lower()}.{key}")
    if key in BROKER_CONFIGS:
        return BROKER_CONFIGS[key].parse(prefixed) if prefixed is not None else broker.get(key)
    return prefixed if prefixed is not None else broker.unknown.get(key)


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One TLS listener's ``ssl.*`` keys, checked for consistency (files are read by :meth:`context`)."""

    listener_name: str
    keystore_location: str | None = None
    keystore_key: str | None = None
    keystore_chain: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")

    @classmethod
    def from_broker(cls, broker: BrokerConfig, listener_name: str) -> TlsSettings:
        """The settings of ``listener_name``; :class:`ConfigError` naming the key at fault."""
        def value(key: str) -> Any:
            return listener_value(broker, listener_name, key)

        settings = cls(listener_name, value("ssl.keystore.location"), value("ssl.keystore.key"),
                       value("ssl.keystore.certificate.chain"), value("ssl.key.password"),
                       value("ssl.truststore.location"), value("ssl.truststore.certificates"),
                       value("ssl.client.auth"), tuple(value("ssl.enabled.protocols")))
        settings._check(value("ssl.keystore.type"), value("ssl.truststore.type"))
        return settings

    def _check(self, keystore_type: str, truststore_type: str) -> None:
        where = f"listener {self.listener_name}"
        if self.keystore_location is None and (self.keystore_key is None or self.keystore_chain is None):
            raise ConfigError(f"{where} serves TLS: set ssl.keystore.location (a PEM file of the key and its "
                              "certificate chain) or ssl.keystore.key and ssl.keystore.certificate.chain",
                              config="ssl.keystore.location")
        if keystore_type != "PEM":
            raise ConfigError(f"{where}: ssl.keystore.type {keystore_type} is Java's; tidelog reads PEM keystores "
                              "(set ssl.keystore.type=PEM)", config="ssl.keystore.type")
        has_truststore = self.truststore_location is not None or self.truststore_certificates is not None
        if has_truststore and truststore_type != "PEM":
            raise ConfigError(f"{where}: ssl.truststore.type {truststore_type} is Java's; tidelog reads PEM "
                              "truststores (set ssl.truststore.type=PEM)", config="ssl.truststore.type")
        if self.client_auth != "none" and not has_truststore:
            raise ConfigError(f"{where}: ssl.client.auth={self.client_auth} needs the CAs of client certificates "
                              "(ssl.truststore.location or ssl.truststore.certificates)", config="ssl.client.auth")
        if not self.enabled_protocols:
            raise ConfigError(f"{where}: ssl.enabled.protocols is empty", config="ssl.enabled.protocols")

    def context(self) -> ssl.SSLContext:
        """A server context: this key and chain, the truststore, client auth and TLS versions.
        Reads the PEM files; :class:`ConfigError` when one cannot be read or does not match."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        versions = sorted(_VERSIONS[v] for v in self.enabled_protocols)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]
        self._load_keystore(context)
        self._load_truststore(context)
        context.verify_mode = _CLIENT_AUTH[self.client_auth]
        return context

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        try:
            if self.keystore_location is not None:
                context.load_cert_chain(self.keystore_location, password=self.key_password)
                return
            with tempfile.TemporaryDirectory(prefix="tidelog-tls-") as scratch:  # 0700: OpenSSL reads files only
                path = os.path.join(scratch, "keystore.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(normalize_pem(self.keystore_key or "") + normalize_pem(self.keystore_chain or ""))
                context.load_cert_chain(path, password=self.key_password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"listener {self.listener_name}: cannot load the TLS key and certificate chain: {e}",
                              config="ssl.keystore.location" if self.keystore_location else "ssl.keystore.key",
                              path=self.keystore_location) from e

    def _load_truststore(self, context: ssl.SSLContext) -> None:
        try:
            if self.truststore_location is not None:
                context.load_verify_locations(cafile=self.truststore_location)
            elif self.truststore_certificates is not None:
                context.load_verify_locations(cadata=normalize_pem(self.truststore_certificates))
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"listener {self.listener_name}: cannot load the trusted certificates: {e}",
                              config="ssl.truststore.location" if self.truststore_location
                              else "ssl.truststore.certificates", path=self.truststore_location) from e


def normalize_pem(text: str) -> str:
    """Every PEM block of ``text`` with its base64 re-wrapped at 64 columns (line breaks are often
    lost when PEM is pasted into a properties value)."""
    blocks = []
    for kind, body in _PEM_BLOCK.findall(text):
        lines = "\n".join(textwrap.wrap("".join(body.split()), 64))
        blocks.append(f"-----BEGIN {kind}-----\n{lines}\n-----END {kind}-----\n")
    return "".join(blocks)
