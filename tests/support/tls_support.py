"""A self-signed certificate and key for the TLS tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def self_signed(folder, name: str = "server") -> tuple[str, str]:
    """A fresh self-signed certificate for 127.0.0.1 and its key (openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
    return str(cert), str(key)

