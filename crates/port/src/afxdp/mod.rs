//! AF_XDP (in progress).
use crate::open::OpenOptions;
use crate::spec::AfXdpSpec;
use crate::PortError;

pub struct AfXdpPort;
impl AfXdpPort {
    pub fn open(
        name: &str,
        _spec: &AfXdpSpec,
        _opts: &OpenOptions,
    ) -> Result<Box<dyn crate::Port>, PortError> {
        Err(PortError::config(name, "not yet"))
    }
}
