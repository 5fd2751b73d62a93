//! Typed errors. Every initialization failure names the step of datasheet
//! §4.6.3 it happened in and the section that defines that step.

use nfkit_hw::HwError;
use std::fmt;
use std::time::Duration;

/// The steps of device initialization, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    PciIdentity,
    PciPowerState,
    PciCommand,
    PciBar0,
    MapBar0,
    DisableRxQueues,
    MasterDisable,
    GlobalReset,
    DisableInterrupts,
    EepromAutoRead,
    DmaInitDone,
    ReceiveFilters,
    DcbVirtualizationOff,
    TransmitInit,
    ReceiveEnable,
    LinkUp,
    RxQueueSetup,
    TxQueueSetup,
    RxQueueStop,
    TxQueueStop,
}

impl Step {
    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Step::PciIdentity => "PCI vendor/device ID check",
            Step::PciPowerState => "PCI power state D0 check",
            Step::PciCommand => "PCI command register set-up",
            Step::PciBar0 => "PCI BAR0 check",
            Step::MapBar0 => "BAR0 mapping",
            Step::DisableRxQueues => "receive queue disable",
            Step::MasterDisable => "PCIe master disable",
            Step::GlobalReset => "global reset",
            Step::DisableInterrupts => "interrupt disable",
            Step::EepromAutoRead => "EEPROM auto-read",
            Step::DmaInitDone => "DMA initialization done",
            Step::ReceiveFilters => "receive filter tables",
            Step::DcbVirtualizationOff => "DCB and virtualization off",
            Step::TransmitInit => "transmit initialization",
            Step::ReceiveEnable => "receive enable",
            Step::LinkUp => "link up",
            Step::RxQueueSetup => "receive queue set-up",
            Step::TxQueueSetup => "transmit queue set-up",
            Step::RxQueueStop => "receive queue disable",
            Step::TxQueueStop => "transmit queue disable",
        }
    }

    /// The 82599 datasheet (rev 3.3) section defining the step.
    pub fn section(self) -> &'static str {
        match self {
            Step::PciIdentity => "9.3.3.1-9.3.3.2",
            Step::PciPowerState => "9.3.7.1.4",
            Step::PciCommand => "9.3.3.3",
            Step::PciBar0 => "9.3.6.1",
            Step::MapBar0 => "8.1",
            Step::DisableRxQueues => "4.6.7.1.2",
            Step::MasterDisable => "5.2.5.3.2",
            Step::GlobalReset => "4.6.3.2",
            Step::DisableInterrupts => "4.6.3.1",
            Step::EepromAutoRead => "4.6.3",
            Step::DmaInitDone => "4.6.3",
            Step::ReceiveFilters => "4.6.7",
            Step::DcbVirtualizationOff => "4.6.11.3.4",
            Step::TransmitInit => "4.6.8",
            Step::ReceiveEnable => "4.6.7",
            Step::LinkUp => "4.6.4",
            Step::RxQueueSetup => "4.6.7",
            Step::TxQueueSetup => "4.6.8",
            Step::RxQueueStop => "4.6.7.1.2",
            Step::TxQueueStop => "4.6.8.2",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (82599 datasheet §{})", self.name(), self.section())
    }
}

/// Why device initialization or queue set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A register never reached the expected value within the timeout.
    #[error("{step}: timed out after {timeout:?} waiting for {waited_for}")]
    Timeout {
        step: Step,
        waited_for: &'static str,
        timeout: Duration,
    },
    /// The device is not in a state the driver can work with.
    #[error("{step}: {what}")]
    Device { step: Step, what: String },
    /// The EEPROM is absent (EEC.EE_PRES clear after auto-read).
    #[error("{step}: no EEPROM present (EEC.EE_PRES = 0); the device has no MAC address or link configuration")]
    EepromAbsent { step: Step },
    /// Firmware reports an EEPROM checksum error (FWSM.EXT_ERR_IND != 0).
    #[error("{step}: EEPROM checksum error reported by firmware (FWSM.EXT_ERR_IND = {code:#x})")]
    EepromChecksum { step: Step, code: u32 },
    /// The link did not come up (LINKS.LINK_UP) within the timeout.
    #[error("{step}: link still down after {timeout:?} (LINKS.LINK_UP = 0): check the cable/module and the link partner")]
    LinkDown { step: Step, timeout: Duration },
    /// PCI configuration space or memory could not be accessed.
    #[error("{step}: {source}")]
    Hw {
        step: Step,
        #[source]
        source: HwError,
    },
    /// A bad argument from the caller (queue index, ring size...).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The queue is already in use by another handle.
    #[error("{kind} queue {index} is already in use")]
    QueueBusy { kind: &'static str, index: usize },
}

impl InitError {
    /// The step that failed, if the error belongs to one.
    pub fn step(&self) -> Option<Step> {
        match self {
            InitError::Timeout { step, .. }
            | InitError::Device { step, .. }
            | InitError::EepromAbsent { step }
            | InitError::EepromChecksum { step, .. }
            | InitError::LinkDown { step, .. }
            | InitError::Hw { step, .. } => Some(*step),
            InitError::Config(_) | InitError::QueueBusy { .. } => None,
        }
    }
}

/// Attach a step to a hardware-layer error.
pub(crate) trait AtStep<T> {
    fn at(self, step: Step) -> Result<T, InitError>;
}

impl<T> AtStep<T> for Result<T, HwError> {
    fn at(self, step: Step) -> Result<T, InitError> {
        self.map_err(|source| InitError::Hw { step, source })
    }
}
