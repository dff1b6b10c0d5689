#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/.

The seeds come from the project itself: the example workflows and fixtures
(scripts/examples/), the scripts of the preparation tests
(engine/src/script/tests.rs), the dsh.toml examples of docs/, the
journal lines of journal/line.rs, and hand-encoded protocol frames. Run it
from anywhere; it only adds files (named by content hash). The committed
corpus is its output plus the reproducers of what the fuzzers found
(fuzz/corpus/<target>/regress-*), and fuzz/run fuzzes a scratch copy.
"""
import hashlib
import json
import os
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------- postcard


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def s(text):
    b = text.encode()
    return varint(len(b)) + b


def opt(x):
    return b"\x00" if x is None else b"\x01" + x


def vec(items):
    return varint(len(items)) + b"".join(items)


# WorkerMsg variants (protocol 5): Hello 0, Ready 1, Phase 2, Log 3,
# Warning 4, ChildStart 5, End 6; an End ends with its optional sandbox.
# HostMsg variants: Init 0, Go 1, Cancel 2, ChildStarted 3, ChildStartError 4,
# ChildSettled 5, ChildFailed 6.
SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
REPORT = varint(1) + opt(varint(4)) + vec([s("rlimits")]) + vec([s("landlock: kernel too old")])
WORKER = [
    varint(0) + varint(5) + varint(4242),
    varint(1) + varint(0) + opt(varint(4)) + vec([s("rlimits"), s("seccomp")]) + vec([]),
    varint(1) + REPORT,
    varint(2) + s("Review"),
    varint(3) + s("3 of 3 reviewed"),
    varint(4) + s("unknown option bogus, ignored") + opt(s("options.bogus")),
    varint(4) + s("a lossy value") + opt(None),
    varint(5) + varint(1) + s("Review src/a.rs") + s("src/a.rs") + opt(s("Review")) + opt(s(SCHEMA))
    + opt(s("m1")) + opt(None) + opt(s("high")) + opt(s("reviewer")) + opt(s("worktree")),
    varint(5) + varint(2) + s("plain") + s("plain") + opt(None) + opt(None) + b"\x00" * 5,
    varint(6) + varint(0) + s('{"reviews":[1,2]}') + varint(3) + varint(0) + opt(None),
    varint(6) + varint(1) + varint(1) + s("boom at review.ts:3:5") + varint(0) + varint(12) + opt(None),
    varint(6) + varint(1) + varint(16) + s("strict: landlock missing") + varint(0) + varint(0) + opt(REPORT),
    varint(6) + varint(2) + varint(12) + s("cancelled") + varint(1) + varint(0) + opt(None),
]
LIMITS = varint(16) + varint(1000) + varint(1000) + varint(10000) + opt(varint(5000)) \
    + varint(268435456) + opt(None) + varint(1048576) + varint(500)
HOST = [
    varint(0) + s("run-1") + s("scripts/review.ts") + s("(async function () {\nreturn 1;\n})")
    + s('{"name":"review","description":"d"}') + varint(1) + s('{"files":["a"]}') + LIMITS + varint(1),
    varint(0) + s("run-2") + s("x.js") + s("(async function () {\n})") + s("{}") + varint(0) + LIMITS + varint(2),
    varint(1),
    varint(2) + varint(0) + s("SIGINT"),
    varint(2) + varint(1) + varint(30000),
    varint(3) + varint(1) + s("scripted-1"),
    varint(4) + varint(1) + varint(8) + s("no fixture answer"),
    varint(5) + varint(1) + varint(0) + s("looks fine") + opt(varint(3) + varint(5)),
    varint(5) + varint(2) + varint(1) + s('{"ok":true}') + opt(None),
    varint(5) + varint(3) + varint(2) + s("gave up") + opt(None),
    varint(5) + varint(4) + varint(3) + opt(None),
    varint(6) + varint(1) + s("connection reset"),
]


def frame(body):
    return struct.pack("<I", len(body)) + body


def protocol_seeds():
    bodies = WORKER + HOST
    for b in bodies:
        put("messages", b)
    request = {
        "prompt": "Review a.rs", "label": "a.rs", "phase": "Review", "schema": SCHEMA,
        "options": {"model": "m1", "provider": None, "effort": None, "agentType": "reviewer", "isolation": None},
    }
    put("messages", json.dumps(request))
    put("messages", json.dumps({**request, "schema": None, "phase": None}))
    # frame: byte 0 the limit (0: the default 16 MiB), bytes 1-3 the read
    # sizes, then the stream.
    stream = b"".join(frame(b) for b in WORKER)
    put("frame", b"\x00\x01\x05\x10" + stream)
    put("frame", b"\x00\x03\x03\x03" + b"".join(frame(b) for b in HOST))
    put("frame", b"\x04\x02\x02\x02" + stream)  # 16-byte limit: oversized frames
    put("frame", b"\x00\x07\x01\x02" + stream[:-3])  # truncated at the end
    put("frame", b"\x00\x01\x01\x01" + frame(b"") + frame(b"\x01"))


# ---------------------------------------------------------------- schema

SCHEMAS = [
    ({"type": "object"}, {}),
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
      "required": ["name"], "additionalProperties": False}, {"name": "Ada", "age": 36}),
    ({"type": "object", "properties": {"findings": {"type": "array", "items": {"type": "object",
      "properties": {"line": {"type": "integer"}, "severity": {"enum": ["low", "high"]}},
      "required": ["line", "severity"]}}}, "required": ["findings"]},
     {"findings": [{"line": 3, "severity": "high"}, {"line": 1.0, "severity": "low"}]}),
    ({"type": "object", "properties": {"kind": {"oneOf": [{"const": "a"}, {"const": "b"}]}}}, {"kind": "b"}),
    ({"type": "object", "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "number"}]}}}, {"v": 1e400}),
    ({"type": "object", "properties": {"n": {"type": "number", "const": 0.1}}}, {"n": 0.1}),
    ({"type": "object", "title": "t", "description": "d", "default": {}, "examples": [{}],
      "properties": {"x": {"type": ["string", "null"]}}}, {"x": None}),
    ({"type": "array"}, []),
    ({"type": "object", "minItems": 1, "pattern": "x"}, {"a": 1}),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object",
      "properties": {"c": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["c"]}}}}}, {"a": {"b": {"c": 2}}}),
]


# The whole vocabulary (main took the jsonschema crate): references,
# combinators, string and array constraints, conditionals.
SCHEMAS += [
    ({"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
      "properties": {"root": {"$ref": "#/$defs/node"}}}, {"root": {"children": [{"children": []}]}}),
    ({"type": "object", "properties": {"a": {"$ref": "#"}, "b": {"$ref": "#"}}}, {"a": {"b": {}}}),
    ({"type": "object", "allOf": [{"required": ["x"]}, {"properties": {"x": {"type": "string", "minLength": 2,
      "maxLength": 4, "pattern": "^[a-z]+$"}}}]}, {"x": "abc"}),
    ({"type": "object", "properties": {"s": {"not": {"type": "null"}}, "t": {"anyOf": [{"type": "integer",
      "multipleOf": 3}, {"enum": ["x"]}]}}}, {"s": 1, "t": 9}),
    ({"type": "object", "properties": {"l": {"type": "array", "prefixItems": [{"type": "string"}],
      "minItems": 1, "maxItems": 3, "uniqueItems": True, "contains": {"const": 1}}}}, {"l": ["a", 1]}),
    ({"type": "object", "if": {"required": ["k"]}, "then": {"required": ["v"]}, "else": {"maxProperties": 0},
      "propertyNames": {"pattern": "^[a-z]$"}}, {"k": 1, "v": 2}),
    ({"type": "object", "properties": {"e": {"type": "string", "format": "email"},
      "p": {"type": "string", "pattern": "^(a+)+$"}}}, {"e": "a@b.c", "p": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaab"}),
]


def schema_seeds():
    for schema, value in SCHEMAS:
        put("schema", json.dumps(schema) + "\n" + json.dumps(value))
    put("schema", "true false")
    put("schema", '{"type":"object","properties":{"a":{"const":-0.0}}} {"a":0}')


# ---------------------------------------------------------------- scripts

RUST_STR = re.compile(r'r(#+)"(.*?)"\1|"((?:[^"\\]|\\.)*)"', re.S)


def unescape(body):
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        i += 2
        if n == "n":
            out.append("\n")
        elif n == "t":
            out.append("\t")
        elif n == "r":
            out.append("\r")
        elif n == "0":
            out.append("\0")
        elif n == "u":
            end = body.index("}", i)
            out.append(chr(int(body[i + 1:end], 16)))
            i = end + 1
        elif n == "x":
            out.append(chr(int(body[i:i + 2], 16)))
            i += 2
        elif n == "\n":
            while i < len(body) and body[i] in " \t\n":
                i += 1
        else:
            out.append(n)
    return "".join(out)


def script_seeds():
    sources = [read("scripts", "examples", "review.ts"), read("scripts", "examples", "research.ts")]
    for m in RUST_STR.finditer(read("engine", "src", "script", "tests.rs")):
        text = m.group(2) if m.group(1) else unescape(m.group(3))
        # Scripts, not messages or names: they have code punctuation.
        if len(text) >= 8 and any(c in text for c in ";{}()=`") and "error" not in text[:12]:
            sources.append(text)
    for i, src in enumerate(sources):
        kind = b"\x00" if i % 3 else b"\x01"  # even: TypeScript, odd: JavaScript
        put("script_bytes", kind + src.encode())
    put("script_bytes", b"\x00" + b"return " + b"[" * 999 + b"]" * 999 + b";\n")
    put("script_bytes", b"\x00" + b"return " + b"(" * 1001 + b")" * 1001 + b";\n")
    put("script_bytes", b"\x00" + b"const f = " + b"x => " * 600 + b"x;\n")


# ---------------------------------------------------------------- fixture, config, journal


def fixture_seeds():
    for name in ("review.fixture.json", "research.fixture.json"):
        put("fixture", b"\x00" + read("scripts", "examples", name).encode())
    put("fixture", b"\x00" + json.dumps({"version": 1, "answers": [
        {"match": {"promptMatches": "^Rev(iew)? [a-z]+\\.rs$", "phase": "Review"}, "text": "ok", "times": 2,
         "usage": {"input": 1, "output": 2}},
        {"match": {"model": "m1", "agentType": "reviewer", "schema": {"type": "object"}},
         "structured": {"ok": True}, "delayMs": 5},
        {"match": {"promptContains": "a.rs"}, "fail": "no"},
        {"match": {"label": "x"}, "startError": "quota"},
        {"match": {"effort": "high", "provider": "p"}, "resultError": "reset"},
        {"match": {}, "hang": True}]}).encode())
    # Record mode: arbitrary bytes build the calls.
    put("fixture", b"\x01" + bytes(range(256)))
    put("fixture", b"\x01" + b"\x03plan\x00\x01{\"type\":\"object\"}" * 4)


def config_seeds():
    for block in re.findall(r"```toml\n(.*?)```", read("docs", "providers.md"), re.S):
        put("config", block)
    for m in RUST_STR.finditer(read("tests", "config.rs")):
        text = m.group(2) if m.group(1) else unescape(m.group(3))
        if "[workflow]" in text or "[providers." in text:
            put("config", text)
    put("config", '[workflow]\nsandbox = "strict"\ntimeout = "1h30m"\ngrace = 2.5\nsync_timeout = "500ms"\n'
        'compute_timeout = 60\nmemory = "256MiB"\nlog_limit = 65536\nbudget = 100000\n'
        'max_concurrent_agents = 4\nmax_total_agents = 50\n')
    put("config", '[workflow]\nmemory = "1MB"\n')
    put("config", '[providers."a b"]\nkind = "openai"\nmodel = 3\n')


def journal_seeds():
    lines = [
        {"type": "attempt", "attempt": 1, "pid": 4242, "at": 1764477512000},
        {"type": "start", "seq": 1, "key": "9f", "label": "plan", "prompt": "Plan it", "at": 1},
        {"type": "settled", "seq": 1, "key": "9f", "childId": "scripted-1", "outcome": {"text": "1. parse"},
         "usage": {"input": 3, "output": 5}, "at": 2},
        {"type": "start", "seq": 2, "key": "a0", "label": "check", "prompt": "Check", "schema": {"type": "object"},
         "model": "m1", "effort": "high", "agentType": "reviewer", "provider": "p", "isolation": "worktree", "at": 3},
        {"type": "settled", "seq": 2, "key": "a0", "outcome": {"structured": {"ok": True, "n": 0.5}}, "at": 4},
        {"type": "settled", "seq": 3, "key": "b1", "outcome": {"startError": "quota"}, "at": 5},
        {"type": "settled", "seq": 4, "key": "c2", "outcome": "cancelled", "at": 6},
        {"type": "attempt", "attempt": 2, "pid": 7, "at": 7},
        {"type": "start", "seq": 1, "key": "9f", "label": "plan", "prompt": "Plan it", "replayed": True, "at": 8},
        {"type": "settled", "seq": 5, "key": "d3", "outcome": {"fail": "no"}, "at": 9},
        {"type": "settled", "seq": 6, "key": "e4", "outcome": {"resultError": "reset"}, "at": 10},
    ]
    text = "".join(json.dumps(l) + "\n" for l in lines)
    put("journal", text)
    put("journal", text + '{"type":"sett')
    put("journal", text[:200] + "\n" + text)
    put("journal", lines and json.dumps(lines[0]) + "\nnot json\n" + json.dumps(lines[0]) + "\n")


def main():
    protocol_seeds()
    schema_seeds()
    script_seeds()
    fixture_seeds()
    config_seeds()
    journal_seeds()
    for t in sorted(os.listdir(CORPUS)):
        print(t, len(os.listdir(os.path.join(CORPUS, t))), file=sys.stderr)


if __name__ == "__main__":
    main()
