//! Bytes from a frontend, straight onto the backend's socket: the
//! backend must neither crash nor stop accepting frontends.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfkit_hw::sim::SimDma;
use nfkit_hw::Mempool;
use nfkit_virtio::vhost_user::{BackendConfig, VhostUserBackend};
use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn backend() -> &'static VhostUserBackend {
    static BE: OnceLock<VhostUserBackend> = OnceLock::new();
    BE.get_or_init(|| {
        let dma = SimDma::new();
        let pool = Mempool::new(&*dma, "fuzz", 256, 2048).unwrap();
        let path = std::env::temp_dir().join(format!("nfkit-fuzz-{}.sock", std::process::id()));
        VhostUserBackend::listen(BackendConfig { name: "fuzz".into(), path, queue_pairs: 2, mac: [2, 0, 0, 0, 0, 1] }, pool).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let be = backend();
    let path = std::env::temp_dir().join(format!("nfkit-fuzz-{}.sock", std::process::id()));
    if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&path) {
        let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = s.write_all(data);
    }
    let start = Instant::now();
    while be.connected() {
        assert!(start.elapsed() < Duration::from_secs(5), "backend stuck on a closed connection");
        std::thread::sleep(Duration::from_micros(200));
    }
});
