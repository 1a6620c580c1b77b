"""Redfish adapter (inventory, firmware; power/sensors/SEL/boot when `bmc.protocol = "redfish"`).

A small client on http.client rather than pyghmi's Redfish Command: that one cannot pin a
certificate fingerprint per site setting, has no SimpleUpdate and no task following. TLS is
always on: the site's CA file, or a pinned SHA-256 fingerprint of the BMC's certificate, or
(only when the site says `tls_insecure = true`) no check. One session per BMC
(SessionService, X-Auth-Token), deleted in close(); Basic auth when the BMC has no
SessionService.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import secrets
import ssl
import time
import urllib.request

from ..errors import UnreachableError, UsageError
from .creds import Credentials
from .model import Sensor, SelEvent, Target, Task

_RESET = {"on": "On", "off": "ForceOff", "cycle": "PowerCycle", "reset": "ForceRestart"}
_BOOT = {"pxe": "Pxe", "disk": "Hdd", "bios": "BiosSetup", "default": "None"}
_BOOT_BACK = {v: k for k, v in _BOOT.items()}
_UNITS = {"Cel": "°C", "RPM": "RPM", "W": "W", "V": "V", "A": "A"}
_TYPES = {"Temperature": "temperature", "Rotational": "fan", "Power": "power", "Voltage": "voltage",
          "Current": "power"}
_THRESH = {"LowerCaution": "lnc", "LowerCritical": "lc", "LowerFatal": "lnr", "UpperCaution": "unc",
           "UpperCritical": "uc", "UpperFatal": "unr"}


class TlsPolicy:
    def __init__(self, *, ca_file: str | None, fingerprint: str | None, insecure: bool):
        if not (ca_file or fingerprint or insecure):
            ca_file = None  # the system's trust store
        self.fingerprint = fingerprint.replace(":", "").lower() if fingerprint else None
        if self.fingerprint or insecure:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # the fingerprint is checked after the handshake
        else:
            try:
                ctx = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(f"bmc.tls_ca_file: {ca_file}: {exc}") from None
            # Python 3.13 makes the default context X509-strict, which refuses the many BMC
            # certificates without an Authority Key Identifier; the chain to the CA still counts
            ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
        self.context = ctx

    def connection(self, host: str, port: int, *, timeout: float) -> http.client.HTTPSConnection:
        """An HTTPS connection that applies this policy to every TCP connection it makes: its
        first one and every reconnect http.client makes by itself (a BMC that closes after each
        response, HTTP/1.0 or `Connection: close`, makes one per request)."""
        return PinnedHTTPSConnection(host, port, timeout=timeout, context=self.context, fingerprint=self.fingerprint)


class PinMismatch(ssl.SSLError):
    """The peer's certificate is not the pinned one (bmc.tls_fingerprint)."""


class PinnedHTTPSConnection(http.client.HTTPSConnection):
    """http.client.HTTPSConnection whose connect() - the one method http.client calls for the
    first connection and for each automatic reconnect - checks the certificate's SHA-256
    fingerprint after the handshake and before any byte of a request is sent."""

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, fingerprint: str | None):
        super().__init__(host, port, timeout=timeout, context=context)
        self._fingerprint = fingerprint
        self.connects = 0  # how many TLS connections this object made (tests read it)

    def connect(self) -> None:
        super().connect()
        self.connects += 1
        if self._fingerprint:
            der = self.sock.getpeercert(binary_form=True) or b""
            if not secrets.compare_digest(hashlib.sha256(der).hexdigest(), self._fingerprint):
                sock, self.sock = self.sock, None
                sock.close()
                raise PinMismatch("certificate fingerprint does not match bmc.tls_fingerprint")


