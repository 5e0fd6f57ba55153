"""Kafka-style JSON message schemas of tidelog's own APIs (:mod:`tidelog.server.staged_writes`),
loaded by kafka-python's message classes as it loads Kafka's."""
