#!/usr/bin/env bash
# Runs a three-node hookraft cluster on loopback (127.0.0.1:7101..7103), one
# process per node configured by cluster/nodeN.env, data and logs under
# ./cluster-data/.
#
#   cluster/run-local.sh          # build if needed, start, wait until every node is ready
#   cluster/run-local.sh status   # which nodes run, which are ready
#   cluster/run-local.sh stop     # SIGTERM each node (SIGKILL after 15 s), via its pid file
#
# Environment:
#   HOOKRAFT_BIN             use this binary, skip cargo (default: build target/release/hookraft)
#   HOOKRAFT_READY_TIMEOUT_S how long to wait for /readyz on each node (default 90)
set -euo pipefail
cd "$(dirname "$0")/.."

nodes=(1 2 3)
data=cluster-data
ready_timeout_s="${HOOKRAFT_READY_TIMEOUT_S:-90}"
stop_timeout_s=15

# The value of one variable from a node's env file.
env_of() {
    local node="$1" name="$2"
    (set -a; . "cluster/node$node.env"; set +a; printf '%s' "${!name:-}")
}

pid_file() { echo "$data/node$1.pid"; }

# The pid of a running node started by this script, or nothing.
running_pid() {
    local file pid
    file="$(pid_file "$1")"
    [[ -f "$file" ]] || return 0
    pid="$(cat "$file")"
    # Only a live process that is a hookraft node: a stale file may name a reused pid.
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "hookraft"; then
        echo "$pid"
    fi
}

is_ready() { curl -sf -m 2 -o /dev/null "http://$(env_of "$1" HOOKRAFT_LISTEN)/readyz"; }

start() {
    command -v curl >/dev/null || { echo "error: curl is needed to wait for readiness" >&2; exit 1; }
    local bin="${HOOKRAFT_BIN:-}"
    if [[ -z "$bin" ]]; then
        echo "== cargo build --release -p hookraft"
        cargo build --release -p hookraft
        bin=target/release/hookraft
    fi
    [[ -x "$bin" ]] || { echo "error: no executable at $bin" >&2; exit 1; }
    bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
    mkdir -p "$data"

    for n in "${nodes[@]}"; do
        local pid
        pid="$(running_pid "$n")"
        if [[ -n "$pid" ]]; then
            echo "node $n already running (pid $pid)"
            continue
        fi
        echo "starting node $n on $(env_of "$n" HOOKRAFT_LISTEN), log $data/node$n.log"
        (set -a; . "cluster/node$n.env"; set +a; exec "$bin" serve) >>"$data/node$n.log" 2>&1 &
        echo $! >"$(pid_file "$n")"
    done

    echo "waiting up to ${ready_timeout_s}s for /readyz on every node"
    local deadline=$((SECONDS + ready_timeout_s))
    for n in "${nodes[@]}"; do
        until is_ready "$n"; do
            if [[ -z "$(running_pid "$n")" ]]; then
                echo "error: node $n exited; the end of $data/node$n.log:" >&2
                tail -n 20 "$data/node$n.log" >&2
                exit 1
            fi
            if ((SECONDS >= deadline)); then
                echo "error: node $n not ready after ${ready_timeout_s}s; the end of $data/node$n.log:" >&2
                tail -n 20 "$data/node$n.log" >&2
                exit 1
            fi
            sleep 0.5
        done
        echo "node $n ready"
    done
    cat <<EOF

cluster running: http://127.0.0.1:7101, http://127.0.0.1:7102, http://127.0.0.1:7103
  curl -s 127.0.0.1:7101/v1/cluster
  $bin cluster status --node 127.0.0.1:7101
logs:  $data/node1.log, $data/node2.log, $data/node3.log
stop:  cluster/run-local.sh stop        (data stays in $data/; rm -rf $data to start afresh)
EOF
}

stop() {
    for n in "${nodes[@]}"; do
        local pid
        pid="$(running_pid "$n")"
        if [[ -z "$pid" ]]; then
            echo "node $n not running"
            rm -f "$(pid_file "$n")"
            continue
        fi
        kill -TERM "$pid"
        local deadline=$((SECONDS + stop_timeout_s))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "node $n (pid $pid) still running after ${stop_timeout_s}s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        else
            echo "node $n (pid $pid) stopped"
        fi
        rm -f "$(pid_file "$n")"
    done
}

status() {
    for n in "${nodes[@]}"; do
        local pid state
        pid="$(running_pid "$n")"
        if [[ -z "$pid" ]]; then
            state="not running"
        elif is_ready "$n"; then
            state="running (pid $pid), ready"
        else
            state="running (pid $pid), not ready"
        fi
        echo "node $n on $(env_of "$n" HOOKRAFT_LISTEN): $state"
    done
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac
