"""What the Snowflake volunteer proxy is told to do: :class:`ProxyConfig`.

Kept apart from the proxy (:mod:`.proxy`) because everything around it reads
the same settings: the command line builds one (:mod:`.proxy_cli`), the
worker processes receive one as JSON (:mod:`.proxyworkers`), and so does the
lab's proxy pool. The defaults are Tor's public settings, so a volunteer can run
the proxy as is; tests always override them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .natprobe import TOR_PROBE_URL


@dataclass
class ProxyConfig:
    broker: str = "https://snowflake-broker.torproject.net/"
    relay: str = "wss://snowflake.torproject.net/"
    stun: list[str] = field(default_factory=lambda: ["stun:stun.l.google.com:19302"])
    allowed_relay_pattern: str = "snowflake.torproject.net$"
    allow_non_tls_relay: bool = False
    allow_private_relay: bool = False
    keep_local_addresses: bool = False
    capacity: int = 0  # 0: unlimited
    poll_interval_s: float = 5.0
    # Snowflake 2.14: a poll waits max(min_poll_interval_s, the broker's NextPoll, or
    # poll_interval_s without one) after the previous poll's answer, a match included.
    min_poll_interval_s: float = 1.0
    # Snowflake 2.12+: poll only while a WebSocket to the default relay opens; checked
    # at start, then after 5 min doubling to 24 h while it fails, else every 24 h.
    # Off in the library (tests); the command line turns it on, as Tor's proxy has it.
    check_relay_reachable: bool = False
    relay_recheck_min_s: float = 300.0
    relay_recheck_max_s: float = 24 * 3600.0
    # After consecutive failed polls (broker unreachable or answering errors) the
    # wait doubles from poll_interval_s up to this, and logging thins out with it.
    backoff_max_s: float = 300.0
    datachannel_timeout_s: float = 20.0
    inactivity_timeout_s: float = 30.0
    broker_timeout_s: float = 30.0
    nat: str = "unknown"  # until (or unless) the probe service says otherwise
    nat_probe_url: str = TOR_PROBE_URL  # "": never probe
    nat_retest_interval_s: float = 24 * 3600.0  # 0: probe at start only
    nat_probe_timeout_s: float = 20.0
    summary_interval_s: float = 3600.0  # Tor's -summary-interval; 0: no summary lines
    proxy_type: str = "standalone"
    unsafe_logging: bool = False
