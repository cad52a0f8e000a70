"""The load-test kit's Jobs (deploy/k8s/loadtest and its cleanup): what `kubectl kustomize` makes of it, checked
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
from services.common.loadtest_runs import RUN_ID_PATTERN
from tests.deploy.k8s import ROOT, env, kubectl, one, render

Object = dict[str, Any]


def _objects(folder: str = "loadtest") -> tuple[Object, ...]:
    result = subprocess.run([kubectl(), "kustomize", str(ROOT / "deploy" / "k8s" / folder)],
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


def _args(container: Object) -> list[str]:
    variables = {name: entry["value"] for name, entry in env(container).items()}
    return [re.sub(r"\$\((\w+)\)", lambda m: variables[m.group(1)], a) for a in container["args"]]


def test_the_cleanup_job_erases_the_runs_id_as_the_runs_admin_with_the_runs_identity() -> None:
    from loadtest import cleanup

    run_objects, objects = _objects(), _objects("loadtest/cleanup")
    assert [o["kind"] for o in objects] == ["Job"]  # identity, certificate and policy are the run's
    run_pod = one(run_objects, "Job", "buraco-loadtest")["spec"]["template"]
    job = one(objects, "Job", "buraco-loadtest-cleanup")
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    (run_container,) = run_pod["spec"]["containers"]
    assert container["image"] == run_container["image"]
    assert container["command"] == ["python", "-m", "loadtest", "cleanup"]
    parsed = cleanup.build_parser().parse_args(_args(container))
    run = build_parser().parse_args(_args(run_container))
    # the same run, services, TLS files and tokens file as the run it cleans
    assert parsed.run_id == run.run_id and RUN_ID_PATTERN.fullmatch(parsed.run_id)
    assert (parsed.targets, parsed.tokens, parsed.tls_ca, parsed.tls_cert, parsed.tls_key) == (
        run.targets, run.tokens, run.tls_ca, run.tls_cert, run.tls_key)
    assert parsed.token_key is None and not parsed.dry_run and parsed.wait > 0
    assert container["volumeMounts"] == [m for m in run_container["volumeMounts"] if m["name"] != "tmp"]
    assert pod["spec"]["volumes"] == [v for v in run_pod["spec"]["volumes"] if v["name"] != "tmp"]
    # admitted and confined as the run: its labels, service account, security context
    assert pod["metadata"]["labels"] == run_pod["metadata"]["labels"]
    for key in ("serviceAccountName", "securityContext", "restartPolicy"):
        assert pod["spec"][key] == run_pod["spec"][key], key
    assert container["securityContext"] == run_container["securityContext"]
    assert job["spec"]["backoffLimit"] == 0
