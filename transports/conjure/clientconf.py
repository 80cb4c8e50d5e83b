"""The ``ClientConf`` that Refraction Networking's client reads, for our station.

Conjure's client (gotapdance's ``cli``, conjure's ``pkg/client/assets``) takes its
station from a protobuf file named ``ClientConf`` in its assets directory
(``-assetsdir``): the phantom subnets with their weights, the generation the
registration names, and the station's X25519 public key (``conjure_pubkey``,
which the prefix transport needs). Without the file it falls back to the
public deployment's built-in subnets, which a lab must never reach. What we
write is what our own client takes as bridge-line arguments (``phantoms=``,
``generation=``, ``pubkey=``; docs/transports/conjure.md §3.5, §9).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from . import signalling as sig

FILENAME = "ClientConf"


def build_client_conf(generation: int, subnets: Sequence[str], station_public: bytes,
                      randomize_dst_port: bool = False, weight: int = 1) -> bytes:
    """A serialized ``ClientConf``: one weighted group of ``subnets``, no decoys
    (an API registration needs none)."""
    if len(station_public) != 32:
        raise ValueError("the station's public key is 32 bytes (X25519)")
    group = sig.PhantomSubnets(weight=weight, subnets=list(subnets),
                               randomize_dst_port=randomize_dst_port)
    conf = sig.ClientConf(generation=generation,
                          phantom_subnets_list=sig.PhantomSubnetsList(weighted_subnets=[group]),
                          conjure_pubkey=sig.PubKey(key=station_public, type=90))
    conf.decoy_list.SetInParent()  # present and empty, as a conf with no decoys is
    return conf.SerializeToString()


def write_assets(directory: Path, generation: int, subnets: Sequence[str],
                 station_public: bytes, randomize_dst_port: bool = False) -> Path:
    """Write ``directory/ClientConf`` (an assets directory for ``-assetsdir``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILENAME
    path.write_bytes(build_client_conf(generation, subnets, station_public, randomize_dst_port))
    return path
