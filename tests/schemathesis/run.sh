#!/usr/bin/env bash
# Fuzzes a live node's HTTP API against the OpenAPI document it serves.
#
# Starts one `hookraft serve` on a free loopback port (state in a temporary
# directory, an API token), seeds an endpoint, a source and a few events so
# listings and reads have something to show, then runs Schemathesis against
# http://127.0.0.1:PORT/openapi.json with the token. Any 5xx, any response
# whose status, content type, headers or body the document does not allow,
# and any request the document calls invalid that the node accepts, fails
# the run (the checks are listed below). Bounded by --max-examples to a few
# minutes on two cores; the node is stopped on the way out.
#
# Schemathesis comes from PyPI, pinned, into a virtualenv under target/.
# Uses target/debug/hookraft (built if missing); HOOKRAFT_BIN overrides.
# Set SCHEMATHESIS_MAX_EXAMPLES to go deeper by hand.
#
# Nothing leaves the machine: hooks.py points every endpoint `url` the
# fuzzer sends at a closed loopback port, and the node and the fuzzer run
# in a network namespace of their own (only loopback) when `unshare -n`
# is allowed, as it is for root.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../.."

SCHEMATHESIS_VERSION=4.32.5
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-100}
venv=target/schemathesis-venv
bin=${HOOKRAFT_BIN:-target/debug/hookraft}

if [ "${1:-}" != --isolated ]; then
    if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "version $SCHEMATHESIS_VERSION"; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
    fi
    if [ ! -x "$bin" ]; then
        cargo build -p hookraft --locked
    fi
    if command -v unshare > /dev/null && command -v ip > /dev/null && unshare -n true 2> /dev/null; then
        exec unshare -n -- "$self" --isolated
    fi
    echo "no network namespace here (unshare -n not allowed): fuzzing with hooks.py's url rewrite alone"
else
    ip link set lo up
fi
export SCHEMATHESIS_HOOKS=tests/schemathesis/hooks.py

work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
base=http://127.0.0.1:$port

# Private targets allowed: the seeded endpoint points at a closed loopback
# port, so its deliveries fail and their timelines fill with attempts and
# retries for the fuzzer to read. No --cluster-secret: adding a node is
# refused (409) at once instead of waiting on a node that never comes.
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/data" --api-token "$token" \
    --allow-private-targets > "$work/node.log" 2>&1 &
node=$!
stop() {
    kill "$node" 2>/dev/null || true
    wait "$node" 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT

deadline=$((SECONDS + 60))
until curl -fsS "$base/readyz" > /dev/null 2>&1; do
    if ! kill -0 "$node" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
        echo "the node did not become ready; its log:"
        tail -n 40 "$work/node.log"
        exit 1
    fi
    sleep 0.2
done

api() {
    curl -fsS -X "$1" "$base$2" -H "authorization: Bearer $token" -H 'content-type: application/json' \
        ${3:+--data "$3"} > /dev/null
}
api POST /v1/endpoints '{"url": "http://127.0.0.1:9/hook", "ordering": "per_key",
    "retry": {"attempts_max": 2, "base_ms": 10, "cap_ms": 20}}'
api POST /v1/sources '{"scheme": "github", "secret": "seed-secret", "entity_key": "/id", "version": "/v"}'
for i in 1 2 3; do
    api POST /v1/events "{\"type\": \"order.created\", \"payload\": {\"n\": $i}, \"ordering_key\": \"k$i\"}"
done
api POST /v1/events/batch '{"events": [{"type": "user.created", "payload": [1, "two"], "idempotency_key": "seed"}]}'

# Every check but two:
# - not_a_server_error: no 5xx;
# - status_code_conformance, content_type_conformance, response_headers_conformance,
#   response_schema_conformance: every answer is one the document lists;
# - negative_data_rejection, missing_required_header: what the document calls
#   invalid is refused;
# - unsupported_method, allow_header_conformance: a method a route does not
#   take is a 405 with `Allow`;
# - ignored_auth: the token is required where the document says;
# - use_after_free, ensure_resource_availability: what was deleted is gone,
#   what was created can be read.
# Left out: positive_data_acceptance, because a request valid by the schema
# may be refused on purpose by rules no schema states (a URL to a private
# address, an id that names nothing, `on_dead` without `ordering: per_key`,
# a secret that is not base64); object_level_authorization, because there is
# one token and one tenant.
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance
checks=$checks,response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method
checks=${SCHEMATHESIS_CHECKS:-$checks,allow_header_conformance,ignored_auth,use_after_free,ensure_resource_availability}

# One worker: with two, Hypothesis' cache of lambda sources races and
# reports its own errors as failed operations; one also keeps a seed's run
# the same. The health checks left out judge the generator's speed on a
# busy machine, not the API.
started=$SECONDS
status=0
"$venv/bin/schemathesis" run "$base/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks "$checks" \
    --max-examples "$max_examples" \
    --seed "${SCHEMATHESIS_SEED:-33}" \
    --workers "${SCHEMATHESIS_WORKERS:-1}" \
    --request-timeout 30 \
    --suppress-health-check too_slow,filter_too_much \
    --warnings off \
    --report junit --report-dir "$work/report" || status=$?
echo "schemathesis: exit $status after $((SECONDS - started)) s"
if [ "$status" -ne 0 ]; then
    echo "---- node log (last 40 lines) ----"
    tail -n 40 "$work/node.log"
fi
exit "$status"
