"""Bring-your-own-tool rows: a transport declared in the spec by command lines alone.

Most people who evade the GFW, Iran's filter or the TSPU use tools with no
Python in them (Shadowsocks, v2ray, Trojan, OpenVPN...). A spec row with
``kind = "external"`` runs such a tool's real server on the bridge node and its
real client in the client namespace, from command templates the lab fills in::

    [transports.shadowsocks]
    kind = "external"
    mode = "socks"
    server = "ss-server -s {server_host} -p {server_port} -k {secret} -m chacha20-ietf-poly1305"
    client = "ss-local -s {server_host} -p {server_port} -l {socks_port} -b {socks_host} ..."
    binaries = ["ss-server", "ss-local"]

Three modes say how the workloads reach the tool: ``socks`` (the client offers
SOCKS5 on ``{socks_host}:{socks_port}``), ``forward`` (a port forwarder: the
client forwards ``{local_host}:{local_port}`` to the server, which forwards to
``{target}``; the workloads connect to the local port) and ``tunnel`` (a VPN:
the lab routes the workloads into its tun device). ``server_port`` and
``server_proto`` say where the server listens (default TCP 9850), so a tool
that must sit on UDP 443 names no port in its templates.

:data:`PLACEHOLDERS` lists every placeholder (the unknown-placeholder error
and docs/lab/transports.md §7.1 give the same list), plus
``{config.NAME}`` (the path of config file NAME, rendered from
``[transports.X.configs]`` with the same placeholders) and ``{tool.NAME}`` (a
tool's path as :mod:`ptlab.common.tools` finds it; ``needs_tags`` skips the
row on a build without the tags it needs). An unknown placeholder, an
unbalanced brace or a missing key fails when the spec loads, with the key
path. A process is ready (:meth:`ExternalPlugin.readiness`) when its log
matches ``server_ready``/``client_ready``, when the command ``server_probe``/
``client_probe`` exits 0, or else by its mode and protocol: a TCP port that
accepts a connection, a UDP port its process has bound, a tun device that is
up (``ptlab.processes.extlaunch``). A readiness timeout says what was waited
for and which key changes it. A tool that is not installed makes the cell an
ERROR that names it (docs/lab/transports.md §7).
"""

from __future__ import annotations

import base64
import re
import secrets
import shlex
import string
from dataclasses import dataclass
from typing import Any

from netns.errors import LabError
from ptcommon.events import READY_PATTERN
from ptcommon.suggest import did_you_mean

from ..common import tools as toolbox
from ..common.flowroles import BENIGN_PORTS
from ..common.wellknown import SERVER_PORT, TUNNEL_ZONE
from ..services.netutil import format_hostport
from .base import CellContext, Endpoint, LabPlugin, Service

SOCKS_HOST, SOCKS_PORT = "127.0.0.1", 1086
# Forward mode: where the client's forwarded port listens (client namespace).
LOCAL_HOST, LOCAL_PORT = "127.0.0.1", 1086
MODES = ("socks", "forward", "tunnel")
PROTOS = ("tcp", "udp")
# Tunnel mode: the tunnel's two ends (lab space). Each side's device is named for
# the lab and the side (tun_device): wireguard-go's control socket lives in the
# host's /run/wireguard/, which every namespace and every lab shares.
TUN_SUBNET, TUN_SERVER, TUN_CLIENT = "198.19.253.0/30", "198.19.253.1", "198.19.253.2"
KEYS = {"kind", "mode", "description", "server", "client", "configs", "binaries",
        "server_port", "server_proto", "server_ready", "client_ready", "server_probe",
        "client_probe", "ready_timeout_s", "bootstrap_floor_s", "needs_tags",
        "lab_cert_names"}
