#!/usr/bin/env python3
"""A stand-in for the hosted GitLab projects API, which cannot run here (tests only).
Serves GET /api/v4/projects/<url-encoded namespace/name> on 127.0.0.1 (port printed on stdout):
with the header PRIVATE-TOKEN equal to argv[1] it answers {"path_with_namespace": ...} taken
from a table; a wrong or missing token gets 401, an unknown project 404."""
import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

TOKEN = sys.argv[1]
PROJECTS = {"group/sub/proj": "Group/Sub/proj", "team/tool": "team/tool"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        prefix = "/api/v4/projects/"
        if not self.path.startswith(prefix):
            return self.reply(404, {"message": "404 Not Found"})
        if self.headers.get("PRIVATE-TOKEN") != TOKEN:
            return self.reply(401, {"message": "401 Unauthorized"})
        pid = urllib.parse.unquote(self.path[len(prefix):])
        if pid not in PROJECTS:
            return self.reply(404, {"message": "404 Project Not Found"})
        self.reply(200, {"id": 7, "path_with_namespace": PROJECTS[pid]})

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
