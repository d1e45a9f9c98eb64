//! Issue 54: token limits for model servers, settled from the response body and from event
//! streams, driven by the official `openai` and `anthropic` Python SDKs (from PyPI) against a
//! model server that answers in their wire formats (tests/models/provider.py, FastAPI).

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use bytes::Bytes;
use http_body_util::Full;

use common::apps::{App, Framework};
use common::{Opbound, Redis, TempSpec};

const PROVIDER: Framework = Framework {
    name: "the model server (FastAPI)",
    program: "python3",
    dir: "tests/models",
    args: &["provider.py"],
    check: &["-c", "import fastapi, uvicorn, openai, anthropic"],
    missing: "fastapi, uvicorn, openai and anthropic are needed (.ci/test installs them with pip)",
};

/// `opbound serve` of the fixture in front of the provider, with a state directory of its own
/// (the fixture has a quota), kept as long as the instance.
fn serve(provider: &App, extra: &[&str]) -> (Opbound, TempSpec) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let state = TempSpec::new(&format!("model-state-{n}"), "");
    let dir = state.dir().join("state");
    let args = ["serve", "--spec", &spec(), "--upstream", &provider.url(), "--state-dir", dir.to_str().unwrap()];
    (Opbound::start(&[&args[..], extra].concat()), state)
}

fn spec() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/api.yaml").display().to_string()
}

/// Runs a scenario of tests/models/clients.py through opbound; its one JSON line.
async fn clients(scenario: &str, ob: &Opbound, key: &str) -> Value {
    let (scenario, base, key) = (scenario.to_string(), ob.url(""), key.to_string());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg("clients.py")
            .args([&scenario, base.trim_end_matches('/'), &key])
            .current_dir(dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "clients.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

async fn served(provider: &App) -> Value {
    let body = common::get(format!("{}/served", provider.url())).await.body;
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_api_is_charged_what_it_reports_streamed_or_not() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &[]);
    let got = clients("tokens", &ob, "sk-tokens").await;
    // Reservations of 30: two requests that used 30 and 50 leave 20, so a third reservation of
    // 30 is refused and one of 20 fits exactly. On estimates alone all four would pass.
    for api in ["chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream"] {
        assert_eq!(got[api], serde_json::json!([200, 200, 429, 200]), "{api}: {got}");
    }
    // Embeddings reserve 20 and use 45 each time.
    assert_eq!(got["embeddings"], serde_json::json!([200, 200, 429, 429]), "{got}");
    let served = served(&provider).await;
    for (path, n) in [("chat", 6), ("responses", 6), ("messages", 6), ("embeddings", 2)] {
        assert_eq!(served["requests"][path], n, "the upstream saw exactly the admitted requests: {served}");
    }
    assert_eq!(served["completed_streams"], 9, "{served}");
}

/// `per: [token, json:/model]`: one counter per key and model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_tokens_are_counted_per_key_and_model() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &["--admin", "127.0.0.1:0"]);
    let got = clients("models", &ob, "sk-models").await;
    // Each pair used 30 and 50: 20 left, so a reservation of 30 is refused and one of 20 fits.
    assert_eq!(got["a-large"], serde_json::json!([200, 200, 429]), "{got}");
    assert_eq!(got["a-small"], serde_json::json!([200, 200, 429]), "the same key, another model: {got}");
    assert_eq!(got["b-large"], serde_json::json!([200, 200, 200]), "another key, the same model: {got}");
    // The operator looks a counter up by its parts, in the bound's order.
    let admin = ob.admin().unwrap();
    let counter = |key: &str, model: &str| {
        let url = format!("http://{admin}/counters?bound=createChatCompletion:1&key={key}&key={model}");
        async move { common::get(url).await.json() }
    };
    assert_eq!(counter("sk-models-a", "large").await["remaining"], 20);
    assert_eq!(counter("sk-models-b", "large").await["remaining"], 10, "80 and then 10 more");
    assert_eq!(counter("sk-models-b", "small").await["remaining"], 100, "never used");
    let one = common::get(format!("http://{admin}/counters?bound=createChatCompletion:1&key=sk-models-a")).await;
    assert_eq!(one.status, 400, "{}", one.body);
    assert!(one.body.contains("give 2 key values, one per part"), "{}", one.body);
}

