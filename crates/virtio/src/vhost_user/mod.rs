//! vhost-user: both ends of the protocol.
//!
//! - [`backend`]: a port that *is* a vhost-user backend (nfkit as the
//!   switch for VMs and other frontends);
//! - [`frontend`]: our virtqueue driver talking to a backend process
//!   ("virtio-user");
//! - [`memory`] and [`device`]: the backend's view of a frontend's
//!   memory and rings, with every access checked.

pub mod backend;
pub mod device;
pub mod frontend;
pub mod memory;

pub use backend::{BackendConfig, VhostUserBackend};
pub use frontend::{connect, FrontendConfig, VhostUserLink, VirtioUser};
