//! Issue 54: token limits for model servers, settled from the response body and from event
//! streams, driven by the official `openai` and `anthropic` Python SDKs (from PyPI) against a
//! model server that answers in their wire formats (tests/models/provider.py, FastAPI).

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::Opbound;
use common::apps::{App, Framework};

const PROVIDER: Framework = Framework {
    name: "the model server (FastAPI)",
    program: "python3",
    dir: "tests/models",
    args: &["provider.py"],
    check: &["-c", "import fastapi, uvicorn, openai, anthropic"],
    missing: "fastapi, uvicorn, openai and anthropic are needed (.ci/test installs them with pip)",
};

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
    let ob = Opbound::start(&["serve", "--spec", &spec(), "--upstream", &provider.url()]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_abandoned_before_its_usage_pays_its_reservation() {
    let provider = App::start(&PROVIDER);
    let ob = Opbound::start(&["serve", "--spec", &spec(), "--upstream", &provider.url(), "--admin", "127.0.0.1:0"]);
    let got = clients("abandon", &ob, "sk-abandon").await;
    // 40 reserved and kept by the abandoned stream (nothing or less was reported before the
    // client left), then the next request's reservation of 1: 59 left as its head says. Had the
    // abandoned stream paid nothing (or only what it reported), 99 or more.
    assert_eq!(got["chat"], 59, "{got}");
    assert_eq!(got["messages"], 59, "{got}");
    let metrics = common::get(format!("http://{}/metrics", ob.admin().unwrap())).await.body;
    assert!(metrics.contains("opbound_settle_unread_total 2\n"), "both streams counted as unread: {metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_wait_what_opbound_says_and_then_succeed() {
    let provider = App::start(&PROVIDER);
    let ob = Opbound::start(&["serve", "--spec", &spec(), "--upstream", &provider.url()]);
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