/// A stream the client leaves before its usage pays its reservation if it reported less, and
/// `max-cost` if it reported nothing (issue 63: what it used is unknown, and its prompt alone
/// may be far past the reservation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_abandoned_before_its_usage_pays_at_least_its_reservation() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &["--headers", "models", "--admin", "127.0.0.1:0"]);
    let got = clients("abandon", &ob, "sk-abandon").await;
    // The chat stream reported nothing before the client left: max-cost, 100, and the next
    // request's reservation of 1 is refused with nothing left. On the old code, 59.
    assert_eq!(got["chat"], 0, "{got}");
    // The messages stream reported its 10 input tokens, less than the 40 reserved: 40 kept,
    // then the next request's reservation of 1: 59 left as its head says.
    assert_eq!(got["messages"], 59, "{got}");
    let metrics = common::get(format!("http://{}/metrics", ob.admin().unwrap())).await.body;
    assert!(metrics.contains("opbound_settle_unread_total 2\n"), "both streams counted as unread: {metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_wait_what_opbound_says_and_then_succeed() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &[]);
    let got = clients("retry", &ob, "sk-retry").await;
    let served = served(&provider).await;
    let log = served["log"].as_array().unwrap();
    for sdk in ["openai", "anthropic"] {
        let times: Vec<f64> = log
            .iter()
            .filter(|e| e["path"] == "models" && e["key"].as_str().unwrap().ends_with(&sdk[sdk.len() - 2..]))
            .map(|e| e["at"].as_f64().unwrap())
            .collect();
        assert_eq!(times.len(), 2, "{sdk}: the refused attempt never reached the upstream: {log:?}");
        let waited = times[1] - times[0];
        assert!(waited >= 0.9, "{sdk} retried after {waited:.3}s, before the second the bound asked for: {got}");
        assert!(got[sdk]["took"].as_f64().unwrap() < 5.0, "{sdk}: {got}");
    }
}

/// Chat completions per key and model, 1,000 tokens, on a shared store.
const SHARED: &str = r#"
openapi: 3.1.0
info: {title: Model server, version: '1'}
components:
  securitySchemes:
    bearer: {type: http, scheme: bearer}
security: [{bearer: []}]
paths:
  /v1/chat/completions:
    post:
      operationId: chat
      requestBody: {content: {application/json: {schema: {type: object, properties: {model: {type: string}, max_tokens: {type: integer}}}}}}
      x-rate-limit:
        - {per: [token, json:/model], limit: 1000, window: PT1H, cost-from: json:/max_tokens, max-cost: 100, settle: json:/usage/total_tokens}
"#;

/// One streamed chat completion that uses `n` output tokens (and 10 of prompt), read to its end.
async fn stream(url: String, model: &'static str, n: u32) -> u16 {
    let body = format!(
        r#"{{"model":"{model}","max_tokens":20,"stream":true,"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"{n}"}}]}}"#
    );
    let request = http::Request::post(url)
        .header("authorization", "Bearer sk-shared")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let got = common::send(request).await;
    assert!(got.status != 200 || got.body.ends_with("data: [DONE]\n\n"), "{}", got.body);
    got.status
}

