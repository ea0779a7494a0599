"""The parent's side of the JSON-lines protocol: send a request, read one reply, trust nothing.

Requests are `{"id", "op", ...}` lines on the request pipe; each reply is one line on the reply
pipe, `{"id", "ok": true, "value", "notes"}` or `{"id", "ok": false, "kind", "message",
"traceback"}`. The child runs untrusted code that can write to the reply pipe itself, so every
reply is checked here before use:

  * a byte cap before parsing, and one deadline for writing the request and reading the reply;
  * JSON with finite numbers only (no NaN, Infinity or 1e999) and integers of at most 20 digits;
  * nesting at most MAX_DEPTH, which also bounds the recursion of the checks below;
  * the envelope's fields and types, the value's shape, and strings cut to the caller's limits;
  * no lone surrogate in any string (JSON can carry "\\ud800", a tokenizer refuses it): each is
    replaced by U+FFFD.

The memory one reply can cost is bounded by the cap: at most about 60 bytes of Python objects
per byte of JSON (1.4 M empty dicts from 4 MB of `{},`), so under 70 MB at the default 1 MiB.
`info["tools"]` of a reset, when present, must be the tool specs every consumer reads
(agent.py's first message, evaluation/heldout.py's checks): `tools_problem` says why not.
Every violation is an `EnvProtocolError` (and a dead child an `EnvCrashed`, a late one an
`EnvTimeout`); no ValueError, RecursionError or MemoryError leaves this module.
"""
import json
import math
import os
import re
import select
import time

from spade_mini.sandbox.limits import (EnvCrashed, EnvLoadError, EnvProtocolError,
                                       EnvRuntimeError, EnvTimeout)

MAX_DEPTH = 32  # the child sends at most 20 levels of info, plus the envelope
MAX_KEY_CHARS = 200
MAX_MESSAGE_CHARS = 2_000
MAX_TRACEBACK_CHARS = 8_000
MAX_NOTES = 8
READ_CHUNK = 1 << 16
MAX_TOOLS = 32
MAX_TOOLS_CHARS = 8_000  # the specs as JSON, as the agent's first message shows them
TOOL_SHAPE = ("{'type': 'function', 'function': {'name': str, 'description': str, 'parameters': "
              "{'type': 'object', 'properties': {name: {...}}, 'required': [name, ...]}}}")
SURROGATE = re.compile("[\ud800-\udfff]")


def _reject(text: str):
    raise ValueError(f"{text[:20]} is not allowed in a reply")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _reject(text)
    return value


def _short_int(text: str) -> int:
    return int(text) if len(text) <= 20 else _reject(text)


def decode(line: bytes):
    """One reply line -> a Python value, or EnvProtocolError."""
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_reject,
                          parse_float=_finite_float, parse_int=_short_int)
    except (ValueError, RecursionError, MemoryError):  # malformed, forged, or nested past json's guard
        raise EnvProtocolError("malformed reply from the environment process") from None


