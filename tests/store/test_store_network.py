"""A store on the network that cannot be reached fails with TensorStore's reason in a
bounded time (jaxattn's retry budget, `kvstore.REMOTE_RETRIES`), never hangs through
TensorStore's own quarter of an hour of retries. No network: the GCS driver is pointed
at a loopback port nothing listens on (TensorStore's TENSORSTORE_GCS_HTTP_URL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from jaxattn.store import kvstore

# The budget shrunk so the test takes a second; the test's timeout is far below
# TensorStore's default budget, so a context left without it fails the test.
SCRIPT = textwrap.dedent(
    """
    import sys
    import jaxattn
    from jaxattn.errors import CaptureFileError
    from jaxattn.store import kvstore

    kvstore.REMOTE_RETRIES = {"max_retries": 2, "initial_delay": "0.05s", "max_delay": "0.1s"}
    try:
        jaxattn.open_store("gs://jaxattn-test-bucket/ewt.zarr")
    except CaptureFileError as e:
        print(e)
    """
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_gcs_store_fails_with_the_reason_in_bounded_time():
    env = {**os.environ, "TENSORSTORE_GCS_HTTP_URL": f"http://127.0.0.1:{_closed_port()}"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    message = done.stdout.strip()
    assert message.startswith(
        "cannot read zarr.json in the store at gs://jaxattn-test-bucket/ewt.zarr:"
    )
    assert "retry attempts failed" in message, message
    assert "\n" not in message


def test_every_network_driver_gets_the_bounded_retries():
    spec = kvstore.store_context(cache_pool={"total_bytes_limit": 1 << 20}).spec.to_json()
    for resource in ("gcs_request_retries", "s3_request_retries", "http_request_retries"):
        for key in ("max_retries", "max_delay"):  # (initial_delay 1 s is the default: unsaid)
            assert spec[resource][key] == kvstore.REMOTE_RETRIES[key], (resource, spec)
    assert spec["cache_pool"] == {"total_bytes_limit": 1 << 20}
