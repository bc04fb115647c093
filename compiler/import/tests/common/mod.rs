//! ONNX protobuf builders the import tests share: a float input/output of static dims, a node, a model.
#![allow(dead_code)]

use prost::Message;
use rlx_import::proto::tensor_proto::DataType;
use rlx_import::proto::tensor_shape_proto::{dimension, Dimension};
use rlx_import::proto::*;

/// A float tensor of `dims`.
pub fn vi(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), denotation: String::new() }).collect(),
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

/// A node with attributes.
pub fn node_with(name: &str, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

/// A node without attributes.
pub fn node(name: &str, op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    node_with(name, op, ins, outs, vec![])
}

/// An opset-17 model of one graph, encoded.
pub fn model(nodes: Vec<NodeProto>, inputs: Vec<ValueInfoProto>, outputs: Vec<ValueInfoProto>, inits: Vec<TensorProto>) -> Vec<u8> {
    ModelProto {
        ir_version: 9,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto { node: nodes, input: inputs, output: outputs, initializer: inits, name: "g".into(), ..Default::default() }),
        ..Default::default()
    }
    .encode_to_vec()
}
