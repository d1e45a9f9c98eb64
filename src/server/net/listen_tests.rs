//! The workers' share of a listener's connections, over real loopback connections.

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use http::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{ListenSettings, serve_workers};
use crate::server::net::admission::Peer;
use crate::server::net::request_body::RequestBody;

/// Answers with the name of the worker thread that served the request in `x-worker`; `/hold`
/// first says it has started and then keeps its worker's thread until `release` is sent.
fn handler(
    started: tokio::sync::mpsc::UnboundedSender<String>,
    release: Arc<Mutex<Option<mpsc::Receiver<()>>>>,
) -> impl Fn(Request<RequestBody>, Peer) -> std::future::Ready<Response<tonic::body::Body>> + Clone + Send + Sync {
    move |req, _peer| {
        let worker = std::thread::current().name().unwrap_or("").to_string();
        if req.uri().path() == "/hold" {
            let _ = started.send(worker.clone());
            // The worker's thread itself is kept, as a long piece of work would keep it.
            if let Some(release) = release.lock().unwrap().take() {
                let _ = release.recv();
            }
        }
        let mut answer = Response::new(tonic::body::Body::empty());
        answer.headers_mut().insert("x-worker", worker.parse().unwrap());
        std::future::ready(answer)
    }
}

/// Reads one answer's head (the handler's answers have no body) and returns its `x-worker`.
async fn worker_of(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "closed before the answer: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let line = head.lines().find_map(|l| l.strip_prefix("x-worker: ")).unwrap_or_else(|| panic!("{head}"));
    line.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_arriving_while_one_worker_is_busy_are_shared_with_it() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (release_tx, release) = mpsc::channel();
    let release = Arc::new(Mutex::new(Some(release)));
    let make = move || handler(started_tx.clone(), release.clone());
    let settings = ListenSettings { shutdown_timeout: Duration::from_secs(5), ..ListenSettings::default() };
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_workers(listener, settings, 2, make, async {
        let _ = stop.await;
    }));

    // One worker takes the first connection and is kept busy by its request.
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let busy = started.recv().await.unwrap();

    // Twenty connections arrive meanwhile; only the other worker is awake to accept them.
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        streams.push(stream);
    }
    release_tx.send(()).unwrap();
    assert_eq!(worker_of(&mut first).await, busy);
    let mut on_busy = 0;
    for stream in &mut streams {
        if worker_of(stream).await == busy {
            on_busy += 1;
        }
    }
    // The busy worker already held one: of the twenty, it is handed all but about eleven.
    assert!((8..=11).contains(&on_busy), "{on_busy} of 20 connections were served by the busy worker");

    drop((first, streams));
    stop_tx.send(()).unwrap();
    server.await.unwrap().unwrap();
}
