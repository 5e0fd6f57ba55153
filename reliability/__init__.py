"""Crash consistency from the outside: ``tidelog serve`` killed with SIGKILL under real client load.

Not part of the installed package (like ``bench/`` and ``kafka_oracle/``): the tests under
``tests/reliability`` import it from the repository root, and it runs on its own as
``python -m reliability.crash --seed S --kills N [--minutes M]``.

* :mod:`reliability.broker`: ``ServeProcess`` — one ``tidelog serve`` subprocess over a data dir
  (free port, small segments, fast cleaner and retention), SIGKILL, restart, time to answer Metadata.
* :mod:`reliability.ledger`: ``Ledger`` — what the clients were told (acknowledged offsets,
  deleted topics, log start offsets) and saw (records observed gone), and the checks against a read.
* :mod:`reliability.workload`: ``Workload`` — a seeded stream of client steps through kafka-python
  (acks=-1): produce, overwrite and tombstone, read back, DeleteRecords, config changes, create and
  delete topics.
* :mod:`reliability.triggers`: when to kill — after a random delay, or at the first sign on disk
  of a roll, a clean, a segment deletion or a topic deletion.
* :mod:`reliability.crash`: the run — epochs of load ended by a kill, checks after each restart,
  ``tidelog verify`` on the data dir, the summary line.
"""