#: Every placeholder a template may use (the unknown-placeholder error lists them;
#: docs/lab/transports.md §7.1 says what fills each, and a test keeps the two equal).
PLACEHOLDERS = frozenset({
    "server_host", "server_port", "socks_host", "socks_port", "local_host", "local_port",
    "target", "target_host", "target_port", "secret", "uuid", "secret_b64", "state",
    "lab_ca", "lab_cert", "lab_key", "tun_dev", "tun_server", "tun_client", "dns_host",
    "tunnel_domain"})
#: The forms with a name after the dot; the error lists them after PLACEHOLDERS.
NAMED_PLACEHOLDERS = ("config.NAME", "tool.NAME")
# Placeholders that belong to one mode only: in another they would name a port
# nothing listens on.
MODE_ONLY = {"socks_host": "socks", "socks_port": "socks",
             "local_host": "forward", "local_port": "forward"}
# The name {lab_cert} is issued for when the row names none (the bridge's, as the
# WebTunnel rows' certificate is).
LAB_CERT_NAMES = ["bridge.lab"]
# {tool.NAME}: the path of a tool found by ptlab.common.tools (the spec, the environment,
# a package that ships it, PATH).
TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class TemplateError(ValueError):
    """A template that cannot be filled in; the message names the key."""


def placeholders(template: str, where: str) -> set[str]:
    """The placeholders ``template`` uses; TemplateError on bad syntax."""
    return set(_fields(template, where))


def _fields(template: str, where: str) -> list[str]:
    """The placeholders ``template`` uses, each once, in the order they first appear.
    A conversion or format spec that no filled-in value (a string) takes, such as
    ``{server_port:d}``, is refused here rather than when a cell fills it in."""
    formatter = string.Formatter()
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in formatter.parse(template)
                  if f is not None]
        for field, spec, conv in parsed:
            try:
                format(formatter.convert_field("x", conv), spec or "")
            except ValueError as exc:
                raise ValueError(f"{{{field}}}: {exc}") from None
    except ValueError as exc:
        raise TemplateError(f"{where}: {exc}") from None
    return list(dict.fromkeys(f for f, _, _ in parsed))


def known_placeholders(configs: set[str]) -> str:
    """The placeholders a template may use, as the unknown-placeholder error lists
    them: every plain one, then the named forms and the row's config names."""
    names = [*sorted(PLACEHOLDERS), *NAMED_PLACEHOLDERS]
    text = ", ".join("{" + n + "}" for n in names)
    if configs:
        text += f"; this row's configs: {', '.join('{config.' + c + '}' for c in sorted(configs))}"
    return text


def check_template(template: Any, where: str, configs: set[str], mode: str = "socks") -> None:
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(f"{where}: expected a non-empty string")
    known = set(PLACEHOLDERS) | {f"config.{c}" for c in configs}
    for name in _fields(template, where):  # the first bad one in reading order
        if name.startswith("tool.") and TOOL_NAME.fullmatch(name[5:]):
            continue
        if name not in known:
            raise TemplateError(f"{where}: unknown placeholder {{{name}}}"
                                f"{did_you_mean(name, known)} "
                                f"(known: {known_placeholders(configs)})")
        if MODE_ONLY.get(name, mode) != mode:
            raise TemplateError(f"{where}: {{{name}}} is for mode = \"{MODE_ONLY[name]}\" "
                                f"only; this row's mode is \"{mode}\""
                                + (" (a forwarder's clients connect to {local_host}:"
                                   "{local_port}, with no SOCKS)" if mode == "forward" else ""))


def template_fields(options: dict[str, Any],
                    roles: tuple[str, ...] = ("server", "client")) -> set[str]:
    """The placeholders a row's command templates for ``roles`` and its configs use."""
    texts = [options.get(r, "") for r in roles] + list(options.get("configs", {}).values())
    return {f for x in texts if isinstance(x, str) and x for f in placeholders(x, "templates")}


