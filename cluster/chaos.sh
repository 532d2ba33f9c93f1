#!/usr/bin/env bash
# The chaos run: builds the image, starts the docker-compose cluster under its
# own project name and host ports, runs `hookraft-chaos` against it (faults:
# kill, pause, network disconnect of each node in turn, under continuous
# ingest), saves the containers' logs, and tears everything down (volumes too).
#
#   cluster/chaos.sh                      # the full run (about 4-6 minutes after the build)
#   cluster/chaos.sh --rate 50 --faults kill   # extra flags go to hookraft-chaos (see --help)
#
# Environment:
#   HOOKRAFT_CHAOS_PORT_BASE  host ports base+1..base+3 for the nodes (default 18080)
#   HOOKRAFT_CHAOS_LOGS       where the containers' logs are saved (default target/chaos)
# Exit status: hookraft-chaos's (0 pass, 1 correctness, 2 liveness, 3 harness).
set -euo pipefail
cd "$(dirname "$0")/.."

# Its own project, ports and secrets: it never touches a `docker-compose up`
# of the same folder running on the default ports.
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-hookraftchaos}"
base="${HOOKRAFT_CHAOS_PORT_BASE:-18080}"
export HOOKRAFT_NODE1_PORT=$((base + 1)) HOOKRAFT_NODE2_PORT=$((base + 2)) HOOKRAFT_NODE3_PORT=$((base + 3))
export HOOKRAFT_API_TOKEN="${HOOKRAFT_API_TOKEN:-chaos-api-token-7d41e9}"
export HOOKRAFT_CLUSTER_SECRET="${HOOKRAFT_CLUSTER_SECRET:-chaos-cluster-secret-0f6b2d81a9c4e735}"
export HOOKRAFT_ADMIN_TOKEN="${HOOKRAFT_ADMIN_TOKEN:-chaos-admin-token-93c5a0}"
logs="${HOOKRAFT_CHAOS_LOGS:-target/chaos}"

compose() {
    if command -v docker-compose >/dev/null; then
        docker-compose -f docker-compose.yml "$@"
    else
        docker compose -f docker-compose.yml "$@"
    fi
}

echo "== building the image and hookraft-chaos"
cluster/build-image.sh
cargo build --release -p hookraft-tests --bin hookraft-chaos

teardown() {
    local status=$?
    mkdir -p "$logs"
    compose logs --no-color --timestamps >"$logs/compose.log" 2>&1 || true
    echo "== containers' logs saved in $logs/compose.log"
    if ((status != 0)); then
        echo "== the last lines of each node's log"
        for service in node1 node2 node3; do
            echo "-- $service"
            compose logs --no-color --tail 40 "$service" 2>&1 || true
        done
    fi
    echo "== docker-compose down -v"
    compose down -v --remove-orphans || true
    exit "$status"
}
trap teardown EXIT

echo "== docker-compose up -d (project $COMPOSE_PROJECT_NAME, ports $HOOKRAFT_NODE1_PORT..$HOOKRAFT_NODE3_PORT)"
compose down -v --remove-orphans >/dev/null 2>&1 || true
compose up -d node1 node2 node3

containers="$(for service in node1 node2 node3; do compose ps -q "$service"; done | paste -sd, -)"
nodes="127.0.0.1:$HOOKRAFT_NODE1_PORT,127.0.0.1:$HOOKRAFT_NODE2_PORT,127.0.0.1:$HOOKRAFT_NODE3_PORT"

echo "== waiting for /healthz on $nodes"
for node in ${nodes//,/ }; do
    deadline=$((SECONDS + 60))
    until curl -sf -m 2 -o /dev/null "http://$node/healthz"; do
        ((SECONDS < deadline)) || { echo "error: $node/healthz did not answer within 60s" >&2; exit 3; }
        sleep 0.5
    done
done

echo "== hookraft-chaos (it waits until the cluster is whole before injecting faults)"
target/release/hookraft-chaos --nodes "$nodes" --containers "$containers" "$@"
