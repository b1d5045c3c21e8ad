"""The payload converter of every Treadle client and worker: pydantic's, except that a payload
it cannot read, decoded without a type (a signal's ``*bodies``, an update's ``*inputs``), comes
back as a ``RawValue`` instead of an exception.

The SDK drops a signal whose input fails to decode, with only a worker log line: a body sent
with an encoding nobody knows (``--input-meta encoding=foo/bar``) would vanish. Handed over
raw, it reaches the workflow's handler, which refuses it in the trace and ``status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

_JSON = PydanticJSONPlainPayloadConverter()
"""The one pydantic JSON converter of the process: stateless but for its cache of type
adapters, which it keeps."""


class TolerantPayloadConverter(PydanticPayloadConverter):
    """``PydanticPayloadConverter``; untyped payloads it cannot decode are left raw."""

    def __init__(self) -> None:
        # The SDK builds a data converter's payload converter again for each serialisation
        # context: with External Storage, for each payload sequence of each workflow task (a
        # dozen a step). pydantic's would make a JSON converter with an empty cache of type
        # adapters each time, so every result decoded built its adapter again.
        CompositePayloadConverter.__init__(
            self,
            *(
                _JSON if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            ),
        )

    def from_payloads(
        self, payloads: Sequence[Payload], type_hints: list[type] | None = None
    ) -> list[Any]:
        if type_hints:
            return super().from_payloads(payloads, type_hints)
        values: list[Any] = []
        for payload in payloads:
            try:
                values.extend(super().from_payloads([payload]))
            except (KeyError, RuntimeError):
                # An unknown encoding (KeyError) or bytes its converter cannot read.
                values.append(RawValue(payload))
        return values