class _Names:
    """``{config.NAME}``, ``{tool.NAME}``: str.format reads NAME as an attribute."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.__dict__.update(paths)


class ExternalPlugin(LabPlugin):
    """A row run from the spec's command templates (no code of ours in the path)."""

    vm_ready = True  # it uses only the client and bridge roles

    def __init__(self, name: str, options: dict[str, Any],
                 tool_settings: dict[str, dict[str, Any]] | None = None) -> None:
        self.name = name
        self.options = options
        # The spec's [tools.NAME] tables (path, version_args), for ptlab.common.tools.
        self.tool_settings = tool_settings or {}
        self.check_options(options)
        # A slow tool (a DNS tunnel probing its fragment sizes) may ask for more time
        # for its first request than the spec's bootstrap_timeout_s gives.
        self.bootstrap_floor_s = float(options.get("bootstrap_floor_s", 0.0))
        self.description = str(options.get("description") or
                               f"external tool: {shlex.split(options['client'])[0]} "
                               f"against {shlex.split(options['server'])[0]}")

    def check_options(self, options: dict[str, Any]) -> None:
        where = f"transports.{self.name}"
        unknown = sorted(set(options) - KEYS)
        if unknown:
            raise TemplateError(f"{where}.{unknown[0]}: unknown key (known: "
                                f"{', '.join(sorted(KEYS))})")
        if options.get("kind") != "external":
            raise TemplateError(f"{where}.kind: must be \"external\"")
        mode = options.get("mode", "socks")
        if mode not in MODES:
            raise TemplateError(f"{where}.mode: {mode!r} is not supported (supported: "
                                f"{', '.join(MODES)})")
        configs = options.get("configs", {})
        if not isinstance(configs, dict):
            raise TemplateError(f"{where}.configs: expected a table of NAME = template")
        for role in ("server", "client"):
            if role not in options:
                raise TemplateError(f"{where}.{role}: missing (a command template)")
            check_template(options[role], f"{where}.{role}", set(configs), mode)
            _split(options[role], f"{where}.{role}")
        for name, text in configs.items():
            if not name.isidentifier():
                raise TemplateError(f"{where}.configs.{name}: a config name must be an "
                                    "identifier (templates name it as {config.NAME})")
            check_template(text, f"{where}.configs.{name}", set(configs) - {name}, mode)
        self._check_server_address(options, where)
        for role in ("server", "client"):
            if f"{role}_probe" in options:
                if f"{role}_ready" in options:
                    raise TemplateError(f"{where}.{role}_probe: give {role}_ready (a line of "
                                        f"its log) or {role}_probe (a command), not both")
                check_template(options[f"{role}_probe"], f"{where}.{role}_probe",
                               set(configs), mode)
                _split(options[f"{role}_probe"], f"{where}.{role}_probe")
        binaries = options.get("binaries", [])
        if not isinstance(binaries, list) or not all(isinstance(b, str) for b in binaries):
            raise TemplateError(f"{where}.binaries: expected a list of program names")
        needs = options.get("needs_tags", {})
        if not isinstance(needs, dict) or not all(
                isinstance(v, list) and all(isinstance(t, str) for t in v)
                for v in needs.values()):
            raise TemplateError(f"{where}.needs_tags: expected a table of TOOL = [build tags]")
        used = self._tools_in(options)
        for tool in needs:
            if tool not in used:
                raise TemplateError(f"{where}.needs_tags.{tool}: no template names "
                                    f"{{tool.{tool}}}")
        for role in ("server_ready", "client_ready"):
            if role in options and not isinstance(options[role], str):
                raise TemplateError(f"{where}.{role}: expected a regular expression")
        names = options.get("lab_cert_names", LAB_CERT_NAMES)
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) and n for n in names)):
            raise TemplateError(f"{where}.lab_cert_names: expected a list of DNS names")
        for key in ("ready_timeout_s", "bootstrap_floor_s"):
            v = options.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 600:
                raise TemplateError(f"{where}.{key}: expected seconds between 0 and 600")

    @staticmethod
    def _check_server_address(options: dict[str, Any], where: str) -> None:
        """``server_port`` (1-65535) and ``server_proto`` (tcp or udp)."""
        port = options.get("server_port", SERVER_PORT)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise TemplateError(f"{where}.server_port: expected a port number (1-65535), "
                                f"got {port!r}")
        proto = options.get("server_proto", "tcp")
        if proto not in PROTOS:
            raise TemplateError(f"{where}.server_proto: {proto!r} is not supported "
                                f"(supported: {', '.join(PROTOS)})")
        if port != SERVER_PORT and "tunnel_domain" in template_fields(options):
            raise TemplateError(f"{where}.server_port: the lab resolver delegates "
                                f"{{tunnel_domain}} to port {SERVER_PORT} on the bridge, so a "
                                "DNS tunnel's server must listen there: drop server_port")

    @property
    def mode(self) -> str:
        return str(self.options.get("mode", "socks"))

    @property
    def server_port(self) -> int:
        return int(self.options.get("server_port", SERVER_PORT))

    @property
    def server_proto(self) -> str:
        return str(self.options.get("server_proto", "tcp"))

    def peer_binaries(self) -> list[str]:
        return list(self.options.get("binaries", []))

    @staticmethod
    def _tools_in(options: dict[str, Any]) -> list[str]:
        return sorted(f[5:] for f in template_fields(options) if f.startswith("tool."))

    def tools(self) -> list[str]:
        """The tools the templates name as ``{tool.NAME}``."""
        return self._tools_in(self.options)

    def resolve_tool(self, name: str) -> toolbox.Tool:
        settings = self.tool_settings.get(name, {})
        return toolbox.resolve(name, settings.get("path"), settings.get("version_args"))

    def skip_reason(self) -> str | None:
        """Why this row cannot run with the tools found: a build tag it needs is
        missing (REALITY needs sing-box's ``with_utls``). A tool not found at all
        is an ERROR, as a missing binary is, not a skip."""
        for name, needed in sorted(self.options.get("needs_tags", {}).items()):
            try:
                tool = self.resolve_tool(name)
            except toolbox.ToolError:
                return None  # the cell's ERROR says where it was looked for
            missing = tool.missing_tags(needed)
            if missing:
                has = ", ".join(tool.tags) if tool.tags else "reports no build tags"
                return (f"needs {name} built with {', '.join(missing)}; {tool.path} "
                        f"({tool.version}, from {tool.source}) has: {has}")
        return None

    # --- one cell ------------------------------------------------------------------

    @staticmethod
    def tun_device(ctx: CellContext, role: str) -> str:
        """The tun device of ``role`` ("server"/"client"): ptl, the lab id, the side."""
        return f"ptl{getattr(ctx.lab, 'id', '') or ''}tun{role[0]}"[:15]

    def _values(self, ctx: CellContext, role: str) -> dict[str, Any]:
        state = ctx.workdir / f"{self.name}-state"
        state.mkdir(exist_ok=True)
        secret_file = state / "secret"
        if not secret_file.exists():  # one secret per cell, the same for both sides
            secret_file.write_text(secrets.token_hex(16))
        values: dict[str, Any] = {
            "server_host": ctx.lab.addr("bridge"), "server_port": str(self.server_port),
            "socks_host": SOCKS_HOST, "socks_port": str(SOCKS_PORT),
            "local_host": LOCAL_HOST, "local_port": str(LOCAL_PORT),
            "target": format_hostport(*ctx.upstream),
            "secret": (secret := secret_file.read_text().strip()), "state": str(state),
            # The secret as a UUID, for tools whose users are UUIDs (VMess, VLESS).
            "uuid": f"{secret[:8]}-{secret[8:12]}-{secret[12:16]}-{secret[16:20]}-{secret[20:32]}",
            # The secret's 16 bytes in base64: Shadowsocks-2022's keys are exactly the
            # cipher's key size, given as base64 (SIP022).
            "secret_b64": base64.b64encode(bytes.fromhex(secret)).decode(),
            "target_host": ctx.upstream[0], "target_port": str(ctx.upstream[1]),
            "lab_ca": str(ctx.lab_ca or ""),
            "tun_dev": self.tun_device(ctx, role), "tun_server": TUN_SERVER,
            "tun_client": TUN_CLIENT,
            "dns_host": ctx.lab.addr("svc") if _has_role(ctx.lab, "svc") else "",
            "tunnel_domain": TUNNEL_ZONE,
            "lab_cert": "", "lab_key": "",
        }
        if {"lab_cert", "lab_key"} & template_fields(self.options):
            values["lab_cert"], values["lab_key"] = self._lab_cert(ctx)
        # Each side renders its own copy ({tun_dev} differs by side), and every path is
        # known before any file is written, so configs may name each other in any order.
        configs = self.options.get("configs", {})
        values["config"] = _Names({name: str(state / f"{role}-{name}") for name in configs})
        values["tool"] = _Names({name: self.resolve_tool(name).path for name in self.tools()})
        for name, text in configs.items():
            (state / f"{role}-{name}").write_text(text.format(**values))
        return values

    def _lab_cert(self, ctx: CellContext) -> tuple[str, str]:
        """The row's certificate and key from the lab CA (reused while its names and
        the bridge's address stay the same)."""
        names = list(self.options.get("lab_cert_names", LAB_CERT_NAMES))
        cert, key = ctx.issue_cert(f"{self.name}: {{lab_cert}}", names,
                                   [ctx.lab.addr("bridge")], f"ext-{self.name}")
        return str(cert), str(key)

    def _argv(self, role: str, ctx: CellContext) -> list[str]:
        return self._filled(role, ctx)[0]

    def _filled(self, role: str, ctx: CellContext) -> tuple[list[str], dict[str, Any]]:
        """``role``'s command line, filled in, and the values it was filled with."""
        if (missing := self.missing(self.options)) is not None:
            raise FileNotFoundError(f"{self.name}: {missing}")
        values = self._values(ctx, role)
        return [token.format(**values) for token in shlex.split(self.options[role])], values

    @property
    def resolver_is_wire(self) -> bool:  # type: ignore[override]  # a class attribute in LabPlugin
        """A row whose client names the lab resolver ({dns_host}) tunnels through it."""
        return "dns_host" in template_fields(self.options, roles=("client",))

    @property
    def tunnel(self) -> bool:
        return self.mode == "tunnel"

    def listen_address(self, role: str, ctx: CellContext) -> tuple[str, int]:
        """Where ``role``'s process listens: the server on the bridge (its
        ``server_port``), the client on its SOCKS5 front or forwarded port."""
        if role == "server":
            return ctx.lab.addr("bridge"), self.server_port
        return (LOCAL_HOST, LOCAL_PORT) if self.mode == "forward" else (SOCKS_HOST, SOCKS_PORT)

    def readiness(self, role: str, ctx: CellContext, values: dict[str, Any]) -> Readiness:
        """How the lab tells that ``role``'s process is ready, and the words a
        timeout gives: what it waited for, and the keys that change it. In order:
        the row's log line (``ROLE_ready``), the row's probe command
        (``ROLE_probe``), a tunnel's device, a TCP port that accepts, a UDP port
        the process has bound."""
        timeout = float(self.options.get("ready_timeout_s", 15.0))
        longer = f"ready_timeout_s (now {timeout:g}) gives it longer"
        if regex := self.options.get(f"{role}_ready"):
            return Readiness(regex, [], f"a line of its log matching /{regex}/ ({role}_ready)",
                             f"fix {role}_ready, or {longer}")
        other = (f"to wait for something else, set {role}_ready = \"REGEX\" (a line of "
                 f"its log) or {role}_probe = \"COMMAND\" (exits 0 once it is ready); {longer}")
        if probe := self.options.get(f"{role}_probe"):
            cmd = shlex.join(token.format(**values) for token in shlex.split(probe))
            return Readiness(READY_PATTERN, ["--ready-cmd", cmd],
                             f"{role}_probe to exit 0 ({cmd})", f"fix {role}_probe, or {longer}")
        if self.tunnel:
            dev = self.tun_device(ctx, role)
            return Readiness(READY_PATTERN, ["--ready-dev", dev],
                             f"tun device {dev} to be up with an address, as tunnel mode does",
                             other)
        host, port = self.listen_address(role, ctx)
        where = format_hostport(host, port)
        if role == "server" and self.server_proto == "udp":
            return Readiness(READY_PATTERN, ["--ready-udp", where],
                             f"its process to bind UDP {where}, the check for "
                             "server_proto = \"udp\"", other)
        front = ("server_proto = \"tcp\"" if role == "server" else
                 "its forwarded port" if self.mode == "forward" else "its SOCKS5 front")
        return Readiness(READY_PATTERN, ["--ready-port", where],
                         f"TCP {where} to accept a connection ({front})", other)

    def _service(self, role: str, node: str, ctx: CellContext) -> Service:
        argv, values = self._filled(role, ctx)
        timeout = float(self.options.get("ready_timeout_s", 15.0))
        ready = self.readiness(role, ctx, values)
        if ready.launch:
            argv = ctx.py("ptlab.processes.extlaunch", *ready.launch,
                          "--component", f"{self.name}-{role}", "--", *argv)
        return Service(f"{self.name}-{role}", node, argv, ready=ready.pattern,
                       ready_timeout_s=timeout, ready_what=f"ready (waited for {ready.what})",
                       ready_hint=ready.hint)

    def servers(self, ctx: CellContext) -> list[Service]:
        out = [self._service("server", "bridge", ctx)]
        if self.tunnel:
            out.append(Service(f"{self.name}-tunroute-server", "bridge", ctx.py(
                "ptlab.processes.tunroute", "server", "--dev", self.tun_device(ctx, "server"),
                "--subnet", TUN_SUBNET)))
        return out

    def clients(self, ctx: CellContext) -> list[Service]:
        out = [self._service("client", "client", ctx)]
        if self.tunnel:
            out.append(Service(f"{self.name}-tunroute-client", "client", ctx.py(
                "ptlab.processes.tunroute", "client", "--dev", self.tun_device(ctx, "client"),
                "--via", TUN_SERVER,
                "--to", f"{ctx.upstream[0]}/32",
                "--benign-ports", f"{BENIGN_PORTS.start}-{BENIGN_PORTS.stop - 1}")))
        return out

    def endpoint(self, ctx: CellContext) -> Endpoint:
        """socks: the client's SOCKS5 front, which connects to the web server; forward:
        the client's forwarded port, which is the web server as far as the workloads
        can tell (the server end forwards to {target}); tunnel: the web server itself,
        routed into the tunnel."""
        if self.mode == "forward":
            return Endpoint(LOCAL_HOST, LOCAL_PORT, LOCAL_HOST, LOCAL_PORT, socks=False)
        return Endpoint(SOCKS_HOST, SOCKS_PORT, *ctx.upstream, socks=not self.tunnel)


@dataclass(frozen=True)
class Readiness:
    """When a row's process is ready: ``pattern`` in its log, after ``launch`` (the
    arguments for ``ptlab.processes.extlaunch``, which writes the ready event once its
    check passes; empty when the tool's own log line is the sign)."""

    pattern: str
    launch: list[str]
    what: str  # what was waited for, for a timeout's message
    hint: str  # which keys change it


def _split(template: str, where: str) -> list[str]:
    try:
        return shlex.split(template)
    except ValueError as exc:
        raise TemplateError(f"{where}: {exc}") from None


def _has_role(lab: Any, role: str) -> bool:
    """Whether the lab has a node ``role`` (a test's stand-in lab may have none)."""
    try:
        lab.addr(role)
    except (LabError, KeyError):
        return False
    return True
