//! Errors as BESS reports them: an `Error` message with a Linux errno
//! and a sentence. A failed request never stops the daemon.

use crate::pb;
use nfkit_pipeline::graph::GraphError;
use nfkit_pipeline::sched::TcError;
use nfkit_pipeline::PipelineError;

/// A failed request: errno and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    pub code: i32,
    pub msg: String,
}

pub type Res<T> = Result<T, Fail>;

impl Fail {
    pub fn new(code: i32, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
        }
    }
    pub fn inval(msg: impl Into<String>) -> Fail {
        Fail::new(libc::EINVAL, msg)
    }
    pub fn noent(msg: impl Into<String>) -> Fail {
        Fail::new(libc::ENOENT, msg)
    }
    pub fn exist(msg: impl Into<String>) -> Fail {
        Fail::new(libc::EEXIST, msg)
    }
    pub fn busy(msg: impl Into<String>) -> Fail {
        Fail::new(libc::EBUSY, msg)
    }
    pub fn notsup(msg: impl Into<String>) -> Fail {
        Fail::new(libc::ENOTSUP, msg)
    }
    pub fn to_pb(&self) -> pb::Error {
        pb::Error {
            code: self.code,
            errmsg: self.msg.clone(),
        }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "errno {}: {}", self.code, self.msg)
    }
}

impl From<GraphError> for Fail {
    fn from(e: GraphError) -> Fail {
        if let GraphError::TwoWorkers {
            module,
            class,
            a,
            b,
        } = &e
        {
            // BESS runs such a module on both workers; name them as a
            // BESS script does (wid), with what to do instead.
            let wid = |w: &str| w.strip_prefix('w').unwrap_or(w).to_string();
            return Fail::inval(format!(
                "module `{module}` ({class}) would get packets from tasks on two workers, wid {} and wid {}: nfkit runs each module on one worker (one owner per queue, no lock on the data path), where BESS would run it on both; give each worker its own `{class}`, or put a Queue in front of `{module}` and attach its task to one worker",
                wid(a),
                wid(b)
            ));
        }
        let code = match &e {
            GraphError::DuplicateModule(_) | GraphError::DuplicateWorker(_) => libc::EEXIST,
            GraphError::Tc(TcError::Duplicate(_)) => libc::EEXIST,
            GraphError::NoModule(_) | GraphError::NoWorker(_) | GraphError::NoTc { .. } => {
                libc::ENOENT
            }
            GraphError::GateBusy { .. } => libc::EBUSY,
            _ => libc::EINVAL,
        };
        Fail::new(code, e.to_string())
    }
}

impl From<PipelineError> for Fail {
    fn from(e: PipelineError) -> Fail {
        match e {
            PipelineError::Graph(g) => g.into(),
            PipelineError::Running => Fail::busy(e.to_string()),
            PipelineError::WorkerLost(_) => Fail::new(libc::EIO, e.to_string()),
            other => Fail::inval(other.to_string()),
        }
    }
}
