//! ONNX protobuf messages: the subset rlxc reads, written by hand for `prost` derive.
//!
//! Field numbers follow the ONNX spec (`onnx.proto`, proto2 syntax, IR version 11+). Messages and
//! fields the importer never reads (training info, sparse-tensor types, device configurations,
//! quantization annotations, …) are left out: prost skips unknown fields when decoding, so a model
//! that carries them still decodes.
//!
//! Conventions:
//! - proto2 `optional` scalars are plain fields here (absent reads as the type's default, as in
//!   proto3). Where absence matters the spec uses a oneof or an explicit discriminator
//!   (`TensorShapeProto.Dimension.value`, `AttributeProto.type`), and those are kept.
//! - Nested messages and enums live in snake_case modules named after their parent, as
//!   `prost-build` would lay them out (`tensor_proto::DataType`, `type_proto::Value`).
//! - Repeated numeric fields: the spec marks `TensorProto.*_data` as packed and leaves `dims`,
//!   `AttributeProto.floats/ints` unpacked (proto2 default). prost decodes both encodings either
//!   way; the attributes below only decide how we *encode*, and match the spec.
//! - `TensorProto.data_type` and `TypeProto.Tensor.elem_type` are `int32` in the spec; convert
//!   with `tensor_proto::DataType::try_from(x)`.

/// The top-level container: a graph plus the opsets and metadata it was exported with.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "4")]
    pub domain: String,
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<FunctionProto>,
}

/// An operator set a model imports: `domain` "" or "ai.onnx" is the default ONNX domain.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A computation graph: nodes in topological order, constants (initializers), and typed
/// inputs/outputs. An initializer may also appear in `input` (IR < 4 models do this).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "15")]
    pub sparse_initializer: Vec<SparseTensorProto>,
    #[prost(string, tag = "10")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// One operator application. An empty string in `input` means "optional input not given".
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(string, tag = "7")]
    pub domain: String,
    #[prost(string, tag = "8")]
    pub overload: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A named attribute of a node. `r#type` says which value field is meaningful; models written
/// before IR version 0.0.2 may omit it, in which case the one populated field decides.
/// `ref_attr_name` non-empty means "the value is the calling function's attribute of that name".
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    #[prost(string, tag = "13")]
    pub doc_string: String,
    #[prost(enumeration = "attribute_proto::AttributeType", tag = "20")]
    pub r#type: i32,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphProto>,
    #[prost(message, optional, tag = "22")]
    pub sparse_tensor: Option<SparseTensorProto>,
    #[prost(message, optional, tag = "14")]
    pub tp: Option<TypeProto>,
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    #[prost(message, repeated, tag = "23")]
    pub sparse_tensors: Vec<SparseTensorProto>,
}

pub mod attribute_proto {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum AttributeType {
        Undefined = 0,
        Float = 1,
        Int = 2,
        String = 3,
        Tensor = 4,
        Graph = 5,
        SparseTensor = 11,
        TypeProto = 13,
        Floats = 6,
        Ints = 7,
        Strings = 8,
        Tensors = 9,
        Graphs = 10,
        SparseTensors = 12,
        TypeProtos = 14,
    }
}

/// A graph input, output or intermediate value with its (possibly partial) type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    #[prost(string, tag = "3")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "4")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A dense tensor. Its elements are in exactly one place: `raw_data` (little-endian, packed,
/// the common case), one of the typed `*_data` fields (which one depends on `data_type`, see the
/// spec: e.g. FLOAT16/BFLOAT16/INT8/UINT8/BOOL/INT4… are stored widened in `int32_data`), or an
/// external file (`data_location == EXTERNAL`, keys `location`, `offset`, `length` in
/// `external_data`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    /// A `tensor_proto::DataType` value.
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(message, optional, tag = "3")]
    pub segment: Option<tensor_proto::Segment>,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub string_data: Vec<Vec<u8>>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(string, tag = "12")]
    pub doc_string: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    #[prost(enumeration = "tensor_proto::DataLocation", tag = "14")]
    pub data_location: i32,
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

pub mod tensor_proto {
    /// Element types, numbered as in the ONNX spec.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataType {
        Undefined = 0,
        Float = 1,
        Uint8 = 2,
        Int8 = 3,
        Uint16 = 4,
        Int16 = 5,
        Int32 = 6,
        Int64 = 7,
        String = 8,
        Bool = 9,
        Float16 = 10,
        Double = 11,
        Uint32 = 12,
        Uint64 = 13,
        Complex64 = 14,
        Complex128 = 15,
        Bfloat16 = 16,
        Float8e4m3fn = 17,
        Float8e4m3fnuz = 18,
        Float8e5m2 = 19,
        Float8e5m2fnuz = 20,
        Uint4 = 21,
        Int4 = 22,
        Float4e2m1 = 23,
        Float8e8m0 = 24,
        Uint2 = 25,
        Int2 = 26,
        Float6e2m3 = 27,
        Float6e3m2 = 28,
    }

    /// Part of a tensor that was split across messages (rare; importers may reject it).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Segment {
        #[prost(int64, tag = "1")]
        pub begin: i64,
        #[prost(int64, tag = "2")]
        pub end: i64,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataLocation {
        Default = 0,
        External = 1,
    }
}

/// COO sparse tensor: `values` [NNZ], `indices` [NNZ, rank] or linearized [NNZ], dense `dims`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseTensorProto {
    #[prost(message, optional, tag = "1")]
    pub values: Option<TensorProto>,
    #[prost(message, optional, tag = "2")]
    pub indices: Option<TensorProto>,
    #[prost(int64, repeated, packed = "false", tag = "3")]
    pub dims: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

