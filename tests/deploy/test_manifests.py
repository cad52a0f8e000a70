"""The Kubernetes manifests (deploy/k8s), rendered per overlay with `kubectl kustomize`: every service
of services/ is deployed, probed and configured as services/common/config.py expects, every pod is
locked down, no secret value is committed, and the network policies follow the call graph."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.common import config as config_module
from services.common.tls import host_of
from tests.deploy.k8s import (
    EDGE,
    ROOT,
    Object,
    containers,
    env,
    find,
    k8s_name,
    labels_match,
    one,
    overlays,
    pod_specs,
    render,
    services,
    workload,
)

OVERLAYS = overlays()
SERVICES = services()


def test_the_suite_is_what_the_tests_expect() -> None:
    # Guards the discovery itself: a renamed folder must not make the checks below vacuous.
    assert set(SERVICES) >= {"matchmaking", "game_session", "wallet", "ranking", "tournament"}
    assert set(SERVICES) <= set(config_module.DEFAULT_PORTS)
    assert OVERLAYS == ["dev", "prod"]


def _configmap(objects: tuple[Object, ...]) -> Object:
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("buraco-config")]
    assert len(maps) == 1
    return maps[0]


def _service_container(objects: tuple[Object, ...], service: str) -> Object:
    pod = workload(objects, service)["spec"]["template"]["spec"]
    named = [c for c in pod["containers"] if c["name"] == k8s_name(service)]
    assert len(named) == 1, f"{service}: no container named {k8s_name(service)}"
    container: Object = named[0]
    return container


def _ports(container: Object) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


def _effective_config(objects: tuple[Object, ...], service: str, tmp_path: Path) -> config_module.Config:
    """What `config.load` makes of the container's environment (the ConfigMap, then `env`)."""
    container = _service_container(objects, service)
    data = dict(_configmap(objects)["data"])
    for ref in container.get("envFrom", []):
        assert ref["configMapRef"]["name"].startswith("buraco-config")
    for name, entry in env(container).items():
        if "value" in entry:
            data[name] = entry["value"]
    # Values that come from Secrets and mounted files in the cluster.
    assert "secretKeyRef" in env(container)["BURACO_DATABASE_URL"]["valueFrom"]
    data["BURACO_DATABASE_URL"] = "postgresql://buraco@db.example:5432/buraco"
    keys = tmp_path / "keys.pem"
    keys.write_text("")
    for name in ("BURACO_JWT_PUBLIC_KEYS", "BURACO_JWT_PRIVATE_KEY"):
        if name in data:
            data[name] = str(keys)
    return config_module.load(service, _with_mounted_tls_files(data, tmp_path))


