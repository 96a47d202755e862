"""A minimal server-sent events client over http.client, for the endpoints that answer with a stream."""

import http.client
import json
import socket
from urllib.parse import urlparse


class EventStream:
    """Send one request with `Accept: text/event-stream`; iterate the answer's (id, event, data) messages."""

    def __init__(self, base_url: str, method: str, path: str, headers: dict, body: dict | None = None):
        url = urlparse(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.connect()
        self.sock = self.conn.sock  # the response takes it over; kept to cut the connection at will
        headers = {**headers, "Accept": "text/event-stream"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")

    def __iter__(self):
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return  # the server ended the stream
            line = line.decode().rstrip("\n")
            if line == "":
                if "event" in fields:
                    yield fields.get("id"), fields["event"], json.loads(fields["data"])
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def close(self):
        """Cut the connection, as a browser tab that goes away does, without reading to the end."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.response.close()