/// Two instances on one Redis, concurrent streams spread over both: every settled amount is
/// counted once, on both, per key and model.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_redis_count_concurrent_streams_exactly() {
    let redis = Redis::start("model-tokens", &[]);
    let provider = App::start(&PROVIDER);
    let spec = TempSpec::new("model-tokens", SHARED);
    let store = redis.url();
    let obs: Vec<Opbound> = (0..2)
        .map(|_| {
            let args = ["serve", "--spec", spec.arg(), "--upstream", &provider.url(), "--store", &store];
            Opbound::start(&[&args[..], &["--store-timeout", "2s", "--admin", "127.0.0.1:0"]].concat())
        })
        .collect();
    for ob in &obs {
        common::wait_store(ob, true).await;
    }
    // 40 streams on the large model, each reserving 20 and using 15; 10 on the small one using 25.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (model, n) = if i % 5 == 4 { ("small", 15) } else { ("large", 5) };
        tasks.push(tokio::spawn(stream(obs[i % 2].url("/v1/chat/completions"), model, n)));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200, "800 reserved at most at once: every stream fits");
    }
    // Settled after each stream ended; asked on both instances until it lands, then exact.
    for (model, left) in [("large", 1000 - 40 * 15), ("small", 1000 - 10 * 25)] {
        for ob in &obs {
            let url = format!("http://{}/counters?bound=chat:0&key=sk-shared&key={model}", ob.admin().unwrap());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let remaining = common::get(&url).await.json()["remaining"].as_i64();
                if remaining == Some(left) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{model}: {remaining:?} left, not {left}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
}

/// `--headers models`: what OpenAI and Anthropic send, read by their SDKs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_providers_headers_are_sent_and_the_sdks_heed_them() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &["--headers", "models", "--admin", "127.0.0.1:0"]);
    let got = clients("headers", &ob, "sk-headers").await;
    let chat = &got["chat"];
    // Reserved 30 at admission of 100 tokens, 1 of 50 requests: the head says so, streamed or not.
    assert_eq!(chat["x-ratelimit-limit-tokens"], "100", "{got}");
    assert_eq!(chat["x-ratelimit-remaining-tokens"], "70", "{got}");
    assert_eq!(chat["x-ratelimit-limit-requests"], "50", "{got}");
    assert_eq!(chat["x-ratelimit-remaining-requests"], "49", "{got}");
    assert!(chat["x-ratelimit-reset-tokens"].as_str().unwrap().ends_with('s'), "{got}");
    assert_eq!(chat["anthropic-ratelimit-tokens-remaining"], "70", "{got}");
    assert!(chat["anthropic-ratelimit-tokens-reset"].as_str().unwrap().ends_with('Z'), "{got}");
    assert_eq!(chat["ratelimit-remaining"], "49", "the legacy fields stay, for the bound with the least left");
    let refused = &got["refused"];
    let ms: u64 = refused["retry-after-ms"].as_str().unwrap().parse().unwrap();
    let s: u64 = refused["retry-after"].as_str().unwrap().parse().unwrap();
    assert!(ms > 0 && s == ms.div_ceil(1000), "{got}");
    // A sliding window's refusal may wait past the window: told not to retry exactly then.
    assert_eq!(refused.get("x-should-retry").is_some(), ms > 60_000, "{got}");
    assert_eq!(got["messages"]["anthropic-ratelimit-tokens-limit"], "100", "{got}");
    assert!(got["messages"].get("anthropic-ratelimit-requests-limit").is_none(), "no bound on requests there: {got}");
    // The quota's refusal waits past what the SDKs sleep: told not to retry, they did not.
    assert_eq!(got["quota"]["x-should-retry"], "false", "{got}");
    let served = served(&provider).await;
    assert_eq!(served["requests"]["batches"], 1, "{served}");
    let metrics = common::get(format!("http://{}/metrics", ob.admin().unwrap())).await.body;
    let refusals: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("opbound_decisions") && l.contains("listBatches:0") && l.contains("\"refused\""))
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(refusals[0].ends_with(" 1"), "one refusal: the SDK did not ask again: {refusals:?}");
}

