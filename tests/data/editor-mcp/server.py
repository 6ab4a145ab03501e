#!/usr/bin/env python3
"""A small MCP stdio text-editor server for the tests of text_editor_mcp.mode: mcp.

It offers one tool, text_editor (view, create, str_replace, insert, undo_edit), answering in the
shape of the npm mcp-server-text-editor: one text content holding
{"success", "message", "content"}. Paths must be absolute (as that server wants them).

argv[1] chooses a misbehaviour for tools/call, to test the client's failures:
  ok       behave
  split    offer text_editor_view, text_editor_create, ... instead of one tool
  garbage  answer a line that is not JSON
  die      exit with status 3 (after "editor crashed" on stderr)
  hang     never answer
  huge     answer with a text content far longer than any view
  deep     answer with JSON nested far too deep
  noinit   never answer initialize
Every tools/call's command and path are appended to argv[2] when given (what reached the
server). Python 3 only: it runs in the local sandbox and in the test images.
"""
import json
import os
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
LOG = sys.argv[2] if len(sys.argv) > 2 else None
history = {}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def shaped(success, message, content=None):
    body = {"success": success, "message": message}
    if content is not None:
        body["content"] = content
    return {"content": [{"type": "text", "text": json.dumps(body)}], "isError": not success}


def edit(a):
    cmd, path = a.get("command"), a.get("path", "")
    if not os.path.isabs(path):
        return shaped(False, "path must be absolute: " + path)
    if cmd == "view":
        if os.path.isdir(path):
            return shaped(True, "listed " + path, "\n".join(sorted(os.listdir(path))))
        with open(path) as f:
            lines = f.read().split("\n")
        rng = a.get("view_range")
        first = 1
        if rng:
            first = rng[0]
            lines = lines[rng[0] - 1:None if rng[1] == -1 else rng[1]]
        out = "\n".join("%6d\t%s" % (first + i, l) for i, l in enumerate(lines))
        return shaped(True, "viewed " + path, out)
    if cmd == "create":
        if os.path.exists(path):
            return shaped(False, "file exists: " + path)
        history.setdefault(path, []).append(None)
        with open(path, "w") as f:
            f.write(a["file_text"])
        return shaped(True, "File created successfully at: " + path)
    with open(path) as f:
        text = f.read()
    if cmd == "str_replace":
        n = text.count(a["old_str"])
        if n != 1:
            return shaped(False, "old_str found %d times in %s" % (n, path))
        new = text.replace(a["old_str"], a.get("new_str", ""))
    elif cmd == "insert":
        lines = text.split("\n")
        k = a["insert_line"]
        new = "\n".join(lines[:k] + a["new_str"].split("\n") + lines[k:])
    elif cmd == "undo_edit":
        if not history.get(path):
            return shaped(False, "no edit to undo for " + path)
        old = history[path].pop()
        if old is None:
            os.unlink(path)
        else:
            with open(path, "w") as f:
                f.write(old)
        return shaped(True, "Undid the last edit of " + path)
    else:
        return shaped(False, "unknown command %s" % cmd)
    history.setdefault(path, []).append(text)
    with open(path, "w") as f:
        f.write(new)
    return shaped(True, "edited " + path, new)


SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
for line in sys.stdin:
    msg = json.loads(line)
    mid, method = msg.get("id"), msg.get("method")
    if mid is None:
        continue
    if method == "initialize":
        if MODE == "noinit":
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "test-editor", "version": "1"}}})
        # a notification and a request of its own, which the client must live with
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "hello"}})
        send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
    elif method == "tools/list":
        names = (["text_editor_" + c for c in
                  ("view", "create", "str_replace", "insert", "undo_edit")]
                 if MODE == "split" else ["text_editor"])
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
            {"name": n, "inputSchema": SCHEMA} for n in names]}})
    elif method == "tools/call":
        p = msg["params"]
        args = dict(p.get("arguments", {}))
        if MODE == "split":
            args["command"] = p["name"][len("text_editor_"):]
        if LOG:
            with open(LOG, "a") as f:
                f.write("%s %s %s\n" % (p["name"], args.get("command"), args.get("path")))
        if MODE == "garbage":
            sys.stdout.write("Traceback (most recent call last): not JSON\n")
            sys.stdout.flush()
        elif MODE == "die":
            sys.stderr.write("editor crashed\n")
            sys.exit(3)
        elif MODE == "hang":
            sys.stdin.read()
        elif MODE == "huge":
            send({"jsonrpc": "2.0", "id": mid, "result": shaped(True, "big", "x" * 4000000)})
        elif MODE == "deep":
            sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":%s1%s}\n'
                             % (mid, "[" * 10000, "]" * 10000))
            sys.stdout.flush()
        else:
            try:
                result = edit(args)
            except (OSError, KeyError, TypeError, IndexError) as e:
                result = shaped(False, "error: %s" % e)
            send({"jsonrpc": "2.0", "id": mid, "result": result})
    else:
        send({"jsonrpc": "2.0", "id": mid,
              "error": {"code": -32601, "message": "method not found"}})
