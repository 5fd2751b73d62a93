//! Opening a port from its spec, and the registry the CLI extends with
//! the backends that live in other crates: the 82599 (`sim:`, `pci:`)
//! and VirtIO (`pci:`, `vhost-user:`, `virtio-user:`).

use crate::spec::PortSpec;
use crate::{afpacket, afxdp, null, pcap, tap, Mempool, Port, PortError};
use nfkit_hw::pool::DEFAULT_BUF_SIZE;
use nfkit_hw::sim::SimDma;

/// Settings shared by all backends.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Buffers in the port's pool (per port, shared by its queues).
    pub pool_buffers: usize,
    /// Take a PCI device even though the kernel is using it (one of its
    /// interfaces is up, addressed or routed): `--force`.
    pub force: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            pool_buffers: 4096,
            force: false,
        }
    }
}

/// `port` holding `guard` until it is dropped, after the port (a
/// [`nfkit_hw::linux::DriverGuard`] gives a device back to its kernel
/// driver once the port has let go of it).
pub fn with_guard<G: Send + 'static>(port: Box<dyn Port>, guard: G) -> Box<dyn Port> {
    Box::new(Guarded {
        port,
        _guard: guard,
    })
}

/// Fields drop in order: the port first, then the guard.
struct Guarded<G> {
    port: Box<dyn Port>,
    _guard: G,
}

impl<G: Send> Port for Guarded<G> {
    fn name(&self) -> &str {
        self.port.name()
    }
    fn rx_queues(&self) -> usize {
        self.port.rx_queues()
    }
    fn tx_queues(&self) -> usize {
        self.port.tx_queues()
    }
    fn rx_batch(&mut self, queue: usize, batch: &mut crate::Batch) -> usize {
        self.port.rx_batch(queue, batch)
    }
    fn tx_batch(&mut self, queue: usize, batch: &mut crate::Batch) -> usize {
        self.port.tx_batch(queue, batch)
    }
    fn tx_refused(&mut self, queue: usize, n: u64) {
        self.port.tx_refused(queue, n)
    }
    fn queue_stats(&self, queue: usize) -> crate::QueueStats {
        self.port.queue_stats(queue)
    }
    fn stats(&self) -> crate::QueueStats {
        self.port.stats()
    }
    fn link(&self) -> crate::LinkStatus {
        self.port.link()
    }
    fn max_frame(&self) -> usize {
        self.port.max_frame()
    }
    fn tx_chains(&self) -> bool {
        self.port.tx_chains()
    }
    fn mac(&self) -> [u8; 6] {
        self.port.mac()
    }
    fn capabilities(&self) -> crate::Caps {
        self.port.capabilities()
    }
    fn pool(&self) -> &Mempool {
        self.port.pool()
    }
    fn take_error(&mut self) -> Option<PortError> {
        self.port.take_error()
    }
    fn rx_done(&self) -> bool {
        self.port.rx_done()
    }
    fn flush(&mut self) -> Result<(), PortError> {
        self.port.flush()
    }
}

/// A pool of `count` 2 KiB buffers in ordinary memory, for software ports:
/// no device DMAs into it, so the simulated platform's heap memory does.
pub fn software_pool(name: &str, count: usize) -> Result<Mempool, PortError> {
    let dma = SimDma::new();
    Mempool::new(&*dma, name, count, DEFAULT_BUF_SIZE).map_err(|source| PortError::Hw {
        port: name.to_string(),
        source,
    })
}

