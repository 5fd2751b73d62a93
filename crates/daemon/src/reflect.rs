//! Any `bess.pb` message as nfkit's argument records, by reflection over
//! the descriptors `build.rs` compiled: a message becomes a
//! [`Value::Map`] of its set fields (integers, floats, strings; bools
//! as 0/1, bytes as a list of integers, repeated fields as lists,
//! nested messages as records; a negative integer as a number), the
//! form nfkit's module constructors and commands read. Replies go the
//! other way, field by field into the reply message.

use crate::error::{Fail, Res};
use nfkit_pipeline::args::Value;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, Value as Pv};
use prost_types::Any;
use std::sync::LazyLock;

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(
        include_bytes!(concat!(env!("OUT_DIR"), "/bess_descriptors.bin")).as_ref(),
    )
    .expect("the descriptors build.rs compiled decode")
});

/// Short names of every bess.pb message.
pub fn all_messages() -> Vec<String> {
    POOL.all_messages()
        .filter(|m| m.package_name() == "bess.pb")
        .map(|m| m.name().to_string())
        .collect()
}

/// The descriptor of `bess.pb.NAME`.
pub fn message(name: &str) -> Option<MessageDescriptor> {
    POOL.get_message_by_name(&format!("bess.pb.{name}"))
}

/// Decode `any` (whose type must be a bess.pb message) into a record;
/// returns the message's short name too.
pub fn any_to_value(any: &Any) -> Res<(String, Value)> {
    let full = crate::mclass::type_name(any);
    let desc = POOL.get_message_by_name(full).ok_or_else(|| {
        Fail::inval(format!(
            "unknown argument type `{}` (expected a bess.pb message)",
            any.type_url
        ))
    })?;
    let m = DynamicMessage::decode(desc.clone(), any.value.as_slice())
        .map_err(|e| Fail::inval(format!("malformed {full}: {e}")))?;
    Ok((desc.name().to_string(), message_to_value(&m)))
}

pub fn message_to_value(m: &DynamicMessage) -> Value {
    Value::Map(
        m.fields()
            .map(|(f, v)| (f.name().to_string(), to_value(v)))
            .collect(),
    )
}

fn to_value(v: &Pv) -> Value {
    match v {
        Pv::Bool(b) => Value::Int(*b as u64),
        Pv::I32(i) => signed(*i as i64),
        Pv::I64(i) => signed(*i),
        Pv::U32(u) => Value::Int(*u as u64),
        Pv::U64(u) => Value::Int(*u),
        Pv::F32(f) => Value::Float(*f as f64),
        Pv::F64(f) => Value::Float(*f),
        Pv::String(s) => Value::Str(s.clone()),
        Pv::Bytes(b) => Value::List(b.iter().map(|&x| Value::Int(x as u64)).collect()),
        Pv::EnumNumber(n) => signed(*n as i64),
        Pv::Message(m) => message_to_value(m),
        Pv::List(l) => Value::List(l.iter().map(to_value).collect()),
        Pv::Map(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (format!("{k:?}").trim_matches('"').to_string(), to_value(v)))
                .collect(),
        ),
    }
}

fn signed(i: i64) -> Value {
    if i >= 0 {
        Value::Int(i as u64)
    } else {
        Value::Float(i as f64)
    }
}

/// A record into message `bess.pb.NAME` (fields by name; a value of
/// the wrong shape is an error naming the field).
pub fn value_to_any(v: &Value, name: &str) -> Res<Any> {
    let desc = message(name).ok_or_else(|| Fail::inval(format!("no message bess.pb.{name}")))?;
    let m = value_to_message(v, &desc)?;
    Ok(Any {
        type_url: format!("type.googleapis.com/bess.pb.{name}"),
        value: m.encode_to_vec(),
    })
}

fn value_to_message(v: &Value, desc: &MessageDescriptor) -> Res<DynamicMessage> {
    let Value::Map(items) = v else {
        return Err(Fail::inval(format!(
            "{}: expected a record, got `{v}`",
            desc.name()
        )));
    };
    let mut m = DynamicMessage::new(desc.clone());
    for (k, x) in items {
        let f = desc
            .get_field_by_name(k)
            .ok_or_else(|| Fail::inval(format!("{} has no field `{k}`", desc.name())))?;
        let pv = if f.is_list() {
            let Value::List(l) = x else {
                return Err(Fail::inval(format!("{}.{k}: expected a list", desc.name())));
            };
            Pv::List(
                l.iter()
                    .map(|e| scalar(e, &f.kind(), k))
                    .collect::<Res<_>>()?,
            )
        } else {
            scalar(x, &f.kind(), k)?
        };
        m.try_set_field(&f, pv)
            .map_err(|e| Fail::inval(format!("{}.{k}: {e}", desc.name())))?;
    }
    Ok(m)
}

