"""The load-test kit's Job (deploy/k8s/loadtest): what `kubectl kustomize` makes of it, checked
against the kit's own argument parser and against the prod overlay it runs beside."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from loadtest.cli import build_parser, settings_from
from loadtest.client import SERVICES
from services.common.config import DEFAULT_PORTS
from tests.deploy.k8s import ROOT, env, kubectl, one, render

Object = dict[str, Any]


def _objects() -> tuple[Object, ...]:
    result = subprocess.run([kubectl(), "kustomize", str(ROOT / "deploy" / "k8s" / "loadtest")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def test_the_job_runs_the_kit_with_tokens_and_mutual_tls_and_no_key(tmp_path: Path) -> None:
    objects = _objects()
    job = one(objects, "Job", "buraco-loadtest")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].startswith("buraco-loadtest:") and container["command"] == ["python", "-m", "loadtest"]
    variables = {name: entry["value"] for name, entry in env(container).items()}
    args = [re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], a) for a in container["args"]]
    parsed = build_parser().parse_args(args)
    # the kit's own rules accept the run, with the mounted files made here
    local = []
    for arg in args:
        name, _, value = arg.partition("=")
        if name in ("--tokens", "--tls-ca", "--tls-cert", "--tls-key"):
            made = tmp_path / value.rsplit("/", 1)[1]
            made.write_text("")
            arg = f"{name}={made}"
        local.append(arg)
    settings = settings_from(build_parser().parse_args(local))
    assert settings.scenario == "journey" and settings.tokens_file and settings.tls_cert and settings.run_id
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for path in (parsed.tokens, parsed.tls_ca, parsed.tls_cert, parsed.tls_key):
        folder = path.rsplit("/", 1)[0]
        assert folder in mounts and mounts[folder]["readOnly"], path
    assert volumes[mounts["/etc/buraco/tls"]["name"]]["secret"]["secretName"] == "loadtest-tls"
    assert volumes[mounts["/etc/buraco/loadtest"]["name"]]["secret"]["secretName"] == "buraco-loadtest-tokens"
    assert parsed.run_id and parsed.token_key is None  # tokens issued beforehand; no key in the pod
    assert str(parsed.out).startswith("/tmp/") and "/tmp" in mounts  # the only writable path
    # every service the journey calls, at its Service (whose certificate names it) and port
    from loadtest.client import parse_targets

    targets = parse_targets(parsed.targets)
    prod = render("prod")
    for service in SERVICES:
        host, port = targets[service].rsplit(":", 1)
        assert int(port) == DEFAULT_PORTS[service]
        certificate = one(prod, "Certificate", f"{service.replace('_', '-')}-tls")["spec"]
        assert host in certificate["dnsNames"], (service, host)
    # restricted: non-root, read-only root, nothing to escalate, no API token
    security = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and security["readOnlyRootFilesystem"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
    assert one(objects, "ServiceAccount", pod["serviceAccountName"])["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 0  # a failed run is read, not retried


def test_the_job_is_admitted_by_the_services_and_may_reach_only_them() -> None:
    objects = _objects()
    labels = one(objects, "Job", "buraco-loadtest")["spec"]["template"]["metadata"]["labels"]
    # the services admit gateways; the DNS policy selects the suite's pods
    assert labels["buraco.io/gateway"] == "true" and labels["app.kubernetes.io/part-of"] == "buraco"
    policy = one(objects, "NetworkPolicy", "buraco-loadtest")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"} and "ingress" not in policy
    ports = {p["port"] for rule in policy["egress"] for p in rule["ports"]}
    assert ports == {DEFAULT_PORTS[s] for s in SERVICES}
    # its certificate comes from the suite's CA issuer, as the prod overlay's do, for client auth
    certificate = one(objects, "Certificate", "loadtest-tls")["spec"]
    assert certificate["issuerRef"] == one(render("prod"), "Certificate", "wallet-tls")["spec"]["issuerRef"]
    assert certificate["usages"] == ["client auth"]
