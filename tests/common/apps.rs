//! Programs the tests run beside opbound (a Flask app, an Express app, a WebSocket server):
//! started on a free loopback port, awaited until they listen, and stopped when dropped.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::{Killed, free_port, listening};

/// An upstream framework: how to start its app, and what to say when it is missing.
pub struct Framework {
    pub name: &'static str,
    pub program: &'static str,
    /// The app's directory and the arguments before its port.
    pub dir: &'static str,
    pub args: &'static [&'static str],
    /// Arguments to `program` that fail when the framework is not installed.
    pub check: &'static [&'static str],
    pub missing: &'static str,
}

/// A framework's app, listening on loopback, stopped when dropped.
pub struct App {
    /// Held for its drop, which stops the app.
    _process: Killed,
    pub addr: SocketAddr,
    output: Arc<Mutex<Vec<String>>>,
}

impl App {
    /// Starts the app on a free port and waits for its ready line. A missing framework fails
    /// loudly: these tests are never skipped.
    pub fn start(framework: &Framework) -> App {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(framework.dir);
        let check = Command::new(framework.program).args(framework.check).current_dir(&dir).output();
        match check {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("{}\n{}", framework.missing, String::from_utf8_lossy(&out.stderr)),
            Err(e) => panic!("{} cannot run ({e}): {}", framework.program, framework.missing),
        }
        let port = free_port();
        let mut child = Command::new(framework.program)
            .args(framework.args)
            .arg(port.to_string())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", framework.name));
        let output = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        // Both pipes are drained for the app's whole life, so it never blocks on a full one.
        for pipe in
            [Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>, Box::new(child.stderr.take().unwrap())]
        {
            let (keep, ready) = (output.clone(), ready_tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if line.starts_with("ready") {
                        let _ = ready.send(());
                    }
                    keep.lock().unwrap().push(line);
                }
            });
        }
        let mut process = Killed(child);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut ready = false;
        loop {
            ready = ready || ready_rx.recv_timeout(Duration::from_millis(50)).is_ok();
            if ready && listening(addr) {
                return App { _process: process, addr, output };
            }
            if let Ok(Some(status)) = process.0.try_wait() {
                panic!("{} exited at start ({status}):\n{}", framework.name, output.lock().unwrap().join("\n"));
            }
            if Instant::now() > deadline {
                panic!("{} did not listen on {addr} in time:\n{}", framework.name, output.lock().unwrap().join("\n"));
            }
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn log(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }
}
