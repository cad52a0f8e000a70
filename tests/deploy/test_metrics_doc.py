"""docs/metrics.md against the code: every Prometheus metric that services/ defines is in the table
with its type and labels, every `exposed` row is in the code, every `planned` row is not yet, and
every metric an alert or a dashboard panel uses is documented."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from services.common.metrics import Metrics
from tests.deploy.k8s import ROOT, one, render

METRIC_TYPES = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
                "Info": "info", "Enum": "stateset",
                # the families a custom collector yields at each scrape
                "CounterMetricFamily": "counter", "GaugeMetricFamily": "gauge",
                "HistogramMetricFamily": "histogram", "SummaryMetricFamily": "summary"}
PROMETHEUS_MODULES = ("prometheus_client", "prometheus_client.core", "prometheus_client.metrics_core")


@dataclass(frozen=True)
class Metric:
    name: str  # as exposed: counters with `_total`
    type: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Row:
    metric: Metric
    status: str


def _exposed_name(name: str, kind: str) -> str:
    return name if kind != "counter" or name.endswith("_total") else f"{name}_total"


def _literal_strings(node: ast.expr | None, where: str) -> tuple[str, ...]:
    if node is None:
        return ()
    assert isinstance(node, ast.List | ast.Tuple), f"{where}: label names must be a literal list"
    values = []
    for item in node.elts:
        assert isinstance(item, ast.Constant) and isinstance(item.value, str), f"{where}: literal label names"
        values.append(item.value)
    return tuple(values)


def metrics_in(path: Path) -> list[Metric]:
    """The prometheus_client metrics a module constructs (their names and labels must be literals)."""
    tree = ast.parse(path.read_text(), str(path))
    classes: dict[str, str] = {}  # local name -> prometheus_client class
    modules: set[str] = set()  # local names of the prometheus_client module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in PROMETHEUS_MODULES:
            classes.update({a.asname or a.name: a.name for a in node.names if a.name in METRIC_TYPES})
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "prometheus_client")
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in classes:
            cls = classes[func.id]
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
            and func.attr in METRIC_TYPES
        ):
            cls = func.attr
        else:
            continue
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        keywords = {k.arg: k.value for k in node.keywords}
        assert "namespace" not in keywords and "subsystem" not in keywords, f"{where}: write the full name"
        name_node = node.args[0] if node.args else keywords.get("name")
        assert isinstance(name_node, ast.Constant) and isinstance(name_node.value, str), (
            f"{where}: a metric's name must be a literal string (docs/metrics.md lists it)"
        )
        labels = _literal_strings(node.args[2] if len(node.args) > 2
                                  else keywords.get("labelnames", keywords.get("labels")), where)
        kind = METRIC_TYPES[cls]
        found.append(Metric(_exposed_name(name_node.value, kind), kind, labels))
    return found


def code_metrics() -> dict[str, Metric]:
    metrics: dict[str, Metric] = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        for metric in metrics_in(path):
            assert metrics.get(metric.name, metric) == metric, f"{metric.name} is defined twice, differently"
            metrics[metric.name] = metric
    return metrics


def _table(section: str) -> list[list[str]]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    assert rows, f"docs/metrics.md: no table under {section!r}"
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def documented() -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for cells in _table("The table"):
        assert len(cells) == 6, cells
        name, kind, labels, _meaning, _by, status = cells
        assert status in ("exposed", "planned"), cells
        metric = Metric(name.strip("`"), kind, tuple(re.findall(r"`(\w+)`", labels)))
        assert metric.name not in rows, f"{metric.name} is listed twice"
        rows[metric.name] = Row(metric, status)
    return rows


def external() -> set[str]:
    return {cells[0].strip("`") for table in ("From kube-state-metrics", "From Prometheus") for cells in _table(table)}


def test_the_scan_finds_metrics() -> None:
    # The scan itself: the common metrics are found, with their labels; collections.Counter is not.
    found = code_metrics()
    assert found["buraco_rpc_calls_total"] == Metric(
        "buraco_rpc_calls_total", "counter", ("service", "method", "code")
    )
    assert found["buraco_rpc_duration_seconds"].type == "histogram"
    assert found["buraco_database_connections"] == Metric(  # a collector's family, yielded at each scrape
        "buraco_database_connections", "gauge", ("service", "pool")
    )
    assert all(m.name.startswith("buraco_") for m in found.values())


def test_every_metric_in_the_code_is_documented_as_it_is() -> None:
    rows = documented()
    for metric in code_metrics().values():
        assert metric.name in rows, f"{metric.name} ({metric.type}) is not in docs/metrics.md"
        row = rows[metric.name]
        assert row.metric == metric, f"docs/metrics.md says {row.metric}, the code {metric}"
        assert row.status == "exposed", f"{metric.name} is in the code now: mark it exposed in docs/metrics.md"


def test_every_exposed_row_is_in_the_code() -> None:
    code = code_metrics()
    for name, row in documented().items():
        if row.status == "exposed":
            assert name in code, f"docs/metrics.md says {name} is exposed, but no code defines it"


def test_a_server_registry_holds_what_the_doc_says() -> None:
    # The registry a server serves on /metrics (metrics.py), read the way Prometheus reads it.
    rows = documented()
    for family in Metrics("wallet").registry.collect():
        name = _exposed_name(family.name, family.type)
        assert name in rows and rows[name].metric.type == family.type, name


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:buraco|kube)_[a-z0-9_]+)\b", expr)) | set(re.findall(r"\b(up)\{", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count")) else n for n in names}


def _queries() -> dict[str, str]:
    """Every PromQL expression of the alerts and the dashboard, by where it is."""
    queries = {}
    rule = one(render("prod"), "PrometheusRule", "buraco")
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    # a recorded series stands for its expression (the metrics it reads)
    recorded = {r["record"]: r["expr"] for r in rules if "record" in r}
    for r in rules:
        expr = r["expr"]
        for name, body in recorded.items():
            expr = expr.replace(name, f"({body})")
        queries[f"alert {r['alert']}" if "alert" in r else f"record {r['record']}"] = expr
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "buraco.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries[f"variable {variable['name']}"] = variable["definition"]
    return queries


def test_alerts_and_panels_use_documented_metrics() -> None:
    rows, others = documented(), external()
    histograms = {n for n, r in rows.items() if r.metric.type == "histogram"}
    used: set[str] = set()
    for where, expr in _queries().items():
        names = _metric_names(expr)
        assert names, f"{where}: no metric"
        for name in names:
            assert name in rows or name in others, f"{where} uses {name}, which docs/metrics.md does not list"
        for raw in re.findall(r"\b(buraco_[a-z0-9_]+_(?:bucket|sum|count))\b", expr):
            assert re.sub(r"_(bucket|sum|count)$", "", raw) in histograms, f"{where}: {raw} is not a histogram's"
        used |= names
    # Every documented metric is on the dashboard or in an alert (or it is not worth its row).
    assert set(rows) | others <= used, f"never used: {sorted((set(rows) | others) - used)}"


def test_panels_say_which_metrics_are_still_coming() -> None:
    rows = documented()
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "buraco.json").read_text())
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        names = set().union(*(_metric_names(t["expr"]) for t in panel["targets"]))
        planned = {n for n in names if n in rows and rows[n].status == "planned"}
        coming = "(coming" in panel["title"]
        assert coming == bool(planned), (
            f"panel {panel['title']!r}: its title must say '(coming: ...)' exactly when it uses a planned metric "
            f"({sorted(planned)}); update it when the metric is exposed"
        )
