#!/usr/bin/env bash
# The dashboard in a real browser: headless Chromium from the distribution's
# packages, driven by Playwright for Python, against a three-node cluster on
# loopback that the test starts and stops itself (tests/browser/harness.py).
#
#   tests/browser/run.sh            # screenshots to docs/screenshots/
#
# Needs target/debug/hookraft (the README's test command builds it; built
# here when missing). Installs what it lacks: the chromium package (with
# apt-get, as root) and a virtualenv with the pinned Playwright in
# target/browser-venv. Playwright never downloads a browser: it is pointed
# at the system's. Environment: HOOKRAFT_BIN, CHROMIUM, SCREENSHOTS override
# the binary, the browser and where the screenshots go.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${HOOKRAFT_BIN:-target/debug/hookraft}"
if [[ ! -x "$bin" ]]; then
    echo "== $bin missing: cargo build -p hookraft"
    cargo build -p hookraft --locked
fi

chromium="${CHROMIUM:-$(command -v chromium || true)}"
if [[ -z "$chromium" ]]; then
    if [[ "$(id -u)" != 0 ]]; then
        echo "error: no chromium; install the distribution's package (apt-get install chromium) or set CHROMIUM" >&2
        exit 1
    fi
    echo "== apt-get install chromium"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    chromium="$(command -v chromium)"
fi

venv=target/browser-venv
requirements=tests/browser/requirements.txt
if ! cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null; then
    echo "== virtualenv $venv with $(grep -v '^#' "$requirements" | tr '\n' ' ')"
    rm -rf "$venv"
    python3 -m venv "$venv"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
fi

echo "== browser test ($("$chromium" --version 2>/dev/null | head -n 1))"
"$venv/bin/python" tests/browser/dashboard_test.py "$bin" "$chromium" "${SCREENSHOTS:-docs/screenshots}"
