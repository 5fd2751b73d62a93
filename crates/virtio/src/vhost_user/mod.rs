//! vhost-user: both ends of the protocol.
//!
//! - [`backend`]: a port that *is* a vhost-user backend (nfkit as the
//!   switch for VMs and other frontends);
//! - [`frontend`]: our virtqueue driver talking to a backend process
//!   ("virtio-user");
//! - [`memory`] and [`shared_ring`]: the backend's view of a frontend's
//!   memory and rings, every access checked (the only `unsafe` of the
//!   backend);
//! - [`device`]: the device side of a split virtqueue over them (the
//!   backend's data path).

pub mod backend;
pub mod device;
pub mod frontend;
pub mod memory;
pub mod shared_ring;

pub use backend::{BackendConfig, VhostUserBackend};
pub use frontend::{connect, FrontendConfig, VhostUserLink, VirtioUser};