/// `check` reads a settle's pointers against the responses OpenAI's own document declares (its
/// JSON bodies and the event payloads of its streams): a typo is a located warning, and the
/// lines the book gives for chat completions and the Responses API pass.
#[test]
fn check_reads_settle_pointers_against_openais_response_schemas() {
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/real/openai-3.1.yaml");
    let dir = TempSpec::new(
        "settle-schemas",
        "overlay: 1.0.0\ninfo: {title: t, version: '1'}\nactions:\n  - target: $.paths['/chat/completions'].post\n    update: {x-rate-limit: {per: token, limit: 1000, window: PT1M, cost: 100, settle: 'json:/usage/total_tokens + json:/usage/total_token'}}\n  - target: $.paths['/responses'].post\n    update: {x-rate-limit: {per: token, limit: 1000, window: PT1M, cost: 100, settle: 'json:/usage/total_tokens + json:/response/usage/total_tokens'}}\n  - target: $.paths['/embeddings'].post\n    update: {x-rate-limit: {per: token, limit: 1000, window: PT1M, cost: 100, settle: 'json:/usage/total_tokens'}}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_opbound"))
        .args(["check", "--per-instance-ok", "--overlay", dir.arg()])
        .arg(&real)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("settles from")).collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    // Chat completions declare stream_options.include_usage: usage is asked for there only.
    let options = opbound::Options { overlays: vec![dir.arg().into()], ..opbound::Options::default() };
    let policy = opbound::load(&real, &options).expect("the spec loads").policy;
    let asks: Vec<&str> = policy.operations.iter().filter(|o| o.asks_usage).map(|o| o.id.as_str()).collect();
    assert_eq!(asks, ["createChatCompletion"]);
    assert!(
        warned[0].starts_with("warning: /paths/~1chat~1completions/post/x-rate-limit/settle in POST /chat/completions (")
            && warned[0].contains("settles from json:/usage/total_token, which no success response of operation createChatCompletion declares"),
        "{}",
        warned[0]
    );
}

/// A model server that answers what cannot be read (not JSON, a count that is not one, nothing
/// at the pointer, malformed events, a 2 MiB event, a stream cut in the middle of an event): the
/// client gets the upstream's bytes unchanged, each pays the bound's `max-cost` (issue 63: the
/// reservation of 40 stood before), and each is counted as unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_read_passes_unchanged_and_pays_max_cost() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &["--admin", "127.0.0.1:0"]);
    let admin = ob.admin().unwrap();
    let post = |base: String, name: &'static str| async move {
        let request = http::Request::post(format!("{base}/v1/bad/{name}"))
            .header("authorization", "Bearer sk-bad")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(r#"{"max_tokens": 40}"#)))
            .unwrap();
        common::send(request).await
    };
    let names = ["not-json", "not-a-count", "missing", "bad-events"];
    for (i, name) in names.into_iter().enumerate() {
        let direct = post(provider.url(), name).await;
        let through = post(ob.url("").trim_end_matches('/').to_string(), name).await;
        assert_eq!(through.status, 200, "{name}");
        assert!(through.body == direct.body, "{name}: the client gets the upstream's bytes");
        let counter = common::get(format!("http://{admin}/counters?bound=bad:0&key=sk-bad")).await.json();
        assert_eq!(counter["remaining"], 1000 - 100 * (i as i64 + 1), "{name}: max-cost, 100, not the 40 reserved");
    }
    let metrics = common::get(format!("http://{admin}/metrics")).await.body;
    assert!(metrics.contains("opbound_settle_unread_total 4\n"), "{metrics}");
    assert!(ob.logged("panicked").is_empty());
}