def clean(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, each lone surrogate replaced by U+FFFD."""
    return SURROGATE.sub("\ufffd", text[:limit])


def bounded(value, max_chars: int, depth: int = 0):
    """A copy of a decoded JSON value with every string cut to `max_chars` (keys to 200) and
    its lone surrogates replaced."""
    if depth > MAX_DEPTH:
        raise EnvProtocolError(f"reply nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return clean(value, max_chars)
    if isinstance(value, list):
        return [bounded(v, max_chars, depth + 1) for v in value]
    if isinstance(value, dict):
        return {clean(k, MAX_KEY_CHARS): bounded(v, max_chars, depth + 1) for k, v in value.items()}
    return value  # None, bool, int, float: already checked by decode()


def check_shape(value, types: tuple) -> bool:
    """Does `value` have the shape a reset/step/hint reply must have?"""
    if len(types) == 1:
        return type(value) is types[0]
    return (isinstance(value, list) and len(value) == len(types)
            and all(type(v) is t for v, t in zip(value, types)))


def tools_problem(tools) -> str | None:
    """Why `tools` (a reset's info["tools"]) is not a list of at most MAX_TOOLS function specs
    of TOOL_SHAPE, at most MAX_TOOLS_CHARS as JSON; None when it is."""
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        return f"info['tools'] must be a list of at most {MAX_TOOLS} tool specs"
    for i, tool in enumerate(tools):
        spec = tool.get("function") if isinstance(tool, dict) else None
        params = spec.get("parameters") if isinstance(spec, dict) else None
        if not (isinstance(params, dict) and tool.get("type", "function") == "function"
                and isinstance(spec.get("name"), str) and spec["name"]
                and isinstance(spec.get("description", ""), str)
                and isinstance(params.get("properties", {}), dict)
                and isinstance(params.get("required", []), list)
                and all(isinstance(r, str) for r in params.get("required", []))):
            return f"info['tools'][{i}] is not a tool spec; write {TOOL_SHAPE}"
    if len(json.dumps(tools)) > MAX_TOOLS_CHARS:
        return f"info['tools'] is longer than {MAX_TOOLS_CHARS} characters as JSON"
    return None


def _text(msg: dict, key: str, limit: int) -> str:
    value = msg.get(key, "")
    return clean(value, limit) if isinstance(value, str) else ""


def unwrap(msg, req_id: int, max_chars: int):
    """The value of a checked reply envelope, or the typed error it reports."""
    if not isinstance(msg, dict) or type(msg.get("id")) is not int or msg["id"] != req_id:
        raise EnvProtocolError("reply out of sequence (forged or stale line)")
    if msg.get("ok") is True:
        notes = msg.get("notes", [])
        if not (isinstance(notes, list) and len(notes) <= MAX_NOTES
                and all(isinstance(n, str) for n in notes)) or "value" not in msg:
            raise EnvProtocolError("malformed reply from the environment process")
        return bounded(msg["value"], max_chars), [clean(n, MAX_KEY_CHARS) for n in notes]
    if msg.get("ok") is not False:
        raise EnvProtocolError("malformed reply from the environment process")
    kind = msg.get("kind")
    text = _text(msg, "message", MAX_MESSAGE_CHARS)
    tb = _text(msg, "traceback", MAX_TRACEBACK_CHARS)
    if kind in ("load", "structure"):
        raise EnvLoadError(text, tb, stage=kind)
    if kind == "start":
        raise EnvLoadError(f"the sandbox could not start: {text}")
    if kind == "protocol":
        raise EnvProtocolError(text)
    if kind == "runtime":
        raise EnvRuntimeError(text, tb)
    raise EnvProtocolError("malformed reply from the environment process")


class Channel:
    """The parent's ends of one child's two pipes: write requests, read capped reply lines."""

    def __init__(self, request_fd: int, reply_fd: int, max_reply_bytes: int):
        self.request_fd, self.reply_fd = request_fd, reply_fd
        self.cap = max_reply_bytes
        os.set_blocking(request_fd, False)
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline
        self._read_poll = select.poll()
        self._read_poll.register(reply_fd, select.POLLIN)
        self._write_poll = select.poll()
        self._write_poll.register(request_fd, select.POLLOUT)

    def send_nowait(self, data: bytes) -> bytes:
        """Write what fits into the pipe now; return the rest (for `send` to finish later)."""
        try:
            return data[os.write(self.request_fd, data):]
        except (BlockingIOError, BrokenPipeError):  # full, or the child is gone: send() will say
            return data

    def send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvTimeout("the environment process stopped reading requests")
            self._write_poll.poll(max(1, int(left * 1000)))
            try:
                view = view[os.write(self.request_fd, view):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise EnvCrashed("the environment process exited") from None

    def _take_line(self) -> bytes | None:
        """The next complete reply line already read, or None (over `cap` bytes: refused)."""
        newline = self._buf.find(b"\n", self._scanned)
        if newline >= 0:
            line = bytes(self._buf[:newline])
            del self._buf[:newline + 1]
            self._scanned = 0
            return line
        self._scanned = len(self._buf)
        if len(self._buf) > self.cap:
            raise EnvProtocolError(f"reply longer than {self.cap} bytes")
        return None

    def read_ready(self) -> bytes | None:
        """Once the reply pipe is readable (poll said so): read what is there; the complete
        line if there is one now, else None."""
        line = self._take_line()
        if line is None:
            chunk = os.read(self.reply_fd, READ_CHUNK)
            if not chunk:
                raise EnvCrashed("the environment process exited")
            self._buf += chunk
            line = self._take_line()
        return line

    def read_line(self, deadline: float, timeout_s: float) -> bytes:
        """The next reply line, at most `cap` bytes, before `deadline`."""
        while True:
            line = self._take_line()
            if line is not None:
                return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvTimeout(f"no reply within {timeout_s:.1f} s")
            if self._read_poll.poll(max(1, int(left * 1000))):
                line = self.read_ready()
                if line is not None:
                    return line

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            os.close(fd)
