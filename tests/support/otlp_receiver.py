"""A small OTLP/HTTP trace receiver for the tests (docs/observability.md).

Decodes each POST to /v1/traces with the OpenTelemetry project's own protobuf definitions (the
`opentelemetry-proto` package) and writes every span received so far to a JSON file: name,
hex ids, kind and attributes. Usage: otlp_receiver.py PORT OUT.json
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PORT = int(sys.argv[1])
OUT = sys.argv[2]
SPANS = []


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    SPANS.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "kind": span.kind,
                            "scope": ss.scope.name,
                            "attributes": {a.key: value(a.value) for a in span.attributes},
                            "status": span.status.code,
                        }
                    )
        with open(OUT, "w") as f:
            json.dump(SPANS, f)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
