"""Our meek client's ClientHellos, captured on loopback: Python's ssl is one stable
fingerprint; curl_cffi's Chrome keeps its JA4 but shuffles extensions, so its JA3
changes from connection to connection."""

from __future__ import annotations

from ptcommon.tlshello import EXT_SNI, ja3, ja4
from transports.meek.fingerprint import capture_client_hellos


async def test_python_ssl_has_one_fingerprint_with_sni():
    hellos = await capture_client_hellos("python", 3)
    assert len(hellos) == 3
    assert len({ja3(h) for h in hellos}) == 1 and len({ja4(h) for h in hellos}) == 1
    assert all(h.sni == "front.lab" and h.ext(EXT_SNI) for h in hellos)


async def test_chrome_shuffles_extensions_so_ja3_varies_and_ja4_does_not():
    chrome = await capture_client_hellos("chrome", 4)
    python = await capture_client_hellos("python", 1)
    assert len({ja4(h) for h in chrome}) == 1
    assert len({ja3(h) for h in chrome}) >= 3  # 15+ shuffled extensions: collisions are rare
    assert ja4(chrome[0]) != ja4(python[0])
    assert ja4(chrome[0])[8:10] == "h2" and ja4(python[0])[8:10] == "h1"  # first ALPN
    assert all(h.sni == "front.lab" for h in chrome)