fn scalar(v: &Value, kind: &Kind, field: &str) -> Res<Pv> {
    let bad = || Fail::inval(format!("field `{field}`: `{v}` does not fit {kind:?}"));
    let int = |v: &Value| -> Option<i128> {
        match v {
            Value::Int(i) => Some(*i as i128),
            Value::Float(f) if f.fract() == 0.0 => Some(*f as i128),
            _ => None,
        }
    };
    Ok(match kind {
        Kind::Bool => Pv::Bool(int(v).ok_or_else(bad)? != 0),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Pv::I32(i32::try_from(int(v).ok_or_else(bad)?).map_err(|_| bad())?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Pv::I64(i64::try_from(int(v).ok_or_else(bad)?).map_err(|_| bad())?)
        }
        Kind::Uint32 | Kind::Fixed32 => {
            Pv::U32(u32::try_from(int(v).ok_or_else(bad)?).map_err(|_| bad())?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Pv::U64(u64::try_from(int(v).ok_or_else(bad)?).map_err(|_| bad())?)
        }
        Kind::Float | Kind::Double => {
            let f = match v {
                Value::Int(i) => *i as f64,
                Value::Float(f) => *f,
                _ => return Err(bad()),
            };
            if matches!(kind, Kind::Float) {
                Pv::F32(f as f32)
            } else {
                Pv::F64(f)
            }
        }
        Kind::String => match v {
            Value::Str(s) | Value::Ident(s) => Pv::String(s.clone()),
            other => Pv::String(other.to_string()),
        },
        Kind::Bytes => match v {
            Value::Str(s) => Pv::Bytes(s.clone().into_bytes().into()),
            Value::List(l) => Pv::Bytes(
                l.iter()
                    .map(|b| int(b).and_then(|b| u8::try_from(b).ok()).ok_or_else(bad))
                    .collect::<Res<Vec<u8>>>()?
                    .into(),
            ),
            _ => return Err(bad()),
        },
        Kind::Message(d) => Pv::Message(value_to_message(v, d)?),
        Kind::Enum(_) => Pv::EnumNumber(i32::try_from(int(v).ok_or_else(bad)?).map_err(|_| bad())?),
    })
}

/// BESS's name for a command's reply: `L2Forward` + `lookup` ->
/// `L2ForwardCommandLookupResponse`.
pub fn reply_name(class: &str, cmd: &str) -> String {
    let camel: String = cmd
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    format!("{class}Command{camel}Response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;

    #[test]
    fn messages_become_records_and_back() {
        let a = crate::mclass::pack(
            &pb::ExactMatchCommandAddArg {
                gate: 3,
                fields: vec![pb::FieldData {
                    encoding: Some(pb::field_data::Encoding::ValueBin(vec![10, 0, 0, 1])),
                }],
            },
            "ExactMatchCommandAddArg",
        );
        let (name, v) = any_to_value(&a).unwrap();
        assert_eq!(name, "ExactMatchCommandAddArg");
        assert_eq!(
            v,
            Value::Map(vec![
                ("gate".into(), Value::Int(3)),
                (
                    "fields".into(),
                    Value::List(vec![Value::Map(vec![(
                        "value_bin".into(),
                        Value::List([10, 0, 0, 1].map(Value::Int).to_vec())
                    )])])
                ),
            ])
        );
        let back = value_to_any(&v, "ExactMatchCommandAddArg").unwrap();
        assert_eq!(back.value, a.value);
        assert_eq!(
            reply_name("L2Forward", "lookup"),
            "L2ForwardCommandLookupResponse"
        );
        let junk = Any {
            type_url: "type.googleapis.com/bess.pb.NoSuchArg".into(),
            value: vec![],
        };
        assert_eq!(any_to_value(&junk).unwrap_err().code, libc::EINVAL);
    }
}
