"""End-to-end tests of the GCS emulator harness in ``tests/gcs_emulator.py``.

TensorFlow reads its GCS settings (proxy, CA bundle, credentials) from the
environment once, the first time it touches a ``gs://`` path. So every
TensorFlow check here runs in a *subprocess* started with ``gcs.env()``; the
pytest process itself never imports TensorFlow and its ``os.environ`` is never
changed.

Each TensorFlow subprocess prints one JSON line as its last line of output;
the test reads it back and makes its assertions in the pytest process.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid

import pytest
from google.api_core import exceptions as gcs_exceptions

from gcs_emulator import ALLOWED_CONNECT_TARGETS, EmulatorError, GcsEmulator

# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcs():
    """One emulator for the whole module (starting one takes ~0.1 s, but the
    TensorFlow subprocesses dominate anyway); tests use their own buckets."""
    with GcsEmulator() as emulator:
        yield emulator


@pytest.fixture
def bucket_name(gcs) -> str:
    """A fresh, empty bucket for one test; also clears the proxy's logs."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    gcs.create_bucket(name)
    gcs.reset_logs()
    return name


def run_python(gcs: GcsEmulator, script: str, *args: str, timeout: float = 180) -> dict:
    """Run ``script`` in a fresh Python with the emulator environment.

    Returns the JSON object the script printed on its last stdout line.
    """
    env = gcs.env()
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # hide TensorFlow's C++ INFO/WARNING logs
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        pytest.fail(
            f"subprocess failed with exit code {result.returncode}\n"
            f"--- stdout ---\n{result.stdout[-3000:]}\n"
            f"--- stderr ---\n{result.stderr[-6000:]}\n"
            f"--- proxy errors ---\n{gcs.proxy_errors()}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def big_payload() -> bytes:
    """~1.25 MiB of deterministic bytes: more than 1 MiB, so libcurl sends
    ``Expect: 100-continue`` and the upload is a sizeable resumable PUT."""
    return bytes(range(256)) * (5 * 1024 + 3)


def tfrecord_payloads(data: bytes) -> list[bytes]:
    """Split a TFRecord file into its records.

    Each record is: 8-byte little-endian length, 4-byte CRC of the length,
    the data, 4-byte CRC of the data. (CRCs are not checked here;
    TensorFlow checked them when it read the file back.)
    """
    records, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        records.append(data[offset + 12 : offset + 12 + length])
        offset += 12 + length + 4
    assert offset == len(data), "trailing bytes after the last record"
    return records


# ---------------------------------------------------------------------------
# TensorFlow end to end
# ---------------------------------------------------------------------------

TF_ROUNDTRIP_SCRIPT = r"""
import json, sys
import tensorflow as tf

bucket = sys.argv[1]
root = f"gs://{bucket}/run"
big = bytes(range(256)) * (5 * 1024 + 3)
out = {}

tf.io.gfile.makedirs(f"{root}/shards")

# Write-then-rename, as a shard writer does to publish a finished file.
with tf.io.gfile.GFile(f"{root}/shards/small.txt.tmp", "wb") as f:
    f.write(b"hello gcs\n")
tf.io.gfile.rename(f"{root}/shards/small.txt.tmp", f"{root}/shards/small.txt")
out["tmp_exists_after_rename"] = tf.io.gfile.exists(f"{root}/shards/small.txt.tmp")

with tf.io.gfile.GFile(f"{root}/shards/big.bin", "wb") as f:
    f.write(big)
with tf.io.gfile.GFile(f"{root}/shards/big.bin", "rb") as f:
    out["big_read_back_ok"] = f.read() == big

with tf.io.gfile.GFile(f"{root}/shards/delete-me", "wb") as f:
    f.write(b"x")
tf.io.gfile.remove(f"{root}/shards/delete-me")
out["removed_exists"] = tf.io.gfile.exists(f"{root}/shards/delete-me")

out["glob"] = sorted(tf.io.gfile.glob(f"{root}/shards/*"))
out["small_exists"] = tf.io.gfile.exists(f"{root}/shards/small.txt")
out["dir_exists"] = tf.io.gfile.isdir(f"{root}/shards")

records = [b"first", b"", b"third record " * 100]
with tf.io.TFRecordWriter(f"{root}/data.tfrecord") as writer:
    for record in records:
        writer.write(record)
read_back = [r.numpy() for r in tf.data.TFRecordDataset(f"{root}/data.tfrecord")]
out["tfrecord_ok"] = read_back == records

# The Python client in the same subprocess must reach the emulator from the
# environment alone (STORAGE_EMULATOR_HOST, GOOGLE_CLOUD_PROJECT).
from google.cloud import storage
client = storage.Client()
out["client_project"] = client.project
out["client_reads_small"] = (
    client.bucket(bucket).blob("run/shards/small.txt").download_as_bytes().decode()
)

print(json.dumps(out))
"""


def test_tensorflow_gfile_and_tfrecord_roundtrip(gcs, bucket_name):
    out = run_python(gcs, TF_ROUNDTRIP_SCRIPT, bucket_name)

    prefix = f"gs://{bucket_name}/run/shards"
    assert out == {
        "tmp_exists_after_rename": False,
        "big_read_back_ok": True,
        "removed_exists": False,
        "glob": [f"{prefix}/big.bin", f"{prefix}/small.txt"],
        "small_exists": True,
        "dir_exists": True,
        "tfrecord_ok": True,
        "client_project": "test",
        "client_reads_small": "hello gcs\n",
    }

    # Check from the pytest process, with the Python client, what TF stored.
    bucket = gcs.client().bucket(bucket_name)
    names = {blob.name for blob in gcs.client().list_blobs(bucket_name)}
    assert names == {
        "run/",  # tf.io.gfile.makedirs creates empty "directory marker" objects
        "run/shards/",
        "run/shards/small.txt",
        "run/shards/big.bin",
        "run/data.tfrecord",
    }
    assert bucket.blob("run/shards/small.txt").download_as_bytes() == b"hello gcs\n"
    assert bucket.blob("run/shards/big.bin").download_as_bytes() == big_payload()
    tfrecord = bucket.blob("run/data.tfrecord").download_as_bytes()
    assert tfrecord_payloads(tfrecord) == [b"first", b"", b"third record " * 100]

    # Only the two Google storage hosts were contacted, and all went well.
    assert gcs.contacted_hosts() == set(ALLOWED_CONNECT_TARGETS)
    assert gcs.refused_connects() == []
    assert gcs.proxy_errors() == []

    requests = gcs.forwarded_requests()
    # TensorFlow opens one TLS connection per request; keep the count modest.
    assert len(requests) < 100, len(requests)
    assert len(gcs.connect_attempts()) == len(requests)
    # Every upload is resumable: a POST that returns a session URL (rewritten
    # by the proxy), then a PUT of the bytes to that URL, through the proxy.
    big_put = [r for r in requests if r.method == "PUT" and "big.bin" in r.path]
    assert len(big_put) == 1 and "upload_id=" in big_put[0].path
    assert big_put[0].request_bytes == len(big_payload())
    assert big_put[0].status == 200
    # Reads go to storage.googleapis.com/BUCKET/OBJECT.
    assert any(
        r.host == "storage.googleapis.com" and r.path.startswith(f"/{bucket_name}/")
        for r in requests
    )


TF_MISSING_SCRIPT = r"""
import json, os, sys, threading, time
import tensorflow as tf

bucket = sys.argv[1]
out = {}

def attempt(label, action):
    try:
        out[label] = ["ok", repr(action())]
    except Exception as error:
        out[label] = [type(error).__name__, str(error)]

def write(path):
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(b"x")

def read(path):
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()

attempt("write_missing_bucket", lambda: write("gs://no-such-bucket-x/file"))
attempt("exists_missing_bucket", lambda: tf.io.gfile.exists("gs://no-such-bucket-x/file"))
attempt("exists_missing_bucket_root", lambda: tf.io.gfile.exists("gs://no-such-bucket-x"))
attempt("exists_existing_bucket_root", lambda: tf.io.gfile.exists(f"gs://{bucket}"))
attempt("glob_missing_bucket", lambda: tf.io.gfile.glob("gs://no-such-bucket-x/*"))
attempt("read_missing_object", lambda: read(f"gs://{bucket}/missing"))
attempt("tfrecord_missing_object",
        lambda: list(tf.data.TFRecordDataset(f"gs://{bucket}/missing")))
attempt("exists_missing_object", lambda: tf.io.gfile.exists(f"gs://{bucket}/missing"))
attempt("remove_missing_object", lambda: tf.io.gfile.remove(f"gs://{bucket}/missing"))

# Known TensorFlow bug: makedirs in a bucket that does not exist never
# returns; it asks for the bucket (404) again and again. Watch it for a
# moment in a thread, then leave without waiting for it.
worker = threading.Thread(
    target=tf.io.gfile.makedirs, args=("gs://no-such-bucket-x/dir",), daemon=True)
worker.start()
worker.join(timeout=2.0)
out["makedirs_missing_bucket_still_running"] = worker.is_alive()

print(json.dumps(out), flush=True)
os._exit(0)  # don't wait for the looping makedirs thread
"""


def test_missing_bucket_and_object_errors(gcs, bucket_name):
    out = run_python(gcs, TF_MISSING_SCRIPT, bucket_name)

    # TensorFlow: NotFoundError (a tf.errors.OpError) for writes and reads.
    kind, message = out["write_missing_bucket"]
    assert kind == "NotFoundError"
    assert "HTTP response code 404" in message
    assert "when initiating an upload to gs://no-such-bucket-x/file" in message

    assert out["exists_missing_bucket"] == ["ok", "False"]
    # How to check a bucket before makedirs (see the hang below).
    assert out["exists_missing_bucket_root"] == ["ok", "False"]
    assert out["exists_existing_bucket_root"] == ["ok", "True"]
    kind, message = out["glob_missing_bucket"]
    assert kind == "NotFoundError" and "404" in message

    kind, message = out["read_missing_object"]
    assert kind == "NotFoundError"
    assert f"The specified path gs://{bucket_name}/missing was not found." in message

    kind, message = out["tfrecord_missing_object"]
    assert kind == "NotFoundError"
    assert "HTTP response code 404" in message
    assert f"when reading gs://{bucket_name}/missing" in message

    assert out["exists_missing_object"] == ["ok", "False"]
    kind, message = out["remove_missing_object"]
    assert kind == "NotFoundError" and f"when deleting gs://{bucket_name}/missing" in message

    # The hang: the pipeline must check a bucket exists before makedirs.
    assert out["makedirs_missing_bucket_still_running"] is True

    # google-cloud-storage: NotFound (HTTP 404) once a request is made.
    client = gcs.client()
    with pytest.raises(gcs_exceptions.NotFound):
        client.get_bucket("no-such-bucket-x")
    assert client.lookup_bucket("no-such-bucket-x") is None
    assert client.bucket("no-such-bucket-x").exists() is False
    with pytest.raises(gcs_exceptions.NotFound):
        client.bucket(bucket_name).blob("missing").download_as_bytes()
    with pytest.raises(gcs_exceptions.NotFound):
        client.bucket("no-such-bucket-x").blob("file").upload_from_string(b"x")
    assert client.bucket(bucket_name).get_blob("missing") is None

    assert gcs.refused_connects() == []


# ---------------------------------------------------------------------------
# The proxy on its own (fast: no TensorFlow)
# ---------------------------------------------------------------------------


def _proxy_request(gcs: GcsEmulator, raw_request: bytes) -> bytes:
    """Send raw bytes to the proxy and return everything it answers."""
    with socket.create_connection(("127.0.0.1", gcs.proxy.port), timeout=10) as sock:
        sock.sendall(raw_request)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


def test_proxy_refuses_and_records_other_hosts(gcs):
    gcs.reset_logs()

    answer = _proxy_request(gcs, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    # Right name, wrong port: refused too.
    answer = _proxy_request(gcs, b"CONNECT www.googleapis.com:80 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    # Plain-HTTP proxying is not offered at all.
    answer = _proxy_request(gcs, b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405 ")

    assert gcs.refused_connects() == [
        "example.com:443",
        "www.googleapis.com:80",
        "GET http://example.com/",
    ]
    assert "example.com:443" in gcs.contacted_hosts()
    assert not gcs.contacted_hosts() & ALLOWED_CONNECT_TARGETS


def _tunnel(gcs: GcsEmulator, host: str) -> http.client.HTTPSConnection:
    """An HTTPS connection to ``host`` through the proxy, trusting the test CA."""
    context = ssl.create_default_context(cafile=str(gcs.ca_cert))
    connection = http.client.HTTPSConnection("127.0.0.1", gcs.proxy.port, context=context, timeout=10)
    connection.set_tunnel(host, 443)
    return connection


def test_proxy_keep_alive_chunked_bodies_and_rewrites(gcs, bucket_name):
    """Exercise the proxy the way TensorFlow does, but with http.client."""
    api = _tunnel(gcs, "www.googleapis.com")
    upload = f"/upload/storage/v1/b/{bucket_name}/o"

    # 1. A chunked request body (TensorFlow uses Content-Length, other
    #    clients may not).
    pieces = [b"chunked ", b"upload ", b"body"]
    api.request("POST", f"{upload}?uploadType=media&name=chunked.txt", body=iter(pieces),
                encode_chunked=True)
    response = api.getresponse()
    response.read()
    assert response.status == 200

    # 2. TensorFlow's empty POST with "Transfer-Encoding: identity" on the
    #    same TLS connection (keep-alive): starts a resumable upload.
    api.request("POST", f"{upload}?uploadType=resumable&name=resumable.bin", body=b"",
                headers={"Content-Length": "0", "Transfer-Encoding": "identity"})
    response = api.getresponse()
    response.read()
    assert response.status == 200
    session_url = response.getheader("Location")
    assert session_url.startswith("https://www.googleapis.com/upload/"), session_url

    # 3. PUT the bytes to the session URL, still on the same connection,
    #    with "Expect: 100-continue" as libcurl sends for large bodies.
    body = big_payload()
    api.request("PUT", session_url.removeprefix("https://www.googleapis.com"), body=body,
                headers={"Content-Range": f"bytes 0-{len(body) - 1}/{len(body)}",
                         "Expect": "100-continue"})
    response = api.getresponse()
    response.read()
    assert response.status == 200
    api.close()

    # 4. Download through the other host name, as TensorFlow reads objects.
    downloads = _tunnel(gcs, "storage.googleapis.com")
    downloads.request("GET", f"/{bucket_name}/chunked.txt")
    response = downloads.getresponse()
    assert (response.status, response.read()) == (200, b"chunked upload body")
    downloads.request("HEAD", f"/{bucket_name}/resumable.bin")
    response = downloads.getresponse()
    response.read()
    assert response.status == 200
    assert int(response.getheader("Content-Length")) == len(body)
    downloads.close()

    bucket = gcs.client().bucket(bucket_name)
    assert bucket.blob("resumable.bin").download_as_bytes() == body
    # Five requests over two TLS connections: keep-alive worked.
    assert [a.target for a in gcs.connect_attempts()] == [
        "www.googleapis.com:443",
        "storage.googleapis.com:443",
    ]
    assert len(gcs.forwarded_requests()) == 5
    assert gcs.proxy_errors() == []


def test_proxy_holds_back_each_read_by_its_read_delay(gcs, bucket_name):
    """read_delay (benchmarks/input_pipeline.py's stand-in for Cloud Storage's latency) is drawn once per GET, and
    the GET is answered no sooner; other requests are not held back."""
    gcs.client().bucket(bucket_name).blob("shard").upload_from_string(b"records")
    draws = []
    gcs.proxy.read_delay = lambda: draws.append(0.2) or 0.2
    try:
        downloads = _tunnel(gcs, "storage.googleapis.com")
        start = time.monotonic()
        downloads.request("GET", f"/{bucket_name}/shard")
        response = downloads.getresponse()
        assert (response.status, response.read()) == (200, b"records")
        waited = time.monotonic() - start
        downloads.request("HEAD", f"/{bucket_name}/shard")
        downloads.getresponse().read()
        downloads.close()
    finally:
        gcs.proxy.read_delay = None
    assert draws == [0.2] and waited >= 0.2


def test_untrusted_client_is_reported(gcs):
    """A client that doesn't trust the test CA fails the handshake, and the
    proxy says why (the usual cause: CURL_CA_BUNDLE not set)."""
    gcs.reset_logs()
    connection = http.client.HTTPSConnection(
        "127.0.0.1", gcs.proxy.port, context=ssl.create_default_context(cafile=None), timeout=10
    )
    connection.set_tunnel("www.googleapis.com", 443)
    with pytest.raises(ssl.SSLCertVerificationError):
        connection.request("GET", "/storage/v1/b")
    connection.close()
    # The proxy notices the failed handshake in its own thread; give it a moment.
    for _ in range(50):
        if gcs.proxy_errors():
            break
        time.sleep(0.02)
    assert any("CURL_CA_BUNDLE" in error for error in gcs.proxy_errors())


# ---------------------------------------------------------------------------
# Environment and lifecycle
# ---------------------------------------------------------------------------


def test_env_for_subprocesses(gcs):
    before = dict(os.environ)
    env = gcs.env({"PATH": "/bin", "GOOGLE_APPLICATION_CREDENTIALS": "/real/key.json",
                   "http_proxy": "http://elsewhere:3128"})

    assert "GOOGLE_APPLICATION_CREDENTIALS" not in env
    assert "http_proxy" not in env
    assert env["PATH"] == "/bin"
    assert env["https_proxy"] == env["HTTPS_PROXY"] == gcs.proxy_url
    assert env["CURL_CA_BUNDLE"] == str(gcs.ca_cert) and gcs.ca_cert.is_file()
    assert env["NO_GCE_CHECK"] == "true"
    assert os.listdir(env["CLOUDSDK_CONFIG"]) == []
    assert env["STORAGE_EMULATOR_HOST"] == gcs.endpoint
    assert env["GOOGLE_CLOUD_PROJECT"] == "test"
    assert dict(os.environ) == before, "env() must not touch os.environ"
    assert gcs.env()["PATH"] == os.environ["PATH"]


def test_missing_binary_gives_clear_error(tmp_path):
    emulator = GcsEmulator(binary=tmp_path / "no-such-binary")
    with pytest.raises(EmulatorError, match="cannot run"):
        emulator.start()
    with pytest.raises(EmulatorError, match="not running"):
        emulator.env()


def test_stop_kills_the_server():
    emulator = GcsEmulator().start()
    pid, port, proxy_port = emulator.pid, emulator.port, emulator.proxy.port
    emulator.stop()
    emulator.stop()  # idempotent
    # The server was waited for (reaped), so its pid no longer exists.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    for closed_port in (port, proxy_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", closed_port), timeout=1)
