"""The web server of `rooflinesim explore`: the static page and the JSON API, on the standard library's threading
HTTP server.

The API object is handed in (the command line builds it from its own parser and commands, rooflinesim/cli/api.py):
this package sits left of `cli` in the layers and never imports it. The page has no login, so the server listens on
this machine only unless told otherwise (`allow_remote`), and then answers only requests addressed to it by a local
name (a Host header check against DNS rebinding: a web page elsewhere cannot reach the API through a name of its
own that resolves to 127.0.0.1).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

from ..errors import InputError

STATIC = Path(__file__).resolve().parent / "static"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
               ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8"}
DEFAULT_PORT = 8765


class Api(Protocol):
    def answer(self, endpoint: str, params: list[tuple[str, str]]): ...  # -> an object like cli.api.ApiAnswer


def is_local_host(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1): only this machine can connect there."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(header: str) -> str:
    """The host name of a Host header: 'localhost:8765' -> 'localhost', '[::1]:8765' -> '::1'."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Handler(BaseHTTPRequestHandler):
    server_version = "rooflinesim-explore"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name; quiet: the terminal shows the URL only
        pass

    def _send(self, status: int, body: bytes, media_type: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json_error(self, status: int, message: str) -> None:
        self._send(status, (json.dumps({"error": message}) + "\n").encode(), "application/json")

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if not self.server.allow_remote and not is_local_host(_host_of(self.headers.get("Host", ""))):
            return self._send_json_error(403, "explore answers requests addressed to this machine only "
                                              f"(Host: {self.headers.get('Host', '')!r}); see --allow-remote")
        url = urlsplit(self.path)
        if url.path.startswith("/api/"):
            return self._answer_api(url.path[len("/api/"):].strip("/"), url.query)
        if url.path in ("/", "/index.html"):
            return self._send_file(STATIC / "index.html")
        if url.path.startswith("/static/"):
            return self._send_file(STATIC / url.path[len("/static/"):])
        return self._send_json_error(404, f"no page {url.path}")

    def _answer_api(self, endpoint: str, query: str) -> None:
        try:
            params = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError:
            return self._send_json_error(400, f"rooflinesim: error: malformed query string {query!r}")
        try:
            answer = self.server.api.answer(endpoint, params)
        except Exception as exc:  # a bug, not bad input: say so, keep serving
            import traceback

            traceback.print_exc(file=sys.stderr)
            return self._send_json_error(500, f"internal error: {type(exc).__name__}: {exc}")
        headers = {"X-Rooflinesim-Stderr": json.dumps(answer.stderr_lines)} if answer.stderr_lines else {}
        self._send(answer.status, answer.body.encode(), answer.media_type, headers)

    def _send_file(self, path: Path) -> None:
        path = path.resolve()
        if STATIC not in path.parents or not path.is_file():
            return self._send_json_error(404, f"no page {self.path}")
        self._send(200, path.read_bytes(), MEDIA_TYPES.get(path.suffix, "application/octet-stream"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, api: Api, allow_remote: bool):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.api, self.allow_remote = api, allow_remote
        super().__init__(address, _Handler)


def make_server(api: Api, host: str = "127.0.0.1", port: int = DEFAULT_PORT, allow_remote: bool = False):
    """A bound, not yet serving, server (port 0: any free port, see `.server_address`). InputError for a non-local
    host without allow_remote, or an address that cannot be bound."""
    host = host.strip().strip("[]")
    if not is_local_host(host) and not allow_remote:
        raise InputError(f"refusing to listen on {host}: explore has no login, so anyone who can reach that address "
                         "could run pricing commands and read spec files this user can read; use --host 127.0.0.1, "
                         "or --allow-remote if that is what you want")
    if not 0 <= port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {port}")
    try:
        return _Server((host, port), api, allow_remote)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another port: --port 0 picks a "
                         "free one)") from None
    except (TypeError, UnicodeError, ValueError):  # a host name the resolver cannot even encode (control characters)
        raise InputError(f"--host {host!r} is not a host name or address") from None


def get_url(server) -> str:
    host, port = server.server_address[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def run_server(api: Api, host: str = "127.0.0.1", port: int = DEFAULT_PORT, allow_remote: bool = False,
               open_browser: bool = True) -> int:
    server = make_server(api, host, port, allow_remote)
    url = get_url(server)
    print(f"rooflinesim explore: {url}  (Ctrl-C stops it)", flush=True)
    # price one default answer in the background: the imports and spec loading are done before the page asks
    threading.Thread(target=api.answer, args=("predict", []), daemon=True).start()
    if allow_remote and not is_local_host(host):
        print("warning: listening beyond this machine (--allow-remote): the page has no login", file=sys.stderr)
    if open_browser:
        import webbrowser

        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("rooflinesim explore: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0
