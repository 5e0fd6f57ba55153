"""docs/grafana/tidelog.json: a Grafana dashboard whose every query names only metrics a live
``tidelog serve`` serves (names taken out of each PromQL expression by a tokenizer, not a pattern
guess), on the templated Prometheus data source, with panels laid out on Grafana's 24-column grid."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served_metrics import exposed_families, served_text

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "tidelog.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

# --- PromQL metric names -----------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<range>\[[^\]]*\])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?)
  | (?P<identifier>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<operator>=~|!~|!=|==|<=|>=|[(){},=<>+\-*/%^@])
""", re.VERBOSE)
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
            "unless", "atan2", "inf", "nan", "start", "end"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}  # may take "by (...)" before their "(...)"
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}


def tokens(expr: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of each PromQL token but spaces; ValueError at a character PromQL has no token for."""
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"no PromQL token at {position} of {expr!r}: {expr[position:position + 10]!r}")
        position = match.end()
        if match.lastgroup != "space":
            yield match.lastgroup or "", match.group()


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside label matchers and label lists
    that are not keywords and not called as functions; plus ``{__name__="..."}`` matchers.
    ValueError when the braces or a label list's parentheses do not close."""
    found: set[str] = set()
    items = list(tokens(expr))
    braces = label_list = 0  # depth inside {...}; inside the (...) after by/without/on/ignoring/group_*
    opening = False  # the next token is the "(" of a label list
    for i, (kind, text) in enumerate(items):
        following = items[i + 1][1] if i + 1 < len(items) else ""
        if opening:
            opening, label_list = False, 1
        elif label_list:
            label_list += {"(": 1, ")": -1}.get(text, 0)
        elif text in ("{", "}"):
            braces += 1 if text == "{" else -1
        elif kind != "identifier":
            continue
        elif braces:
            if text == "__name__" and following == "=" and i + 2 < len(items) and items[i + 2][0] == "string":
                found.add(items[i + 2][1][1:-1])
        elif text in LABEL_LISTS and following == "(":
            opening = True
        elif text not in KEYWORDS and following != "(" and not (text in AGGREGATIONS and following in LABEL_LISTS):
            found.add(text)
    if braces or label_list:
        raise ValueError(f"unbalanced PromQL {expr!r}")
    _balanced_parentheses(expr, items)
    return found


def _balanced_parentheses(expr: str, items: list[tuple[str, str]]) -> None:
    depth = 0
    for _, text in items:
        depth += {"(": 1, ")": -1}.get(text, 0)
        if depth < 0:
            break
    if depth:
        raise ValueError(f"unbalanced parentheses in {expr!r}")


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (topic) (rate(kafka_server_brokertopicmetrics_bytesin_total{topic=~"$topic"}[1m]))',
     {"kafka_server_brokertopicmetrics_bytesin_total"}),
    ('max by (request) (kafka_network_requestmetrics_totaltimems{quantile="0.99"})',
     {"kafka_network_requestmetrics_totaltimems"}),
    ("sum by (topic) (a{x=\"y\"} - b)", {"a", "b"}),
    ('sum(rate(x[5m])) by (le, job) / on (job) group_left (topic) y offset 1h', {"x", "y"}),
    ('topk(20, tidelog_log_cleaner_dirty_ratio{topic=~"${topic}"})', {"tidelog_log_cleaner_dirty_ratio"}),
    ('{__name__="process_open_fds", job="t"} > bool 100', {"process_open_fds"}),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval]))) or vector(0)", {"h_bucket"}),
    ('count by (reason) (tidelog_log_retention_reason{reason!="held"}) unless on() z', {"tidelog_log_retention_reason", "z"}),
])
def test_metric_names_of_expressions(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


@pytest.mark.parametrize("expr", ["rate(x[1m]", "sum by (topic x", "x ? y", 'x{a="b"'])
def test_metric_names_refuses_what_is_not_promql(expr: str) -> None:
    with pytest.raises(ValueError):
        metric_names(expr)


# --- the dashboard -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, the ones nested in collapsed rows too."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable (``label_values(metric, label)``
    contributes its metric selector)."""
    found = [(f"panel {p['title']!r} target {t['refId']}", t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"label_values\((?:(.+),\s*)?\w+\)", query.strip())
            assert match is not None, f"variable {variable['name']}: unexpected query {query!r}"
            if match[1]:
                found.append((f"variable {variable['name']}", match[1]))
    return found


def test_dashboard_is_a_grafana_dashboard_on_a_templated_prometheus(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36 and dashboard["title"] and dashboard["uid"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE
    for panel in panels(dashboard):
        if panel["type"] != "row":
            assert panel["datasource"] == DATASOURCE, panel["title"]
            assert panel["targets"], f"panel {panel['title']!r} has no query"
            assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]


def test_dashboard_panels_have_unique_ids_and_do_not_overlap(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_dashboard_covers_the_issue_areas(dashboard: dict[str, Any]) -> None:
    named = set().union(*(metric_names(expr) for _, expr in queries(dashboard)))
    for area in ("kafka_server_brokertopicmetrics_bytesin_total", "kafka_server_brokertopicmetrics_bytesout_total",
                 "kafka_server_brokertopicmetrics_messagesin_total", "kafka_log_log_size",
                 "kafka_log_log_numlogsegments", "kafka_log_logcleanermanager_max_dirty_percent",
                 "kafka_log_logcleanermanager_time_since_last_run_ms",
                 "kafka_log_logcleanermanager_uncleanable_partitions_count", "kafka_log_logcleaner_deadthreadcount",
                 "tidelog_log_cleaner_dirty_ratio", "tidelog_log_retention_reason", "kafka_log_log_logstartoffset",
                 "kafka_network_requestmetrics_requests_total", "kafka_network_requestmetrics_totaltimems",
                 "kafka_log_logmanager_offlinelogdirectorycount", "kafka_server_socket_server_metrics_connection_count",
                 "kafka_coordinator_group_groupmetadatamanager_numgroups", "tidelog_log_recovery_partitions_loaded"):
        assert area in named, area


def test_every_dashboard_query_names_served_metrics(dashboard: dict[str, Any],
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    served = exposed_families(served_text(tmp_path_factory.mktemp("served")))
    checked = 0
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        unknown = sorted(names - set(served))
        assert not unknown, f"{where}: {expr!r} names metrics the endpoint does not serve: {unknown}"
        checked += len(names)
    assert checked >= 50


COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}  # PromQL reads a drop as a counter reset
GAUGE_FUNCTIONS = {"deriv", "delta", "idelta", "predict_linear"}


def function_arguments(expr: str, functions: set[str]) -> Iterator[tuple[str, set[str]]]:
    """(function, metric names of its argument) for every call of one of ``functions`` in ``expr``."""
    items = list(tokens(expr))
    for i, (kind, text) in enumerate(items):
        if kind != "identifier" or text not in functions or i + 1 >= len(items) or items[i + 1][1] != "(":
            continue
        depth, end = 0, i + 1
        for end in range(i + 1, len(items)):
            depth += {"(": 1, ")": -1}.get(items[end][1], 0)
            if depth == 0:
                break
        yield text, metric_names(" ".join(t for _, t in items[i + 2:end]))


@pytest.mark.parametrize(("expr", "calls"), [
    ("sum(rate(a_total[1m])) / deriv(b[5m])", [("rate", {"a_total"})]),
    ("increase(x_total[1h]) + rate(y[1m])", [("increase", {"x_total"}), ("rate", {"y"})]),
])
def test_function_arguments(expr: str, calls: list[tuple[str, set[str]]]) -> None:
    assert list(function_arguments(expr, COUNTER_FUNCTIONS)) == calls


def test_dashboard_takes_rates_of_counters_only(dashboard: dict[str, Any],
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """rate()/increase() of a gauge turns each drop (a truncation, a topic recreated) into a spike;
    deriv()/delta() of a counter misreads its resets."""
    served = exposed_families(served_text(tmp_path_factory.mktemp("served")))
    for where, expr in queries(dashboard):
        for function, names in function_arguments(expr, COUNTER_FUNCTIONS | GAUGE_FUNCTIONS):
            wanted = "counter" if function in COUNTER_FUNCTIONS else "gauge"
            wrong = sorted(n for n in names if n in served and served[n].type != wanted)
            assert not wrong, f"{where}: {function}() over {wrong}, which are not {wanted}s: {expr!r}"
