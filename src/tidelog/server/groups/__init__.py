"""The group coordinator: consumer groups over Kafka's classic rebalance protocol, with group
metadata and committed offsets in the compacted ``__consumer_offsets`` topic, in Kafka's format.

| module        | concept                                                                  |
|---------------|--------------------------------------------------------------------------|
| `records`     | the ``__consumer_offsets`` key/value records (byte layouts), group hash  |
| `group`       | :class:`ClassicGroup`, its members and states                            |
| `messages`    | the coordinator's configuration, store protocol, requests and answers    |
| `coordinator` | :class:`GroupCoordinator`: the rebalance state machine, the one door     |
| `sessions`    | :class:`MemberSessions`: heartbeat and pending-member timers             |
| `offset_manager` | :class:`OffsetMetadataManager`: commit, fetch, delete, expire offsets |
| `views`       | what DescribeGroups and ListGroups show of a group (read-only)           |
| `offsets`     | ``__consumer_offsets`` through the LogManager: create, append, load      |
| `service`     | the coordinator as the server runs it (event-loop timers, loading)       |
| `apis`        | the ten group APIs' handlers                                             |
"""