class RedfishClient:
    def __init__(self, target: Target, creds: Credentials, tls: TlsPolicy, *, timeout: float):
        self.node = target.node
        self.target = target
        self._creds = creds
        self._tls = tls
        self._timeout = timeout
        self._token: str | None = None
        self._session_uri: str | None = None
        self._conn: http.client.HTTPSConnection | None = None
        root = self.get("/redfish/v1", auth=False)
        sessions = (root.get("Links", {}).get("Sessions") or {}).get("@odata.id")
        if sessions:
            body = {"UserName": creds.username, "Password": creds.password.reveal()}
            status, headers, doc = self._request("POST", sessions, body, auth=False)
            if status == 401:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: login refused (user or password wrong)")
            if status >= 400:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: login failed (HTTP {status}: "
                                       f"{_message(doc)})")
            self._token = headers.get("x-auth-token")
            self._session_uri = headers.get("location") or doc.get("@odata.id")

    # ------------------------------------------------------------------ transport
    def _where(self) -> str:
        return f"{self.target.host}:{self.target.redfish_port}"

    def _connect(self) -> http.client.HTTPSConnection:
        if self._conn is None:
            conn = self._tls.connection(self.target.host, self.target.redfish_port, timeout=self._timeout)
            try:
                conn.connect()
            except Exception as exc:
                raise self._tls_error(exc) from None
            self._conn = conn
        return self._conn

    def _tls_error(self, exc: BaseException) -> UnreachableError:
        if isinstance(exc, PinMismatch):
            return UnreachableError(f"{self.node}: BMC {self._where()}: certificate fingerprint does not match "
                                    "bmc.tls_fingerprint")
        if isinstance(exc, ssl.SSLCertVerificationError):
            return UnreachableError(f"{self.node}: BMC {self._where()}: certificate not trusted "
                                    f"({exc.verify_message}); see bmc.tls_ca_file / tls_fingerprint")
        return UnreachableError(f"{self.node}: BMC {self._where()}: {self._creds.scrub(str(exc) or type(exc).__name__)}")

    def _request(self, method: str, path: str, body=None, *, auth: bool = True, raw: bytes | None = None,
                 content_type: str = "application/json") -> tuple[int, dict, dict]:
        headers = {"Accept": "application/json", "OData-Version": "4.0"}
        data = None
        if raw is not None:
            data = raw
            headers["Content-Type"] = content_type
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            if self._token:
                headers["X-Auth-Token"] = self._token
            else:
                basic = f"{self._creds.username}:{self._creds.password.reveal()}".encode()
                headers["Authorization"] = "Basic " + base64.b64encode(basic).decode()
        for attempt in (1, 2):
            conn = self._connect()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                break
            except (PinMismatch, ssl.SSLCertVerificationError) as exc:  # a reconnect to another certificate
                self._conn = None
                raise self._tls_error(exc) from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._conn = None  # keep-alive connection closed under us: one reconnect
                if attempt == 2:
                    raise UnreachableError(f"{self.node}: BMC {self._where()}: {method} {path}: "
                                           f"{self._creds.scrub(str(exc))}") from None
            except (OSError, http.client.HTTPException) as exc:
                self._conn = None
                raise UnreachableError(f"{self.node}: BMC {self._where()}: {method} {path}: "
                                       f"{self._creds.scrub(str(exc) or type(exc).__name__)}") from None
        try:
            doc = json.loads(payload) if payload else {}
        except ValueError:
            doc = {}
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, doc if isinstance(doc, dict) else {}

    def get(self, path: str, *, auth: bool = True) -> dict:
        status, _, doc = self._request("GET", path, auth=auth)
        if status >= 400:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: GET {path}: HTTP {status} {_message(doc)}")
        return doc

    def _post(self, path: str, body: dict) -> tuple[int, dict, dict]:
        status, headers, doc = self._request("POST", path, body)
        if status >= 400:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: POST {path}: HTTP {status} {_message(doc)}")
        return status, headers, doc

    def _members(self, path: str) -> list[str]:
        return [m["@odata.id"] for m in self.get(path).get("Members", []) if "@odata.id" in m]

    def _system(self) -> str:
        return self._members("/redfish/v1/Systems")[0]

    # ------------------------------------------------------------------ BmcClient
    def power_state(self) -> str:
        return "on" if self.get(self._system()).get("PowerState", "Off") in ("On", "PoweringOff") else "off"

    def power(self, action: str) -> None:
        system = self.get(self._system())
        reset = system.get("Actions", {}).get("#ComputerSystem.Reset", {})
        kind = _RESET[action]
        allowed = reset.get("ResetType@Redfish.AllowableValues")
        if action == "cycle" and system.get("PowerState") == "Off":
            kind = "On"
        elif allowed and kind not in allowed and action == "cycle":
            kind = "ForceRestart"
        self._post(reset["target"], {"ResetType": kind})

    def bootdev(self) -> tuple[str, bool]:
        boot = self.get(self._system()).get("Boot", {})
        if boot.get("BootSourceOverrideEnabled", "Disabled") == "Disabled":
            return "default", False
        return (_BOOT_BACK.get(boot.get("BootSourceOverrideTarget"), str(boot.get("BootSourceOverrideTarget"))),
                boot.get("BootSourceOverrideEnabled") == "Continuous")

    def set_bootdev(self, device: str, persistent: bool) -> None:
        body = {"Boot": {"BootSourceOverrideTarget": _BOOT[device],
                         "BootSourceOverrideEnabled": "Disabled" if device == "default" else
                         ("Continuous" if persistent else "Once")}}
        status, _, doc = self._request("PATCH", self._system(), body)
        if status >= 400:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: set boot: HTTP {status} {_message(doc)}")

    def sensors(self) -> list[Sensor]:
        chassis = self.get(self._members("/redfish/v1/Chassis")[0])
        out: list[Sensor] = []
        if "Sensors" in chassis:
            for uri in self._members(chassis["Sensors"]["@odata.id"]):
                s = self.get(uri)
                th = {_THRESH[k]: v["Reading"] for k, v in (s.get("Thresholds") or {}).items()
                      if k in _THRESH and isinstance(v, dict) and v.get("Reading") is not None}
                health = (s.get("Status") or {}).get("Health", "OK")
                out.append(Sensor(s.get("Name", uri), _TYPES.get(s.get("ReadingType"), "other"), s.get("Reading"),
                                  _UNITS.get(s.get("ReadingUnits"), s.get("ReadingUnits") or ""),
                                  {"OK": "ok", "Warning": "warning"}.get(health, "critical"), th))
        if "Power" in chassis:
            for psu in self.get(chassis["Power"]["@odata.id"]).get("PowerSupplies", []):
                health = (psu.get("Status") or {}).get("Health", "OK")
                out.append(Sensor(f"{psu.get('Name', 'PSU')} Status", "psu", None, "",
                                  {"OK": "ok", "Warning": "warning"}.get(health, "critical"), {},
                                  ("Present",) if health == "OK" else ("Failure detected",)))
        return out

    def _sel_service(self) -> dict:
        manager = self._members("/redfish/v1/Managers")[0]
        services = self._members(self.get(manager)["LogServices"]["@odata.id"])
        for uri in services:
            if uri.rstrip("/").rsplit("/", 1)[-1].upper() in ("SEL", "LOG1", "EVENTLOG"):
                return self.get(uri)
        return self.get(services[0])

    def sel(self, *, clear: bool = False) -> list[SelEvent]:
        service = self._sel_service()
        entries = self.get(service["Entries"]["@odata.id"]).get("Members", [])
        out = []
        for e in entries:
            ts = None
            if e.get("Created"):
                try:
                    ts = time.mktime(time.strptime(e["Created"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
                except ValueError:
                    ts = None
            sev = {"OK": "info", "Warning": "warning"}.get(e.get("Severity", "OK"), "critical")
            out.append(SelEvent(int(e.get("Id", 0)) if str(e.get("Id", "")).isdigit() else 0, ts,
                                str(e.get("SensorType", "")), str(e.get("SensorType", "")),
                                str(e.get("Message", "")), sev, e.get("EntryCode") != "Deassert"))
        if clear:
            # Redfish has no reservation: re-read after the clear would race; read, clear, and
            # compare the count the service reports next (best effort, documented)
            self._post(service["Actions"]["#LogService.ClearLog"]["target"], {})
        return out

    def inventory(self) -> dict:
        system = self.get(self._system())
        out = {k: str(system[v]) for k, v in (("manufacturer", "Manufacturer"), ("model", "Model"),
                                             ("serial", "SerialNumber"), ("bios_firmware", "BiosVersion"))
               if system.get(v)}
        manager = self.get(self._members("/redfish/v1/Managers")[0])
        if manager.get("FirmwareVersion"):
            out["bmc_firmware"] = str(manager["FirmwareVersion"])
        return out

    # ------------------------------------------------------------------ FirmwareClient
    def firmware(self) -> dict[str, str]:
        update = self.get("/redfish/v1/UpdateService")
        out = {}
        for uri in self._members(update["FirmwareInventory"]["@odata.id"]):
            item = self.get(uri)
            out[str(item.get("Id") or uri.rsplit("/", 1)[-1])] = str(item.get("Version", ""))
        return out

    def update_firmware(self, component: str, image_url: str, *, image: bytes | None) -> Task:
        """SimpleUpdate when the BMC offers it and the image is a URL it can fetch; else a
        multipart push of `image` (read by the caller) to MultipartHttpPushUri."""
        update = self.get("/redfish/v1/UpdateService")
        target = f"{update['FirmwareInventory']['@odata.id']}/{component}"
        simple = update.get("Actions", {}).get("#UpdateService.SimpleUpdate")
        if image is None and simple and image_url.startswith(("http://", "https://")):
            proto = image_url.split(":", 1)[0].upper()
            status, headers, doc = self._post(simple["target"], {"ImageURI": image_url, "TransferProtocol": proto,
                                                                 "Targets": [target]})
        else:
            push = update.get("MultipartHttpPushUri")
            if not push:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: no MultipartHttpPushUri or SimpleUpdate")
            if image is None:
                image = _fetch(image_url)
            boundary = secrets.token_hex(12)
            params = json.dumps({"Targets": [target], "@Redfish.OperationApplyTime": "Immediate"})
            body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateParameters\"\r\n"
                    f"Content-Type: application/json\r\n\r\n{params}\r\n"
                    f"--{boundary}\r\nContent-Disposition: form-data; name=\"UpdateFile\"; filename=\"image.bin\"\r\n"
                    f"Content-Type: application/octet-stream\r\n\r\n").encode() + image + f"\r\n--{boundary}--\r\n".encode()
            status, headers, doc = self._request("POST", push, raw=body,
                                                 content_type=f"multipart/form-data; boundary={boundary}")
            if status >= 400:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: push: HTTP {status} {_message(doc)}")
        uri = headers.get("location") or doc.get("@odata.id")
        if not uri:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: update accepted without a task")
        return self.task(uri) if status != 200 or "TaskState" not in doc else _task(uri, doc)

    def task(self, uri: str) -> Task:
        return _task(uri, self.get(uri))

    def close(self) -> None:
        try:
            if self._session_uri and self._token:
                self._request("DELETE", self._session_uri)
        except UnreachableError:
            pass
        finally:
            self._token = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _task(uri: str, doc: dict) -> Task:
    msgs = tuple(str(m.get("Message", "")) for m in doc.get("Messages", []) if isinstance(m, dict))
    return Task(uri, str(doc.get("TaskState", "New")), doc.get("PercentComplete"), msgs)


def _message(doc: dict) -> str:
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("code") or "")
    return ""


def _fetch(url: str) -> bytes:
    if url.startswith("file://") or url.startswith("/"):
        path = url[len("file://"):] if url.startswith("file://") else url
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise UsageError(f"--image: {path}: {exc.strerror}") from None
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 (admin-given URL)
            return resp.read()
    except Exception as exc:
        raise UsageError(f"--image: cannot fetch {url}: {exc}") from None
