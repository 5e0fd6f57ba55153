"""Kafka's source metrics for a ``format("tidelog")`` stream, from the query's progress.

Spark's Kafka source reports, per micro-batch, ``minOffsetsBehindLatest``,
``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest`` in ``sources[i].metrics`` of the query
progress (``KafkaMicroBatchStream.metrics``: for each partition with a latest available offset,
that offset minus the batch's end offset, 0 for a partition the batch has not reached) and
describes itself as ``KafkaV2[Subscribe[topic]]``.

PySpark's Python data source API (4.2, 4.3) has no hook for either: the JVM stream that wraps a
Python reader (``PythonMicroBatchStream``) implements neither ``ReportsSourceMetrics`` nor its
own ``toString``, so Spark shows ``metrics`` as empty and the description as
``PythonMicroBatchStream...@<hash>``. What it does carry is the batch's ``endOffset`` and, from
the reader's ``reportLatestOffset()``, the ``latestOffset`` seen when the batch was planned:
:func:`source_metrics` computes Kafka's three metrics from those, the same numbers Spark's Kafka
source would report, and :func:`description` gives the Kafka-style description of the options.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tidelog.spark import options as o

METRIC_NAMES = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")


def source_metrics(source: Any) -> dict[str, str]:
    """Kafka's ``offsetsBehindLatest`` metrics of one source progress (``query.lastProgress``'s
    ``sources[i]``, as the PySpark object or its dict); ``{}`` when the progress has no end or no
    latest offset (Spark's Kafka source reports an empty map then). Values are strings, as in
    Spark's ``metrics`` map (the average in Java's ``Double.toString`` form)."""
    end, latest = _offsets(source, "endOffset"), _offsets(source, "latestOffset")
    if end is None or not latest:
        return {}
    behind = [latest_offset - end.get(key, 0) for key, latest_offset in latest.items()]
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": java_double(sum(behind) / len(behind))}


def _offsets(source: Any, name: str) -> dict[tuple[str, str], int] | None:
    """``{(topic, partition): offset}`` of a progress field (a JSON string or a dict), or None."""
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    if isinstance(value, str):
        value = json.loads(value) if value.strip() not in ("", "null") else None
    if not isinstance(value, Mapping):
        return None
    return {(topic, str(p)): int(offset) for topic, parts in value.items() for p, offset in parts.items()}


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` prints it (``12.5``, ``0.0``, ``1.0E7``)."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    for precision in range(1, 18):  # the shortest mantissa that round-trips, as Java prints it
        mantissa, exponent = f"{value:.{precision}e}".split("e")
        if float(f"{mantissa}e{exponent}") == value:
            break
    digits = mantissa.rstrip("0")
    digits = digits + "0" if digits.endswith(".") else digits
    return f"{digits}E{int(exponent)}"


def description(options: Mapping[str, str]) -> str:
    """The description Spark's Kafka source would show for these read options, with tidelog's
    name: ``TidelogV2[Subscribe[a, b]]``, ``TidelogV2[SubscribePattern[p]]`` or
    ``TidelogV2[Assign[t-0, t-1]]`` (Kafka's ``KafkaV2[...]`` with its strategy's toString)."""
    sub = o.parse_source_options(options, streaming=True).subscription
    if sub.kind == o.SUBSCRIBE:
        inner = f"Subscribe[{', '.join(sub.topics)}]"
    elif sub.kind == o.SUBSCRIBE_PATTERN:
        inner = f"SubscribePattern[{sub.pattern}]"
    else:
        inner = f"Assign[{', '.join(str(tp) for tp in sub.assigned)}]"
    return f"TidelogV2[{inner}]"
