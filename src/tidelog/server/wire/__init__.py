"""Purpose-built codecs of the two hot APIs, Produce and Fetch, reading and writing Kafka's wire
format in place (every other API goes through kafka-python's classes, :mod:`tidelog.server.codec`)."""
