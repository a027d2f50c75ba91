"""Generated code of protos/jaxattn/v1/attention.proto (the wire contract), and the contract.

Do not edit the generated modules (`attention_pb2`, its stub `.pyi` and
`attention_pb2_grpc`): run `python protos/generate.py`. The proto
package `jaxattn.v1` is this Python package, so protoc's imports resolve as is.
Users never need these modules: `jaxattn.client` hides them.

`PROTO` is the .proto itself, shipped in the package (a copy that
`protos/generate.py` writes and tests/packaging keeps equal to protos/): the
contract for a client in another language, from any install:

    python -m grpc_tools.protoc -I "$(python -c 'import jaxattn.v1 as v; print(v.PROTO_ROOT)')" \\
        --go_out=. jaxattn/v1/attention.proto
"""

from pathlib import Path

PROTO = Path(__file__).resolve().with_name("attention.proto")
# The include root its import path "jaxattn/v1/attention.proto" is relative to.
PROTO_ROOT = PROTO.parents[2]
