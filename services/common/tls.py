"""TLS for the gRPC servers and for the calls between services (docs/operations.md, "TLS").

Server: with BURACO_TLS_CERT_FILE and BURACO_TLS_KEY_FILE, the service's port serves TLS only.
With BURACO_TLS_CLIENT_CA_FILE as well, a client must present a certificate signed by one of those
CAs (mutual TLS), or its handshake fails. Calls between services carry tokens either way; TLS
keeps them and the cards private on the wire, mutual TLS also keeps unknown peers off the port.

Client: with BURACO_TLS_CA_FILE, every channel to another service is TLS: the server's certificate
must chain to that bundle and name the host of the address called (for a table's owner, reached
at its pod address, the host of the game-session address: its certificate names the service, not
the pod). With a certificate and key configured, they are presented as the client certificate.

Rotation without a restart: the files are watched (their size and modification time, at most every
BURACO_TLS_RELOAD_SECONDS). The server swaps its certificate for the next handshake (gRPC asks
`ServerTls.fetch` before each one); clients make new channels for later calls, and the old ones
close once their calls end. A set of files that does not load (a half-written file, a key that is
not the certificate's) is logged and the previous set stays in use: a bad renewal never takes a
serving replica down. At start, files that do not load are an error (the process exits 2).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

log = logging.getLogger("buraco.tls")


class TlsError(ValueError):
    """Certificate files that cannot serve: unreadable, not PEM, or a key that is not the certificate's."""


@dataclass(frozen=True)
class TlsSettings:
    """The TLS files of one process (all optional; see the module's docstring)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    ca_file: Path | None = None  # verifies the services this process calls
    client_ca_file: Path | None = None  # the client certificates this server requires
    reload_seconds: float = 10.0

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise TlsError("BURACO_TLS_CERT_FILE and BURACO_TLS_KEY_FILE go together: set both or neither")
        if self.client_ca_file is not None and self.cert_file is None:
            raise TlsError("BURACO_TLS_CLIENT_CA_FILE asks for mutual TLS: set BURACO_TLS_CERT_FILE and "
                           "BURACO_TLS_KEY_FILE too")

    @property
    def serves_tls(self) -> bool:
        return self.cert_file is not None

    @property
    def calls_tls(self) -> bool:
        return self.ca_file is not None


def _stamp(paths: tuple[Path, ...]) -> tuple[tuple[int, int], ...]:
    """What changes when a file is rewritten or replaced (Kubernetes swaps a symlink)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise TlsError(f"{path}: cannot be read ({e.strerror or e})") from None


def load_pair(cert_file: Path, key_file: Path) -> tuple[bytes, bytes, datetime]:
    """The key and certificate chain (PEM) of a pair that goes together, and the certificate's end
    of validity; TlsError when they do not load or do not match."""
    chain, key = _read(cert_file), _read(key_file)
    try:
        certificate = x509.load_pem_x509_certificates(chain)[0]
    except ValueError:
        raise TlsError(f"{cert_file}: not a PEM certificate chain") from None
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError):
        raise TlsError(f"{key_file}: not an unencrypted PEM private key") from None
    raw = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(*raw) != certificate.public_key().public_bytes(*raw):
        raise TlsError(f"{key_file} is not the key of the certificate in {cert_file}")
    return key, chain, certificate.not_valid_after_utc


def load_bundle(path: Path) -> bytes:
    """A CA bundle (PEM); TlsError when it holds no certificate."""
    data = _read(path)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsError(f"{path}: not a PEM bundle of CA certificates") from None
    return data


def _log_loaded(what: str, cert_file: Path, expires: datetime) -> None:
    days = (expires - datetime.now(UTC)).total_seconds() / 86400
    log.info(what, extra={"fields": {"certificate": str(cert_file), "expires": expires.isoformat(),
                                     "days_left": round(days, 1)}})


