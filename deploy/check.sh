#!/usr/bin/env bash
# `make deploy-check`: render every Kustomize overlay, validate the result offline against the
# Kubernetes schemas (kubernetes-validate --strict, with its bundled schemas, for the oldest and
# newest Kubernetes versions supported), and lint the YAML, the Dockerfile, the scripts and the
# Grafana dashboard. Tools come from the virtual environment (requirements-dev.txt, pinned).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-.venv/bin}
out=${OUT:-build/deploy}
versions=${K8S_VERSIONS:-1.31.0 1.37.0}
# Custom resources have no bundled schema: tests/deploy checks them (the Prometheus Operator's,
# and cert-manager's in the prod overlay).
custom='kind ((PodMonitor|PrometheusRule) with api version monitoring\.coreos\.com/v1|(Issuer|Certificate) with api version cert-manager\.io/v1) '

mkdir -p "$out"
# the overlays, and the load-test Jobs (deploy/k8s/loadtest and its cleanup, each applied on its own)
for dir in deploy/k8s/overlays/*/ deploy/k8s/loadtest/ deploy/k8s/loadtest/cleanup/; do
    overlay=$(basename "$dir")
    "$bin/kubectl" kustomize "$dir" >"$out/$overlay.yaml"
    objects=$(grep -c '^kind: ' "$out/$overlay.yaml")
    for version in $versions; do
        if ! report=$("$bin/kubernetes-validate" --strict --quiet -k "$version" "$out/$overlay.yaml" 2>&1); then
            grep -E '^(WARN|ERROR|FATAL)' <<<"$report" >&2 || echo "$report" >&2
            echo "deploy-check: $overlay is not valid for Kubernetes $version" >&2
            exit 1
        fi
        unexpected=$(grep -E '^(WARN|ERROR|FATAL)' <<<"$report" | grep -vE "$custom" || true)
        if [[ -n "$unexpected" ]]; then
            echo "$unexpected" >&2
            echo "deploy-check: $overlay: objects that could not be validated for Kubernetes $version" >&2
            exit 1
        fi
        echo "deploy-check: $overlay: $objects objects valid for Kubernetes $version (strict)"
    done
done
"$bin/yamllint" --strict -c deploy/.yamllint.yaml deploy
echo "deploy-check: yamllint ok"
"$bin/hadolint" deploy/Dockerfile
echo "deploy-check: hadolint ok"
"$bin/shellcheck" deploy/*.sh
echo "deploy-check: shellcheck ok"
for dashboard in deploy/grafana/*.json; do
    "$bin/python" -m json.tool "$dashboard" >/dev/null
done
echo "deploy-check: dashboards are JSON"
