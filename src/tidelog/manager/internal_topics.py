"""Kafka's internal topics, which clients may read but not write or delete.

``__consumer_offsets`` holds the group coordinator's committed offsets, ``__transaction_state``
the transaction coordinator's log, ``__share_group_state`` the share coordinator's (Kafka's
``Topic.isInternal``). Only the broker itself appends to them (the group coordinator goes
straight to the LogManager, never through Produce), so:

* Produce to one gets INVALID_TOPIC_EXCEPTION "Cannot append to internal topic <name>", Kafka's
  answer. Kafka lets a client whose client id is ``__admin_client`` through; tidelog does not:
  a client id is whatever the client says it is, and no client of this broker needs the door.
* DeleteTopics of one gets INVALID_TOPIC_EXCEPTION: its data (every group's committed offsets)
  would be gone at the next start, and the coordinator would answer from what it holds in memory
  until then. ``tidelog topics delete`` on a local dir refuses it too, as Kafka's
  ``kafka-topics --delete`` does for internal topics.
"""

from __future__ import annotations

from tidelog.errors import InvalidTopicError
# The one list of their names is the storage layer's (its tiered-storage refusals need it too); the
# configs Kafka creates them with (:data:`~tidelog.manager.kraft_metadata.INTERNAL_TOPIC_CONFIGS`)
# and the group coordinator's topic take their names from here.
from tidelog.storage.config_keys import CONSUMER_OFFSETS, INTERNAL_TOPICS, SHARE_GROUP_STATE, TRANSACTION_STATE

__all__ = ["CONSUMER_OFFSETS", "INTERNAL_TOPICS", "SHARE_GROUP_STATE", "TRANSACTION_STATE", "check_appendable",
           "check_deletable", "is_internal"]


def is_internal(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def check_appendable(topic: str) -> None:
    """Raise :class:`InvalidTopicError` when a client may not produce to ``topic``."""
    if is_internal(topic):
        raise InvalidTopicError(f"Cannot append to internal topic {topic}")  # Kafka's exact text


def check_deletable(topic: str) -> None:
    """Raise :class:`InvalidTopicError` when a client may not delete ``topic``."""
    if is_internal(topic):
        raise InvalidTopicError(f"Cannot delete internal topic {topic}: it holds the broker's own state "
                                "(committed offsets, transactions)", topic=topic)
