"""How a worker checks who it talks to over TLS: a CA bundle, or the pinned certificate itself.

The coordinator (``coordinator.tls_certfile``/``tls_keyfile``) and every relay
(``--relay-certfile``/``--relay-keyfile``) can serve TLS (:class:`echo2.net.serving.BackgroundServer`).
A worker then verifies each server in one of two ways:

* ``--ca-file BUNDLE`` — the usual chain-of-trust check against a CA bundle, host name included;
* ``--pin-sha256 HEX`` (repeatable) — the server's certificate must *be* one of these (SHA-256 of
  its DER bytes, what ``openssl x509 -noout -fingerprint -sha256`` prints, colons optional). For
  self-signed setups: no CA, no host names, and nothing a CA could be tricked into issuing.

Neither: the system's trust store (httpx's default). A server that fails the check is refused
with :class:`ssl.SSLCertVerificationError` during the handshake, before a request (and the
credential in its header) is sent.
"""

from __future__ import annotations

import hashlib
import re
import ssl
from pathlib import Path

_HEX = re.compile(r"[0-9a-f]{64}")


def normalize_pin(pin: str) -> str:
    """``pin`` as 64 lower-case hex digits (colons and spaces dropped); ValueError when it is not
    a SHA-256 fingerprint."""
    clean = re.sub(r"[:\s]", "", pin).lower()
    if not _HEX.fullmatch(clean):
        raise ValueError(f"{pin!r} is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
    return clean


def certificate_fingerprint(certfile: str | Path) -> str:
    """SHA-256 (hex) of the first certificate in the PEM file ``certfile``: what to pin."""
    text = Path(certfile).read_text()
    match = re.search(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", text, re.DOTALL)
    if match is None:
        raise ValueError(f"{certfile} holds no PEM certificate")
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(match.group(0))).hexdigest()


class _PinnedSocket(ssl.SSLSocket):
    def do_handshake(self, block: bool = False) -> None:
        super().do_handshake(block)
        _check_pin(self.getpeercert(binary_form=True), self.context, self.server_hostname)


class _PinnedObject(ssl.SSLObject):
    def do_handshake(self) -> None:
        super().do_handshake()
        _check_pin(self.getpeercert(binary_form=True), self.context, self.server_hostname)


def _check_pin(der: bytes | None, context: ssl.SSLContext, host: str | None) -> None:
    pins: frozenset[str] = getattr(context, "echo2_pins", frozenset())
    seen = hashlib.sha256(der).hexdigest() if der else "none"
    if seen not in pins:
        raise ssl.SSLCertVerificationError(
            f"certificate pin mismatch: {host or 'the server'} presented a certificate with SHA-256 {seen}, "
            f"not the pinned {', '.join(sorted(pins))} (--pin-sha256)")


class PinnedContext(ssl.SSLContext):
    """A client context that trusts exactly the certificates whose SHA-256 is in ``echo2_pins``
    (no CA chain, no host name: the pin says which certificate, and so which key, to expect)."""

    sslsocket_class = _PinnedSocket
    sslobject_class = _PinnedObject
    echo2_pins: frozenset[str]


def client_context(ca_file: str | None = None, pins: tuple[str, ...] | list[str] = ()) -> ssl.SSLContext | bool:
    """What a worker's HTTP clients verify servers with (httpx's ``verify``): the pins, else the CA
    bundle, else True (the system's trust store)."""
    if ca_file is not None and pins:
        raise ValueError("give a CA bundle or certificate pins, not both")
    if pins:
        context = PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the pin check replaces the chain check
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.echo2_pins = frozenset(normalize_pin(pin) for pin in pins)
        return context
    if ca_file is not None:
        try:
            return ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as error:
            raise ValueError(f"cannot load the CA bundle {ca_file}: {error}") from None
    return True


def verification_failure(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate check that failed somewhere in ``error``'s chain of causes, if one did."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ssl.SSLCertVerificationError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
