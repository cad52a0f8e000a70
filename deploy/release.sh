#!/usr/bin/env bash
# Release the suite to the cluster of the current kubectl context, in order (docs/operations.md,
# "Deploying a release"):
#   1. render the overlay (kubectl kustomize);
#   2. apply what the migrations need (label buraco.io/release-step=migrate: the namespace, the
#      shared configuration, the base network policies, the migration Job), after deleting the
#      previous release's Job (a Job's pod template cannot change in place);
#   3. wait for the Job: every service's `python -m services.<service> migrate`, in one pod;
#      stop here if it fails (the running version is untouched; its log says why);
#   4. apply everything: the services roll to the new image (game sessions one pod at a time);
#   5. wait for every rollout.
#
#   deploy/release.sh deploy/k8s/overlays/prod              # release
#   deploy/release.sh deploy/k8s/overlays/prod --dry-run    # only ask the API server (dry run)
#
# KUBECTL (default kubectl), MIGRATION_TIMEOUT (seconds, default 1800) and ROLLOUT_TIMEOUT
# (default 15m) adjust it.
set -euo pipefail

overlay=${1:?usage: deploy/release.sh OVERLAY_DIR [--dry-run]}
mode=${2:-}
kubectl=${KUBECTL:-kubectl}
migration_timeout=${MIGRATION_TIMEOUT:-1800}
rollout_timeout=${ROLLOUT_TIMEOUT:-15m}
dry_run=()
if [[ "$mode" == "--dry-run" ]]; then
    dry_run=(--dry-run=server)
elif [[ -n "$mode" ]]; then
    echo "release: unknown option $mode" >&2
    exit 2
fi

manifest=$(mktemp)
trap 'rm -f "$manifest"' EXIT
"$kubectl" kustomize "$overlay" >"$manifest"
namespace=$(awk '/^kind: Namespace$/ { found = 1 } found && /^  name: / { print $2; exit }' "$manifest")
if [[ -z "$namespace" ]]; then
    echo "release: $overlay renders no Namespace" >&2
    exit 2
fi
echo "release: $overlay into namespace $namespace"

if [[ ${#dry_run[@]} -eq 0 ]]; then
    "$kubectl" -n "$namespace" delete job buraco-migrate --ignore-not-found --wait=true 2>/dev/null || true
fi
"$kubectl" apply "${dry_run[@]}" -l buraco.io/release-step=migrate -f "$manifest"

if [[ ${#dry_run[@]} -eq 0 ]]; then
    echo "release: waiting for the migrations (up to ${migration_timeout} s)"
    deadline=$((SECONDS + migration_timeout))
    while true; do
        conditions=$("$kubectl" -n "$namespace" get job buraco-migrate \
            -o jsonpath='{.status.conditions[?(@.status=="True")].type}')
        if [[ " $conditions " == *" Complete "* ]]; then
            echo "release: migrations done"
            break
        fi
        if [[ " $conditions " == *" Failed "* ]] || ((SECONDS > deadline)); then
            echo "release: the migrations did not finish ($conditions); nothing else was changed" >&2
            "$kubectl" -n "$namespace" logs job/buraco-migrate --all-containers --tail=50 >&2 || true
            exit 1
        fi
        sleep 5
    done
fi

"$kubectl" apply "${dry_run[@]}" -f "$manifest"

if [[ ${#dry_run[@]} -eq 0 ]]; then
    for workload in $("$kubectl" -n "$namespace" get deployment,statefulset \
        -l app.kubernetes.io/part-of=buraco -o name); do
        "$kubectl" -n "$namespace" rollout status "$workload" --timeout="$rollout_timeout"
    done
    echo "release: done"
fi