def _with_mounted_tls_files(data: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``data`` with its TLS files (mounted from the certificate's Secret in the cluster) made here."""
    for name in ("BURACO_TLS_CERT_FILE", "BURACO_TLS_KEY_FILE", "BURACO_TLS_CA_FILE", "BURACO_TLS_CLIENT_CA_FILE"):
        if data.get(name):
            mounted = tmp_path / Path(data[name]).name
            mounted.write_text("")
            data[name] = str(mounted)
    return data


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("service", SERVICES)
def test_every_service_is_deployed_probed_and_configured(overlay: str, service: str, tmp_path: Path) -> None:
    objects = render(overlay)
    name = k8s_name(service)
    defaults = config_module.load(service, {})
    container = _service_container(objects, service)
    assert container["command"] == ["python", "-m", f"services.{service}"]
    assert container.get("args", []) in ([], ["serve"])

    # Ports: the defaults of services/common/config.py, and what the service reads from its env.
    ports = _ports(container)
    assert ports == {"grpc": defaults.port, "metrics": defaults.metrics_port, "health": defaults.health_port}, service
    effective = _effective_config(objects, service, tmp_path)
    assert (effective.port, effective.metrics_port, effective.health_port) == (
        defaults.port, defaults.metrics_port, defaults.health_port)
    assert effective.env == "production" and effective.host == "0.0.0.0" and effective.metrics_enabled
    assert not effective.migrate_on_start  # the migration Job does it, before the release
    assert effective.database_schema == service

    # Native gRPC probes on the plaintext probe port (the service's port may be TLS only): readiness
    # and liveness are different checks (services/common/server.py), and liveness waits far longer
    # than readiness, so a busy or draining replica leaves the rotation without being restarted.
    for probe, check in (("startupProbe", "readiness"), ("readinessProbe", "readiness"),
                         ("livenessProbe", "liveness")):
        assert container[probe]["grpc"] == {"port": defaults.health_port, "service": check}, f"{service} {probe}"
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert ready["timeoutSeconds"] * ready["failureThreshold"] < 10
    assert live["periodSeconds"] * live["failureThreshold"] >= 60 and live["timeoutSeconds"] >= 10

    # The Service and the headless Service in front of the pods.
    template_labels = workload(objects, service)["spec"]["template"]["metadata"]["labels"]
    for service_name in (name, f"{name}-headless"):
        svc = one(objects, "Service", service_name)
        assert labels_match(svc["spec"]["selector"], template_labels)
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(defaults.port, "grpc")]
    assert one(objects, "Service", f"{name}-headless")["spec"]["clusterIP"] == "None"
    # The others reach it through the headless Service, round robin over its replicas.
    address = _configmap(objects)["data"][f"BURACO_{service.upper()}_ADDRESS"]
    assert address == f"dns:///{name}-headless:{defaults.port}"

    # Its own ServiceAccount, an autoscaler that owns the replica count, a disruption budget.
    spec = workload(objects, service)["spec"]
    assert spec["template"]["spec"]["serviceAccountName"] == name
    assert one(objects, "ServiceAccount", name)["automountServiceAccountToken"] is False
    assert "replicas" not in spec, f"{service}: the HorizontalPodAutoscaler owns the replica count"
    hpa = one(objects, "HorizontalPodAutoscaler", name)
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == (workload(objects, service)["kind"], name)
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    pdb = one(objects, "PodDisruptionBudget", name)
    assert labels_match(pdb["spec"]["selector"]["matchLabels"], template_labels)
    assert labels_match(one(objects, "NetworkPolicy", name)["spec"]["podSelector"]["matchLabels"], template_labels)

    # A service that calls others signs its calls: its own private key, from a Secret.
    if service in ("matchmaking", "game_session", "tournament"):
        assert effective.addresses and env(container)["BURACO_JWT_PRIVATE_KEY"]["value"].startswith(
            "/etc/buraco/jwt-private/"
        )
        volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
        assert volumes["jwt-private"]["secret"]["secretName"] == f"buraco-jwt-{name}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_locked_down_and_bounded(overlay: str) -> None:
    objects = render(overlay)
    pods = list(pod_specs(objects))
    assert len(pods) == len(SERVICES) + 3  # the services, the gateway, the migration Job, the wallet audit
    for label, pod in pods:
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] > 0, label
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, label
        assert pod["automountServiceAccountToken"] is False, label
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), label
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        assert not any("hostPath" in v for v in volumes.values()), label
        for container in containers(pod):
            where = f"{label} {container['name']}"
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context.get("privileged", False) is False, where
            assert context["capabilities"]["drop"] == ["ALL"] and not context["capabilities"].get("add"), where
            resources = container["resources"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[kind]), f"{where}: {kind}"
            # The only writable path: /tmp, an emptyDir of bounded size.
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]] and volumes[mounts["/tmp"]]["emptyDir"]["sizeLimit"], where
            for path, volume in mounts.items():
                if path != "/tmp":
                    assert "secret" in volumes[volume], f"{where}: {path} should be a read-only Secret"
            image = container["image"]
            assert re.fullmatch(r"[\w./-]*buraco:[\w.-]+", image) and not image.endswith(":latest"), where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_is_deployed_probed_and_configured(overlay: str, tmp_path: Path) -> None:
    from services.gateway import service as gateway_service

    objects = render(overlay)
    deployment = workload(objects, EDGE)
    container = _service_container(objects, EDGE)
    assert container["command"] == ["python", "-m", "services.gateway"]
    data = dict(_configmap(objects)["data"])
    data |= {name: entry["value"] for name, entry in env(container).items() if "value" in entry}
    keys = tmp_path / "keys.pem"
    keys.write_text("")
    data |= {"BURACO_JWT_PUBLIC_KEYS": str(keys), "BURACO_JWT_PRIVATE_KEY": str(keys)}
    # production's rules hold: oidc, no `*` origin
    config, settings = gateway_service.load(_with_mounted_tls_files(data, tmp_path))
    assert config.env == "production" and config.host == "0.0.0.0" and settings.sign_in == "oidc"
    assert _ports(container) == {"http": settings.port, "metrics": config.metrics_port}
    for name in ("game_session", "wallet", "matchmaking", "ranking", "tournament"):
        assert config.addresses[name].startswith("dns:///"), name
    # HTTP probes: liveness on /healthz, readiness on /readyz (503 while it stops).
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["buraco.io/gateway"] == "true"  # the services admit it
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["jwt-private"]["secret"]["secretName"] == "buraco-jwt-gateway"
    svc = one(objects, "Service", "gateway")
    assert labels_match(svc["spec"]["selector"], template["metadata"]["labels"])
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["http"]
    assert "replicas" not in deployment["spec"]
    assert one(objects, "HorizontalPodAutoscaler", "gateway")["spec"]["minReplicas"] >= 1
    assert labels_match(one(objects, "PodDisruptionBudget", "gateway")["spec"]["selector"]["matchLabels"],
                        template["metadata"]["labels"])
    # Its network policy: HTTP from anywhere (the edge), and calls to every service.
    policy = one(objects, "NetworkPolicy", "gateway")["spec"]
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": "http"}]}]
    callees = {(r["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], r["ports"][0]["port"])
               for r in policy["egress"]}
    assert callees == {(k8s_name(s), p) for s, p in config_module.DEFAULT_PORTS.items()}
    # The namespace admits gateways, its own included.
    (namespace,) = find(objects, "Namespace")
    assert namespace["metadata"]["labels"]["buraco.io/gateways"] == "true"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_value_is_committed(overlay: str) -> None:
    objects = render(overlay)
    for secret in find(objects, "Secret"):
        assert not secret.get("data") and not secret.get("stringData"), secret["metadata"]["name"]
    for key, value in _configmap(objects)["data"].items():
        assert not re.search(r"PASSWORD|SECRET|TOKEN", key), key
        assert "-----BEGIN" not in value and not re.search(r"://[^/\s]*:[^/\s]*@", value), key
    # Every Secret the pods use is named in docs/operations.md, which says how to create it.
    operations = (ROOT / "docs" / "operations.md").read_text()
    referenced: set[str] = set()
    for label, pod in pod_specs(objects):
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                referenced.add(volume["secret"]["secretName"])
        for container in containers(pod):
            for name, entry in env(container).items():
                source = entry.get("valueFrom", {})
                if "secretKeyRef" in source:
                    referenced.add(source["secretKeyRef"]["name"])
                if re.search(r"URL|PASSWORD|SECRET|TOKEN", name):
                    assert "value" not in entry, f"{label}: {name} must come from a Secret"
    assert referenced >= {f"buraco-db-{k8s_name(s)}" for s in SERVICES} | {"buraco-jwt-public-keys"}
    undocumented = sorted(name for name in referenced if f"`{name}`" not in operations)
    assert not undocumented, f"docs/operations.md does not say how to create {undocumented}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_migration_job_migrates_every_service_before_a_release(overlay: str) -> None:
    objects = render(overlay)
    job = one(objects, "Job", "buraco-migrate")
    assert job["metadata"]["labels"]["buraco.io/release-step"] == "migrate"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    migrated: dict[str, Object] = {}
    for container in containers(pod):
        command = [*container["command"], *container.get("args", [])]
        match = re.fullmatch(r"services\.(\w+)", command[2]) if command[:2] == ["python", "-m"] else None
        assert match and command[3:] == ["migrate"], command
        assert match.group(1) not in migrated
        migrated[match.group(1)] = container
    assert sorted(migrated) == SERVICES
    for service, container in migrated.items():
        # The same database and schema as the service itself.
        served = env(_service_container(objects, service))
        assert env(container)["BURACO_DATABASE_URL"] == served["BURACO_DATABASE_URL"], service
        assert env(container)["BURACO_DATABASE_SCHEMA"] == served["BURACO_DATABASE_SCHEMA"], service
    # What the Job needs is applied with it, before the rest (deploy/release.sh).
    first = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if o["metadata"].get("labels", {}).get("buraco.io/release-step") == "migrate"
    }
    (namespace,) = find(objects, "Namespace")
    assert {
        ("Namespace", namespace["metadata"]["name"]),
        ("ConfigMap", _configmap(objects)["metadata"]["name"]),
        ("ServiceAccount", pod["serviceAccountName"]),
        ("NetworkPolicy", "buraco-default-deny"),
        ("NetworkPolicy", "buraco-allow-dns"),
        ("NetworkPolicy", "buraco-allow-postgresql"),
        ("Job", "buraco-migrate"),
    } == first


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_game_sessions_advertise_their_stable_names(overlay: str) -> None:
    objects = render(overlay)
    statefulset = one(objects, "StatefulSet", "game-session")
    headless = one(objects, "Service", statefulset["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    port = config_module.DEFAULT_PORTS["game_session"]
    namespace = statefulset["metadata"]["namespace"]
    variables = env(_service_container(objects, "game_session"))
    order = list(variables)
    advertise = "BURACO_GAME_SESSION_ADVERTISE_ADDRESS"
    # $(VAR) expands only variables defined before it, as the kubelet does.
    value = variables[advertise]["value"]
    for variable in re.findall(r"\$\((\w+)\)", value):
        assert order.index(variable) < order.index(advertise), variable
    assert variables["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert variables["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    expanded = (
        value.replace("$(POD_NAME)", "game-session-0")
        .replace("$(POD_NAMESPACE)", namespace)
        .replace("$(CLUSTER_DOMAIN)", variables["CLUSTER_DOMAIN"]["value"])
    )
    assert expanded == f"game-session-0.{headless['metadata']['name']}.{namespace}.svc.cluster.local:{port}"


def _call_graph() -> dict[str, set[str]]:
    """caller -> callees, from the README's who-calls-whom table (the gateways' row aside)."""
    names = {
        "matchmaking": "matchmaking",
        "game sessions": "game-session",
        "wallet": "wallet",
        "ranking": "ranking",
        "tournaments": "tournament",
    }
    graph: dict[str, set[str]] = {name: set() for name in names.values()}
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| ([a-z ,]+) \| ([a-z ,]+) \| .* \| .* \|$", readme, re.M)
    assert rows, "the README's who-calls-whom table was not found"
    for caller, callees in rows:
        if caller in names and callees != "nobody":
            graph[names[caller]] |= {names[c.strip()] for c in callees.split(",")}
    assert graph["matchmaking"] == {"ranking", "wallet", "game-session"}  # the table was read
    return graph


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_follow_the_call_graph(overlay: str) -> None:
    objects = render(overlay)
    graph = _call_graph()
    ports = {k8s_name(s): p for s, p in config_module.DEFAULT_PORTS.items()}
    deny = one(objects, "NetworkPolicy", "buraco-default-deny")
    assert deny["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/part-of": "buraco"}
    assert sorted(deny["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    for name in graph:
        policy = one(objects, "NetworkPolicy", name)["spec"]
        (ingress,) = policy["ingress"]
        assert ingress["ports"] == [{"protocol": "TCP", "port": "grpc"}]
        callers, gateways = set(), 0
        for peer in ingress["from"]:
            if "namespaceSelector" in peer:
                assert peer["namespaceSelector"] == {"matchLabels": {"buraco.io/gateways": "true"}}
                assert peer["podSelector"] == {"matchLabels": {"buraco.io/gateway": "true"}}
                gateways += 1
            else:
                callers.add(peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"])
        assert gateways == 1, f"{name}: the gateways reach every public service"
        assert callers == {c for c, callees in graph.items() if name in callees}, name
        callees = {
            (rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], rule["ports"][0]["port"])
            for rule in policy.get("egress", [])
        }
        assert callees == {(c, ports[c]) for c in graph[name]}, name
        assert ("Egress" in policy["policyTypes"]) == bool(graph[name])
    scrape = one(objects, "NetworkPolicy", "buraco-allow-metrics-scrape")["spec"]
    assert scrape["ingress"][0]["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    postgres = one(objects, "NetworkPolicy", "buraco-allow-postgresql")["spec"]
    assert postgres["egress"][0]["ports"] == [{"protocol": "TCP", "port": 5432}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_has_its_namespace_under_restricted_pod_security(overlay: str) -> None:
    objects = render(overlay)
    (namespace,) = find(objects, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for o in objects:
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == namespace["metadata"]["name"], o["metadata"]["name"]
            assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "buraco", o["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_reference_resolves(overlay: str) -> None:
    # The kubelet expands $(VAR) from envFrom and from the variables listed before; anything else
    # stays as the literal text "$(VAR)".
    objects = render(overlay)
    shared = set(_configmap(objects)["data"])
    for label, pod in pod_specs(objects):
        for container in containers(pod):
            known = set(shared) if container.get("envFrom") else set()
            for entry in container.get("env", []):
                for variable in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                    assert variable in known, f"{label} {container['name']}: {entry['name']} uses $({variable})"
                known.add(entry["name"])


# -- TLS (prod: cert-manager) ---------------------------------------------------------------------------

def _tls_files(objects: tuple[Object, ...], process: str) -> dict[str, str]:
    """The TLS settings of a process's container, each checked to be a file of its mounted certificate."""
    container = next(c for c in workload(objects, process)["spec"]["template"]["spec"]["containers"]
                     if c["name"] == k8s_name(process))
    pod = workload(objects, process)["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == f"{k8s_name(process)}-tls"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    assert mount["readOnly"] is True
    settings = {name: entry["value"] for name, entry in env(container).items() if name.startswith("BURACO_TLS_")}
    # cert-manager writes tls.crt, tls.key and ca.crt into the certificate's Secret
    for value in settings.values():
        folder, file = value.rsplit("/", 1)
        assert folder == mount["mountPath"] and file in ("tls.crt", "tls.key", "ca.crt"), value
    return settings


def test_prod_turns_mutual_tls_on_with_certificates_from_cert_manager() -> None:
    objects = render("prod")
    # the chain: a self-signed issuer signs the suite's CA, whose issuer signs every workload's certificate
    assert one(objects, "Issuer", "buraco-selfsigned")["spec"] == {"selfSigned": {}}
    ca = one(objects, "Certificate", "buraco-ca")["spec"]
    assert ca["isCA"] is True and ca["issuerRef"] == {"name": "buraco-selfsigned", "kind": "Issuer"}
    assert one(objects, "Issuer", "buraco-ca")["spec"] == {"ca": {"secretName": ca["secretName"]}}
    addresses = _configmap(objects)["data"]
    for process in (*SERVICES, EDGE):
        name = k8s_name(process)
        certificate = one(objects, "Certificate", f"{name}-tls")["spec"]
        assert certificate["secretName"] == f"{name}-tls"
        assert certificate["issuerRef"] == {"name": "buraco-ca", "kind": "Issuer"}
        assert {"server auth", "client auth"} <= set(certificate["usages"])
        assert certificate["renewBefore"] and certificate["privateKey"]["rotationPolicy"] == "Always"
        files = _tls_files(objects, process)
        assert files["BURACO_TLS_CA_FILE"].endswith("/ca.crt")  # verifies whom it calls
        assert files["BURACO_TLS_CERT_FILE"].endswith("/tls.crt")
        assert files["BURACO_TLS_KEY_FILE"].endswith("/tls.key")
        if process == EDGE:
            assert "BURACO_TLS_CLIENT_CA_FILE" not in files  # it serves HTTP behind the ingress
            continue
        assert files["BURACO_TLS_CLIENT_CA_FILE"].endswith("/ca.crt")  # mutual TLS
        # the certificate names what its callers verify: the host of the service's address (the
        # headless Service, also the name a table's owner is verified by) and the Service itself
        host = host_of(addresses[f"BURACO_{process.upper()}_ADDRESS"])
        assert host is not None and host in certificate["dnsNames"] and name in certificate["dnsNames"]


def test_dev_stays_plaintext() -> None:
    objects = render("dev")
    assert not find(objects, "Certificate")
    for process in (*SERVICES, EDGE):
        for container in workload(objects, process)["spec"]["template"]["spec"]["containers"]:
            assert not [n for n in env(container) if n.startswith("BURACO_TLS_")]
