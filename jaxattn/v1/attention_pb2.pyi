from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Dtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[Dtype]
    DTYPE_FLOAT32: _ClassVar[Dtype]
    DTYPE_FLOAT16: _ClassVar[Dtype]
    DTYPE_BFLOAT16: _ClassVar[Dtype]
    DTYPE_UINT8: _ClassVar[Dtype]

class Codec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODEC_UNSPECIFIED: _ClassVar[Codec]
    CODEC_NONE: _ClassVar[Codec]
    CODEC_ZSTD: _ClassVar[Codec]
    CODEC_LZ4: _ClassVar[Codec]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_HIGHEST: _ClassVar[Precision]
    PRECISION_TF32: _ClassVar[Precision]
    PRECISION_BF16: _ClassVar[Precision]
DTYPE_UNSPECIFIED: Dtype
DTYPE_FLOAT32: Dtype
DTYPE_FLOAT16: Dtype
DTYPE_BFLOAT16: Dtype
DTYPE_UINT8: Dtype
CODEC_UNSPECIFIED: Codec
CODEC_NONE: Codec
CODEC_ZSTD: Codec
CODEC_LZ4: Codec
PRECISION_UNSPECIFIED: Precision
PRECISION_HIGHEST: Precision
PRECISION_TF32: Precision
PRECISION_BF16: Precision

class Text(_message.Message):
    __slots__ = ("text", "text_pair")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_PAIR_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_pair: str
    def __init__(self, text: _Optional[str] = ..., text_pair: _Optional[str] = ...) -> None: ...

class CaptureRequest(_message.Message):
    __slots__ = ("texts", "what", "layers", "heads", "dtype", "codec", "max_chunk_bytes", "truncate", "precision", "query_positions", "key_positions", "coalesce", "weights_in_header", "generate", "ignore_eos")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    WHAT_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    QUERY_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    KEY_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    COALESCE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_IN_HEADER_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedCompositeFieldContainer[Text]
    what: _containers.RepeatedScalarFieldContainer[str]
    layers: _containers.RepeatedScalarFieldContainer[int]
    heads: _containers.RepeatedScalarFieldContainer[int]
    dtype: Dtype
    codec: Codec
    max_chunk_bytes: int
    truncate: bool
    precision: Precision
    query_positions: _containers.RepeatedScalarFieldContainer[int]
    key_positions: _containers.RepeatedScalarFieldContainer[int]
    coalesce: bool
    weights_in_header: bool
    generate: int
    ignore_eos: bool
    def __init__(self, texts: _Optional[_Iterable[_Union[Text, _Mapping]]] = ..., what: _Optional[_Iterable[str]] = ..., layers: _Optional[_Iterable[int]] = ..., heads: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[Dtype, str]] = ..., codec: _Optional[_Union[Codec, str]] = ..., max_chunk_bytes: _Optional[int] = ..., truncate: _Optional[bool] = ..., precision: _Optional[_Union[Precision, str]] = ..., query_positions: _Optional[_Iterable[int]] = ..., key_positions: _Optional[_Iterable[int]] = ..., coalesce: _Optional[bool] = ..., weights_in_header: _Optional[bool] = ..., generate: _Optional[int] = ..., ignore_eos: _Optional[bool] = ...) -> None: ...

class CaptureResponse(_message.Message):
    __slots__ = ("header", "chunk", "items")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    header: ExampleHeader
    chunk: TensorChunk
    items: _containers.RepeatedCompositeFieldContainer[CaptureResponse]
    def __init__(self, header: _Optional[_Union[ExampleHeader, _Mapping]] = ..., chunk: _Optional[_Union[TensorChunk, _Mapping]] = ..., items: _Optional[_Iterable[_Union[CaptureResponse, _Mapping]]] = ...) -> None: ...

class ExampleHeader(_message.Message):
    __slots__ = ("index", "tokens", "sentence_b_start", "layers", "heads", "tensors", "chunk_count", "precision", "truncated", "kv_heads", "query_positions", "key_positions", "weights", "generated_start", "stop")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_B_START_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    QUERY_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    KEY_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    index: int
    tokens: _containers.RepeatedScalarFieldContainer[str]
    sentence_b_start: int
    layers: _containers.RepeatedScalarFieldContainer[int]
    heads: _containers.RepeatedScalarFieldContainer[int]
    tensors: _containers.RepeatedScalarFieldContainer[str]
    chunk_count: int
    precision: Precision
    truncated: bool
    kv_heads: _containers.RepeatedScalarFieldContainer[int]
    query_positions: _containers.RepeatedScalarFieldContainer[int]
    key_positions: _containers.RepeatedScalarFieldContainer[int]
    weights: str
    generated_start: int
    stop: str
    def __init__(self, index: _Optional[int] = ..., tokens: _Optional[_Iterable[str]] = ..., sentence_b_start: _Optional[int] = ..., layers: _Optional[_Iterable[int]] = ..., heads: _Optional[_Iterable[int]] = ..., tensors: _Optional[_Iterable[str]] = ..., chunk_count: _Optional[int] = ..., precision: _Optional[_Union[Precision, str]] = ..., truncated: _Optional[bool] = ..., kv_heads: _Optional[_Iterable[int]] = ..., query_positions: _Optional[_Iterable[int]] = ..., key_positions: _Optional[_Iterable[int]] = ..., weights: _Optional[str] = ..., generated_start: _Optional[int] = ..., stop: _Optional[str] = ...) -> None: ...

