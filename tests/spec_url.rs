//! Issue 53, part 2: `--spec http://...`, the spec fetched from the running service, and
//! `--spec-poll`, against a real HTTP server on loopback whose answers the test sets: a document
//! with an ETag (and a 304 when it has not changed), a 404, an HTML page, 50 MB, or no answer.

mod common;

use std::convert::Infallible;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use common::{Opbound, TempSpec, Upstream, get};

/// What the spec server answers next.
#[derive(Clone)]
enum Answer {
    Spec { text: String, etag: String },
    Status(u16),
    Html,
    Huge,
    Silent,
}

#[derive(Default)]
struct Seen {
    /// `If-None-Match` of every request, in order.
    validators: Vec<Option<String>>,
    not_modified: usize,
}

struct SpecServer {
    url: String,
    answer: Arc<Mutex<Answer>>,
    seen: Arc<Mutex<Seen>>,
}

impl SpecServer {
    async fn start(first: Answer) -> SpecServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/openapi.json", listener.local_addr().unwrap());
        let answer = Arc::new(Mutex::new(first));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (a, s) = (answer.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (a, s) = (a.clone(), s.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let (a, s) = (a.clone(), s.clone());
                        async move {
                            let answer = a.lock().unwrap().clone();
                            let validator = request
                                .headers()
                                .get("if-none-match")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string);
                            s.lock().unwrap().validators.push(validator.clone());
                            let response = match answer {
                                Answer::Spec { etag, .. } if validator.as_deref() == Some(&etag) => {
                                    s.lock().unwrap().not_modified += 1;
                                    Response::builder().status(304).body(Full::new(Bytes::new()))
                                }
                                Answer::Spec { text, etag } => Response::builder()
                                    .header("content-type", "application/json")
                                    .header("etag", etag)
                                    .body(Full::new(Bytes::from(text))),
                                Answer::Status(code) => Response::builder().status(code).body(Full::new(Bytes::new())),
                                Answer::Html => Response::builder()
                                    .header("content-type", "text/html; charset=utf-8")
                                    .body(Full::new(Bytes::from("<html><body>Swagger UI</body></html>"))),
                                Answer::Huge => Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(vec![b' '; 50 << 20]))),
                                Answer::Silent => {
                                    tokio::time::sleep(Duration::from_secs(3600)).await;
                                    Response::builder().body(Full::new(Bytes::new()))
                                }
                            };
                            Ok::<_, Infallible>(response.unwrap())
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        SpecServer { url, answer, seen }
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

/// A generated document: `/search` and `/items`, `x-rate-limit` only where `limits` says.
fn document(search: Option<u32>, items: Option<u32>) -> String {
    let bound = |n: Option<u32>| match n {
        Some(n) => format!(r#","x-rate-limit":{{"per":"route","limit":{n},"window":"PT1H"}}"#),
        None => String::new(),
    };
    format!(
        r#"{{"openapi":"3.1.0","info":{{"title":"generated","version":"1"}},"paths":{{"/search":{{"get":{{"operationId":"search","responses":{{"200":{{"description":"ok"}}}}{}}}}},"/items":{{"get":{{"operationId":"items","responses":{{"200":{{"description":"ok"}}}}{}}}}}}}}}"#,
        bound(search),
        bound(items)
    )
}

/// The statuses of `n` requests for `path`, one after the other.
async fn statuses(ob: &Opbound, path: &str, n: usize) -> Vec<u16> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(get(ob.url(path)).await.status);
    }
    v
}

fn check(url: &str) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_opbound")).args(["check", url]).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_fetched_from_a_url_loads_and_bad_answers_are_said_with_the_url() {
    let server = SpecServer::start(Answer::Spec { text: document(Some(2), None), etag: "\"v1\"".into() }).await;
    let url = server.url.clone();
    let (code, said) = tokio::task::spawn_blocking(move || check(&url)).await.unwrap();
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("valid OpenAPI 3.1 spec: 2 operations, 1 bound"), "{said}");
    let url = server.url.clone();
    let routes = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_opbound")).args(["routes", &url]).output().unwrap()
    })
    .await
    .unwrap();
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(routes.contains(&format!("search:0  2 per PT1H per route; from {}, line 1", server.url)), "{routes}");
    for (answer, says) in [
        (Answer::Status(404), "answered 404 Not Found"),
        (Answer::Html, "an HTML page"),
        (Answer::Huge, "over 32 MB"),
        (Answer::Silent, "no whole answer within 10s"),
    ] {
        server.set(answer);
        let url = server.url.clone();
        let started = Instant::now();
        let (code, said) = tokio::task::spawn_blocking(move || check(&url)).await.unwrap();
        assert_eq!(code, Some(2), "{says}: {said}");
        assert!(said.contains(&format!("cannot read {}: ", server.url)) && said.contains(says), "{says}: {said}");
        assert!(!said.contains("panicked"));
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}

