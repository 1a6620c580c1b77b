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
# DMTF Sensor schema (Sensor.v1_x): ReadingType values, then ReadingUnits (UCUM codes)
_TYPES = {"Temperature": "temperature", "Rotational": "fan", "Power": "power", "Voltage": "voltage",
          "Current": "power"}
_UNIT_TYPES = {"Cel": "temperature", "RPM": "fan", "W": "power", "V": "voltage", "A": "power"}
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
        self._system_uri: str | None = None
        root = self.get("/redfish/v1", auth=False)
        sessions = (root.get("Links", {}).get("Sessions") or {}).get("@odata.id")
        if sessions:
            body = {"UserName": creds.username, "Password": creds.password.reveal()}
            status, headers, doc = self._request("POST", sessions, body, auth=False)
            if status == 401:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: login refused (user or password wrong)")
            if status >= 400:
                raise UnreachableError(f"{self.node}: BMC {self._where()}: login failed ({_http(status, doc)})")
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
            if resp.status < 400:
                raise self._bad(method, path, f"HTTP {resp.status} with a body that is not JSON "
                                f"({_excerpt(payload)})") from None
            doc = {}
        if not isinstance(doc, dict):
            if resp.status < 400:
                raise self._bad(method, path, f"HTTP {resp.status} with JSON that is not an object "
                                f"({_excerpt(payload)})")
            doc = {}
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, doc

    def _bad(self, method: str, path: str, what: str) -> UnreachableError:
        """One line for a BMC answer slurmadm cannot use: node, BMC, the request and what came back."""
        return UnreachableError(f"{self.node}: BMC {self._where()}: {method} {path}: answered {what}")

    def get(self, path: str, *, auth: bool = True) -> dict:
        status, _, doc = self._request("GET", path, auth=auth)
        if status >= 400:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: GET {path}: {_http(status, doc)}")
        return doc

    def _post(self, path: str, body: dict) -> tuple[int, dict, dict]:
        status, headers, doc = self._request("POST", path, body)
        if status >= 400:
            raise UnreachableError(f"{self.node}: BMC {self._where()}: POST {path}: {_http(status, doc)}")
        return status, headers, doc

    def _members(self, path: str) -> list[str]:
        members = self.get(path).get("Members", [])
        if not isinstance(members, list):
            raise self._bad("GET", path, "a collection whose Members is not a list")
        return [m["@odata.id"] for m in members if isinstance(m, dict) and isinstance(m.get("@odata.id"), str)]

    def _first(self, path: str, what: str) -> str:
        members = self._members(path)
        if not members:
            raise self._bad("GET", path, f"an empty collection (no {what})")
        return members[0]

    def _link(self, doc: dict, key: str, path: str) -> str:
        link = doc.get(key)
        uri = link.get("@odata.id") if isinstance(link, dict) else None
        if not isinstance(uri, str):
            raise self._bad("GET", path, f"a resource without {key}")
        return uri

    def _system(self) -> str:
        if self._system_uri is None:
            self._system_uri = self._first("/redfish/v1/Systems", "ComputerSystem")
        return self._system_uri

    # ------------------------------------------------------------------ BmcClient
    def power_state(self) -> str:
        return "on" if self.get(self._system()).get("PowerState", "Off") in ("On", "PoweringOff") else "off"

    def power(self, action: str) -> None:
        system = self.get(self._system())
        reset = (system.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
        if not isinstance(reset.get("target"), str):
            raise self._bad("GET", self._system(), "a ComputerSystem without the #ComputerSystem.Reset action")
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
            raise UnreachableError(f"{self.node}: BMC {self._where()}: set boot: {_http(status, doc)}")

    def sensors(self) -> list[Sensor]:
        chassis_uri = self._first("/redfish/v1/Chassis", "Chassis")
        chassis = self.get(chassis_uri)
        out: list[Sensor] = []
        if "Sensors" in chassis:
            docs = [self.get(uri) for uri in self._members(self._link(chassis, "Sensors", chassis_uri))]
            fans = (self._fan_sources(chassis, chassis_uri)
                    if any(sensor_type(d) == "other" and d.get("ReadingUnits") in ("%", "Percent") for d in docs)
                    else set())
            for s in docs:
                uri = s.get("@odata.id", "")
                th = {_THRESH[k]: v["Reading"] for k, v in (s.get("Thresholds") or {}).items()
                      if k in _THRESH and isinstance(v, dict) and v.get("Reading") is not None}
                health = (s.get("Status") or {}).get("Health", "OK")
                out.append(Sensor(s.get("Name", uri), sensor_type(s, fans), s.get("Reading"),
                                  _UNITS.get(s.get("ReadingUnits"), s.get("ReadingUnits") or ""),
                                  {"OK": "ok", "Warning": "warning"}.get(health, "critical"), th))
        if "Power" in chassis:
            for psu in self.get(self._link(chassis, "Power", chassis_uri)).get("PowerSupplies", []):
                health = (psu.get("Status") or {}).get("Health", "OK")
                out.append(Sensor(f"{psu.get('Name', 'PSU')} Status", "psu", None, "",
                                  {"OK": "ok", "Warning": "warning"}.get(health, "critical"), {},
                                  ("Present",) if health == "OK" else ("Failure detected",)))
        return out

    def _fan_sources(self, chassis: dict, chassis_uri: str) -> set[str]:
        """The Sensor URIs the chassis' fans read from (ThermalSubsystem/Fans/*: SpeedPercent's
        DataSourceUri): a sensor in Percent is a fan when a Fan resource points at it."""
        out: set[str] = set()
        thermal = chassis.get("ThermalSubsystem")
        if not isinstance(thermal, dict) or "@odata.id" not in thermal:
            return out
        sub = self.get(thermal["@odata.id"])
        if not isinstance(sub.get("Fans"), dict):
            return out
        for uri in self._members(sub["Fans"]["@odata.id"]):
            fan = self.get(uri)
            for key in ("SpeedPercent", "SpeedRPM"):
                src = fan.get(key)
                if isinstance(src, dict) and isinstance(src.get("DataSourceUri"), str):
                    out.add(src["DataSourceUri"])
        return out

    def log_services(self) -> list[tuple[str, dict, list[dict]]]:
        """(uri, LogService, entries) of the system's and every manager's log services, SEL-typed
        ones first (LogEntryType "SEL" or named SEL, then those whose entries are EntryType
        "SEL"), then the others in the order found (the system's before the managers')."""
        owners = [self._system(), *self._members("/redfish/v1/Managers")]
        seen: list[str] = []
        for owner in owners:
            doc = self.get(owner)
            if isinstance(doc.get("LogServices"), dict) and "@odata.id" in doc["LogServices"]:
                seen += [u for u in self._members(doc["LogServices"]["@odata.id"]) if u not in seen]
        if not seen:
            raise self._bad("GET", owners[0], "no LogServices under the system or its managers")
        services = []
        for uri in seen:
            doc = self.get(uri)
            services.append((uri, doc, self._entries(uri, doc)))

        def rank(item: tuple[str, dict, list[dict]]) -> int:
            uri, doc, entries = item
            name = str(doc.get("Id") or uri.rstrip("/").rsplit("/", 1)[-1]).upper()
            if doc.get("LogEntryType") == "SEL" or name == "SEL":
                return 0
            return 1 if any(e.get("EntryType") == "SEL" for e in entries) else 2

        return sorted(services, key=rank)

    def _entries(self, uri: str, service: dict) -> list[dict]:
        page = self._link(service, "Entries", uri)
        out: list[dict] = []
        ids: set[str] = set()
        for _ in range(100):  # pages (@odata.nextLink), bounded
            doc = self.get(page)
            new = [e for e in doc.get("Members", []) if isinstance(e, dict) and e.get("@odata.id") not in ids]
            ids.update(e.get("@odata.id") for e in new)
            out += new
            page = doc.get("@odata.nextLink")
            total = doc.get("Members@odata.count")
            if not new or not isinstance(page, str) or (isinstance(total, int) and len(out) >= total):
                break
        return out

    def sel(self, *, clear: bool = False) -> list[SelEvent]:
        out = []
        cleared = []
        for uri, service, entries in self.log_services():
            log = uri[len("/redfish/v1/"):] if uri.startswith("/redfish/v1/") else uri
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
                                    str(e.get("Message", "")), sev, e.get("EntryCode") != "Deassert", log))
            action = ((service.get("Actions") or {}).get("#LogService.ClearLog") or {}).get("target")
            if clear and action:
                cleared.append(action)
        # Redfish has no reservation: an entry logged between the read and the clear is lost
        # (documented); each log read is cleared
        for action in cleared:
            self._post(action, {})
        return out

    def inventory(self) -> dict:
        system = self.get(self._system())
        out = {k: str(system[v]) for k, v in (("manufacturer", "Manufacturer"), ("model", "Model"),
                                             ("serial", "SerialNumber"), ("bios_firmware", "BiosVersion"))
               if system.get(v)}
        manager = self.get(self._first("/redfish/v1/Managers", "Manager"))
        if manager.get("FirmwareVersion"):
            out["bmc_firmware"] = str(manager["FirmwareVersion"])
        out.update(self._chassis_parts())
        return out

    def _chassis_parts(self) -> dict[str, list[dict]]:
        """PSUs and fans of each chassis: Power's PowerSupplies (else PowerSubsystem's
        collection), ThermalSubsystem's Fans collection (else Thermal's Fans array). A BMC
        that has none of them (or answers 404) gives none; the rest of the inventory stands."""
        out: dict[str, list[dict]] = {}
        try:
            chassis = self._members("/redfish/v1/Chassis")
        except UnreachableError:
            return out
        for uri in chassis:
            try:
                doc = self.get(uri)
            except UnreachableError:
                continue
            psus = self._array_or_collection(doc, ("Power", "PowerSupplies"), ("PowerSubsystem", "PowerSupplies"))
            fans = self._array_or_collection(doc, ("Thermal", "Fans"), ("ThermalSubsystem", "Fans"),
                                             prefer_collection=True)
            for kind, items in (("psus", psus), ("fans", fans)):
                out.setdefault(kind, []).extend(redfish_part(i) for i in items)
        return {k: v for k, v in out.items() if v}

    def _array_or_collection(self, chassis: dict, array: tuple[str, str], collection: tuple[str, str], *,
                             prefer_collection: bool = False) -> list[dict]:
        def from_array() -> list[dict]:
            link = (chassis.get(array[0]) or {}).get("@odata.id") if isinstance(chassis.get(array[0]), dict) else None
            if not link:
                return []
            items = self.get(link).get(array[1]) or []
            return [i for i in items if isinstance(i, dict)]

        def from_collection() -> list[dict]:
            link = (chassis.get(collection[0]) or {}).get("@odata.id") \
                if isinstance(chassis.get(collection[0]), dict) else None
            if not link:
                return []
            sub = self.get(link).get(collection[1])
            if not isinstance(sub, dict) or not isinstance(sub.get("@odata.id"), str):
                return []
            return [self.get(m) for m in self._members(sub["@odata.id"])]

        for how in ((from_collection, from_array) if prefer_collection else (from_array, from_collection)):
            try:
                found = how()
            except UnreachableError:
                continue
            if found:
                return found
        return []

    # ------------------------------------------------------------------ FirmwareClient
    def firmware(self) -> dict[str, str]:
        update = self.get("/redfish/v1/UpdateService")
        out = {}
        for uri in self._members(self._link(update, "FirmwareInventory", "/redfish/v1/UpdateService")):
            item = self.get(uri)
            out[str(item.get("Id") or uri.rsplit("/", 1)[-1])] = str(item.get("Version", ""))
        return out

    def update_firmware(self, component: str, image_url: str, *, image: bytes | None) -> Task:
        """SimpleUpdate when the BMC offers it and the image is a URL it can fetch; else a
        multipart push of `image` (read by the caller) to MultipartHttpPushUri."""
        update = self.get("/redfish/v1/UpdateService")
        target = f"{self._link(update, 'FirmwareInventory', '/redfish/v1/UpdateService')}/{component}"
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
                raise UnreachableError(f"{self.node}: BMC {self._where()}: push: {_http(status, doc)}")
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


