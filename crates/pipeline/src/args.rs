//! Module arguments as the config language gives them, with typed
//! getters that report which argument is wrong.

use std::fmt;

/// A position in a config file (1-based line and column).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

/// An argument value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Str(String),
    /// A bare name (a port, a policy, a mode).
    Ident(String),
    List(Vec<Value>),
    /// A record of named values: a module command's argument, or one
    /// entry of a list of rules (`.nfk`: `(name=value, ...)`; BESS: a
    /// protobuf message).
    Map(Vec<(String, Value)>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Ident(s) => f.write_str(s),
            Value::List(l) => {
                f.write_str("[")?;
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Value::Map(m) => {
                f.write_str("(")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}={v}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Ident(_) => "a name",
            Value::List(_) => "a list",
            Value::Map(_) => "a record",
        }
    }
}

/// A problem with one argument (or with the argument list when `arg` is
/// `None`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{msg}", arg.as_ref().map(|a| format!("argument `{a}`: ")).unwrap_or_default())]
pub struct ArgError {
    pub arg: Option<String>,
    pub msg: String,
}

impl ArgError {
    pub fn new(arg: &str, msg: impl Into<String>) -> ArgError {
        ArgError {
            arg: Some(arg.to_string()),
            msg: msg.into(),
        }
    }
    pub fn general(msg: impl Into<String>) -> ArgError {
        ArgError {
            arg: None,
            msg: msg.into(),
        }
    }
}

/// The `name=value` arguments of one module or class, consumed by typed
/// getters; [`Args::finish`] rejects any left over.
#[derive(Debug, Clone, Default)]
pub struct Args {
    items: Vec<(String, Value, Pos)>,
    used: Vec<bool>,
}

impl Args {
    pub fn new(items: Vec<(String, Value, Pos)>) -> Args {
        let used = vec![false; items.len()];
        Args { items, used }
    }

    /// Arguments from (name, value) pairs (for Rust callers).
    pub fn from_pairs(pairs: &[(&str, Value)]) -> Args {
        Args::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone(), Pos::default()))
                .collect(),
        )
    }

    /// The arguments of a record value (`Value::Map`).
    pub fn from_value(name: &str, v: Value) -> Result<Args, ArgError> {
        match v {
            Value::Map(m) => Ok(Args::new(
                m.into_iter().map(|(k, v)| (k, v, Pos::default())).collect(),
            )),
            v => Err(Self::wrong(name, "a record `(name=value, ...)`", &v)),
        }
    }

    /// The arguments as a record value (what [`Args::from_value`] reads).
    pub fn into_value(self) -> Value {
        Value::Map(self.items.into_iter().map(|(k, v, _)| (k, v)).collect())
    }

    /// A list of records (a single record is a list of one); each comes
    /// back as its own `Args`, to be read and [`finish`](Args::finish)ed.
    pub fn records(&mut self, name: &str) -> Result<Option<Vec<Args>>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::List(l)) => l
                .into_iter()
                .map(|v| Args::from_value(name, v))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Args::from_value(name, v).map(|a| Some(vec![a])),
        }
    }

    /// A list of strings (a single string is a list of one).
    pub fn str_list(&mut self, name: &str) -> Result<Option<Vec<String>>, ArgError> {
        let l = match self.take(name) {
            None => return Ok(None),
            Some(Value::List(l)) => l,
            Some(v) => vec![v],
        };
        l.into_iter()
            .map(|v| match v {
                Value::Str(s) | Value::Ident(s) => Ok(s),
                v => Err(Self::wrong(name, "a list of strings", &v)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A flag: `0`/`1`, or the names `true`/`false`.
    pub fn bool_or(&mut self, name: &str, default: bool) -> Result<bool, ArgError> {
        match self.take(name) {
            None => Ok(default),
            Some(Value::Int(v @ (0 | 1))) => Ok(v == 1),
            Some(Value::Ident(s) | Value::Str(s)) if s == "true" || s == "True" => Ok(true),
            Some(Value::Ident(s) | Value::Str(s)) if s == "false" || s == "False" => Ok(false),
            Some(v) => Err(Self::wrong(name, "a flag (0, 1, true, false)", &v)),
        }
    }

    /// Whether no argument is left to read.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Where argument `name` was written.
    pub fn pos(&self, name: &str) -> Option<Pos> {
        self.items.iter().find(|i| i.0 == name).map(|i| i.2)
    }

    /// The raw value of `name`, marking it used.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        let i = self.items.iter().position(|i| i.0 == name)?;
        self.used[i] = true;
        Some(self.items[i].1.clone())
    }

    fn wrong(name: &str, want: &str, got: &Value) -> ArgError {
        ArgError::new(
            name,
            format!("expected {want}, found {} `{got}`", got.kind()),
        )
    }

    pub fn u64(&mut self, name: &str) -> Result<Option<u64>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Int(v)) => Ok(Some(v)),
            Some(v) => Err(Self::wrong(name, "an integer", &v)),
        }
    }

    pub fn u64_or(&mut self, name: &str, default: u64) -> Result<u64, ArgError> {
        Ok(self.u64(name)?.unwrap_or(default))
    }

    /// An integer in `lo..=hi`.
    pub fn usize_in(
        &mut self,
        name: &str,
        default: usize,
        lo: usize,
        hi: usize,
    ) -> Result<usize, ArgError> {
        let v = self.u64_or(name, default as u64)?;
        if v < lo as u64 || v > hi as u64 {
            return Err(ArgError::new(
                name,
                format!("{v} is out of range {lo}..={hi}"),
            ));
        }
        Ok(v as usize)
    }

    pub fn f64(&mut self, name: &str) -> Result<Option<f64>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Int(v)) => Ok(Some(v as f64)),
            Some(Value::Float(v)) => Ok(Some(v)),
            Some(v) => Err(Self::wrong(name, "a number", &v)),
        }
    }

    /// A string or a bare name.
    pub fn str(&mut self, name: &str) -> Result<Option<String>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Str(s) | Value::Ident(s)) => Ok(Some(s)),
            Some(v) => Err(Self::wrong(name, "a string", &v)),
        }
    }

    pub fn required_str(&mut self, name: &str) -> Result<String, ArgError> {
        self.str(name)?
            .ok_or_else(|| ArgError::new(name, "is required"))
    }

    /// A list of integers (a single integer is a list of one).
    pub fn u64_list(&mut self, name: &str) -> Result<Option<Vec<u64>>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Int(v)) => Ok(Some(vec![v])),
            Some(Value::List(l)) => l
                .iter()
                .map(|v| match v {
                    Value::Int(i) => Ok(*i),
                    v => Err(Self::wrong(name, "a list of integers", v)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(Self::wrong(name, "a list of integers", &v)),
        }
    }

    /// Bytes: a string's bytes, or a list of integers 0..=255.
    pub fn bytes(&mut self, name: &str) -> Result<Option<Vec<u8>>, ArgError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s.into_bytes())),
            Some(Value::List(l)) => l
                .iter()
                .map(|v| match v {
                    Value::Int(i) if *i <= 255 => Ok(*i as u8),
                    v => Err(Self::wrong(name, "a list of bytes (0..=255)", v)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(v) => Err(Self::wrong(
                name,
                "bytes (a string or a list of 0..=255)",
                &v,
            )),
        }
    }

    /// Fail on arguments nobody asked for.
    pub fn finish(&self, class: &str) -> Result<(), ArgError> {
        match self.items.iter().zip(&self.used).find(|(_, u)| !**u) {
            Some((i, _)) => Err(ArgError::new(&i.0, format!("{class} has no such argument"))),
            None => Ok(()),
        }
    }
}
