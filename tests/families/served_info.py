"""A model's ModelInfo as a server answers it and a client reads it back, without a
network: the servicer's GetModelInfo handler, the bytes on the wire, the client's reader."""

from __future__ import annotations


def served_info(engine):
    """(the wire's pb.ModelInfo, the client's ModelInfo) for `engine` behind a server
    with small request limits."""
    from jaxattn.client import AttentionClient
    from jaxattn.v1 import attention_pb2 as pb
    from service.requests import RequestParser
    from service.servicer import AttentionServicer

    parser = RequestParser(engine, max_texts=1, max_tokens=1, max_request_bytes=1)
    answer = AttentionServicer(engine, None, parser).GetModelInfo(pb.GetModelInfoRequest(), None)
    wire = pb.ModelInfo.FromString(answer.SerializeToString())
    client = AttentionClient.__new__(AttentionClient)
    client._info = None
    client.server_info = lambda timeout=None: wire
    return wire, client.model_info()