def sensor_type(doc: dict, fan_sources: set[str] = frozenset()) -> str:
    """A Redfish Sensor's type: its ReadingType, else its ReadingUnits (Cel, RPM, W, V, A), else
    the resource it sits under (a Fan reads from it, or its URI is under Fans/Temperatures)."""
    kind = _TYPES.get(doc.get("ReadingType"))
    if kind:
        return kind
    kind = _UNIT_TYPES.get(doc.get("ReadingUnits"))
    if kind:
        return kind
    uri = str(doc.get("@odata.id", ""))
    if uri in fan_sources or "/Fans/" in uri or doc.get("PhysicalContext") == "Fan":
        return "fan"
    if "/Temperatures/" in uri:
        return "temperature"
    return "other"


def _excerpt(payload: bytes, n: int = 40) -> str:
    text = payload[:n].decode("utf-8", "replace").replace("\n", " ").strip()
    return repr(text + ("..." if len(payload) > n else ""))


def _http(status: int, doc: dict) -> str:
    """'HTTP 500 Internal Server Error' or 'HTTP 400 Bad Request: <the BMC's message>'."""
    import http as _h

    try:
        phrase = _h.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    msg = _message(doc)
    return f"HTTP {status}{' ' + phrase if phrase else ''}{': ' + msg if msg else ''}"


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


def redfish_part(item: dict) -> dict:
    """One PowerSupply or Fan resource (or array member) as a part: name, serial, model, part
    number, manufacturer, firmware, health."""
    status = item.get("Status") if isinstance(item.get("Status"), dict) else {}
    row = {"name": str(item.get("Name") or item.get("Id") or item.get("MemberId") or ""),
           "serial": str(item.get("SerialNumber") or ""), "model": str(item.get("Model") or ""),
           "part": str(item.get("PartNumber") or ""), "manufacturer": str(item.get("Manufacturer") or ""),
           "firmware": str(item.get("FirmwareVersion") or ""), "health": str(status.get("Health") or "")}
    if item.get("Id") and item.get("Name") and str(item["Id"]) != str(item["Name"]):
        row["id"] = str(item["Id"])
    return {k: v for k, v in row.items() if v}
