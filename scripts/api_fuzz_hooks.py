"""schemathesis hooks of scripts/api-fuzz.sh (loaded through SCHEMATHESIS_HOOKS).

Protobuf bodies (Prometheus remote write, OTLP) are generated as random bytes, which is what
their decoders must survive. A protobuf response is checked as what the document says it is,
a binary string: its bytes, each one character.
"""

import schemathesis
from hypothesis import strategies as st

schemathesis.openapi.media_type("application/x-protobuf", st.binary(max_size=4096))


@schemathesis.deserializer("application/x-protobuf")
def protobuf_as_bytes(ctx, response):
    return response.content.decode("latin-1")
