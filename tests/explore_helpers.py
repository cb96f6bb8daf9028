"""Shared by the explore tests: a live server on a free port, and plain HTTP requests to it."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager

from rooflinesim.cli import build_parser
from rooflinesim.cli.api import CommandApi
from rooflinesim.explore.server import get_url, make_server


@contextmanager
def running_server(calibration: str | None = None, parser_factory=None):
    factory = parser_factory or (lambda: build_parser(raising=True))
    server = make_server(CommandApi(factory, calibration=calibration), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield get_url(server)
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, headers: dict | None = None) -> tuple[int, dict, str]:
    """(status, headers, body) of a GET, 4xx and 5xx included."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def get_json(url: str):
    status, _, body = get(url)
    assert status == 200, body
    return json.loads(body)
