//! Typed errors of the VirtIO driver and the vhost-user ports.

use crate::virtqueue::QueueError;
use nfkit_hw::HwError;

/// Why a VirtIO device could not be brought up or driven.
#[derive(Debug, thiserror::Error)]
pub enum VirtioError {
    #[error(transparent)]
    Hw(#[from] HwError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("PCI function {addr} is {vendor:04x}:{device:04x}, not a VirtIO network device (1af4:1000 legacy or 1af4:1041 modern)")]
    NotVirtioNet {
        addr: String,
        vendor: u16,
        device: u16,
    },
    #[error("PCI function {addr}: no device there (config space reads all-ones): is the address right and the device not hot-unplugged?")]
    NoDevice { addr: String },
    #[error("the device did not finish {step} within {timeout_ms} ms (VirtIO 1.2 §3.1.1)")]
    Timeout { step: &'static str, timeout_ms: u64 },
    #[error("the device refused the features {wanted:#x} (it offered {offered:#x}): FEATURES_OK did not stick (§3.1.1 step 6)")]
    FeaturesRefused { offered: u64, wanted: u64 },
    #[error("the device lacks feature {name} (bit {bit}), which this driver needs")]
    MissingFeature { name: &'static str, bit: u32 },
    #[error("the device set status {status:#x} (FAILED or DEVICE_NEEDS_RESET) during {step}")]
    DeviceFailed { step: &'static str, status: u8 },
    #[error("virtqueue {queue} is not available on this device (size 0)")]
    NoQueue { queue: u16 },
    #[error("modern VirtIO PCI capability `{0}` is missing or malformed (§4.1.4)")]
    Capability(&'static str),
    #[error("control queue command class {class} cmd {cmd}: {why}")]
    Control {
        class: u8,
        cmd: u8,
        why: &'static str,
    },
    #[error("vhost-user: {0}")]
    VhostUser(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}
