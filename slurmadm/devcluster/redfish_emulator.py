"""Redfish BMC emulators: one HTTPS server per fake node (127.0.0.1, redfish-port+i), serving the
same node state as the IPMI emulator.

sushy-tools' fake driver covers power and boot only; this covers what slurmadm uses, shaped
after the DMTF schemas (ServiceRoot, ComputerSystem, Chassis with Sensors/Thermal/Power, Manager
with LogServices/SEL, UpdateService with FirmwareInventory, MultipartHttpPushUri and
SimpleUpdate, TaskService) and a Supermicro HGX B200's inventory names:

- sessions: POST /redfish/v1/SessionService/Sessions (X-Auth-Token), DELETE to log out; Basic
  auth also accepted. The session-limit fault caps open sessions (503 past it).
- firmware images are the emulator's own format: a first line
  `SLURMADM-FAKE-FIRMWARE component=<Id> version=<version>`; anything else fails the task.
  SimpleUpdate fetches ImageURI itself (http/https), as a real BMC does. The task runs
  New -> Running -> Completed over about a second; the version changes when it completes.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import ssl
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .bmc_state import SENSORS, NodeBmc

FAKE_IMAGE_MAGIC = b"SLURMADM-FAKE-FIRMWARE"
_UNITS = {"temperature": "Cel", "fan": "RPM", "power": "W", "voltage": "V"}
_TYPES = {"temperature": "Temperature", "fan": "Rotational", "power": "Power", "voltage": "Voltage"}
R = "/redfish/v1"


def fake_image(component: str, version: str, size: int = 4096) -> bytes:
    head = FAKE_IMAGE_MAGIC + f" component={component} version={version}\n".encode()
    return head + b"\0" * max(0, size - len(head))


def parse_image(data: bytes) -> tuple[str, str] | None:
    first = data.split(b"\n", 1)[0]
    m = re.fullmatch(rb"SLURMADM-FAKE-FIRMWARE component=(\S+) version=(\S+)", first)
    return (m.group(1).decode(), m.group(2).decode()) if m else None


class RedfishBmc:
    def __init__(self, node: NodeBmc, username: str, password: str):
        self.node = node
        self.username = username
        self.password = password
        self.sessions: dict[str, str] = {}  # token -> session id
        self.tasks: dict[str, dict] = {}
        self.lock = threading.Lock()
        self._ids = 0

    def next_id(self) -> str:
        with self.lock:
            self._ids += 1
            return str(self._ids)

    # ---------------------------------------------------------------- firmware tasks
    def start_update(self, image: bytes | None, uri: str | None, targets: list[str]) -> str:
        tid = self.next_id()
        task = {"@odata.id": f"{R}/TaskService/Tasks/{tid}", "@odata.type": "#Task.v1_7_0.Task", "Id": tid,
                "Name": "Firmware update", "TaskState": "New", "TaskStatus": "OK", "PercentComplete": 0,
                "StartTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "Messages": []}
        self.tasks[tid] = task
        threading.Thread(target=self._run_update, args=(task, image, uri, targets), daemon=True).start()
        return tid

    def _run_update(self, task: dict, image: bytes | None, uri: str | None, targets: list[str]) -> None:
        def fail(msg: str) -> None:
            task.update(TaskState="Exception", TaskStatus="Critical",
                        Messages=[{"MessageId": "Update.1.0.UpdateFailed", "Message": msg}])

        task.update(TaskState="Running", PercentComplete=10)
        if image is None and uri is not None:
            try:
                ctx = ssl._create_unverified_context()  # a BMC fetching from the admin's own server
                with urllib.request.urlopen(uri, timeout=10, context=ctx) as resp:  # noqa: S310
                    image = resp.read()
            except Exception as exc:
                return fail(f"cannot fetch {uri}: {exc}")
        parsed = parse_image(image or b"")
        if parsed is None:
            return fail("image is not a valid firmware package")
        component, version = parsed
        if component not in self.node.firmware:
            return fail(f"image is for {component}, which this system does not have")
        wanted = [t.rstrip("/").rsplit("/", 1)[-1] for t in targets]
        if wanted and component not in wanted and not any(w in ("1", "BMC") for w in wanted
                                                          if component in ("BMC", "BIOS")):
            return fail(f"image is for {component}, not for {', '.join(wanted)}")
        for pct in (40, 70, 90):
            time.sleep(0.2)
            task["PercentComplete"] = pct
        self.node.set_firmware(component, version)
        task.update(TaskState="Completed", PercentComplete=100,
                    EndTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    Messages=[{"MessageId": "Update.1.0.UpdateSuccessful",
                               "Message": f"{component} updated to {version}"}])

    # ---------------------------------------------------------------- resources
    def get(self, path: str) -> dict | None:
        n = self.node
        if path == R:
            return {"@odata.id": R, "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
                    "RedfishVersion": "1.15.0", "Name": "Root Service",
                    "Systems": {"@odata.id": f"{R}/Systems"}, "Chassis": {"@odata.id": f"{R}/Chassis"},
                    "Managers": {"@odata.id": f"{R}/Managers"}, "UpdateService": {"@odata.id": f"{R}/UpdateService"},
                    "TaskService": {"@odata.id": f"{R}/TaskService"},
                    "SessionService": {"@odata.id": f"{R}/SessionService"},
                    "Links": {"Sessions": {"@odata.id": f"{R}/SessionService/Sessions"}}}
        if path == f"{R}/SessionService":
            return {"@odata.id": path, "@odata.type": "#SessionService.v1_1_8.SessionService", "Id": "SessionService",
                    "ServiceEnabled": True, "Sessions": {"@odata.id": f"{path}/Sessions"}}
        if path == f"{R}/SessionService/Sessions":
            return _collection(path, "#SessionCollection.SessionCollection",
                               [f"{path}/{sid}" for sid in self.sessions.values()])
        for coll, member in (("Systems", "1"), ("Chassis", "1"), ("Managers", "1")):
            if path == f"{R}/{coll}":
                return _collection(path, f"#{'ComputerSystem' if coll == 'Systems' else coll[:-1] if coll == 'Managers' else 'Chassis'}Collection", [f"{path}/{member}"])
        if path == f"{R}/Systems/1":
            return {"@odata.id": path, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1",
                    "Name": "System", "HostName": n.node, "Manufacturer": "Supermicro", "Model": "SYS-A22GA-NBRT",
                    "SerialNumber": f"S{n.index + 1:03d}B200", "PowerState": "On" if n.power == "on" else "Off",
                    "BiosVersion": n.firmware["BIOS"],
                    "Status": {"State": "Enabled", "Health": self.health(), "HealthRollup": self.health()},
                    "Boot": {"BootSourceOverrideTarget": {"default": "None", "pxe": "Pxe", "disk": "Hdd",
                                                          "bios": "BiosSetup", "cdrom": "Cd"}[n.bootdev],
                             "BootSourceOverrideEnabled": ("Disabled" if n.bootdev == "default" else
                                                           "Continuous" if n.boot_persistent else "Once"),
                             "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "BiosSetup", "Cd"]},
                    "Actions": {"#ComputerSystem.Reset": {
                        "target": f"{path}/Actions/ComputerSystem.Reset",
                        "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart",
                                                              "PowerCycle"]}},
                    "LogServices": {"@odata.id": f"{path}/LogServices"}}
        if path == f"{R}/Managers/1":
            return {"@odata.id": path, "@odata.type": "#Manager.v1_19_0.Manager", "Id": "1", "Name": "Manager",
                    "ManagerType": "BMC", "FirmwareVersion": n.firmware["BMC"], "Model": "AST2600",
                    "Status": {"State": "Enabled", "Health": "OK"},
                    "LogServices": {"@odata.id": f"{path}/LogServices"}}
        if path in (f"{R}/Managers/1/LogServices", f"{R}/Systems/1/LogServices"):
            return _collection(path, "#LogServiceCollection.LogServiceCollection", [f"{R}/Managers/1/LogServices/SEL"])
        if path == f"{R}/Managers/1/LogServices/SEL":
            return {"@odata.id": path, "@odata.type": "#LogService.v1_5_0.LogService", "Id": "SEL",
                    "Name": "System Event Log", "MaxNumberOfRecords": 512, "OverWritePolicy": "NeverOverWrites",
                    "Entries": {"@odata.id": f"{path}/Entries"},
                    "Actions": {"#LogService.ClearLog": {"target": f"{path}/Actions/LogService.ClearLog"}}}
        if path == f"{R}/Managers/1/LogServices/SEL/Entries":
            members = [self.log_entry(e) for e in list(n.sel)]
            return {"@odata.id": path, "@odata.type": "#LogEntryCollection.LogEntryCollection",
                    "Members": members, "Members@odata.count": len(members)}
        if path == f"{R}/Chassis/1":
            return {"@odata.id": path, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": "1", "Name": "Chassis",
                    "ChassisType": "RackMount", "Manufacturer": "Supermicro", "Model": "SYS-A22GA-NBRT",
                    "PowerState": "On" if n.power == "on" else "Off", "Status": {"Health": self.health()},
                    "Sensors": {"@odata.id": f"{path}/Sensors"}, "Thermal": {"@odata.id": f"{path}/Thermal"},
                    "Power": {"@odata.id": f"{path}/Power"}}
        if path == f"{R}/Chassis/1/Sensors":
            return _collection(path, "#SensorCollection.SensorCollection",
                               [f"{path}/{_sid(s.name)}" for s in SENSORS if s.threshold_based])
        if path.startswith(f"{R}/Chassis/1/Sensors/"):
            s = next((s for s in SENSORS if s.threshold_based and _sid(s.name) == path.rsplit("/", 1)[1]), None)
            return None if s is None else self.sensor(s, path)
        if path == f"{R}/Chassis/1/Thermal":
            temps = [self.sensor(s, f"{path}#/Temperatures/{i}") for i, s in
                     enumerate(x for x in SENSORS if x.kind == "temperature")]
            fans = [self.sensor(s, f"{path}#/Fans/{i}") for i, s in enumerate(x for x in SENSORS if x.kind == "fan")]
            return {"@odata.id": path, "@odata.type": "#Thermal.v1_7_1.Thermal", "Id": "Thermal",
                    "Temperatures": [{"Name": t["Name"], "ReadingCelsius": t["Reading"],
                                      "UpperThresholdCritical": t["Thresholds"].get("UpperCritical", {}).get("Reading"),
                                      "Status": t["Status"]} for t in temps],
                    "Fans": [{"Name": f["Name"], "Reading": f["Reading"], "ReadingUnits": "RPM",
                              "LowerThresholdCritical": f["Thresholds"].get("LowerCritical", {}).get("Reading"),
                              "Status": f["Status"]} for f in fans]}
        if path == f"{R}/Chassis/1/Power":
            total = next(s for s in SENSORS if s.kind == "power")
            value, _ = n.reading(total)
            psus = []
            for s in (x for x in SENSORS if x.kind == "psu"):
                _, bits = n.reading(s)
                psus.append({"Name": s.name.replace(" Status", ""), "MemberId": s.name[3],
                             "Status": {"State": "Enabled", "Health": "Critical" if bits & 0x02 else "OK"}})
            return {"@odata.id": path, "@odata.type": "#Power.v1_7_1.Power", "Id": "Power",
                    "PowerControl": [{"Name": "System Power Control", "PowerConsumedWatts": value}],
                    "PowerSupplies": psus}
        if path == f"{R}/UpdateService":
            return {"@odata.id": path, "@odata.type": "#UpdateService.v1_11_0.UpdateService", "Id": "UpdateService",
                    "ServiceEnabled": True, "HttpPushUri": f"{path}/upload",
                    "MultipartHttpPushUri": f"{path}/upload",
                    "FirmwareInventory": {"@odata.id": f"{path}/FirmwareInventory"},
                    "Actions": {"#UpdateService.SimpleUpdate": {
                        "target": f"{path}/Actions/UpdateService.SimpleUpdate",
                        "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"]}}}
        if path == f"{R}/UpdateService/FirmwareInventory":
            return _collection(path, "#SoftwareInventoryCollection.SoftwareInventoryCollection",
                               [f"{path}/{c}" for c in n.firmware])
        if path.startswith(f"{R}/UpdateService/FirmwareInventory/"):
            comp = path.rsplit("/", 1)[1]
            if comp not in n.firmware:
                return None
            return {"@odata.id": path, "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory", "Id": comp,
                    "Name": comp.replace("_", " "), "Version": n.firmware[comp], "Updateable": True,
                    "Status": {"State": "Enabled", "Health": "OK"}}
        if path == f"{R}/TaskService":
            return {"@odata.id": path, "@odata.type": "#TaskService.v1_2_0.TaskService", "Id": "TaskService",
                    "Tasks": {"@odata.id": f"{path}/Tasks"}}
        if path == f"{R}/TaskService/Tasks":
            return _collection(path, "#TaskCollection.TaskCollection", [t["@odata.id"] for t in self.tasks.values()])
        if path.startswith(f"{R}/TaskService/Tasks/"):
            return self.tasks.get(path.rsplit("/", 1)[1])
        return None

    def health(self) -> str:
        worst = "OK"
        for s in SENSORS:
            _, bits = self.node.reading(s)
            if (s.kind == "psu" and bits & 0x02) or (s.threshold_based and bits & 0x36):
                return "Critical"
            if s.threshold_based and bits & 0x09:
                worst = "Warning"
        return worst

    def sensor(self, s, path: str) -> dict:
        value, bits = self.node.reading(s)
        t = s.thresholds()
        names = {"lnc": "LowerCaution", "lc": "LowerCritical", "lnr": "LowerFatal",
                 "unc": "UpperCaution", "uc": "UpperCritical", "unr": "UpperFatal"}
        health = "Critical" if bits & 0x36 else "Warning" if bits & 0x09 else "OK"
        return {"@odata.id": path, "@odata.type": "#Sensor.v1_7_0.Sensor", "Id": _sid(s.name), "Name": s.name,
                "Reading": value, "ReadingUnits": _UNITS[s.kind], "ReadingType": _TYPES[s.kind],
                "Thresholds": {names[k]: {"Reading": v} for k, v in t.items() if v is not None},
                "Status": {"State": "Enabled", "Health": health}}

    def log_entry(self, e) -> dict:
        from .ipmi_emulator import SENSOR_BY_NUMBER

        s = SENSOR_BY_NUMBER.get(e.sensor_number)
        return {"@odata.id": f"{R}/Managers/1/LogServices/SEL/Entries/{e.record_id}",
                "@odata.type": "#LogEntry.v1_15_0.LogEntry", "Id": str(e.record_id), "EntryType": "SEL",
                "Created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.timestamp)),
                "SensorNumber": e.sensor_number, "SensorType": s.name if s else "Unknown",
                "EntryCode": "Deassert" if e.event_type & 0x80 else "Assert",
                "Message": _describe(e), "Severity": _severity(e),
                "OemRecordFormat": None}

    # ---------------------------------------------------------------- actions
    def post(self, path: str, body: dict) -> tuple[int, dict, dict]:
        n = self.node
        if path == f"{R}/Systems/1/Actions/ComputerSystem.Reset":
            kind = body.get("ResetType")
            action = {"On": "on", "ForceOff": "off", "GracefulShutdown": "shutdown", "ForceRestart": "reset",
                      "PowerCycle": "cycle"}.get(kind)
            if action is None:
                return 400, _error(f"ResetType {kind!r} is not allowed"), {}
            n.set_power(action)
            return 204, {}, {}
        if path == f"{R}/Managers/1/LogServices/SEL/Actions/LogService.ClearLog":
            n.clear_sel()
            return 204, {}, {}
        if path == f"{R}/UpdateService/Actions/UpdateService.SimpleUpdate":
            uri = body.get("ImageURI")
            if not isinstance(uri, str) or not uri.startswith(("http://", "https://")):
                return 400, _error("ImageURI must be an http(s) URL"), {}
            tid = self.start_update(None, uri, body.get("Targets") or [])
            return 202, self.tasks[tid], {"Location": f"{R}/TaskService/Tasks/{tid}"}
        return 404, _error(f"{path} not found"), {}


def _sid(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name)


def _collection(path: str, kind: str, members: list[str]) -> dict:
    return {"@odata.id": path, "@odata.type": kind, "Name": path.rsplit("/", 1)[1],
            "Members": [{"@odata.id": m} for m in members], "Members@odata.count": len(members)}


def _error(msg: str) -> dict:
    return {"error": {"code": "Base.1.8.GeneralError", "message": msg}}


def _describe(e) -> str:
    from .bmc_state import SENSOR_BY_NUMBER

    s = SENSOR_BY_NUMBER.get(e.sensor_number)
    name = s.name if s else f"sensor {e.sensor_number:#x}"
    offset = e.data[0] & 0x0F
    if e.event_type & 0x7F == 0x01:
        what = ["Lower Non-critical going low", "Lower Non-critical going high", "Lower Critical going low",
                "Lower Critical going high", "Lower Non-recoverable going low", "Lower Non-recoverable going high",
                "Upper Non-critical going low", "Upper Non-critical going high", "Upper Critical going low",
                "Upper Critical going high", "Upper Non-recoverable going low",
                "Upper Non-recoverable going high"][offset]
    elif e.sensor_type == 0x08:
        what = ["Presence detected", "Failure detected", "Predictive failure", "Power Supply AC lost"][offset % 4]
    elif e.sensor_type == 0x22:
        what = {0: "S0/G0: working", 6: "S4/S5: soft-off"}.get(offset, f"state {offset}")
    elif e.sensor_type == 0x10:
        what = {2: "Log area reset/cleared", 4: "SEL full"}.get(offset, f"offset {offset}")
    elif e.sensor_type == 0x0C:
        what = "Correctable ECC"
    else:
        what = f"offset {offset}"
    return f"{name}: {what}" + (" (deasserted)" if e.event_type & 0x80 else "")


def _severity(e) -> str:
    offset = e.data[0] & 0x0F
    if e.event_type & 0x7F == 0x01:
        return "Critical" if offset >= 8 or offset in (2, 4) else "Warning"
    if e.sensor_type == 0x08 and offset in (1, 3):
        return "Critical"
    return "OK"


def _handler(bmc: RedfishBmc):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "slurmadm-bmc-emulator"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, code: int, body: dict | None = None, headers: dict | None = None) -> None:
            data = json.dumps(body).encode() if body else b""
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if data:
                self.send_header("Content-Type", "application/json")
                self.send_header("OData-Version", "4.0")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data:
                self.wfile.write(data)

        def _gate(self) -> bool:
            node = bmc.node
            if node.fault("unreachable"):
                self.close_connection = True
                try:
                    self.connection.close()
                except OSError:
                    pass
                return False
            if node.fault("slow"):
                time.sleep(node.slow_delay())
            return True

        def _authed(self) -> bool:
            token = self.headers.get("X-Auth-Token")
            if token and token in bmc.sessions:
                return True
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                try:
                    user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
                except Exception:
                    user, pw = "", ""
                if user == bmc.username and secrets.compare_digest(pw, bmc.password):
                    return True
            self._send(401, _error("authentication required"), {"WWW-Authenticate": 'Basic realm="BMC"'})
            return False

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def do_GET(self) -> None:
            if not self._gate():
                return
            path = self.path.split("?")[0].rstrip("/") or "/"
            if path in ("/redfish", "/redfish/v1") or path == R:
                if path == "/redfish":
                    return self._send(200, {"v1": f"{R}/"})
                return self._send(200, bmc.get(R))
            if not self._authed():
                return
            doc = bmc.get(path)
            if doc is None:
                return self._send(404, _error(f"{path} not found"))
            self._send(200, doc)

        def do_POST(self) -> None:
            if not self._gate():
                return
            path = self.path.split("?")[0].rstrip("/")
            raw = self._body()
            if path == f"{R}/SessionService/Sessions":
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._send(400, _error("body is not JSON"))
                if body.get("UserName") != bmc.username or not secrets.compare_digest(
                        str(body.get("Password", "")), bmc.password):
                    return self._send(401, _error("invalid credentials"))
                limit = bmc.node.session_limit()
                if limit is not None and len(bmc.sessions) >= limit:
                    return self._send(503, _error("session limit reached"))
                token, sid = secrets.token_hex(16), bmc.next_id()
                bmc.sessions[token] = sid
                loc = f"{R}/SessionService/Sessions/{sid}"
                return self._send(201, {"@odata.id": loc, "Id": sid, "UserName": bmc.username},
                                  {"X-Auth-Token": token, "Location": loc})
            if not self._authed():
                return
            if path == f"{R}/UpdateService/upload":
                ctype = self.headers.get("Content-Type", "")
                if ctype.startswith("multipart/form-data"):
                    parts = _multipart(raw, ctype)
                    params = json.loads(parts.get("UpdateParameters", b"{}") or b"{}")
                    image = parts.get("UpdateFile")
                    if image is None:
                        return self._send(400, _error("multipart push needs an UpdateFile part"))
                    tid = bmc.start_update(image, None, params.get("Targets") or [])
                else:
                    tid = bmc.start_update(raw, None, [])
                return self._send(202, bmc.tasks[tid], {"Location": f"{R}/TaskService/Tasks/{tid}"})
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return self._send(400, _error("body is not JSON"))
            code, doc, headers = bmc.post(path, body)
            self._send(code, doc, headers)

        def do_PATCH(self) -> None:
            if not self._gate() or not self._authed():
                return
            path = self.path.split("?")[0].rstrip("/")
            try:
                body = json.loads(self._body() or b"{}")
            except ValueError:
                return self._send(400, _error("body is not JSON"))
            if path != f"{R}/Systems/1" or "Boot" not in body:
                return self._send(405, _error(f"PATCH {path} not supported"))
            boot = body["Boot"]
            target = {"None": "default", "Pxe": "pxe", "Hdd": "disk", "BiosSetup": "bios", "Cd": "cdrom"}.get(
                boot.get("BootSourceOverrideTarget", "None"))
            if target is None:
                return self._send(400, _error("BootSourceOverrideTarget not allowed"))
            bmc.node.set_bootdev(target, boot.get("BootSourceOverrideEnabled") == "Continuous")
            self._send(204)

        def do_DELETE(self) -> None:
            if not self._gate():
                return
            path = self.path.rstrip("/")
            prefix = f"{R}/SessionService/Sessions/"
            if path.startswith(prefix):
                sid = path[len(prefix):]
                token = next((t for t, s in bmc.sessions.items() if s == sid), None)
                if token is None:
                    return self._send(404, _error("no such session"))
                if not self._authed():
                    return
                bmc.sessions.pop(token, None)
                return self._send(204)
            self._send(405, _error("DELETE not supported"))

    return Handler


def _multipart(raw: bytes, ctype: str) -> dict[str, bytes]:
    m = re.search(r'boundary="?([^";]+)"?', ctype)
    if not m:
        return {}
    out = {}
    for part in raw.split(b"--" + m.group(1).encode()):
        head, _, body = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if name:
            out[name.group(1).decode()] = body[:-2] if body.endswith(b"\r\n") else body
    return out


def bind_retrying(make, what: str, port: int, timeout: float = 60.0):
    """make() a server on `port`, again while the port is busy (up to `timeout` s): the dev
    cluster's ports lie in Linux's ephemeral range (32768-60999), where a busy machine's outgoing
    connection may hold one for a while (128 nodes' shippers and sshd at bring-up)."""
    import errno

    deadline = time.monotonic() + timeout
    while True:
        try:
            return make()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                raise OSError(exc.errno, f"{what}: port {port}: {exc.strerror}") from None
            time.sleep(0.5)


def start(states: list[NodeBmc], username: str, password: str, port: int, *, cert: str | None,
          key: str | None) -> list[ThreadingHTTPServer]:
    ctx = None
    if cert and key:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
    def bind(i: int, st: NodeBmc):
        try:
            return bind_retrying(lambda: ThreadingHTTPServer(
                ("127.0.0.1", port + i), _handler(RedfishBmc(st, username, password))), f"Redfish of {st.node}", port + i)
        except OSError as exc:  # that one BMC does not answer (as a dead one); the others serve
            print(f"warning: {exc}; this Redfish BMC is left out", flush=True)
            return None

    # every port at once: a port in TIME_WAIT costs its wait once, not once per port before it
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=32) as pool:
        bound = list(pool.map(lambda a: bind(*a), enumerate(states)))
    servers = []
    for srv in bound:
        if srv is None:
            continue
        srv.daemon_threads = True
        if ctx is not None:
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    return servers


def make_certificate(cert_path, key_path, ca_path) -> str:
    """A CA and a server certificate for 127.0.0.1/localhost (the dev cluster's BMCs). Returns the
    server certificate's SHA-256 fingerprint (for the pinned-fingerprint setting)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slurmadm dev-cluster BMC CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
          .not_valid_after(now + dt.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          # what Python 3.13's X509-strict default asks of a CA (the DMTF client runs with it)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    import os

    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(ca_path, "wb") as fh:
        fh.write(ca.public_bytes(serialization.Encoding.PEM))
    return cert.fingerprint(hashes.SHA256()).hex()
