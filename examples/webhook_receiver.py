"""A webhook receiver for decision rules: check the signature, act once per event id.

    MODELCOMPARE_WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py 8080
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from modelcompare.service.webhooks.signing import verify

SECRET = os.environ.get("MODELCOMPARE_WEBHOOK_SECRET", "")
seen: set[str] = set()  # event ids acted on; keep them in your database in production


def act(event: dict) -> None:
    if event["kind"] == "fired" and event["rule"] == "promote":
        print("promote the challenger:", event["figures"])
    elif event["kind"] == "fired" and event["rule"] == "rollback":
        print("roll back:", event["figures"])


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if not verify(SECRET, self.headers.get("Modelcompare-Signature", ""), body):
            self.send_response(401)  # not signed with the secret, or older than 5 minutes
        else:
            event = json.loads(body)["event"]
            if event["id"] not in seen:  # a delivery may come twice, always with the same id
                seen.add(event["id"])
                act(event)
            self.send_response(204)
        self.end_headers()


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Receiver).serve_forever()
