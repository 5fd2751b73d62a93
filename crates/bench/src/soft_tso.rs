//! `nfkit-bench soft-tso-lockstep --frames N` (internal): the pipeline's
//! software `TSO` module alone, lock-step, for callgrind. N super-frames
//! of 64,000 payload bytes (TCP in VXLAN, a chain of pool buffers, as
//! VXLANEncap leaves a TAP's 64 KB frame) are cut at an MSS of 1,398
//! into 46 segments each, which are then freed. The task runs alone:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*run_task_batch*' \
//!     target/release/nfkit-bench soft-tso-lockstep --frames 200
//! ```
//!
//! Instructions per payload byte: the total over the bytes printed.

use anyhow::{anyhow, Result};
use nfkit_hw::pool::offload::{Gso, Offload, Tunnel, L3, L4};
use nfkit_pipeline::args::Args;
use nfkit_pipeline::harness::Harness;
use nfkit_pipeline::modules::{BuildEnv, Registry};

/// Payload bytes of each super-frame, and its MSS.
pub const PAYLOAD: usize = 64_000;
const MSS: u16 = 1_398;

/// Outer Ethernet, IPv4, UDP to 4789, VXLAN; inner Ethernet, IPv4, TCP
/// (checksums left 0: TSO sets every one).
fn frame() -> Vec<u8> {
    let tcp_total = 20 + 20 + PAYLOAD;
    let outer_total = 20 + 8 + 8 + 14 + tcp_total;
    let mut f = vec![2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa, 8, 0];
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(outer_total as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 0, 1, 192, 168, 0, 2]);
    f.extend_from_slice(&0xc001u16.to_be_bytes());
    f.extend_from_slice(&4789u16.to_be_bytes());
    f.extend_from_slice(&((outer_total - 20) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x08, 0, 0, 0, 0, 0, 7, 0]);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(tcp_total as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[
        0x03, 0xe8, 0x07, 0xd0, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend((0..PAYLOAD).map(|i| (i * 31 % 251) as u8));
    f
}

/// Cut `frames` super-frames; returns the segments made.
pub fn lockstep(frames: usize) -> Result<usize> {
    let mut h = Harness::new();
    let mut a: Args = nfkit_pipeline::parse("x::Sink()\nx.c()", "t")?.commands[0]
        .args
        .clone();
    let env = BuildEnv {
        ports: Default::default(),
        pool: h.pool().clone(),
    };
    let mut tso = Registry::default()
        .build("TSO", &mut a, &env)
        .map_err(|e| anyhow!("TSO: {e}"))?;
    let f = frame();
    let o = Offload {
        l3: L3::Ipv4,
        l4: L4::Tcp,
        gso: Gso::Tcp,
        tunnel: Tunnel::Vxlan,
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        gso_size: MSS,
        outer_l2_len: 14,
        outer_l3_len: 20,
        tunnel_len: 16,
        ..Offload::default()
    };
    let mut segs = 0;
    for _ in 0..frames {
        let mut p = h.pool().alloc_frame(&f)?;
        p.set_offload(o);
        let mut b = nfkit_hw::Batch::new();
        let _ = b.push(p);
        let _ = h.process(&mut *tso, 0, b);
        loop {
            let k = h.run_task_batch(&mut *tso)[0].len();
            if k == 0 {
                break;
            }
            segs += k;
        }
    }
    let want = frames * PAYLOAD.div_ceil(usize::from(MSS));
    if segs != want {
        return Err(anyhow!(
            "{segs} segments, not {want}: {:?}",
            tso.extra_stats()
        ));
    }
    Ok(segs)
}
