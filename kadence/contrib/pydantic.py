"""A data converter for pydantic (v2) models, as temporalio.contrib.pydantic:
`Client.connect(..., data_converter=pydantic_data_converter)`.

Values are written as JSON by pydantic (a serializer of any value) and read back by a
`pydantic.TypeAdapter` of the type hint of the parameter or return value they go to, so a model,
a list or dict of models, a union, `datetime`, `UUID` and every other type pydantic validates are
rebuilt as the hint says, with the model's own validators and serializers. The other encodings
(None, bytes, protobuf) are the default converter's. Needs `pip install 'kadence[pydantic]'`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

try:
    from pydantic import TypeAdapter
    from pydantic_core import SchemaSerializer
    from pydantic_core.core_schema import any_schema
except ModuleNotFoundError as err:
    raise ModuleNotFoundError("kadence.contrib.pydantic needs the pydantic extra: pip install 'kadence[pydantic]'") from err

from kadence.api.common.v1 import Payload
from kadence.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
)

__all__ = ["PydanticJSONPlainPayloadConverter", "PydanticPayloadConverter", "ToJsonOptions", "pydantic_data_converter"]


@dataclass(frozen=True)
class ToJsonOptions:
    """How pydantic writes a value: `exclude_unset` leaves out the fields a model was not given."""

    exclude_unset: bool = False


class PydanticJSONPlainPayloadConverter(EncodingPayloadConverter):
    """`json/plain` written and read by pydantic."""

    def __init__(self, to_json_options: ToJsonOptions | None = None) -> None:
        self._to_json_options = to_json_options or ToJsonOptions()
        self._serializer = SchemaSerializer(any_schema())  # serializes each value by its own type

    @property
    def encoding(self) -> str:
        return "json/plain"

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": self.encoding.encode()},
                       data=self._serializer.to_json(value, exclude_unset=self._to_json_options.exclude_unset))

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        return TypeAdapter(Any if type_hint is None else type_hint).validate_json(payload.data)


class PydanticPayloadConverter(CompositePayloadConverter):
    """The default converter's encodings, with pydantic's JSON in place of the default JSON."""

    def __init__(self, to_json_options: ToJsonOptions | None = None) -> None:
        json_converter = PydanticJSONPlainPayloadConverter(to_json_options)
        super().__init__(*(
            json_converter if isinstance(converter, JSONPlainPayloadConverter) else converter
            for converter in DefaultPayloadConverter.default_encoding_payload_converters
        ))


pydantic_data_converter = DataConverter(payload_converter_class=PydanticPayloadConverter)
"""A data converter for pydantic models: pass it as a client's `data_converter`."""
