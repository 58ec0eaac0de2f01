//! Network faults for one process: a network namespace of the test's own
//! (Linux, root), whose loopback reaches the host's services only through
//! [`Link`]s the test cuts and heals. A process started in it
//! ([`Namespace::command`]) sees every linked service at the very address it
//! has on the host — a Kafka broker's advertised address included, which a
//! proxy on another port could not give — so a member can be cut off from
//! etcd but not from Kafka, or the reverse, while everything else on the
//! host is untouched.
//!
//! A cut is a partition, not a reset: connections stay open and nothing
//! flows either way (bytes already read wait for the heal, then go on), and
//! new connections are accepted but carry nothing, as when packets are
//! dropped. Healed, every connection goes on where it stopped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

/// A network namespace, held by a shell of its own that waits on its stdin
/// (so it ends with this process, even one killed with -9); ended on drop.
#[derive(Debug)]
pub struct Namespace {
    holder: Child,
    /// The holder's stdin: closed, it ends.
    _hold: Option<std::process::ChildStdin>,
    /// `/proc/{holder}/ns/net`.
    path: PathBuf,
}

impl Namespace {
    /// A new namespace with its loopback up (needs root: `unshare -n`).
    pub fn new() -> Self {
        let mut holder = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && echo up && read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare runs (util-linux)");
        let mut up = [0u8; 3];
        let said = holder.stdout.take().map(|mut out| out.read_exact(&mut up));
        assert!(
            matches!(said, Some(Ok(()))) && &up == b"up\n",
            "a network namespace could not be made (unshare --net needs root): {:?}",
            holder.try_wait()
        );
        let path = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        let hold = holder.stdin.take();
        Namespace { holder, _hold: hold, path }
    }

    /// `program` to be run in the namespace (`nsenter`, which runs it in its
    /// own process: the child's PID is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command.arg(format!("--net={}", self.path.display())).arg("--").arg(program);
        command
    }

    /// A link from `address` (`127.0.0.1:port`) in the namespace to the same
    /// address on the host, open until cut.
    pub fn link(&self, address: &str) -> Link {
        let ns = std::fs::File::open(&self.path).expect("the namespace's file");
        let host = std::fs::File::open("/proc/thread-self/ns/net").expect("this thread's namespace");
        // The listener is made in the namespace (a socket stays in the
        // namespace it was made in), by a thread of its own that ends then;
        // the threads that accept and connect to the host's service are
        // the caller's, on the host.
        let (made, listener) = std::sync::mpsc::channel();
        let target = address.to_owned();
        std::thread::spawn(move || {
            let listener = move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(|e| format!("entering the namespace: {e}"))
                .and_then(|()| TcpListener::bind(&target).map_err(|e| format!("listening on {target} in it: {e}")));
            let back = move_into_link_name_space(host.as_fd(), Some(LinkNameSpaceType::Network));
            let _ = made.send(listener.and_then(|l| back.map(|()| l).map_err(|e| format!("coming back: {e}"))));
        });
        let listener = listener.recv().expect("the linking thread answers").expect("linked");
        Link::serve(listener, address, None)
    }

    /// The reverse of [`Namespace::link`]: an address on the host's loopback
    /// (a port of its own) reaching `address` in the namespace — a process's
    /// HTTP endpoint there, say.
    pub fn expose(&self, address: &str) -> (String, Link) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a host port");
        let host = listener.local_addr().expect("its address").to_string();
        (host, Link::serve(listener, address, Some(self.path.clone())))
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// One service reached from the namespace; closed on drop.
#[derive(Debug)]
pub struct Link {
    gate: Arc<Gate>,
    address: String,
}

impl Link {
    /// Forwards what `listener` accepts to `to`, connecting from the network
    /// namespace at `ns` (or this thread's).
    fn serve(listener: TcpListener, to: &str, ns: Option<PathBuf>) -> Link {
        let gate = Arc::new(Gate::default());
        listener.set_nonblocking(true).expect("nonblocking");
        let (target, accepting) = (to.to_owned(), Arc::clone(&gate));
        std::thread::spawn(move || accept(&listener, &target, ns.as_deref(), &accepting));
        Link { gate, address: to.to_owned() }
    }

    /// Nothing flows until [`Link::heal`].
    pub fn cut(&self) {
        self.gate.set(State::Cut);
        eprintln!("[testkit] link to {} cut", self.address);
    }

    /// Everything flows again, and held bytes go on.
    pub fn heal(&self) {
        self.gate.set(State::Open);
        eprintln!("[testkit] link to {} healed", self.address);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.gate.set(State::Closed);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Open,
    Cut,
    Closed,
}

/// The link's state, and every connection's streams (to close them).
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(State, Vec<TcpStream>)>,
    changed: Condvar,
}

impl Gate {
    fn set(&self, state: State) {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        held.0 = state;
        if state == State::Closed {
            for stream in held.1.drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        self.changed.notify_all();
    }

    /// Waits while cut; false once closed.
    fn pass(&self) -> bool {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while held.0 == State::Cut {
            held = self.changed.wait(held).unwrap_or_else(PoisonError::into_inner);
        }
        held.0 == State::Open
    }

    fn closed(&self) -> bool {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0 == State::Closed
    }

    /// Keeps a connection's streams to close with the link (at once when it
    /// is closed already).
    fn keep(&self, streams: [&TcpStream; 2]) {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if held.0 == State::Closed {
            for stream in streams {
                let _ = stream.shutdown(Shutdown::Both);
            }
            return;
        }
        held.1.extend(streams.into_iter().filter_map(|s| s.try_clone().ok()));
    }
}

fn accept(listener: &TcpListener, to: &str, ns: Option<&std::path::Path>, gate: &Arc<Gate>) {
    while !gate.closed() {
        match listener.accept() {
            Ok((inner, _)) => {
                let (to, ns, gate) = (to.to_owned(), ns.map(PathBuf::from), Arc::clone(gate));
                std::thread::spawn(move || connect(inner, &to, ns.as_deref(), &gate));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => return,
        }
    }
}

/// Connects an accepted connection to `to` (from the namespace at `ns`:
/// this connection's thread enters it) once the link lets it, and forwards
/// both ways.
fn connect(inner: TcpStream, to: &str, ns: Option<&std::path::Path>, gate: &Arc<Gate>) {
    let _ = inner.set_nonblocking(false);
    if !gate.pass() {
        return;
    }
    if let Some(ns) = ns {
        let entered = std::fs::File::open(ns)
            .and_then(|f| Ok(move_into_link_name_space(f.as_fd(), Some(LinkNameSpaceType::Network))?));
        if entered.is_err() {
            return;
        }
    }
    let Ok(outer) = TcpStream::connect(to) else {
        return;
    };
    gate.keep([&inner, &outer]);
    let (Ok(inner2), Ok(outer2)) = (inner.try_clone(), outer.try_clone()) else {
        return;
    };
    let back = Arc::clone(gate);
    std::thread::spawn(move || forward(outer2, inner2, &back));
    forward(inner, outer, gate);
}

/// Copies `from` to `to` while the link lets it.
fn forward(mut from: TcpStream, mut to: TcpStream, gate: &Gate) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !gate.pass() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
