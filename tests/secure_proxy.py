"""A real TLS + HTTP basic-auth endpoint in front of a node, for the tests: nginx (Debian's
nginx-light, installed by scripts/setup.sh) with a CA and a server certificate made per test
session. The OpenSearch security plugin is not on Maven Central, so this stands where a
secured cluster's front door would."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import shutil
import socket
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from waiting import wait_until

USER = "lr-tester"
PASSWORD = "S3cret-pw-Zq8"  # unusual enough to grep for in every output


@dataclass(frozen=True)
class SecureEndpoint:
    url: str  # https://127.0.0.1:PORT
    ca: Path  # the CA that signed the server certificate
    wrong_ca: Path  # a CA that did not
    user: str
    password: str
    upstream: str


def _cert_pair(out: Path, name: str) -> tuple[Path, Path, object, object]:
    """A self-signed CA: (cert path, key path, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = out / f"{name}.pem", out / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path, cert, key


def _server_cert(out: Path, ca_cert: object, ca_key: object) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    cert_path, key_path = out / "server.pem", out / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def nginx_binary() -> str | None:
    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file()
                                     else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_proxy(root: Path, upstream: str) -> tuple[SecureEndpoint, subprocess.Popen[bytes]]:
    """Write the certificates, the password file and nginx.conf under ``root``; start nginx
    in the foreground (the caller stops the process). Raises RuntimeError when it cannot."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed (scripts/setup.sh installs Debian's "
                           "nginx-light; or: apt-get install nginx-light)")
    root.mkdir(parents=True, exist_ok=True)
    for sub in ("logs", "tmp"):
        (root / sub).mkdir(exist_ok=True)
    ca, _, ca_cert, ca_key = _cert_pair(root, "ca")
    wrong_ca, *_ = _cert_pair(root, "other-ca")
    cert, key = _server_cert(root, ca_cert, ca_key)
    digest = base64.b64encode(hashlib.sha1(PASSWORD.encode()).digest()).decode()
    (root / "htpasswd").write_text(f"{USER}:{{SHA}}{digest}\n")
    port = _free_port()
    up = urllib.parse.urlsplit(upstream)
    user_line = "user root;" if os.geteuid() == 0 else ""
    (root / "nginx.conf").write_text(f"""
{user_line}
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {root}/tmp/body;
  proxy_temp_path {root}/tmp/proxy;
  fastcgi_temp_path {root}/tmp/fastcgi;
  uwsgi_temp_path {root}/tmp/uwsgi;
  scgi_temp_path {root}/tmp/scgi;
  client_max_body_size 200m;
  upstream cluster {{ server {up.hostname}:{up.port}; keepalive 16; }}
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    auth_basic "lr-test";
    auth_basic_user_file {root}/htpasswd;
    location / {{
      proxy_pass http://cluster;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Authorization "";
      proxy_read_timeout 300s;
    }}
  }}
}}
""")
    proc = subprocess.Popen([binary, "-p", str(root), "-c", str(root / "nginx.conf"),
                             "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                            stderr=open(root / "logs" / "stderr.log", "wb"))  # noqa: SIM115
    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {(root / 'logs' / 'stderr.log').read_text()}"
                               f"{(root / 'logs' / 'error.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    try:
        wait_until(listening, f"nginx to listen on port {port}", timeout=20, pause=0.1)
    except AssertionError:
        proc.kill()
        raise
    endpoint = SecureEndpoint(f"https://127.0.0.1:{port}", ca, wrong_ca, USER, PASSWORD,
                              upstream)
    return endpoint, proc
