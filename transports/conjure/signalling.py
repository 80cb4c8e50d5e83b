"""Conjure's registration messages: the part of ``proto/signalling.proto`` we speak.

Why built here rather than generated: the messages are proto2 in package
``tapdance``; building their descriptor with ``descriptor_pb2`` gives the
protobuf library's own encoder and decoder without a ``protoc`` step. Field
numbers, types and labels follow signalling.proto exactly
(docs/transports/conjure.md §2.3), so a registration we encode is what Conjure's registrar decodes.

Messages: ``C2SWrapper``, ``ClientToStation``, ``RegistrationFlags``,
``GenericTransportParams``, ``PrefixTransportParams``, ``RegistrationResponse``,
and the ``ClientConf`` a client ships with (``PubKey``, ``DecoyList``,
``TLSDecoySpec``, ``PhantomSubnetsList``, ``PhantomSubnets``); enums
``TransportType``, ``RegistrationSource`` and ``KeyType``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
OPT = F.LABEL_OPTIONAL
REP = F.LABEL_REPEATED

TRANSPORT_TYPES = {"null": 0, "min": 1, "obfs4": 2, "dtls": 3, "prefix": 4}
SOURCE_API, SOURCE_BIDIRECTIONAL_API = 2, 4


_REPEATED = {("DecoyList", "tls_decoys"), ("PhantomSubnets", "subnets"),
             ("PhantomSubnetsList", "weighted_subnets")}


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="ptlab/conjure_signalling.proto",
                                           package="tapdance", syntax="proto2",
                                           dependency=["google/protobuf/any.proto"])

    def enum(name: str, values: dict[str, int]) -> None:
        e = f.enum_type.add(name=name)
        for key, number in values.items():
            e.value.add(name=key, number=number)

    def message(name: str, fields: list[tuple[str, int, int, str | None]]) -> None:
        m = f.message_type.add(name=name)
        for fname, number, ftype, type_name in fields:
            many = (name, fname) in _REPEATED
            fd = m.field.add(name=fname, number=number, type=ftype, label=REP if many else OPT)
            if type_name:
                fd.type_name = type_name

    enum("TransportType", {"Null": 0, "Min": 1, "Obfs4": 2, "DTLS": 3, "Prefix": 4, "uTLS": 5,
                           "Format": 6, "WASM": 7, "FTE": 8, "Quic": 9, "Webrtc": 99})
    enum("RegistrationSource", {"Unspecified": 0, "Detector": 1, "API": 2,
                                "DetectorPrescan": 3, "BidirectionalAPI": 4, "DNS": 5,
                                "BidirectionalDNS": 6})
    message("RegistrationFlags", [("upload_only", 1, F.TYPE_BOOL, None),
                                  ("dark_decoy", 2, F.TYPE_BOOL, None),
                                  ("proxy_header", 3, F.TYPE_BOOL, None),
                                  ("use_TIL", 4, F.TYPE_BOOL, None),
                                  ("prescanned", 5, F.TYPE_BOOL, None)])
    message("GenericTransportParams", [("randomize_dst_port", 13, F.TYPE_BOOL, None)])
    message("PrefixTransportParams", [("prefix_id", 1, F.TYPE_INT32, None),
                                      ("prefix", 2, F.TYPE_BYTES, None),
                                      ("flush_after_prefix", 3, F.TYPE_BOOL, None),
                                      ("randomize_dst_port", 13, F.TYPE_BOOL, None)])
    message("ClientToStation", [
        ("protocol_version", 1, F.TYPE_UINT32, None),
        ("decoy_list_generation", 2, F.TYPE_UINT32, None),
        ("client_lib_version", 5, F.TYPE_UINT32, None),
        ("disable_registrar_overrides", 6, F.TYPE_BOOL, None),
        ("transport", 12, F.TYPE_ENUM, ".tapdance.TransportType"),
        ("transport_params", 13, F.TYPE_MESSAGE, ".google.protobuf.Any"),
        ("covert_address", 20, F.TYPE_STRING, None),
        ("masked_decoy_server_name", 21, F.TYPE_STRING, None),
        ("v6_support", 22, F.TYPE_BOOL, None),
        ("v4_support", 23, F.TYPE_BOOL, None),
        ("flags", 24, F.TYPE_MESSAGE, ".tapdance.RegistrationFlags"),
        ("padding", 100, F.TYPE_BYTES, None),
    ])
    message("RegistrationResponse", [
        ("ipv4addr", 1, F.TYPE_FIXED32, None),
        ("ipv6addr", 2, F.TYPE_BYTES, None),
        ("dst_port", 3, F.TYPE_UINT32, None),
        ("serverRandom", 4, F.TYPE_BYTES, None),
        ("error", 5, F.TYPE_STRING, None),
        ("transport_params", 10, F.TYPE_MESSAGE, ".google.protobuf.Any"),
    ])
    # The ClientConf a Conjure client ships with (its assets directory's ``ClientConf``):
    # what our station gives Conjure's own client (clientconf.py).
    enum("KeyType", {"AES_GCM_128": 90, "AES_GCM_256": 91})
    message("PubKey", [("key", 1, F.TYPE_BYTES, None),
                       ("type", 2, F.TYPE_ENUM, ".tapdance.KeyType")])
    message("TLSDecoySpec", [("hostname", 1, F.TYPE_STRING, None),
                             ("ipv4addr", 2, F.TYPE_FIXED32, None),
                             ("pubkey", 3, F.TYPE_MESSAGE, ".tapdance.PubKey"),
                             ("timeout", 4, F.TYPE_UINT32, None),
                             ("tcpwin", 5, F.TYPE_UINT32, None),
                             ("ipv6addr", 6, F.TYPE_BYTES, None)])
    message("DecoyList", [("tls_decoys", 1, F.TYPE_MESSAGE, ".tapdance.TLSDecoySpec")])
    message("PhantomSubnets", [("weight", 1, F.TYPE_UINT32, None),
                               ("subnets", 2, F.TYPE_STRING, None),
                               ("randomize_dst_port", 3, F.TYPE_BOOL, None)])
    message("PhantomSubnetsList", [
        ("weighted_subnets", 1, F.TYPE_MESSAGE, ".tapdance.PhantomSubnets")])
    message("ClientConf", [
        ("decoy_list", 1, F.TYPE_MESSAGE, ".tapdance.DecoyList"),
        ("generation", 2, F.TYPE_UINT32, None),
        ("default_pubkey", 3, F.TYPE_MESSAGE, ".tapdance.PubKey"),
        ("phantom_subnets_list", 4, F.TYPE_MESSAGE, ".tapdance.PhantomSubnetsList"),
        ("conjure_pubkey", 5, F.TYPE_MESSAGE, ".tapdance.PubKey"),
    ])
    message("C2SWrapper", [
        ("shared_secret", 1, F.TYPE_BYTES, None),
        ("registration_payload", 3, F.TYPE_MESSAGE, ".tapdance.ClientToStation"),
        ("registration_source", 4, F.TYPE_ENUM, ".tapdance.RegistrationSource"),
        ("registration_address", 6, F.TYPE_BYTES, None),
        ("decoy_address", 7, F.TYPE_BYTES, None),
        ("registration_response", 8, F.TYPE_MESSAGE, ".tapdance.RegistrationResponse"),
        ("RegRespBytes", 9, F.TYPE_BYTES, None),
        ("RegRespSignature", 10, F.TYPE_BYTES, None),
    ])
    return f


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(_file())
    names = ["C2SWrapper", "ClientToStation", "RegistrationFlags", "GenericTransportParams",
             "PrefixTransportParams", "RegistrationResponse", "ClientConf", "PubKey",
             "PhantomSubnetsList", "PhantomSubnets", "DecoyList", "TLSDecoySpec"]
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tapdance.{n}"))
            for n in names}


_CLASSES = _classes()
C2SWrapper = _CLASSES["C2SWrapper"]
ClientToStation = _CLASSES["ClientToStation"]
RegistrationFlags = _CLASSES["RegistrationFlags"]
GenericTransportParams = _CLASSES["GenericTransportParams"]
PrefixTransportParams = _CLASSES["PrefixTransportParams"]
RegistrationResponse = _CLASSES["RegistrationResponse"]
ClientConf = _CLASSES["ClientConf"]
PubKey = _CLASSES["PubKey"]
PhantomSubnetsList = _CLASSES["PhantomSubnetsList"]
PhantomSubnets = _CLASSES["PhantomSubnets"]
DecoyList = _CLASSES["DecoyList"]
TLSDecoySpec = _CLASSES["TLSDecoySpec"]
