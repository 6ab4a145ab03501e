#!/usr/bin/env python3
"""A stand-in for the hosted GitLab projects API, which cannot run here (tests only).
Serves GET /api/v4/projects/<url-encoded namespace/name> on 127.0.0.1 (port printed on stdout):
with the header PRIVATE-TOKEN equal to argv[1] it answers {"path_with_namespace": ...} taken
from a table; a wrong or missing token gets 401, an unknown project 404.

With a second argument, a directory of bare repositories, it also serves them as GitLab does
on the same origin: smart HTTP (`git http-backend`, fetch and push) for the user oauth2 with
the token as password (basic auth; 401 otherwise), so that a task given as {platform: gitlab,
owner, name} clones and pushes against it."""
import base64
import json
import os
import subprocess
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

TOKEN = sys.argv[1]
GIT_ROOT = sys.argv[2] if len(sys.argv) > 2 else None
PROJECTS = {"group/sub/proj": "Group/Sub/proj", "team/tool": "team/tool"}
BASIC = "Basic " + base64.b64encode(f"oauth2:{TOKEN}".encode()).decode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        prefix = "/api/v4/projects/"
        if GIT_ROOT and not self.path.startswith("/api/"):
            return self.git()
        if not self.path.startswith(prefix):
            return self.reply(404, {"message": "404 Not Found"})
        if self.headers.get("PRIVATE-TOKEN") != TOKEN:
            return self.reply(401, {"message": "401 Unauthorized"})
        pid = urllib.parse.unquote(self.path[len(prefix):])
        if pid not in PROJECTS:
            return self.reply(404, {"message": "404 Project Not Found"})
        self.reply(200, {"id": 7, "path_with_namespace": PROJECTS[pid]})

    def do_POST(self):
        if not GIT_ROOT:
            return self.reply(404, {"message": "404 Not Found"})
        self.git()

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    def git(self):
        if self.headers.get("Authorization") != BASIC:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="gitlab"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.body()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": GIT_ROOT,
               "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": urllib.parse.unquote(path),
               "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "oauth2",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
               "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
               "GIT_CONFIG_VALUE_0": "*"}
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True).stdout
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, rest = out.partition(sep)
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
