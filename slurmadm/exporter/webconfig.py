"""The Prometheus exporter-toolkit web configuration file (`--web.config.file` of node_exporter,
dcgm-exporter and the others), for slurmadm's exporters and webhook:

    tls_server_config:
      cert_file: /etc/slurmadm/tls/exporter.crt
      key_file: /etc/slurmadm/tls/exporter.key      # root-only
      client_auth_type: RequireAndVerifyClientCert  # optional, with client_ca_file
      client_ca_file: /etc/slurmadm/tls/ca.crt
      min_version: TLS12                            # optional: TLS10..TLS13
    basic_auth_users:
      prometheus: $2y$10$...                        # bcrypt (htpasswd -B, or python -m bcrypt)

Format: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md
(`http_server_config` is accepted and ignored; other keys are refused). The webhook uses the
TLS part; its callers keep authenticating with the bearer token (Alertmanager's
`authorization.credentials_file`), as the Authorization header carries one scheme only.
"""

from __future__ import annotations

import base64
import hashlib
import os
import ssl
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError

CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
               "RequireAnyClientCert": ssl.CERT_OPTIONAL, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
            "TLS13": ssl.TLSVersion.TLSv1_3}
TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
            "cipher_suites", "curve_preferences", "prefer_server_cipher_suites", "client_allowed_sans"}


@dataclass
class WebConfig:
    path: str
    cert_file: str | None = None
    key_file: str | None = None
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    users: dict[str, bytes] = field(default_factory=dict)
    _ok: dict[tuple[str, bytes], bool] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = VERSIONS[self.min_version]
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:
                ctx.load_verify_locations(self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"web config {self.path}: tls_server_config: cannot load the certificate or key "
                             f"({getattr(exc, 'strerror', None) or exc})") from None
        ctx.verify_mode = CLIENT_AUTH[self.client_auth_type]
        return ctx

    def authorized(self, header: str | None) -> bool:
        """An `Authorization: Basic` header naming one of basic_auth_users with its password
        (bcrypt-checked once per distinct header, as exporter-toolkit caches it)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            if key in self._ok:
                return self._ok[key]
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            ok = False
        with self._lock:
            if len(self._ok) > 1024:
                self._ok.clear()
            self._ok[key] = ok
        return ok


def load(path: str | None) -> WebConfig | None:
    """The file at `path` (None: no web config), or one UsageError line naming what is wrong."""
    if path is None:
        return None
    import yaml

    where = f"web config {path}"
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise UsageError(f"{where}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise UsageError(f"{where}: not YAML" + (f" (line {mark.line + 1})" if mark else "")) from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: not a mapping")
    unknown = set(data) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                         "(known: tls_server_config, basic_auth_users, http_server_config)")
    cfg = WebConfig(path=path)
    tls = data.get("tls_server_config") or {}
    if not isinstance(tls, dict) or set(tls) - TLS_KEYS:
        raise UsageError(f"{where}: tls_server_config: unknown key(s) "
                         f"{', '.join(sorted(set(tls) - TLS_KEYS)) if isinstance(tls, dict) else '(not a mapping)'}")
    if tls:
        if not tls.get("cert_file") or not tls.get("key_file"):
            raise UsageError(f"{where}: tls_server_config needs cert_file and key_file")
        base = os.path.dirname(os.path.abspath(path))  # relative to the file, as exporter-toolkit does
        cfg.cert_file = os.path.join(base, str(tls["cert_file"]))
        cfg.key_file = os.path.join(base, str(tls["key_file"]))
        _private(cfg.key_file, f"{where}: tls_server_config.key_file")
        cfg.client_auth_type = str(tls.get("client_auth_type") or "NoClientCert")
        if cfg.client_auth_type not in CLIENT_AUTH:
            raise UsageError(f"{where}: tls_server_config.client_auth_type {cfg.client_auth_type!r}: one of "
                             f"{', '.join(CLIENT_AUTH)}")
        if tls.get("client_ca_file"):
            cfg.client_ca_file = os.path.join(base, str(tls["client_ca_file"]))
        elif cfg.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
            raise UsageError(f"{where}: tls_server_config.client_auth_type {cfg.client_auth_type} needs client_ca_file")
        cfg.min_version = str(tls.get("min_version") or "TLS12")
        if cfg.min_version not in VERSIONS:
            raise UsageError(f"{where}: tls_server_config.min_version {cfg.min_version!r}: one of {', '.join(VERSIONS)}")
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise UsageError(f"{where}: basic_auth_users: not a mapping of user: bcrypt hash")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise UsageError(f"{where}: basic_auth_users.{user}: not a bcrypt hash ($2y$...)")
        cfg.users[str(user)] = hashed.encode()
    return cfg  # basic_auth_users without TLS is allowed, as exporter-toolkit does: `doctor` warns


def _private(path: str, what: str) -> None:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror}") from None
    if st.st_mode & 0o077:
        raise UsageError(f"{what} {path}: readable by others (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it")
