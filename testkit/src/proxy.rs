//! A TCP fault proxy on 127.0.0.1, for fault-injection tests (this machine
//! has no netem). Clients connect to the proxy; it forwards to Redis and can,
//! on command: delay replies, black-hole replies (the server executes, the
//! client never hears back), black-hole everything (an unreachable server that
//! still accepts connections), cut every connection after N more reply bytes,
//! drop all connections at once, black-hole the connections open now
//! while new ones pass (a NAT that silently forgot its idle mappings), or
//! black-hole each connection that stays silent in both directions for a
//! threshold (a NAT that forgets idle flows on its own).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// What the proxy does to traffic right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward both ways.
    None,
    /// Hold each reply chunk this long before forwarding it.
    DelayReplies(Duration),
    /// Forward requests; read and discard replies.
    BlackholeReplies,
    /// Read and discard both directions; accept new connections but never
    /// connect them through.
    BlackholeAll,
    /// Forward this many more reply bytes per connection, then cut it.
    CutAfter(usize),
}

struct Shared {
    fault: Mutex<Fault>,
    conns: Mutex<Vec<TcpStream>>,
    /// Per connection through: set, its traffic is discarded both ways.
    flows: Mutex<Vec<Arc<AtomicBool>>>,
    /// With a threshold, a flow silent in both directions for that long
    /// is black-holed (see [`FaultProxy::drop_idle_after`]).
    idle_drop: Mutex<Option<Duration>>,
    /// What the flows' last-activity stamps count from.
    epoch: Instant,
    stopped: AtomicBool,
}

pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy in front of `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::None),
            conns: Mutex::new(Vec::new()),
            flows: Mutex::new(Vec::new()),
            idle_drop: Mutex::new(None),
            epoch: Instant::now(),
            stopped: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.stopped.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                let _ = client.set_nodelay(true);
                let shared = Arc::clone(&accept_shared);
                std::thread::spawn(move || connect_through(client, upstream_port, shared));
            }
        });
        FaultProxy { port, shared, acceptor: Some(acceptor) }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Changes what happens to traffic from now on, on every connection.
    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock() = fault;
    }

    /// Black-holes every connection open now, as a NAT or load balancer
    /// that dropped its idle mappings: no FIN, no RST, both sockets stay
    /// open, and whatever either side sends is discarded. Connections
    /// opened afterwards pass through (under the current [`Fault`]).
    pub fn blackhole_existing(&self) {
        for flow in self.shared.flows.lock().drain(..) {
            flow.store(true, Ordering::Release);
        }
    }

    /// From now on, a connection through the proxy that stays silent in
    /// both directions for `threshold` is black-holed for good, as a NAT or
    /// a cloud load balancer forgets an idle flow (Azure's after 4 min,
    /// AWS's NAT gateway after 350 s): no FIN, no RST, both sockets stay
    /// open, and whatever either side sends afterwards is discarded. The
    /// silence counts from the connection's last byte either way (or from
    /// its opening); the first byte sent after the threshold is the first
    /// one lost. Call it before the connections to watch are opened.
    pub fn drop_idle_after(&self, threshold: Duration) {
        *self.shared.idle_drop.lock() = Some(threshold);
    }

    /// Drops every open connection (both sides see a reset or EOF).
    pub fn drop_connections(&self) {
        for conn in self.shared.conns.lock().drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.drop_connections();
        // Wake the acceptor so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn connect_through(client: TcpStream, upstream_port: u16, shared: Arc<Shared>) {
    if *shared.fault.lock() == Fault::BlackholeAll {
        shared.conns.lock().push(client.try_clone().unwrap());
        let mut sink = [0u8; 4096];
        let mut client = client;
        while matches!(client.read(&mut sink), Ok(n) if n > 0) {}
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = server.set_nodelay(true);
    {
        let mut conns = shared.conns.lock();
        conns.push(client.try_clone().unwrap());
        conns.push(server.try_clone().unwrap());
    }
    let silenced = Arc::new(AtomicBool::new(false));
    shared.flows.lock().push(Arc::clone(&silenced));
    let flow = Flow { silenced, last_active: Arc::new(AtomicU64::new(shared.millis())) };
    let up_shared = Arc::clone(&shared);
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up_flow = flow.clone();
    std::thread::spawn(move || pump(c2, s2, up_shared, false, up_flow));
    pump(server, client, shared, true, flow);
}

impl Shared {
    /// Milliseconds since the proxy started.
    fn millis(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One connection through the proxy, as both of its pumps see it.
#[derive(Clone)]
struct Flow {
    /// Set: its traffic is discarded both ways.
    silenced: Arc<AtomicBool>,
    /// When a byte last went through either way (see [`Shared::millis`]).
    last_active: Arc<AtomicU64>,
}

impl Flow {
    /// Notes a chunk read from either side; true when the flow is (or has
    /// just become, silent past the idle-drop threshold) black-holed.
    fn black_holed(&self, shared: &Shared) -> bool {
        if self.silenced.load(Ordering::Acquire) {
            return true;
        }
        let now = shared.millis();
        let last = self.last_active.swap(now, Ordering::AcqRel);
        if let Some(threshold) = *shared.idle_drop.lock() {
            let threshold = u64::try_from(threshold.as_millis()).unwrap_or(u64::MAX);
            if now.saturating_sub(last) >= threshold {
                self.silenced.store(true, Ordering::Release);
                return true;
            }
        }
        false
    }
}

/// Copies `from` to `to` until either side closes, applying the fault.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>, replies: bool, flow: Flow) {
    let mut buf = [0u8; 16 * 1024];
    let mut cut_budget: Option<usize> = None;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let fault = *shared.fault.lock();
        if flow.black_holed(&shared) {
            continue;
        }
        let forward = match fault {
            Fault::None => n,
            Fault::BlackholeAll => 0,
            Fault::BlackholeReplies => {
                if replies {
                    0
                } else {
                    n
                }
            }
            Fault::DelayReplies(d) => {
                if replies {
                    std::thread::sleep(d);
                }
                n
            }
            Fault::CutAfter(limit) => {
                if replies {
                    let budget = cut_budget.get_or_insert(limit);
                    let take = n.min(*budget);
                    *budget -= take;
                    take
                } else {
                    n
                }
            }
        };
        if forward > 0 && to.write_all(&buf[..forward]).is_err() {
            break;
        }
        if cut_budget == Some(0) {
            break;
        }
        if !matches!(fault, Fault::CutAfter(_)) {
            cut_budget = None;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
