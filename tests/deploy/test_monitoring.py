"""Monitoring resources (deploy/k8s/base/monitoring.yaml) and the dashboard: what kubernetes-validate
cannot check (the Prometheus Operator's resources have no bundled schema) is checked here."""

from __future__ import annotations

import json
import re

import pytest
from google.protobuf.descriptor import FileDescriptor

from buraco.v1 import game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2
from tests.deploy.k8s import ROOT, Object, find, one, overlays, processes, render, workload

REQUIRED_ALERTS = {
    "BuracoTargetDown",
    "BuracoTargetMissing",
    "BuracoMetricAbsent",
    "BuracoMoveLatencyBudgetBurn",
    "BuracoSettlementBudgetBurn",
    "BuracoHighErrorRate",
    "BuracoHighLatencyP99",
    "BuracoTablesNoProgress",
    "BuracoOutboxBacklog",
    "BuracoWalletAuditFailed",
}
FILES: list[FileDescriptor] = [
    m.DESCRIPTOR for m in (game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2)
]


def _methods() -> dict[str, bool]:
    """Every RPC of the contracts, as the `method` label names it, and whether it is a server stream."""
    methods = {}
    for file in FILES:
        for service in file.services_by_name.values():
            for method in service.methods:
                methods[f"/{service.full_name}/{method.name}"] = method.server_streaming
    assert len(methods) > 20
    return methods


def _anchors() -> set[str]:
    """GitHub's anchors of the headings of docs/operations.md."""
    text = (ROOT / "docs" / "operations.md").read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _rules(objects: tuple[Object, ...]) -> list[Object]:
    rule = one(objects, "PrometheusRule", "buraco")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.mark.parametrize("overlay", overlays())
def test_alerts_are_complete_and_have_runbooks(overlay: str) -> None:
    every = _rules(render(overlay))
    # recording rules: named level:metric:operations (Prometheus' convention), each recorded once
    recorded = [r["record"] for r in every if "record" in r]
    assert len(recorded) == len(set(recorded))
    for rule in every:
        if "record" in rule:
            assert set(rule) == {"record", "expr"} and re.fullmatch(r"buraco:[a-z0-9_]+:[a-z0-9_]+", rule["record"])
    rules = [r for r in every if "alert" in r]
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS
    anchors = _anchors()
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in anchors, f"docs/operations.md has no runbook heading for {rule['alert']}"
        # Balanced parentheses and braces: a cheap guard against a broken expression.
        expr = rule["expr"]
        for pair in ("()", "{}", "[]"):
            assert expr.count(pair[0]) == expr.count(pair[1]), rule["alert"]


def _stream_filters() -> list[str]:
    """The `method!~"..."` regexes that keep streams out of latency percentiles."""
    rules = _rules(render("prod"))
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "buraco.json").read_text())
    exprs = [r["expr"] for r in rules if "duration_seconds" in r["expr"]]
    exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "duration" in t["expr"]]
    filters = [f for e in exprs for f in re.findall(r'method!~"([^"]+)"', e)]
    assert len(filters) >= 4 and len(exprs) >= 3
    return filters


def test_latency_percentiles_leave_out_exactly_the_streams() -> None:
    methods = _methods()
    for pattern in set(_stream_filters()):
        for method, streaming in methods.items():
            assert bool(re.fullmatch(pattern, method)) == streaming, f"{pattern} and {method}"
        # the actions sent on a Play stream are timed as calls of their own: they count
        assert not re.fullmatch(pattern, "/buraco.v1.GameSessionService/Play/Discard"), pattern


@pytest.mark.parametrize("overlay", overlays())
def test_prometheus_scrapes_every_service(overlay: str) -> None:
    objects = render(overlay)
    (monitor,) = find(objects, "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    for service in processes():
        template = workload(objects, service)["spec"]["template"]
        assert all(template["metadata"]["labels"].get(k) == v for k, v in selector.items()), service
        ports = [p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
        assert "metrics" in ports, service


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "buraco.json").read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in ("Calls per second", "error ratio", "p99 latency", "Tables active", "Outbox backlog",
                   "Wallet audit"):
        assert any(wanted.lower() in t.lower() for t in titles), wanted
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
