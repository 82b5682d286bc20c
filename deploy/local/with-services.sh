#!/usr/bin/env bash
# Run a command with a real Kafka broker, a real PostgreSQL, a real kube-apiserver (with etcd) and a
# real Slurm (slurmctld, slurmd, slurmrestd) started for it, then stop them.
#
#   deploy/local/with-services.sh COMMAND [ARGS...]
#
# Both run on free 127.0.0.1 ports with their data in a fresh temporary folder, so parallel runs do
# not collide. The command sees FEDSCHED_TEST_KAFKA (host:port), FEDSCHED_TEST_POSTGRES (a DSN) and
# FEDSCHED_TEST_KUBE_KUBECONFIG (an admin kubeconfig; kube.sh builds the API server once, cached),
# FEDSCHED_TEST_SLURM_URL (slurmrestd's http URL) and FEDSCHED_TEST_SLURM_TOKEN_FILE (its JWT; slurm.sh
# installs Debian's Slurm packages once, as root).
# PYTHON names the interpreter that has the project installed (default: python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
state="$(mktemp -d "${TMPDIR:-/tmp}/fedsched-services.XXXXXX")"

cleanup() {
    local rc=$?
    bash "$here/kafka.sh" stop "$state/kafka" >/dev/null 2>&1 || true
    "$PYTHON" "$here/postgres.py" stop "$state/postgres" >/dev/null 2>&1 || true
    bash "$here/kube.sh" stop "$state/kube" >/dev/null 2>&1 || true
    bash "$here/slurm.sh" stop "$state/slurm" >/dev/null 2>&1 || true
    rm -rf "$state"
    exit "$rc"
}
trap cleanup EXIT INT TERM

echo "with-services: starting Kafka ${KAFKA_VERSION:-3.9.2} and PostgreSQL in $state" >&2
kafka_started=$(date +%s)
FEDSCHED_TEST_KAFKA="$(bash "$here/kafka.sh" start "$state/kafka" | tail -n 1)"
pg_started=$(date +%s)
FEDSCHED_TEST_POSTGRES="$("$PYTHON" "$here/postgres.py" start "$state/postgres" | tail -n 1)"
done_at=$(date +%s)
echo "with-services: Kafka at $FEDSCHED_TEST_KAFKA ($((pg_started - kafka_started)) s)," \
     "PostgreSQL at $FEDSCHED_TEST_POSTGRES ($((done_at - pg_started)) s)" >&2
export FEDSCHED_TEST_KAFKA FEDSCHED_TEST_POSTGRES

bash "$here/kube.sh" build
kube_started=$(date +%s)
bash "$here/kube.sh" start "$state/kube" >/dev/null
FEDSCHED_TEST_KUBE_KUBECONFIG="$state/kube/kubeconfig"
echo "with-services: kube-apiserver at $(cat "$state/kube/server") ($(($(date +%s) - kube_started)) s)" >&2
export FEDSCHED_TEST_KUBE_KUBECONFIG

bash "$here/slurm.sh" install
slurm_started=$(date +%s)
bash "$here/slurm.sh" start "$state/slurm" >/dev/null
FEDSCHED_TEST_SLURM_URL="$(cat "$state/slurm/url")"
FEDSCHED_TEST_SLURM_TOKEN_FILE="$state/slurm/token"
echo "with-services: Slurm at $FEDSCHED_TEST_SLURM_URL ($(($(date +%s) - slurm_started)) s)" >&2
export FEDSCHED_TEST_SLURM_URL FEDSCHED_TEST_SLURM_TOKEN_FILE

"$@"