/// Open one of the software backends. `sim:`, `pci:`, `vhost-user:` and
/// `virtio-user:` give a `PortError::Config`: open those through a
/// [`Registry`] that has an [`Opener`] for them.
pub fn open(spec: &PortSpec, opts: &OpenOptions) -> Result<Box<dyn Port>, PortError> {
    let name = spec.to_string();
    Ok(match spec {
        PortSpec::Null(s) => Box::new(null::NullPort::open(&name, s, opts)?),
        PortSpec::Pcap(s) => Box::new(pcap::PcapPort::open(&name, s, opts)?),
        PortSpec::AfPacket(s) => Box::new(afpacket::AfPacketPort::open(&name, s, opts)?),
        PortSpec::Tap(s) => Box::new(tap::TapPort::open(&name, s, opts)?),
        PortSpec::AfXdp(s) => Box::new(afxdp::AfXdpPort::open(&name, s, opts)?),
        PortSpec::Sim(..) | PortSpec::Pci(..) => {
            return Err(PortError::config(
                &name,
                "82599 ports (sim:, pci:) are not supported here: open them through a \
                 Registry with the ixgbe opener (the `nfkit` command does this)",
            ))
        }
        PortSpec::Bond(b) => {
            let members = b
                .members
                .iter()
                .map(|m| open(m, opts))
                .collect::<Result<Vec<_>, _>>()?;
            Box::new(crate::bond::BondPort::new(&name, members, b.opts.clone())?)
        }
        PortSpec::VhostUser(_) | PortSpec::VirtioUser(_) => {
            return Err(PortError::config(
                &name,
                "vhost-user ports (vhost-user:, virtio-user:) are not supported here: open \
                 them through a Registry with nfkit_virtio::opener() (the `nfkit` command \
                 does this)",
            ))
        }
    })
}

/// Opens the specs a crate above this one knows (the 82599 driver for
/// `sim:` and `pci:`). Returns `None` to pass the spec on.
pub trait Opener: Send + Sync {
    fn open(&self, spec: &PortSpec, opts: &OpenOptions)
        -> Option<Result<Box<dyn Port>, PortError>>;
}

impl<F> Opener for F
where
    F: Fn(&PortSpec, &OpenOptions) -> Option<Result<Box<dyn Port>, PortError>> + Send + Sync,
{
    fn open(
        &self,
        spec: &PortSpec,
        opts: &OpenOptions,
    ) -> Option<Result<Box<dyn Port>, PortError>> {
        self(spec, opts)
    }
}

/// The software backends plus any added openers, asked in the order added
/// before the built-in ones.
#[derive(Default)]
pub struct Registry {
    openers: Vec<Box<dyn Opener>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Add an opener, asked before the ones already added and before the
    /// software backends.
    pub fn with(mut self, opener: impl Opener + 'static) -> Registry {
        self.openers.insert(0, Box::new(opener));
        self
    }

    pub fn open(&self, spec: &PortSpec, opts: &OpenOptions) -> Result<Box<dyn Port>, PortError> {
        if let PortSpec::Bond(b) = spec {
            // Members through this registry (vhost-user, 82599s, ...).
            let members = b
                .members
                .iter()
                .map(|m| self.open(m, opts))
                .collect::<Result<Vec<_>, _>>()?;
            let port = crate::bond::BondPort::new(&spec.to_string(), members, b.opts.clone())?;
            return Ok(Box::new(port));
        }
        let port = self
            .openers
            .iter()
            .find_map(|o| o.open(spec, opts))
            .unwrap_or_else(|| open(spec, opts))?;
        tracing::info!("{}", crate::frame_line(&*port));
        Ok(port)
    }

    /// Parse and open.
    pub fn open_str(&self, spec: &str, opts: &OpenOptions) -> Result<Box<dyn Port>, PortError> {
        let parsed: PortSpec = spec
            .parse()
            .map_err(|e: crate::SpecError| PortError::config(spec, e.msg))?;
        self.open(&parsed, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_specs_need_an_opener() {
        let e = open(&"sim:0".parse().unwrap(), &OpenOptions::default())
            .err()
            .unwrap();
        assert!(e.to_string().contains("not supported here"), "{e}");
        for s in ["vhost-user:/tmp/x.sock", "virtio-user:/tmp/x.sock"] {
            let e = open(&s.parse().unwrap(), &OpenOptions::default())
                .err()
                .unwrap();
            assert!(e.to_string().contains("nfkit_virtio::opener"), "{e}");
        }
        let reg = Registry::new().with(|spec: &PortSpec, opts: &OpenOptions| match spec {
            PortSpec::Sim(..) => Some(open(&"null:".parse().unwrap(), opts)),
            _ => None,
        });
        let p = reg.open_str("sim:0", &OpenOptions::default()).unwrap();
        assert_eq!(p.name(), "null:");
        // a guard outlives the port it is attached to
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let g = with_guard(p, Flag(dropped.clone()));
        assert_eq!(g.name(), "null:");
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(g);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
        assert!(reg.open_str("nope", &OpenOptions::default()).is_err());
    }
}