class ServerTls:
    """The server's credentials, swapped for the next handshake when its files change."""

    def __init__(self, settings: TlsSettings, clock: Callable[[], float] = time.monotonic) -> None:
        assert settings.cert_file is not None and settings.key_file is not None
        self.settings = settings
        self._paths = tuple(p for p in (settings.cert_file, settings.key_file, settings.client_ca_file) if p)
        self._clock = clock
        self._stamp = _stamp(self._paths)
        self._next_check = clock() + settings.reload_seconds
        self._initial = self._configuration()  # raises TlsError: the process does not start
        #: Certificate sets loaded after the first (tests, logs).
        self.reloads = 0

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        s = self.settings
        assert s.cert_file is not None and s.key_file is not None
        key, chain, expires = load_pair(s.cert_file, s.key_file)
        roots = load_bundle(s.client_ca_file) if s.client_ca_file is not None else None
        _log_loaded("tls certificate loaded", s.cert_file, expires)
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=roots)

    def credentials(self) -> grpc.ServerCredentials:
        # gRPC documents None from the fetcher as "keep the current configuration"; grpc-stubs omit it
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self.fetch,  # type: ignore[arg-type]
            require_client_authentication=self.settings.client_ca_file is not None,
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC before each handshake: a new configuration when the files changed (checked
        at most every `reload_seconds`), else None (keep the current one)."""
        now = self._clock()
        if now < self._next_check:
            return None
        self._next_check = now + self.settings.reload_seconds
        stamp = _stamp(self._paths)
        if stamp == self._stamp:
            return None
        try:
            configuration = self._configuration()
        except TlsError as e:
            log.error("tls certificate not reloaded: the previous one stays in use",
                      extra={"fields": {"error": str(e)}})
            return None  # the stamp is kept: the files are tried again at the next check
        self._stamp = stamp
        self.reloads += 1
        return configuration


class ClientTls:
    """The credentials of calls to other services; `version` changes when its files change, and
    callers then make new channels."""

    def __init__(self, settings: TlsSettings, clock: Callable[[], float] = time.monotonic) -> None:
        assert settings.ca_file is not None
        self.settings = settings
        self._paths = tuple(p for p in (settings.ca_file, settings.cert_file, settings.key_file) if p)
        self._clock = clock
        self._stamp = _stamp(self._paths)
        self._next_check = clock() + settings.reload_seconds
        self._credentials = self._load()  # raises TlsError: the process does not start
        self.version = 0

    def _load(self) -> grpc.ChannelCredentials:
        s = self.settings
        assert s.ca_file is not None
        roots = load_bundle(s.ca_file)
        if s.cert_file is None or s.key_file is None:
            return grpc.ssl_channel_credentials(root_certificates=roots)
        key, chain, _ = load_pair(s.cert_file, s.key_file)
        return grpc.ssl_channel_credentials(root_certificates=roots, private_key=key, certificate_chain=chain)

    def current(self) -> tuple[int, grpc.ChannelCredentials]:
        """The credentials for new channels and their version (checked for a change at most every
        `reload_seconds`)."""
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self.settings.reload_seconds
            stamp = _stamp(self._paths)
            if stamp != self._stamp:
                try:
                    self._credentials = self._load()
                    self._stamp = stamp
                    self.version += 1
                    log.info("tls client credentials reloaded")
                except TlsError as e:
                    log.error("tls client credentials not reloaded: the previous ones stay in use",
                              extra={"fields": {"error": str(e)}})
        return self.version, self._credentials


def host_of(target: str) -> str | None:
    """The host a certificate must name for a gRPC target: `wallet-headless` for
    `dns:///wallet-headless:50053` or `wallet-headless:50053`; None for a list of addresses."""
    if target.startswith(("ipv4:", "ipv6:", "unix:")):
        return None
    if target.startswith("dns:"):
        target = target[4:].lstrip("/")
        if "/" in target:  # dns://authority/name:port
            target = target.split("/", 1)[1]
    if target.startswith("["):  # [::1]:50053
        return target[1:].split("]", 1)[0]
    return target.rsplit(":", 1)[0] if ":" in target else target