pub mod tensor_shape_proto {
    /// One axis: a known size, a symbolic name, or neither (unknown).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dimension {
        #[prost(oneof = "dimension::Value", tags = "1, 2")]
        pub value: Option<dimension::Value>,
        #[prost(string, tag = "3")]
        pub denotation: String,
    }

    pub mod dimension {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(int64, tag = "1")]
            DimValue(i64),
            #[prost(string, tag = "2")]
            DimParam(String),
        }
    }
}

/// The type of a value. rlxc reads tensor types; sequence, map and optional types are decoded so
/// errors can name them, and their insides are kept as nested `TypeProto`s.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    #[prost(oneof = "type_proto::Value", tags = "1, 4, 5, 9, 8, 7")]
    pub value: Option<type_proto::Value>,
    #[prost(string, tag = "6")]
    pub denotation: String,
}

pub mod type_proto {
    use super::{TensorShapeProto, TypeProto};

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(message, tag = "1")]
        TensorType(Tensor),
        #[prost(message, tag = "4")]
        SequenceType(Box<Sequence>),
        #[prost(message, tag = "5")]
        MapType(Box<Map>),
        #[prost(message, tag = "9")]
        OptionalType(Box<Optional>),
        #[prost(message, tag = "8")]
        SparseTensorType(SparseTensor),
        #[prost(message, tag = "7")]
        OpaqueType(Opaque),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        /// A `tensor_proto::DataType` value.
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        /// Absent means the rank is unknown.
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sequence {
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Map {
        #[prost(int32, tag = "1")]
        pub key_type: i32,
        #[prost(message, optional, boxed, tag = "2")]
        pub value_type: Option<Box<TypeProto>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Optional {
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SparseTensor {
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Opaque {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(string, tag = "2")]
        pub name: String,
    }
}

/// A model-local function (ModelProto.functions): a named subgraph that nodes may call by
/// (`domain`, `name`, `overload`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FunctionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "4")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    pub output: Vec<String>,
    #[prost(string, repeated, tag = "6")]
    pub attribute: Vec<String>,
    #[prost(message, repeated, tag = "11")]
    pub attribute_proto: Vec<AttributeProto>,
    #[prost(message, repeated, tag = "7")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "8")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "10")]
    pub domain: String,
    #[prost(string, tag = "13")]
    pub overload: String,
    #[prost(message, repeated, tag = "12")]
    pub value_info: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

#[cfg(test)]
mod tests {
    use super::tensor_proto::DataType;
    use super::tensor_shape_proto::{dimension, Dimension};
    use super::*;
    use prost::Message;

    fn tensor_type(elem: DataType, dims: &[dimension::Value]) -> TypeProto {
        TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem as i32,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(d.clone()),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }
    }

    #[test]
    fn model_round_trips_through_prost() {
        let weight = TensorProto {
            dims: vec![2, 2],
            data_type: DataType::Float as i32,
            name: "W".into(),
            raw_data: [1.0f32, 2.0, 3.0, 4.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
            ..Default::default()
        };
        let node = NodeProto {
            input: vec!["x".into(), "W".into()],
            output: vec!["y".into()],
            name: "mm0".into(),
            op_type: "MatMul".into(),
            attribute: vec![AttributeProto {
                name: "perm".into(),
                r#type: attribute_proto::AttributeType::Ints as i32,
                ints: vec![1, 0, -1],
                ..Default::default()
            }],
            ..Default::default()
        };
        let n = dimension::Value::DimParam("N".into());
        let model = ModelProto {
            ir_version: 10,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 21,
            }],
            producer_name: "rlxc-test".into(),
            graph: Some(GraphProto {
                name: "g".into(),
                node: vec![node],
                initializer: vec![weight],
                input: vec![ValueInfoProto {
                    name: "x".into(),
                    r#type: Some(tensor_type(
                        DataType::Float,
                        &[n.clone(), dimension::Value::DimValue(2)],
                    )),
                    ..Default::default()
                }],
                output: vec![ValueInfoProto {
                    name: "y".into(),
                    r#type: Some(tensor_type(
                        DataType::Float,
                        &[n, dimension::Value::DimValue(2)],
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };

        let bytes = model.encode_to_vec();
        let back = ModelProto::decode(bytes.as_slice()).expect("decode");
        assert_eq!(back, model);
        let g = back.graph.as_ref().unwrap();
        assert_eq!(
            g.node[0].attribute[0].r#type(),
            attribute_proto::AttributeType::Ints
        );
        assert_eq!(
            DataType::try_from(g.initializer[0].data_type),
            Ok(DataType::Float)
        );
    }

    #[test]
    fn packed_and_unpacked_repeated_scalars_both_decode() {
        // TensorProto.dims (field 1, int64): unpacked is tag 0x08 per element, packed is 0x0a + len.
        let unpacked = [0x08, 0x03, 0x08, 0x04];
        let packed = [0x0a, 0x02, 0x03, 0x04];
        assert_eq!(TensorProto::decode(&unpacked[..]).unwrap().dims, vec![3, 4]);
        assert_eq!(TensorProto::decode(&packed[..]).unwrap().dims, vec![3, 4]);
        // TensorProto.float_data (field 4): unpacked fixed32 elements (tag 0x25).
        let mut floats = vec![0x25];
        floats.extend(1.5f32.to_le_bytes());
        assert_eq!(
            TensorProto::decode(floats.as_slice()).unwrap().float_data,
            vec![1.5]
        );
    }
}
