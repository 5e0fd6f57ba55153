"""``subscribePattern`` is a Java regex, matched as Spark's Kafka source matches it.

What Spark does (apache/spark ``connector/kafka-0-10-sql/.../ConsumerStrategy.scala``,
``SubscribePatternStrategy.assignedTopicPartitions``): it lists the topics with the admin client
and keeps those where ``topicPattern.r.findFirstIn(name)`` is defined: Scala's ``Regex`` over
``java.util.regex.Pattern``, a match *anywhere* in the name (``find()``, not ``matches()``). So
``orders`` selects ``orders`` and ``eu-orders-v2``, ``^orders$`` only ``orders``. The Java
constructs users write (``\\p{Alpha}``, inline flags, possessive quantifiers, ``\\Q...\\E``) work;
an invalid pattern fails at ``load()`` naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.spark.java_regex import JavaRegexError, compile_java
from tidelog.spark.options import SourceOptionError, parse_source_options
from tidelog.topic_partition import TopicPartition

TOPICS = ["orders", "eu-orders-v2", "Orders", "ORDERS_2024", "payments", "a.b", "axb", "clicks-9", "x"]


def found(pattern: str) -> list[str]:
    """The topics ``pattern`` selects, in TOPICS order (Spark's findFirstIn semantics)."""
    regex = compile_java(pattern)
    return [t for t in TOPICS if regex.search(t)]


@pytest.mark.parametrize(("pattern", "expected"), [
    ("orders", ["orders", "eu-orders-v2"]),                    # anywhere in the name
    ("^orders$", ["orders"]),                                  # anchored: the whole name
    ("(?i)^orders", ["orders", "Orders", "ORDERS_2024"]),       # inline flag at the start
    ("^eu-(?i)ORDERS", ["eu-orders-v2"]),                      # inline flag in the middle (Python refuses)
    ("^(?i:o)rders$", ["orders", "Orders"]),                   # scoped flag group
    ("^\\p{Lower}+$", ["orders", "payments", "axb", "x"]),     # POSIX class
    ("^\\p{Alpha}+$", ["orders", "Orders", "payments", "axb", "x"]),
    ("^\\p{Upper}\\p{Alnum}*", ["Orders", "ORDERS_2024"]),
    ("^[\\p{Lower}\\-]+\\p{Digit}$", ["eu-orders-v2", "clicks-9"]),            # a POSIX class inside [...]
    ("\\P{Alnum}", ["eu-orders-v2", "ORDERS_2024", "a.b", "clicks-9"]),
    ("^\\Qa.b\\E$", ["a.b"]),                                  # quoting: the dot is literal
    ("^a.b$", ["a.b", "axb"]),
    ("^\\w++$", ["orders", "Orders", "ORDERS_2024", "payments", "axb", "x"]),  # possessive
    ("^(?>ord|orders)$", []),                                  # atomic group: no backtracking into it
    ("^(?<w>[a-z])\\k<w>", []),                                # named group and back reference
    ("^[a-c[x-z]]$", ["x"]),                                   # Java's class union
    ("\\d\\z", ["eu-orders-v2", "ORDERS_2024", "clicks-9"]),
    ("\\p{javaLowerCase}-\\p{javaDigit}", ["clicks-9"]),
])
def test_java_constructs_select_the_topics_spark_selects(pattern: str, expected: list[str]) -> None:
    assert found(pattern) == expected


@pytest.mark.parametrize(("pattern", "message"), [
    ("orders(", "Unclosed group"),
    ("orders)", "Unmatched closing"),
    ("[a-z", "Unclosed character class"),
    ("(?P<n>x)", "Unknown inline modifier"),                    # Python-only syntax is not Java
    ("\\p{Klingon}", "Unknown character property name"),
    ("[a-z&&[^x]]", "intersection"),                           # Java-only, no translation: refused
    ("*a", "nothing to repeat"),
])
def test_invalid_or_untranslatable_patterns_fail_naming_the_option(pattern: str, message: str) -> None:
    with pytest.raises(JavaRegexError, match=message):
        compile_java(pattern)
    with pytest.raises(SourceOptionError, match="Option 'subscribePattern': .* is not a valid Java regular expression"):
        parse_source_options({"path": "/x", "subscribepattern": pattern}, streaming=False)


def test_spark_reads_the_topics_a_java_pattern_finds(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log_dir = tmp_path / "logs"
    m = open_manager(log_dir)
    try:
        for i, topic in enumerate(("orders", "eu-orders-v2", "Orders", "payments")):
            m.create_topic(topic, 1)
            append_simple(m, TopicPartition(topic, 0), 3 + i)
    finally:
        m.shutdown()

    def topics(pattern: str) -> dict[str, int]:
        df = spark.read.format("tidelog").option("subscribePattern", pattern).load(str(log_dir))
        return {r["topic"]: r["n"] for r in df.groupBy("topic").count().withColumnRenamed("count", "n").collect()}

    assert topics("orders") == {"orders": 3, "eu-orders-v2": 4}
    assert topics("(?i)^orders$") == {"orders": 3, "Orders": 5}
    assert topics("^\\p{Lower}++$") == {"orders": 3, "payments": 6}
    with pytest.raises(Exception, match="Option 'subscribePattern': 'orders\\(' is not a valid Java regular"):
        spark.read.format("tidelog").option("subscribePattern", "orders(").load(str(log_dir)).collect()
