# A Maven remote for bench-pkgcache: serves the current directory on 127.0.0.1:PORT, each
# request answered after DELAY_MS (a distant repository's round trip), many at a time.
#   python3 serve.py PORT DELAY_MS
import http.server
import sys
import time


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        time.sleep(float(sys.argv[2]) / 1000)
        super().do_GET()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
