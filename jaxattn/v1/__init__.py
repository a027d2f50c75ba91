"""Generated code of protos/jaxattn/v1/attention.proto (the wire contract).

Do not edit the *_pb2*.py files: run `python protos/generate.py`. The proto
package `jaxattn.v1` is this Python package, so protoc's imports resolve as is.
Users never need these modules: `jaxattn.client` hides them.
"""