class TensorChunk(_message.Message):
    __slots__ = ("example_index", "tensor", "datatype", "shape", "codec", "scale", "offset", "byte_offset", "byte_length", "total_bytes", "crc32", "data", "padding")
    EXAMPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PADDING_FIELD_NUMBER: _ClassVar[int]
    example_index: int
    tensor: str
    datatype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    codec: Codec
    scale: float
    offset: float
    byte_offset: int
    byte_length: int
    total_bytes: int
    crc32: int
    data: bytes
    padding: bytes
    def __init__(self, example_index: _Optional[int] = ..., tensor: _Optional[str] = ..., datatype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., codec: _Optional[_Union[Codec, str]] = ..., scale: _Optional[float] = ..., offset: _Optional[float] = ..., byte_offset: _Optional[int] = ..., byte_length: _Optional[int] = ..., total_bytes: _Optional[int] = ..., crc32: _Optional[int] = ..., data: _Optional[bytes] = ..., padding: _Optional[bytes] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "family", "layers", "heads", "hidden_size", "head_dim", "vocab_size", "max_positions", "dtype", "quantities", "max_texts", "max_tokens", "precision", "max_request_bytes", "weights", "max_metadata_bytes", "min_chunk_bytes", "max_chunk_bytes", "default_chunk_bytes", "shared_weights", "revision", "causal", "num_key_value_heads", "attention_windows", "max_example_bytes", "max_result_bytes", "longest_text_statistics", "longest_text_attention", "coalesce", "max_new_tokens", "eos_ids")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    QUANTITIES_FIELD_NUMBER: _ClassVar[int]
    MAX_TEXTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    MAX_METADATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    MIN_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHARED_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CAUSAL_FIELD_NUMBER: _ClassVar[int]
    NUM_KEY_VALUE_HEADS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    MAX_EXAMPLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULT_BYTES_FIELD_NUMBER: _ClassVar[int]
    LONGEST_TEXT_STATISTICS_FIELD_NUMBER: _ClassVar[int]
    LONGEST_TEXT_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    COALESCE_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EOS_IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    family: str
    layers: int
    heads: int
    hidden_size: int
    head_dim: int
    vocab_size: int
    max_positions: int
    dtype: str
    quantities: _containers.RepeatedScalarFieldContainer[str]
    max_texts: int
    max_tokens: int
    precision: str
    max_request_bytes: int
    weights: str
    max_metadata_bytes: int
    min_chunk_bytes: int
    max_chunk_bytes: int
    default_chunk_bytes: int
    shared_weights: str
    revision: str
    causal: bool
    num_key_value_heads: int
    attention_windows: _containers.RepeatedScalarFieldContainer[int]
    max_example_bytes: int
    max_result_bytes: int
    longest_text_statistics: int
    longest_text_attention: int
    coalesce: bool
    max_new_tokens: int
    eos_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., family: _Optional[str] = ..., layers: _Optional[int] = ..., heads: _Optional[int] = ..., hidden_size: _Optional[int] = ..., head_dim: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_positions: _Optional[int] = ..., dtype: _Optional[str] = ..., quantities: _Optional[_Iterable[str]] = ..., max_texts: _Optional[int] = ..., max_tokens: _Optional[int] = ..., precision: _Optional[str] = ..., max_request_bytes: _Optional[int] = ..., weights: _Optional[str] = ..., max_metadata_bytes: _Optional[int] = ..., min_chunk_bytes: _Optional[int] = ..., max_chunk_bytes: _Optional[int] = ..., default_chunk_bytes: _Optional[int] = ..., shared_weights: _Optional[str] = ..., revision: _Optional[str] = ..., causal: _Optional[bool] = ..., num_key_value_heads: _Optional[int] = ..., attention_windows: _Optional[_Iterable[int]] = ..., max_example_bytes: _Optional[int] = ..., max_result_bytes: _Optional[int] = ..., longest_text_statistics: _Optional[int] = ..., longest_text_attention: _Optional[int] = ..., coalesce: _Optional[bool] = ..., max_new_tokens: _Optional[int] = ..., eos_ids: _Optional[_Iterable[int]] = ...) -> None: ...
