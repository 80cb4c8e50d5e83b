"""The lab's well-known ports, names and ranges: what every part of it agrees on.

Lab services listen on these ports (docs/architecture.md §1.4), plugins point
their rows at them, the runner tells infrastructure flows from a transport's
by them, and the resolver serves these names. They sit at the floor of
``ptlab`` so that plugins and services read them without importing what
starts the services.
"""

from __future__ import annotations

WEB_HTTP, WEB_HTTPS, EDGE_HTTPS, EDGE_HTTP = 80, 443, 443, 80
DNS_PORT, STUN_PORT, BINARY_PORT, UDP_PORT, SSH_PORT = 53, 3478, 7000, 7001, 22
QUIC_PORT = 443  # UDP: the QUIC echo, where HTTP/3 servers listen
# The zone the lab resolver delegates to the bridge, for DNS tunnels, and the
# bridge's port where a bring-your-own-tool row's server listens (a DNS tunnel's
# server answers the delegation there: docs/lab/transports.md §7.5).
TUNNEL_ZONE = "tunnel.lab"
SERVER_PORT = 9850
# Benign sites behind the edge, and the names fronted transports will use.
# Two front domains (front.lab, assets.lab) and two benign sites share the edge.
EDGE_SITES = ("www.benign.lab", "news.benign.lab", "front.lab", "assets.lab")
# Origins behind the edge on other nodes: name -> (node, port, mode). They run
# per cell; between cells the edge answers 502 for them. meek's origin sits
# behind a reflector route (only meek's headers pass, Meek-IP added).
SNOWFLAKE_EDGE_NAME, SNOWFLAKE_BROKER_PORT = "snowflake.lab", 8080
MEEK_EDGE_NAME, MEEK_PORT = "meek.lab", 7080
CONJURE_EDGE_NAME, CONJURE_REGISTRAR_PORT = "conjure.lab", 8090
# The ISP's range (Conjure's lab row adds it to the isp node): used addresses in
# the lower half run ordinary servers, the upper half is phantom space.
ISP_RANGE, ISP_PHANTOMS, ISP_SERVER = "198.19.200.0/24", "198.19.200.128/25", "198.19.200.10"
ISP_RANGE6, ISP_PHANTOMS6 = "2001:db8:c800::/64", "2001:db8:c800:0:8000::/65"
EDGE_ORIGINS = {SNOWFLAKE_EDGE_NAME: ("broker", SNOWFLAKE_BROKER_PORT, "cdn"),
                MEEK_EDGE_NAME: ("bridge", MEEK_PORT, "reflector"),
                CONJURE_EDGE_NAME: ("isp", CONJURE_REGISTRAR_PORT, "cdn")}

