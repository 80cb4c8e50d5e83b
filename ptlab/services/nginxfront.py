"""A small real website on Debian's nginx, optionally hiding one secret path.

WebTunnel's bridges (docs/transports/webtunnel.md §4) sit behind an ordinary
web server (as the VMess-over-WebSocket row's v2ray does, in its own config
template in experiments/proxies.toml): it terminates TLS with the
site's certificate, serves the site to anyone, and proxies only one secret
path, with ``Upgrade``, to the tunnel server on the loopback. A prober that
does not know the path must see exactly the web server it would see with no
tunnel behind it, so the same function writes both configurations and a test
compares their answers byte for byte (tests/ptlab/services/test_nginxfront.py).

The proxied location follows what Tor's WebTunnel documentation gives bridge
operators: HTTP/1.1 to the backend, ``Upgrade`` passed on and ``Connection:
upgrade`` set, ``Accept-Encoding`` cleared, ``Host`` and the forwarding
headers (``X-Real-IP``, ``X-Forwarded-For``, ``X-Forwarded-Proto``) set,
``Front-End-Https: on`` added, no redirect rewriting, and no logs.

TLS and HTTP/2 are set up as on the bridges Tor's operator guide has people
deploy: ``listen ... ssl http2``, and certbot's ``options-ssl-nginx.conf``, which
``certbot --nginx`` includes in the site (TLS 1.2 and 1.3, its cipher list for
1.2, the client's cipher preference, a shared session cache for a day, no session
tickets). Without ``ssl_protocols``, Debian's nginx 1.22 offers TLS 1.0 to 1.2
only: a TLS 1.3-only ClientHello got a protocol_version alert and ALPN ``h2``
alone a no_application_protocol alert, a fingerprint deployed bridges do not
have (docs/lab/peers.md §3.3). certbot's ``ssl_dhparam`` line is left out: it
serves only the DHE-RSA suites, which the lab's ECDSA certificate (certbot's
default key type since 2.0) never uses. WebTunnel's clients offer no ALPN
(lyrebird's hello is uTLS's ``HelloRandomizedNoALPN``), so the tunnel stays on
HTTP/1.1 and its Upgrade.

No log line names a client by default: there is no access log, a missing page
is not logged, and the secret path logs nothing (nginx's error lines carry the
client's address).

Everything nginx writes (pid, temporary files) stays in the prefix directory
it is given, and it logs to stderr, so several can run at once, one per cell.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

# A few pages a visitor (or a prober) can fetch: the site is small but real.
SITE_PAGES = {
    "index.html": ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>Field notes</title><link rel=\"stylesheet\" href=\"/style.css\">"
                   "</head>\n<body><h1>Field notes</h1>\n<p>Photographs and notes from the "
                   "field, mostly birds.</p>\n<ul><li><a href=\"/about.html\">About</a></li>"
                   "</ul></body></html>\n"),
    "about.html": ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>About - Field notes</title></head>\n<body><h1>About</h1>\n"
                   "<p>A notebook kept since 2019.</p></body></html>\n"),
    "style.css": "body { font-family: serif; max-width: 40em; margin: 2em auto; }\n",
    "robots.txt": "User-agent: *\nAllow: /\n",
}
NGINX_BINARY = "nginx"
#: certbot's options-ssl-nginx.conf (certbot-nginx's tls_configs), as the operator
#: guide's ``certbot --nginx`` includes it in the server block.
CERTBOT_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                   "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                   "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                   "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384")
CERTBOT_TLS_OPTIONS = f"""\
    ssl_session_cache shared:le_nginx_SSL:10m;
    ssl_session_timeout 1440m;
    ssl_session_tickets off;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers off;
    ssl_ciphers "{CERTBOT_CIPHERS}";
"""


def secret_path(seed: int, length: int = 24) -> str:
    """A secret path like the ones bridge operators pick: random letters and digits
    (drawn from the cell's seed, so a run is reproducible)."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    rng = random.Random(f"webtunnel-path-{seed}")
    return "".join(rng.choice(alphabet) for _ in range(length))


@dataclass(frozen=True)
class Front:
    """One nginx site: where it listens, its name and certificate, and (optionally)
    the secret path and the loopback port of the tunnel server behind it."""

    prefix: Path  # nginx's prefix: pid, temporary files, the site, the config
    listen: tuple[str, ...]  # "198.18.0.3:443", "[2001:db8::3]:443"
    server_name: str
    cert: Path
    key: Path
    secret: str | None = None  # the path without its leading slash
    backend_port: int | None = None

    @property
    def site(self) -> Path:
        return self.prefix / "site"

    @property
    def config_path(self) -> Path:
        return self.prefix / "nginx.conf"

    def argv(self) -> list[str]:
        return [NGINX_BINARY, "-e", "stderr", "-p", str(self.prefix), "-c",
                str(self.config_path)]

    def write(self) -> Front:
        """Write the site and the configuration; return self."""
        if (self.secret is None) != (self.backend_port is None):
            raise ValueError("a secret path needs a backend port, and the other way round")
        if self.secret is not None and (not self.secret or "/" in self.secret
                                        or any(c in self.secret for c in " ;{}\"'\\")):
            raise ValueError(f"bad secret path {self.secret!r}")
        self.site.mkdir(parents=True, exist_ok=True)
        for name, text in SITE_PAGES.items():
            (self.site / name).write_text(text)
        self.config_path.write_text(self.config())
        return self

    def config(self) -> str:
        listen = "\n".join(f"    listen {addr} ssl http2;" for addr in self.listen)
        tunnel = ""
        if self.secret is not None:
            tunnel = f"""
    location = /{self.secret} {{
      proxy_pass http://127.0.0.1:{self.backend_port};
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection "upgrade";
      proxy_set_header Accept-Encoding "";
      proxy_set_header Host $host;
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      add_header Front-End-Https on;
      proxy_redirect off;
      access_log off;
      error_log /dev/null;
    }}
"""
        p = self.prefix
        return f"""daemon off;
master_process on;
worker_processes 1;
user root;
pid {p}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  log_not_found off;  # a missing page is not an error, and its line names the client
  client_body_temp_path {p}/nginx-body;
  proxy_temp_path {p}/nginx-proxy;
  fastcgi_temp_path {p}/nginx-fastcgi;
  uwsgi_temp_path {p}/nginx-uwsgi;
  scgi_temp_path {p}/nginx-scgi;
  types {{ text/html html; text/css css; text/plain txt; }}
  default_type application/octet-stream;
  server {{
{listen}
    server_name {self.server_name};
    ssl_certificate {self.cert};
    ssl_certificate_key {self.key};
{CERTBOT_TLS_OPTIONS}    root {self.site};
    index index.html;
{tunnel}  }}
}}
"""