/// Issue 63: a document nested 100,000 levels took the YAML parser 58 s to refuse, and JSON
/// fetched from a URL ending in `.yaml` goes to that parser. Each is refused at the bracket that
/// goes past the limit, as a located error, from a file or a URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_nested_too_deep_is_refused_at_its_bracket_from_a_file_or_a_url() {
    let levels = 100_000;
    let deep = format!(r#"{{"openapi": "3.0.3", "x": {}{}}}"#, "[".repeat(levels), "]".repeat(levels));
    let block = format!("openapi: 3.0.3\nx:\n  - a\n  - {}{}\n", "{a: ".repeat(levels), "}".repeat(levels));
    let server = SpecServer::start(Answer::Spec { text: deep.clone(), etag: "\"v1\"".into() }).await;
    let dir = TempSpec::new("deep", "");
    let file = |name: &str, text: &str| {
        let path = dir.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    // The 128 levels the parsers read, and the 129th bracket: the spec's own `{` is the first; a
    // block list is not a flow collection, the maps inside it are.
    let cases = [
        (file("deep.json", &deep), "line 1, column 154"),
        (file("deep.yaml", &deep), "line 1, column 154"),
        (file("block.yaml", &block), "line 4, column 517"),
        (server.url.clone(), "line 1, column 154"),
        (server.url.replace("openapi.json", "openapi.yaml"), "line 1, column 154"),
    ];
    for (spec, at) in cases {
        let (code, said) = tokio::task::spawn_blocking({
            let spec = spec.clone();
            move || check(&spec)
        })
        .await
        .unwrap();
        assert_eq!(code, Some(1), "{spec}: {said}");
        let expected = format!("({at}): the document nests lists and maps more than 128 levels deep here");
        assert!(said.contains(&expected), "{spec}: expected {expected:?} in\n{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_polls_the_spec_reloads_what_changed_and_keeps_serving_through_failures() {
    let server = SpecServer::start(Answer::Spec { text: document(Some(2), None), etag: "\"v1\"".into() }).await;
    let up = Upstream::start().await;
    let overlay = TempSpec::new(
        "spec-url-overlay.yaml",
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/items'].get\n    update: {x-rate-limit: {per: route, limit: 3, window: PT1H}}\n",
    );
    let ob = Opbound::start(&[
        "serve",
        "--spec",
        &server.url,
        "--overlay",
        overlay.arg(),
        "--spec-poll",
        "200ms",
        "--upstream",
        &up.url(),
    ]);
    assert_eq!(statuses(&ob, "/search", 3).await, [200, 200, 429], "the spec's own bound");
    assert_eq!(statuses(&ob, "/items", 4).await, [200, 200, 200, 429], "the overlay's, on the fetched spec");

    // Unchanged: asked with its ETag and answered 304, nothing reloaded.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.seen.lock().unwrap().not_modified < 2 {
        assert!(Instant::now() < deadline, "no conditional fetch: {:?}", server.seen.lock().unwrap().validators);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(server.seen.lock().unwrap().validators.iter().skip(1).all(|v| v.as_deref() == Some("\"v1\"")));

    // The service fails: the policy serving stays, its counts with it.
    server.set(Answer::Status(503));
    let refused = ob.logged_at_least("503 Service Unavailable", 1);
    assert!(!refused.is_empty(), "the failed fetch is logged: {:#?}", ob.logged("reload"));
    assert_eq!(statuses(&ob, "/search", 1).await, [429], "the old policy still serves");
    // And the failing service is asked less and less often: 200 ms, then 400, 800, 1.6 s, 3.2 s
    // at most (without the backoff, fifteen times in these 3 s).
    let asked = server.seen.lock().unwrap().validators.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let more = server.seen.lock().unwrap().validators.len() - asked;
    assert!(more <= 6, "asked {more} times in 3 s while failing");

    // A new version: /search is bounded at 5 now; the reload carries it.
    server.set(Answer::Spec { text: document(Some(5), None), etag: "\"v2\"".into() });
    let deadline = Instant::now() + Duration::from_secs(15);
    while ob.logged("reloaded").is_empty() && ob.logged("reload applied").is_empty() {
        assert!(Instant::now() < deadline, "the new version was never reloaded: {:#?}", ob.logged("reload"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = statuses(&ob, "/search", 4).await;
    assert!(after.contains(&200), "a bound of 5 admits again: {after:?}");
}

/// A real FastAPI application, started under uvicorn: its generated document carries one bound
/// (`openapi_extra`), an overlay another; opbound fetches the document from it and enforces both.
/// Restarted with a changed limit and a new route, a SIGHUP reloads; while it is down, the old
/// policy keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fastapi_app_s_generated_spec_with_an_overlay_is_enforced_and_followed() {
    let port = common::free_port();
    let app = |version: &str| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks");
        let child = Command::new("python3")
            .args(["-m", "uvicorn", "fastapi_app:app", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--app-dir")
            .arg(&dir)
            .env("APP_VERSION", version)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("uvicorn starts (.ci/test installs fastapi and uvicorn)");
        common::Killed(child)
    };
    let spec_url = format!("http://127.0.0.1:{port}/openapi.json");
    let answering = |version: &'static str| {
        let url = spec_url.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    let r = get(&url).await;
                    if r.status == 200 && r.body.contains(&format!("\"version\":\"{version}\"")) {
                        return;
                    }
                }
                assert!(Instant::now() < deadline, "the FastAPI app did not answer");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let first = app("1");
    answering("1").await;
    let overlay = TempSpec::new(
        "fastapi-limits.yaml",
        "overlay: 1.0.0\ninfo: {title: limits, version: '1'}\nactions:\n  - target: $.paths[*][?@.tags[?@ == 'items']]\n    update:\n      x-rate-limit: {per: route, limit: 2, window: PT1H}\n",
    );
    let upstream = format!("http://127.0.0.1:{port}");
    let ob = Opbound::start(&["serve", "--spec", &spec_url, "--overlay", overlay.arg(), "--upstream", &upstream]);
    let count = |name: &'static str| {
        let url = ob.url(&format!("/count/{name}"));
        async move { get(&url).await.json()["count"].as_u64().unwrap() }
    };
    assert_eq!(statuses(&ob, "/search", 5).await, [200, 200, 200, 429, 429], "the bound written in the app");
    assert_eq!(statuses(&ob, "/items", 4).await, [200, 200, 429, 429], "the overlay's bound");
    assert_eq!((count("search").await, count("items").await), (3, 2), "the app served what opbound admitted");

    // The app goes down: a reload cannot fetch, and the policy serving stays.
    drop(first);
    let hup = || Command::new("kill").args(["-HUP", &ob.child.id().to_string()]).status().unwrap();
    hup();
    assert!(!ob.logged_at_least("reload refused", 1).is_empty(), "{:#?}", ob.logged("reload"));
    let down = get(ob.url("/search")).await.status;
    assert_eq!(down, 429, "still the old policy: refused before it reaches the app that is down");

    // Version 2: /search's limit is 5, /reports is new and tagged items.
    let _second = app("2");
    answering("2").await;
    hup();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ob.logged("reloaded").is_empty() {
        assert!(Instant::now() < deadline, "no reload: {:#?}", ob.logged("reload"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(statuses(&ob, "/reports", 3).await, [200, 200, 429], "the overlay selects the new route");
    assert_eq!(statuses(&ob, "/items", 1).await, [429], "an unchanged bound kept its count");
    assert_eq!(statuses(&ob, "/search", 6).await, [200, 200, 200, 200, 200, 429], "the changed limit, counted afresh");
}

/// A real NestJS application (npm), whose generated document carries a bound through
/// `@ApiExtension`, and a real Django REST framework one whose drf-spectacular document carries
/// it through `@extend_schema(extensions=...)`: each fetched by URL and enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nestjs_and_a_django_rest_framework_app_s_annotations_are_enforced() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks");
    let nest = dir.join("nest");
    let node = common::require("node");
    enforced(&node, &[nest.join("app.js").to_str().unwrap()], &nest).await;
    enforced("python3", &[dir.join("drf_app.py").to_str().unwrap()], &dir).await;
}

/// Starts `program ARGS PORT`, then checks opbound enforces the app's `/search` bound (3) read
/// from its `/openapi.json`, and no bound on `/items`.
async fn enforced(program: &str, args: &[&str], dir: &std::path::Path) {
    let port = common::free_port();
    let _app = common::Killed(
        Command::new(program)
            .args(args)
            .arg(port.to_string())
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the app starts (.ci/test installs its packages)"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{args:?} did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let spec_url = format!("http://127.0.0.1:{port}/openapi.json");
    let upstream = format!("http://127.0.0.1:{port}");
    let ob = Opbound::start(&["serve", "--spec", &spec_url, "--upstream", &upstream]);
    assert_eq!(statuses(&ob, "/search", 4).await, [200, 200, 200, 429], "{args:?}: the bound its annotation wrote");
    for _ in 0..4 {
        assert_eq!(get(ob.url("/items")).await.status, 200, "no bound on /items");
    }
}

/// `--spec https://...` trusts what the flags say: `--spec-ca-file` (a private CA) and
/// `--spec-server-name` (a certificate naming a host, reached by address); without them the
/// system's roots, which refuse a private CA's certificate. `serve` fetches a spec its upstream
/// serves with the upstream's own TLS flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_over_tls_is_fetched_as_the_tls_flags_say() {
    let spec = TempSpec::new("spec-tls", &document(Some(2), None));
    let dir = spec.dir();
    common::tls_files(dir, "DNS:api.test");
    let location = format!("location / {{ root {}; }}", dir.display());
    let (_nginx, port) = common::tls_nginx(dir, "server.pem", "server.key", &location).await;
    let url = format!("https://127.0.0.1:{port}/spec.yaml");
    let ca = dir.join("ca.pem").to_str().unwrap().to_string();
    let run = |args: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            let out = Command::new(env!("CARGO_BIN_EXE_opbound")).args(&args).output().unwrap();
            (
                out.status.code(),
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            )
        })
        .await
        .unwrap()
    };
    let check = |extra: &[&str]| {
        let mut args = vec!["check".to_string(), url.clone()];
        args.extend(extra.iter().map(|s| s.to_string()));
        run(args)
    };

    let (code, said) = check(&["--spec-ca-file", &ca, "--spec-server-name", "api.test"]).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("2 operations, 1 bound"), "{said}");
    // The system's roots do not know the private CA.
    let (code, said) = check(&["--spec-server-name", "api.test"]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains(&format!("cannot read {url}: ")) && said.contains("UnknownIssuer"), "{said}");
    // The certificate names api.test, not the address.
    let (code, said) = check(&["--spec-ca-file", &ca]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("not valid for name \"127.0.0.1\""), "{said}");
    // Bad flags are said before anything is fetched.
    let (code, said) = check(&["--spec-ca-file", "/nonexistent/ca.pem"]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("cannot read --spec-ca-file /nonexistent/ca.pem"), "{said}");
    let (code, said) = check(&["--spec-ca-file", &ca, "--spec-server-name", "not a name"]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains(r#"--spec-server-name "not a name" is not a host name or an address"#), "{said}");
    // `opbound overlay` fetches the same way.
    let (code, said) = run(vec![
        "overlay".into(),
        url.clone(),
        spec_overlay(dir).to_str().unwrap().into(),
        "--spec-ca-file".into(),
        ca.clone(),
        "--spec-server-name".into(),
        "api.test".into(),
    ])
    .await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("limit: 3"), "the overlay's bound, in the spec's YAML: {said}");

    // serve: the spec on the upstream's origin is fetched as the upstream is reached.
    let upstream = format!("https://127.0.0.1:{port}");
    let ob = Opbound::start(&[
        "serve",
        "--spec",
        &url,
        "--upstream",
        &upstream,
        "--upstream-ca-file",
        &ca,
        "--upstream-server-name",
        "api.test",
    ]);
    // The upstream is a static server: /search is not a file there (404), but its bound of 2 holds.
    assert_eq!(statuses(&ob, "/search", 3).await, [404, 404, 429]);
}

/// An overlay bounding `/items` at 3 an hour, written beside the spec.
fn spec_overlay(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("limits.yaml");
    std::fs::write(
        &path,
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/items'].get\n    update: {x-rate-limit: {per: route, limit: 3, window: PT1H}}\n",
    )
    .unwrap();
    path
}

/// An overlay may be a URL too, fetched like the spec: a SIGHUP reads it again, and a changed
/// overlay reloads though no file changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlay_by_url_is_fetched_again_on_reload() {
    let overlay = |limit: u32| {
        format!(
            r#"{{"overlay":"1.0.0","info":{{"title":"t","version":"1"}},"actions":[{{"target":"$.paths['/items'].get","update":{{"x-rate-limit":{{"per":"route","limit":{limit},"window":"PT1H"}}}}}}]}}"#
        )
    };
    let server = SpecServer::start(Answer::Spec { text: overlay(1), etag: "\"o1\"".into() }).await;
    let spec = TempSpec::new("overlay-url", &document(None, None));
    let up = Upstream::start().await;
    let ob = Opbound::start(&["serve", "--spec", spec.arg(), "--overlay", &server.url, "--upstream", &up.url()]);
    assert_eq!(statuses(&ob, "/items", 2).await, [200, 429], "the overlay's bound of 1");
    server.set(Answer::Spec { text: overlay(3), etag: "\"o3\"".into() });
    Command::new("kill").args(["-HUP", &ob.child.id().to_string()]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ob.logged("reload applied").is_empty() && ob.logged("reloaded").is_empty() {
        assert!(Instant::now() < deadline, "the changed overlay was not reloaded: {:#?}", ob.logged("reload"));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The bound changed, so it counts afresh, to its new limit of 3.
    assert_eq!(statuses(&ob, "/items", 4).await, [200, 200, 200, 429]);
}
