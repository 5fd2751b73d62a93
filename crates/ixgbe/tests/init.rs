//! Device initialization against the 82599 model in strict mode: zero
//! violations with 1 and 16 queue pairs in both execution modes, and a
//! typed error (no panic, no hang) for each injected fault.

mod common;

use common::{assert_no_violations, model, Bench, Mode};
use nfkit_hw::Mempool;
use nfkit_ixgbe::{DeviceConfig, DeviceStats, InitError, Step};
use nfkit_ixgbe_model::{Faults, LinkFault, ModelConfig};
use std::time::{Duration, Instant};

fn queues(n: usize) -> DeviceConfig {
    DeviceConfig {
        rx_queues: n,
        tx_queues: n,
        ..DeviceConfig::default()
    }
}

/// Initialize, open every queue pair (queue model), close them again.
fn init_and_open_all(mode: Mode, n: usize) {
    let mut bench = Bench::new(mode);
    let nic = bench.nic(model(1));
    let dev = bench.init(&nic, queues(n)).expect("init");
    assert_eq!(dev.mac(), [0x02, 0, 0, 0, 0, 1], "MAC from RAL0/RAH0");
    assert!(dev.link().up);
    assert!(!dev.init_report().master_disable_fallback);
    let pool = Mempool::new(&*bench.dma, "init", n * 2 * 128 + 256, 4096).unwrap();
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for q in 0..n {
        rx.push(dev.rx_queue(q, &pool, 128).expect("rx queue"));
        tx.push(dev.tx_queue(q, &pool, 128).expect("tx queue"));
    }
    assert!(matches!(
        dev.rx_queue(0, &pool, 128),
        Err(InitError::QueueBusy { .. })
    ));
    assert!(matches!(
        dev.tx_queue(n, &pool, 128),
        Err(InitError::Config(_))
    ));
    drop(rx);
    drop(tx);
    assert_eq!(
        pool.free_count(),
        pool.capacity(),
        "queues gave their buffers back"
    );
    assert_eq!(
        dev.stats(),
        DeviceStats::default(),
        "no traffic: every counter reads zero"
    );
    assert_no_violations(&nic);
    bench.stop();
}

#[test]
fn lock_step_one_queue_pair() {
    init_and_open_all(Mode::LockStep, 1);
}

#[test]
fn lock_step_sixteen_queue_pairs() {
    init_and_open_all(Mode::LockStep, 16);
}

#[test]
fn free_running_one_queue_pair() {
    init_and_open_all(Mode::FreeRunning, 1);
}

#[test]
fn free_running_sixteen_queue_pairs() {
    init_and_open_all(Mode::FreeRunning, 16);
}

#[test]
fn all_128_queues_can_be_opened() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    let dev = bench.init(&nic, queues(128)).expect("init");
    let pool = Mempool::new(&*bench.dma, "q128", 128 * 64 * 2 + 256, 4096).unwrap();
    let rx: Vec<_> = (0..128)
        .map(|q| dev.rx_queue(q, &pool, 64).unwrap())
        .collect();
    let tx: Vec<_> = (0..128)
        .map(|q| dev.tx_queue(q, &pool, 64).unwrap())
        .collect();
    drop((rx, tx));
    assert_no_violations(&nic);
}

fn with_faults(faults: Faults) -> ModelConfig {
    ModelConfig { faults, ..model(1) }
}

/// Run init on a faulty model (lock-step: the timeouts pass in virtual
/// time) and return its error.
fn init_error(faults: Faults) -> InitError {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(with_faults(faults));
    let started = Instant::now();
    let err = bench
        .init(&nic, DeviceConfig::default())
        .expect_err("init must fail");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a fault must not hang"
    );
    let text = err.to_string();
    let step = err.step().expect("the error names its step");
    assert!(text.contains(step.section()), "{text}");
    err
}

#[test]
fn eeprom_absent() {
    let err = init_error(Faults {
        eeprom_absent: true,
        ..Faults::default()
    });
    assert!(
        matches!(
            err,
            InitError::EepromAbsent {
                step: Step::EepromAutoRead
            }
        ),
        "{err}"
    );
}

#[test]
fn eeprom_bad_checksum() {
    let err = init_error(Faults {
        eeprom_bad_checksum: true,
        ..Faults::default()
    });
    assert!(
        matches!(
            err,
            InitError::EepromChecksum {
                step: Step::EepromAutoRead,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn dma_init_never_done() {
    let err = init_error(Faults {
        dma_init_never_done: true,
        ..Faults::default()
    });
    assert!(
        matches!(
            err,
            InitError::Timeout {
                step: Step::DmaInitDone,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn link_down() {
    let err = init_error(Faults {
        link: LinkFault::Down,
        ..Faults::default()
    });
    assert!(
        matches!(
            err,
            InitError::LinkDown {
                step: Step::LinkUp,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn queue_never_enables() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(with_faults(Faults {
        queue_never_enables: Some(3),
        ..Faults::default()
    }));
    let dev = bench.init(&nic, queues(4)).expect("init itself succeeds");
    let pool = Mempool::new(&*bench.dma, "f", 1024, 4096).unwrap();
    assert!(dev.rx_queue(2, &pool, 128).is_ok());
    let err = dev
        .rx_queue(3, &pool, 128)
        .err()
        .expect("rx queue 3 never enables");
    assert!(
        matches!(
            err,
            InitError::Timeout {
                step: Step::RxQueueSetup,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("RXDCTL.ENABLE"), "{err}");
    let err = dev
        .tx_queue(3, &pool, 128)
        .err()
        .expect("tx queue 3 never enables");
    assert!(
        matches!(
            err,
            InitError::Timeout {
                step: Step::TxQueueSetup,
                ..
            }
        ),
        "{err}"
    );
    // the failed queues were released and can be tried again
    assert!(matches!(
        dev.rx_queue(3, &pool, 128),
        Err(InitError::Timeout { .. })
    ));
}

#[test]
fn master_disable_stuck_takes_the_fallback() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(with_faults(Faults {
        master_disable_stuck: true,
        ..Faults::default()
    }));
    let dev = bench
        .init(&nic, DeviceConfig::default())
        .expect("the fallback path initializes the device");
    assert!(dev.init_report().master_disable_fallback);
    assert!(dev.link().up);
    assert_no_violations(&nic);
}

#[test]
fn wrong_device_is_refused() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(ModelConfig {
        device_id: 0x1234,
        ..model(1)
    });
    let err = bench.init(&nic, DeviceConfig::default()).unwrap_err();
    assert!(
        matches!(
            err,
            InitError::Device {
                step: Step::PciIdentity,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn bad_queue_counts_are_refused() {
    let mut bench = Bench::new(Mode::LockStep);
    let nic = bench.nic(model(1));
    assert!(matches!(
        bench.init(&nic, queues(0)),
        Err(InitError::Config(_))
    ));
    assert!(matches!(
        bench.init(&nic, queues(129)),
        Err(InitError::Config(_))
    ));
}
