"""Schemathesis hooks for tests/schemathesis/run.sh.

An endpoint's `url` is where the node sends deliveries. A fuzzer choosing
it freely would have the node call whatever address it made up, so every
`url` in a request body is replaced before the request is sent: by a
loopback port where nothing listens when the case is meant to be valid, by
text that is no URL when it is meant to be refused (either way the case
keeps what it tests). run.sh also runs everything in a network namespace of
its own when it can, so nothing leaves the machine even without this.
"""

import schemathesis

LOOPBACK_TARGET = "http://127.0.0.1:9/fuzz"
NOT_A_URL = "not a url"


def _negative(case):
    meta = getattr(case, "meta", None)
    return meta is not None and meta.generation.mode.is_negative


def _rewrite(value, replacement):
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "url" and isinstance(inner, str):
                value[key] = replacement
            else:
                _rewrite(inner, replacement)
    elif isinstance(value, list):
        for inner in value:
            _rewrite(inner, replacement)


@schemathesis.hook
def before_call(context, case, kwargs):
    _rewrite(case.body, NOT_A_URL if _negative(case) else LOOPBACK_TARGET)
