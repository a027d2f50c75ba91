"""A capture stream's progress, so a cut one resumes on another replica, from the same model.

Captures are pure reads, and the engine's results for a text do not depend on
the texts batched beside it, so the examples a cut stream did not deliver can
be asked of any replica serving the same weights: `Resume` keeps how many
arrived (in request order), asks for the rest, pinned to the precision the
first ones were computed at, and refuses a replica whose weights fingerprint
(`ModelInfo.weights`) differs from the one that sent the first examples:
never a result mixed from two models. docs/replicas.md.
"""

from __future__ import annotations

import grpc

from jaxattn.capture import Capture
from jaxattn.client.errors import AttentionServiceError
from jaxattn.info import ModelInfo
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs


class Resume:
    """What one Capture call has received so far, and what to ask next.

    Attributes:
      done: examples received, in request order (skipped truncated ones included).
      origin: (address, weights fingerprint) of the replica that sent the first
        example; the fingerprint is "" when it would not say. None before it.
    """

    def __init__(self, request: pb.CaptureRequest):
        self._request = request
        self.done = 0
        self.origin: tuple[str, str] | None = None
        self._precision: str | None = None

    def request(self) -> pb.CaptureRequest:
        """The request for the examples not received yet (the whole one at first)."""
        if not self.done:
            return self._request
        rest = pb.CaptureRequest()
        rest.CopyFrom(self._request)
        del rest.texts[: self.done]
        if not rest.precision:  # the server's default: the one the first part came at
            rest.precision = codecs.precision_value(self._precision)  # a newer one too
        return rest

    def received(self, capture: Capture, weights: str, address: str) -> None:
        """Count one example received from `address`, whose call named `weights` (the
        answering model's fingerprint: the stream's first header or its metadata, else
        its ModelInfo's; "" where neither said)."""
        if self.origin is None:
            self.origin = (address, weights)
            self._precision = capture.precision
        self.done += 1

    def check_model(self, info: ModelInfo | None, address: str) -> None:
        """Whether the rest may come from `address`, serving `info`.

        Raises:
          AttentionServiceError: FAILED_PRECONDITION naming both fingerprints when
            its weights differ from the first examples' (or either is unknown).
        """
        if self.origin is None:
            return
        first, weights = self.origin
        theirs = info.weights if info is not None else ""
        if weights and theirs == weights:
            return
        raise AttentionServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the stream was cut after {self.done} examples from {first} (weights "
            f"{weights or 'unknown'}) and the replica to resume on serves weights "
            f"{theirs or 'unknown'}: not mixing two models in one result (give one "
            "client replicas of one model)",
            address,
        )

    def so_far(self) -> str:
        """ ", after N examples from ADDRESS" once some arrived, for an error message."""
        return f", after {self.done} examples from {self.origin[0]}" if self.origin else ""
