"""docs/metrics.md against what the endpoint serves: its catalog tables list exactly the families a
live ``tidelog serve`` serves (each name both ways, with its type and labels), each Kafka name is what
the JMX exporter's rules make of the MBean the table gives, the reason-code tables list exactly
the codes the cleaner and retention decide with, and ``tidelog metrics`` on a stopped dir prints
families of the same catalog."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from served_metrics import Family, exposed_families, served_text

from tidelog.cleaner.plan import CLEANING_REASONS
from tidelog.retention import RETENTION_REASONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
CATALOG_HEADER = "| Name | Type | Labels | Meaning | Kafka MBean | Rule |"
RULES = {"gauge", "meter", "percentile", "count", "Strimzi", "tidelog", "client"}


@dataclass(frozen=True, slots=True)
class DocRow:
    name: str
    type: str
    labels: frozenset[str]
    mbean: str
    rule: str
    line: int


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def catalog(text: str) -> list[DocRow]:
    """Every row of every table whose header is :data:`CATALOG_HEADER`."""
    rows, in_table = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() == CATALOG_HEADER:
            in_table = True
        elif in_table and not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            name, kind, labels, _, mbean, rule = _cells(line)
            assert len(_code(name)) == 1, f"docs/metrics.md:{number}: one name in backticks, got {name!r}"
            rows.append(DocRow(_code(name)[0], kind, frozenset(_code(labels)), mbean, rule, number))
    return rows


def code_table(text: str, heading: str) -> list[str]:
    """The codes (first column) of the table under ``heading``."""
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    return [_code(_cells(line)[0])[0] for line in section.splitlines()
            if line.startswith("| `")]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> str:
    return served_text(tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="module")
def served(scraped: str) -> dict[str, Family]:
    return exposed_families(scraped)


@pytest.fixture(scope="module")
def documented() -> list[DocRow]:
    return catalog(DOC.read_text())


def test_doc_lists_exactly_the_served_families(served: dict[str, Family], documented: list[DocRow]) -> None:
    names = [row.name for row in documented]
    assert len(names) == len(set(names)), f"listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    assert sorted(set(served) - set(names)) == [], "served but not in docs/metrics.md"
    assert sorted(set(names) - set(served)) == [], "in docs/metrics.md but not served"


def test_doc_gives_each_family_its_served_type_and_labels(served: dict[str, Family], documented: list[DocRow]) -> None:
    for row in documented:
        family = served[row.name]
        assert row.type == family.type, f"docs/metrics.md:{row.line}: {row.name} is a {family.type}"
        if family.samples:  # an empty family (nothing quarantined) shows no labels to compare
            assert row.labels == family.labels, f"docs/metrics.md:{row.line}: {row.name} has labels {sorted(family.labels)}"


def exporter_name(mbean: str, rule: str) -> str:
    """What the JMX exporter's kafka-2_0_0.yml rules (1.x exporter) name an attribute of ``mbean``
    (``kafka.<domain>:type=T,name=N[,tags]``): the gauge rule's ``kafka_<domain>_<type>_<name>``,
    lowercased, characters outside ``[a-zA-Z0-9:_]`` as ``_``, runs of ``_`` squeezed; a meter's
    Count without ``PerSec`` plus ``_total``; a histogram's percentiles on the gauge name, its Count
    as ``_count_total``."""
    domain, _, keys = mbean.partition(":")
    properties = dict(part.split("=", 1) for part in keys.split(",") if "=" in part)
    name = properties["name"]
    if rule == "meter":
        assert name.endswith("PerSec"), mbean
        name = name[:-len("PerSec")]
    raw = f"{domain.removeprefix('kafka.')}_{properties['type']}_{name}"
    safe = "kafka_" + re.sub("_+", "_", re.sub(r"[^a-zA-Z0-9:_]", "_", raw)).lower()
    return {"meter": safe + "_total", "count": safe + "_count_total"}.get(rule, safe)


def test_each_kafka_name_is_what_the_exporter_makes_of_its_mbean(documented: list[DocRow]) -> None:
    for row in documented:
        assert row.rule in RULES, f"docs/metrics.md:{row.line}: unknown rule {row.rule!r}"
        if row.rule in ("gauge", "meter", "percentile", "count"):
            mbean = _code(row.mbean)[0].split("[", 1)[0]
            assert exporter_name(mbean, row.rule) == row.name, f"docs/metrics.md:{row.line}: {mbean}"
        assert row.name.startswith("tidelog_") == (row.rule == "tidelog"), f"docs/metrics.md:{row.line}"
        assert row.name.startswith("kafka_") == (row.rule not in ("tidelog", "client")), f"docs/metrics.md:{row.line}"


def test_exporter_name_follows_the_rules_on_known_cases() -> None:
    assert exporter_name("kafka.log:type=Log,name=Size,topic,partition", "gauge") == "kafka_log_log_size"
    assert exporter_name("kafka.log:type=LogCleanerManager,name=max-dirty-percent", "gauge") == \
        "kafka_log_logcleanermanager_max_dirty_percent"
    assert exporter_name("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec", "meter") == \
        "kafka_server_brokertopicmetrics_bytesin_total"
    assert exporter_name("kafka.network:type=RequestMetrics,name=TotalTimeMs,request", "count") == \
        "kafka_network_requestmetrics_totaltimems_count_total"
    assert exporter_name("kafka.coordinator.group:type=GroupMetadataManager,name=NumGroupsStable", "gauge") == \
        "kafka_coordinator_group_groupmetadatamanager_numgroupsstable"


def test_reason_code_tables_list_exactly_the_codes_in_use() -> None:
    text = DOC.read_text()
    assert sorted(code_table(text, "### `tidelog_log_cleaner_reason`")) == sorted(CLEANING_REASONS)
    assert sorted(code_table(text, "### `tidelog_log_retention_reason`")) == sorted(RETENTION_REASONS)


def test_served_reason_labels_are_documented_codes(scraped: str) -> None:
    for family in text_string_to_metric_families(scraped):
        if family.name == "tidelog_log_cleaner_reason":
            assert {s.labels["reason"] for s in family.samples} <= set(CLEANING_REASONS)
        if family.name == "tidelog_log_retention_reason":
            assert {s.labels["reason"] for s in family.samples} <= set(RETENTION_REASONS)


def test_stopped_dir_metrics_are_documented_names(tmp_path: Path, documented: list[DocRow]) -> None:
    """``tidelog metrics`` on a stopped dir prints families of the same catalog, with the same types."""
    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"), *args],
                              check=True, capture_output=True, text=True, timeout=120).stdout

    cli("topics", "create", "users", "--config", "cleanup.policy=compact")
    subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"), "produce", "users",
                    "--key-separator", ":"], input="a:1\nb:2\na:3\n", check=True, capture_output=True, text=True,
                   timeout=120)
    stopped = exposed_families(cli("metrics"))
    types = {row.name: row.type for row in documented}
    assert {"kafka_log_log_size", "tidelog_log_cleaner_reason", "tidelog_log_retention_reason"} <= set(stopped)
    assert {name: family.type for name, family in stopped.items()} == {name: types.get(name) for name in stopped}
