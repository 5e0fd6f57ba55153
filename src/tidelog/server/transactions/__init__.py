"""The transaction coordinator: transactional ids and their transactions (transaction protocol
V1, KIP-98), with their state in the compacted ``__transaction_state`` topic, in Kafka's format.

| module        | concept                                                                   |
|---------------|---------------------------------------------------------------------------|
| `records`     | the ``__transaction_state`` key/value records (byte layouts), id hash     |
| `state`       | :class:`TxnState` and :class:`TxnMetadata`: the state machine             |
| `topic`       | ``__transaction_state`` through the LogManager: create, append, load      |
| `coordinator` | :class:`TransactionCoordinator`: the requests, markers, timeouts, loading |
| `service`     | the coordinator as the server runs it (timers, the server's context)      |
| `apis`        | AddPartitionsToTxn, AddOffsetsToTxn and EndTxn handlers                   |
"""
