//! # nfkit-virtio: VirtIO-net for the queue model
//!
//! One split-virtqueue driver ([`virtqueue`]) under every way of reaching
//! a VirtIO network device:
//!
//! - legacy PCI (I/O-port BAR, VirtIO 1.2 §4.1.4.8) and modern PCI
//!   (capabilities and MMIO BARs, §4.1.4), both initialised per §3.1.1;
//! - vhost-user as the frontend ("virtio-user"): the same rings in
//!   memfd-backed memory shared with a backend process;
//! - and, the other way round, a vhost-user *backend* port so that VMs
//!   and other vhost-user frontends can plug into nfkit.
//!
//! Spec numbers are in [`spec`]. `unsafe` appears only where memory is
//! shared with another process (the memfd arena of [`shm`]; the
//! frontend's memory and rings as the backend maps them,
//! [`vhost_user::memory`] and [`vhost_user::shared_ring`]); every block
//! carries a `// SAFETY:` comment.
//!
//! ## Reading path
//!
//! From a port to a descriptor write: [`open_pci`] picks uio or VFIO and
//! the register layout → [`PciNet::init`] runs §3.1.1 and builds the
//! queues → [`NetDevice`]'s `Port::tx_batch` puts the net header in the
//! headroom (`net.rs`, `TxQueue::send`) → [`Virtqueue::add`] writes the
//! descriptor and the available-ring slot → [`Virtqueue::publish`]
//! writes `avail.idx` and says whether to notify → [`Notify::notify`]
//! (I/O port, a 16-bit store into the mapped notify BAR, the
//! configuration-space window when the BAR cannot be mapped, or an
//! eventfd).
//!
//! ## Ports
//!
//! | spec (through [`opener`]) | open with | port |
//! |---|---|---|
//! | `pci:ADDR` of a 1af4:1000/1041 | [`open_pci`] | [`PciNet`] (modern registers through the mapped BAR, or the §4.1.4.9 window) |
//! | `virtio-user:PATH[,queues=N][,tso=on]` | [`open_virtio_user`] | [`vhost_user::VirtioUser`] (our driver, a backend process as the device) |
//! | `vhost-user:PATH[,queues=N][,tso=on]` | [`open_vhost_user`] | [`vhost_user::VhostUserBackend`] (we are the device: QEMU guests, DPDK virtio-user) |
//!
//! A packet handed to a port's `tx_batch` from another port's pool is
//! copied into the port's own pool first (only its buffers have device
//! addresses the device can reach).
//!
//! ## Where it is tested
//!
//! - `tests/pci_model.rs`: both PCI layouts against a device model;
//! - `tests/vhost_user.rs`, `tests/hostile.rs`: frontend against backend,
//!   hostile frontends (proptest);
//! - `tests/dpdk.rs`: against DPDK's virtio-user and vhost PMDs;
//! - `cargo xtask guest run`: the real `nfkit` in a QEMU guest over
//!   legacy/uio, modern/uio and modern/VFIO, and a guest kernel's
//!   virtio-net over vhost-user through `nfkit nf bridge`;
//! - `cargo xtask fuzz`: the cargo-fuzz targets in `fuzz/`;
//! - `nfkit bench vhost`: the vhost-user path against DPDK's.

#![deny(unsafe_code)]

pub mod ctrl;
pub mod error;
pub mod net;
pub mod open;
pub mod pci;
pub mod shm;
pub mod spec;
pub mod vhost_user;
pub mod virtqueue;
pub mod vnet;

pub use error::VirtioError;
pub use net::{NetDevice, Notify};
pub use open::{open_pci, open_vhost_user, open_virtio_user, opener};
pub use pci::modern::{IoBars, MappedBars, PciCfgAccess, RegisterSpace};
pub use pci::{LegacyTransport, ModernTransport, NetConfig, PciNet, PciTransport};
pub use shm::MemfdArena;
pub use virtqueue::{LayoutKind, QueueError, RingLayout, Segment, Used, UsedError, Virtqueue};
