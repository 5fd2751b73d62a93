//! Numbers from the VirtIO specification (version 1.2, cs01), as
//! declarative tables. Section numbers are given beside each group.
//! Names follow the specification so a reader can search for them.

/// Device status bits (§2.1 "Device Status Field").
pub mod status {
    pub const RESET: u8 = 0;
    pub const ACKNOWLEDGE: u8 = 1;
    pub const DRIVER: u8 = 2;
    pub const DRIVER_OK: u8 = 4;
    pub const FEATURES_OK: u8 = 8;
    pub const DEVICE_NEEDS_RESET: u8 = 64;
    pub const FAILED: u8 = 128;
}

/// Feature bits (§6 "Reserved Feature Bits" and §5.1.3 "Network device
/// feature bits"). Only the ones this driver reads or negotiates.
pub mod feature {
    /// §5.1.3: the device fills in partial checksums the driver hands it
    /// (`NEEDS_CSUM`, §5.1.6.2).
    pub const NET_F_CSUM: u64 = 1 << 0;
    /// §5.1.3: the driver takes packets with partial or verified
    /// checksums (`NEEDS_CSUM`, `DATA_VALID`, §5.1.6.4).
    pub const NET_F_GUEST_CSUM: u64 = 1 << 1;
    /// §5.1.3: the driver may turn the guest offloads on and off through
    /// the control queue (§5.1.6.5.6).
    pub const NET_F_CTRL_GUEST_OFFLOADS: u64 = 1 << 2;
    /// §5.1.3: the device has a MAC address in its configuration space.
    pub const NET_F_MAC: u64 = 1 << 5;
    /// §5.1.3: the driver takes TSO super-frames (IPv4, IPv6), with ECN.
    pub const NET_F_GUEST_TSO4: u64 = 1 << 7;
    pub const NET_F_GUEST_TSO6: u64 = 1 << 8;
    pub const NET_F_GUEST_ECN: u64 = 1 << 9;
    /// §5.1.3: the device segments TSO super-frames (IPv4, IPv6), with ECN.
    pub const NET_F_HOST_TSO4: u64 = 1 << 11;
    pub const NET_F_HOST_TSO6: u64 = 1 << 12;
    pub const NET_F_HOST_ECN: u64 = 1 << 13;
    /// §5.1.3: a received packet may span several receive buffers, the
    /// first one's header saying how many (`num_buffers`, §5.1.6.3.1);
    /// the header is then 12 bytes even on a legacy device.
    pub const NET_F_MRG_RXBUF: u64 = 1 << 15;
    /// §5.1.3: link status in the configuration space.
    pub const NET_F_STATUS: u64 = 1 << 16;
    /// §5.1.3: a control virtqueue exists.
    pub const NET_F_CTRL_VQ: u64 = 1 << 17;
    /// §5.1.3: receive-mode control (promiscuous, all-multicast).
    pub const NET_F_CTRL_RX: u64 = 1 << 18;
    /// §5.1.3: several receive/transmit queue pairs.
    pub const NET_F_MQ: u64 = 1 << 22;
    /// §6 (legacy): the header and the packet may share a descriptor.
    pub const F_ANY_LAYOUT: u64 = 1 << 27;
    /// §6: `used_event`/`avail_event` (§2.7.7, §2.7.10).
    pub const F_EVENT_IDX: u64 = 1 << 29;
    /// §6: a VirtIO 1.x (non-legacy) device.
    pub const F_VERSION_1: u64 = 1 << 32;
    /// §6 and §2.7.9: the device uses buffers in the order they were
    /// made available, so the driver may reclaim them in ring order.
    pub const F_IN_ORDER: u64 = 1 << 35;
    /// §6: the device sits behind an IOMMU and uses bus addresses
    /// (needed for modern devices under VFIO + vIOMMU).
    pub const F_ACCESS_PLATFORM: u64 = 1 << 33;
    /// vhost-user: the protocol-features message exists (vhost-user
    /// specification, "Protocol features").
    pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
}

/// Split-virtqueue descriptor flags (§2.7.5).
pub mod desc {
    /// The buffer continues in the descriptor named by `next`.
    pub const F_NEXT: u16 = 1;
    /// The device writes this buffer (otherwise it reads it).
    pub const F_WRITE: u16 = 2;
    /// The buffer holds a table of indirect descriptors (not used here).
    pub const F_INDIRECT: u16 = 4;
    /// Size of one descriptor: addr u64, len u32, flags u16, next u16.
    pub const SIZE: usize = 16;
}

/// Ring flags (§2.7.6 and §2.7.8).
pub mod ring {
    /// avail.flags: the driver does not want used-buffer notifications
    /// (ignored by the device once EVENT_IDX is negotiated, §2.7.7).
    pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
    /// used.flags: the device does not want available-buffer
    /// notifications (ignored by the driver with EVENT_IDX, §2.7.10).
    pub const USED_F_NO_NOTIFY: u16 = 1;
    /// Largest queue size of a split virtqueue (§2.7).
    pub const MAX_SIZE: u16 = 32768;
    /// Alignment of the used ring of a legacy queue (§2.7.2).
    pub const LEGACY_ALIGN: usize = 4096;
}

/// The network device (§5.1).
pub mod net {
    /// PCI device IDs (§4.1.2): transitional (legacy) and modern.
    pub const PCI_DEVICE_ID_LEGACY: u16 = 0x1000;
    pub const PCI_DEVICE_ID_MODERN: u16 = 0x1041;
    pub const PCI_VENDOR_ID: u16 = 0x1af4;

    /// §5.1.6: `struct virtio_net_hdr` without `num_buffers` (legacy
    /// device, MRG_RXBUF not negotiated) is 10 bytes; with VERSION_1 it
    /// always has `num_buffers` and is 12 bytes.
    pub const HDR_LEN_LEGACY: usize = 10;
    pub const HDR_LEN_MODERN: usize = 12;

    /// §5.1.4 device configuration layout (offsets in the device config).
    pub const CFG_MAC: usize = 0;
    pub const CFG_STATUS: usize = 6;
    pub const CFG_MAX_VIRTQUEUE_PAIRS: usize = 8;
    /// config `status` bit: link up.
    pub const S_LINK_UP: u16 = 1;

    /// §5.1.6.5: control virtqueue classes, commands and acks.
    pub const CTRL_RX: u8 = 0;
    pub const CTRL_RX_PROMISC: u8 = 0;
    pub const CTRL_MQ: u8 = 4;
    /// §5.1.6.5.6: VIRTIO_NET_CTRL_GUEST_OFFLOADS, command SET (a
    /// little-endian u64 of the guest offload feature bits to keep on).
    pub const CTRL_GUEST_OFFLOADS: u8 = 5;
    pub const CTRL_GUEST_OFFLOADS_SET: u8 = 0;
    pub const CTRL_MQ_VQ_PAIRS_SET: u8 = 0;
    pub const CTRL_OK: u8 = 0;
    pub const CTRL_ERR: u8 = 1;
}
