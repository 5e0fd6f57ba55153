"""Security of the server's listeners: TLS (``SSL://``, ``SASL_SSL://``) and SASL (``SASL_PLAINTEXT://``,
``SASL_SSL://``) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.

* :mod:`.tls` turns the ``ssl.*`` broker keys (PEM only) into a server :class:`ssl.SSLContext`;
  asyncio does the handshake before a connection is served, so a failed handshake (bad
  certificate, unknown CA, no client certificate when one is required) closes that connection
  and nothing else.
* :mod:`.sasl` is Kafka's ``SaslServerAuthenticator``: until a client has authenticated, only
  ApiVersions, SaslHandshake and SaslAuthenticate are served, and anything else closes the
  connection (KIP-43, KIP-152).
* :mod:`.plain` and :mod:`.scram` check one exchange each; :mod:`.credentials` is the file of
  users, kept in the first log dir and managed by ``tidelog users``.

The crypto is the standard library's (``ssl``, ``hashlib.pbkdf2_hmac``, ``hmac``); secrets are
compared with :func:`hmac.compare_digest`.
"""