/// A streamed chat completion whose client did not ask for usage: opbound asks on its behalf
/// (the operation declares `stream_options.include_usage`), charges what the stream reports, and
/// the client gets byte for byte the stream it would have had without opbound. With
/// `--no-ask-usage`, the request goes as it came and, its stream reporting nothing, it pays the
/// bound's `max-cost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_asked_for_on_the_clients_behalf_and_the_client_sees_no_difference() {
    let provider = App::start(&PROVIDER);
    let post = |base: String, key: &'static str| async move {
        let body = r#"{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"7"}]}"#;
        let request = http::Request::post(format!("{base}/v1/chat/completions"))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        common::send(request).await
    };
    let direct = post(provider.url(), "sk-direct").await;
    assert!(!direct.body.contains("usage"), "without asking, no usage: {}", direct.body);
    for (flags, key, left, asked) in
        [(&[][..], "sk-asked", 100 - 17, true), (&["--no-ask-usage"][..], "sk-not-asked", 0, false)]
    {
        let (ob, _state) = serve(&provider, &[&["--admin", "127.0.0.1:0"], flags].concat());
        let through = post(ob.url("").trim_end_matches('/').to_string(), key).await;
        assert_eq!(through.status, 200);
        assert!(through.body == direct.body, "{flags:?}: the same stream:\n{}\n---\n{}", through.body, direct.body);
        assert!(through.header("content-length").is_none());
        let served = served(&provider).await;
        assert_eq!(served["include_usage"].as_array().unwrap().last().unwrap(), asked, "{flags:?}: {served}");
        let url = format!("http://{}/counters?bound=createChatCompletion:1&key={key}&key=m", ob.admin().unwrap());
        // 10 prompt tokens and 7 generated when the usage was read; else max-cost, 100.
        assert_eq!(common::get(url).await.json()["remaining"], left, "{flags:?}");
    }
}

/// A client cannot step out of its per-model counters with a request too long to read: the
/// shipped spec refuses it (`missing: reject`), and with `--max-key-body` past it, it is read
/// and counted on its key and model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_too_long_to_read_is_refused_not_passed_uncounted() {
    let provider = App::start(&PROVIDER);
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/openai-compatible.yaml").display().to_string();
    let padding = "x".repeat(100 * 1024);
    let body = format!(
        r#"{{"model":"m","max_completion_tokens":50,"metadata":{{"pad":"{padding}"}},"messages":[{{"role":"user","content":"3"}}]}}"#
    );
    for (flags, status) in [(&[][..], 400), (&["--max-key-body", "16MiB", "--headers", "models"][..], 200)] {
        let state = TempSpec::new("model-long", "");
        let dir = state.dir().join("state");
        let args = ["serve", "--spec", &shipped, "--upstream", &provider.url(), "--state-dir", dir.to_str().unwrap()];
        let ob = Opbound::start(&[&args[..], flags].concat());
        let request = http::Request::post(ob.url("/v1/chat/completions"))
            .header("authorization", "Bearer sk-long")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let got = common::send(request).await;
        assert_eq!(got.status, status, "{flags:?}: {}", got.body);
        if status == 400 {
            assert!(got.body.contains("missing-key"), "{}", got.body);
        } else {
            // Counted on its key and model: one request, and the 50 tokens it reserved.
            assert_eq!(got.header("x-ratelimit-remaining-requests"), Some("499"));
            assert_eq!(got.header("x-ratelimit-remaining-tokens"), Some("199950"));
        }
    }
}

/// Issue 63: a `stream` other than the literal `true` that pydantic reads as true (`"yes"`,
/// `1`, `"on"`, ...) streamed from a vLLM-like server with no usage, since usage was asked for
/// only on `true`, and the request paid its estimate of 1 token. Asked for on every such
/// spelling, each stream is charged what it used, and the client still gets no usage chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_spelled_as_pydantic_reads_it_is_charged_what_it_used() {
    let provider = App::start(&PROVIDER);
    let (ob, _state) = serve(&provider, &["--headers", "models"]);
    let got = clients("spellings", &ob, "sk-spell").await;
    let spellings = got.as_object().unwrap();
    assert_eq!(spellings.len(), 7, "{got}");
    for (stream, seen) in spellings {
        // 37 content chunks and the one that stops: a stream, as the SDK read it.
        assert_eq!(seen["chunks"], 38, "{stream}: {got}");
        assert_eq!(seen["usage_seen"], 0, "{stream}: the client did not ask for usage: {got}");
        // 47 used, then 1 reserved by the call that reads the head: 100 - 48. On the old code,
        // 1 charged and 98 left.
        assert_eq!(seen["left"], 52, "{stream}: {got}");
    }
    let served = served(&provider).await;
    let asked = served["include_usage"].as_array().unwrap();
    assert!(asked.len() == 7 && asked.iter().all(|a| a == true), "usage asked for each stream: {served}");
}
