"""PT stdout lines: exact text, escaping, one flushed ASCII line each."""

import codecs
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ptadapter import str_utils

from transports.pt import messages


class Recorder(io.StringIO):
    """Counts flushes, so we know each line left the buffer at once."""

    flushes = 0

    def flush(self):
        self.flushes += 1
        super().flush()


def lines_of(fn, *args, **kw):
    out = Recorder()
    fn(*args, out=out, **kw)
    text = out.getvalue()
    assert text.endswith("\n") and out.flushes == 1
    return text[:-1]


def test_fixed_lines():
    assert lines_of(messages.version, "1") == "VERSION 1"
    assert lines_of(messages.version_error) == "VERSION-ERROR no-version"
    assert lines_of(messages.env_error, "no TOR_PT_STATE_LOCATION") == \
        "ENV-ERROR no TOR_PT_STATE_LOCATION"
    assert lines_of(messages.proxy_done) == "PROXY DONE"
    assert lines_of(messages.proxy_error, "nope") == "PROXY-ERROR nope"
    assert lines_of(messages.cmethods_done) == "CMETHODS DONE"
    assert lines_of(messages.smethods_done) == "SMETHODS DONE"


def test_cmethod_and_smethod():
    assert lines_of(messages.cmethod, "obfs4", "127.0.0.1", 4321) == \
        "CMETHOD obfs4 socks5 127.0.0.1:4321"
    assert lines_of(messages.cmethod_error, "meek", "no\nway") == "CMETHOD-ERROR meek no way"
    assert lines_of(messages.smethod, "direct", "::1", 9) == "SMETHOD direct [::1]:9"
    assert lines_of(messages.smethod, "obfs4", "198.18.0.2", 443,
                    {"cert": "AbC+/x", "iat-mode": "0"}) == \
        "SMETHOD obfs4 198.18.0.2:443 ARGS:cert=AbC+/x,iat-mode=0"
    assert lines_of(messages.smethod_error, "meek", "server not supported") == \
        "SMETHOD-ERROR meek server not supported"


def test_smethod_args_escaping():
    assert messages.format_smethod_args({"a=b": "c,d", "e": "f\\"}) == r"a\=b=c\,d,e=f\\"
    # ptadapter (a parent) splits it where we meant it to be split.
    parsed = str_utils.parse_smethod_args(messages.format_smethod_args({"k": "v,w=x", "z": "1"}))
    assert list(parsed) == ["k", "z"]
    with pytest.raises(ValueError):
        messages.format_smethod_args({"k": "has space"})


_ARG = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)


def _parse_args(text: str) -> dict[str, str]:
    """An independent reader of the escaping we promise (``\\x`` is a literal x)."""
    out, key, cur, i = {}, None, [], 0
    while i <= len(text):
        ch = text[i] if i < len(text) else ","
        if ch == "\\":
            cur.append(text[i + 1])
            i += 2
            continue
        if ch == "=" and key is None:
            key, cur = "".join(cur), []
        elif ch == ",":
            out[key] = "".join(cur)
            key, cur = None, []
        else:
            cur.append(ch)
        i += 1
    return out


@given(st.dictionaries(_ARG, _ARG, min_size=1, max_size=4))
def test_smethod_args_round_trip(args):
    assert _parse_args(messages.format_smethod_args(args)) == args
    assert messages.parse_smethod_args(messages.format_smethod_args(args)) == args


def test_parsing_smethod_args_as_a_parent():
    assert messages.parse_smethod_args(r"cert=a\,b\=c\\,iat-mode=0") == {
        "cert": "a,b=c\\", "iat-mode": "0"}
    assert messages.parse_smethod_args(r"k\=ey=v=w,,flag") == {"k=ey": "v=w", "flag": ""}
    assert messages.parse_smethod_args("") == {}
    with pytest.raises(ValueError, match="dangling backslash"):
        messages.parse_smethod_args("k=v\\")


def _c_unquote(s: str) -> str:
    assert s[0] == s[-1] == '"'
    return codecs.decode(s[1:-1], "unicode_escape").encode("latin-1").decode("utf-8")


@given(st.text(max_size=40))
def test_log_message_is_one_ascii_line_and_round_trips(msg):
    line = messages.format_log("warning", msg)
    assert line.isascii() and "\n" not in line and "\0" not in line
    prefix = "LOG SEVERITY=warning MESSAGE="
    assert line.startswith(prefix)
    assert _c_unquote(line[len(prefix):]) == msg


def test_log_line_and_severity():
    assert lines_of(messages.log, "error", 'ORPort "down"') == \
        r'LOG SEVERITY=error MESSAGE="ORPort \"down\""'
    with pytest.raises(ValueError):
        messages.format_log("fatal", "x")


def test_status_quotes_only_when_needed():
    line = lines_of(messages.status, "obfs4", {"ADDRESS": "198.18.0.2:443", "CONNECT": "Success",
                                               "ERROR": "timed out, retrying"})
    assert line == ('STATUS TRANSPORT=obfs4 ADDRESS=198.18.0.2:443 CONNECT=Success '
                    'ERROR="timed out, retrying"')
    assert messages.format_status("x", {"K": ""}) == 'STATUS TRANSPORT=x K=""'
    with pytest.raises(ValueError):
        messages.format_status("x", {"BAD KEY": "v"})


def test_error_text_is_sanitised():
    line = lines_of(messages.env_error, "caf\u00e9\r\nsecond\0line")
    assert line.isascii() and "\n" not in line and "\0" not in line


def test_emit_survives_a_closed_stdout():
    out = io.StringIO()
    out.close()
    messages.emit("VERSION 1", out)  # no exception: the lifetime watcher ends us instead
