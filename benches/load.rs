//! Loading and compiling specs: parse, read the model, validate bounds, build the router.
//!
//! `cargo bench --bench load`. The 13 MB spec is generated (1,200 operations with bounds, and the
//! bulky schemas real specs carry); the real specs in `../shared/specs` are measured too when
//! that folder is present, and an overlay of 10,000 actions over Stripe's. Documents nested
//! 100,000 levels deep and a spec of 200,000 operations are measured to their refusal.

use std::fmt::Write;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opbound::spec::Source;

/// A JSON spec of about `target` bytes with `operations` operations over a third as many paths.
fn synthetic_spec(target: usize, operations: usize) -> String {
    let paths = operations / 3;
    let mut schemas = String::new();
    let mut s = String::with_capacity(target + 1024);
    s.push_str(r#"{"openapi":"3.0.3","info":{"title":"synthetic","version":"1"},"servers":[{"url":"https://api.example.com/v1"}],"#);
    s.push_str(r#""x-rate-limit":[{"name":"perimeter","per":"address","limit":600,"window":"PT1M"}],"paths":{"#);
    for p in 0..paths {
        let template = format!("/resources{}/{{id}}/items/{{itemId}}.json", p % 97);
        let template = if p % 2 == 0 { format!("/r{p}{template}") } else { format!("/r{p}/{{id}}") };
        if p > 0 {
            s.push(',');
        }
        write!(
            s,
            r#""{template}":{{"parameters":[{{"name":"id","in":"path","required":true,"schema":{{"type":"string"}}}}],"#
        )
        .unwrap();
        for (m, method) in ["get", "post", "delete"].iter().enumerate() {
            if m > 0 {
                s.push(',');
            }
            write!(
                s,
                r##""{method}":{{"operationId":"op{p}_{method}","x-rate-limit":[{{"per":"user","limit":{},"window":"PT1M","max-keys":500}}],"requestBody":{{"content":{{"application/json":{{"schema":{{"$ref":"#/components/schemas/S{p}"}}}}}}}},"responses":{{"200":{{"description":"ok","content":{{"application/json":{{"schema":{{"$ref":"#/components/schemas/S{p}"}}}}}}}}}}}}"##,
                10 + m
            )
            .unwrap();
        }
        s.push('}');
    }
    s.push_str(r#"},"components":{"schemas":{"#);
    // Bulky schemas, as real specs have, until the document reaches its size.
    let per_schema = target.saturating_sub(s.len()) / paths.max(1);
    for p in 0..paths {
        schemas.clear();
        let mut i = 0;
        while schemas.len() < per_schema.saturating_sub(120) {
            if i > 0 {
                schemas.push(',');
            }
            write!(schemas, r#""field{i}":{{"type":"string","description":"Field {i} of resource {p}, described at length as real specs do.","maxLength":{}}}"#, 64 + i).unwrap();
            i += 1;
        }
        if p > 0 {
            s.push(',');
        }
        write!(s, r#""S{p}":{{"type":"object","properties":{{{schemas}}}}}"#).unwrap();
    }
    s.push_str("}}}");
    s
}

fn bench_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    let text = synthetic_spec(13 * 1024 * 1024, 1200);
    let source = Source::from_text(Path::new("synthetic.json"), text);
    let ops =
        opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap().policy.operations.len();
    assert_eq!(ops, 1200);
    group.throughput(Throughput::Bytes(source.text.len() as u64));
    group.bench_function(BenchmarkId::new("spec", format!("synthetic 13MB {ops} operations")), |b| {
        b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap())
    });

    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/real");
    for name in ["kubernetes.json", "stripe.json", "openai-3.1.yaml"] {
        let Ok(source) = Source::read(&shared.join(name)) else {
            eprintln!("{name}: not found beside the checkout; skipped");
            continue;
        };
        group.throughput(Throughput::Bytes(source.text.len() as u64));
        group.bench_function(BenchmarkId::new("spec", name), |b| {
            b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap())
        });
    }
    group.finish();
}

/// An overlay (YAML, as people write them) of `n` actions over the operations of `spec`, one
/// after another: bounds set and reset, descriptions written and removed.
fn overlay_of(spec: &serde_json::Value, n: usize) -> String {
    let mut operations = Vec::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_some() {
                operations.push(format!("$.paths['{}'].{method}", path.replace('\\', "\\\\").replace('\'', "\\'")));
            }
        }
    }
    let mut s = String::from("overlay: 1.0.0\ninfo: {title: bench, version: '1'}\nactions:\n");
    for i in 0..n {
        let target = &operations[i % operations.len()];
        match i % 4 {
            0 | 1 => writeln!(
                s,
                "  - target: \"{target}\"\n    update:\n      x-rate-limit: {{per: address, limit: {}, window: PT1M, max-keys: 100}}",
                10 + i % 90
            ),
            2 => writeln!(s, "  - target: \"{target}\"\n    update: {{description: 'Action {i} was here.'}}"),
            _ => writeln!(s, "  - target: \"{target}.description\"\n    remove: true"),
        }
        .unwrap();
    }
    s
}

fn bench_overlay(c: &mut Criterion) {
    let mut group = c.benchmark_group("overlay");
    group.sample_size(10);
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/real/stripe.json");
    let Ok(spec) = Source::read(&shared) else {
        eprintln!("stripe.json: not found beside the checkout; the overlay benchmark is skipped");
        return;
    };
    let tree = spec.parse().unwrap();
    let dir = std::env::temp_dir().join(format!("opbound-bench-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for n in [2_500, 10_000] {
        let text = overlay_of(&tree, n);
        let overlay = opbound::spec::overlay::Overlay::read(Source::from_text(Path::new("limits.yaml"), text.clone()))
            .expect("the overlay reads");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("apply", format!("stripe.json {n} actions")), |b| {
            b.iter(|| {
                let mut applied = opbound::spec::overlay::Applied::default();
                let mut tree = tree.clone();
                overlay.apply(&mut tree, &mut applied).unwrap();
                tree
            })
        });
        // What `check --overlay` does: read both, apply, compile, place the findings.
        let file = dir.join(format!("limits-{n}.yaml"));
        std::fs::write(&file, &text).unwrap();
        let options = opbound::Options { overlays: vec![file], ..Default::default() };
        opbound::policy::load_source(spec.clone(), &options).expect("stripe.json loads with the overlay");
        group.bench_function(BenchmarkId::new("load", format!("stripe.json {n} actions")), |b| {
            b.iter(|| opbound::policy::load_source(spec.clone(), &options).unwrap())
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A document (JSON, which YAML reads too) holding `levels` lists nested in one another.
fn nested(levels: usize) -> String {
    let mut s = String::with_capacity(2 * levels + 64);
    s.push_str("{\"openapi\": \"3.0.3\", \"x-deep\": ");
    s.push_str(&"[".repeat(levels));
    s.push_str(&"]".repeat(levels));
    s.push('}');
    s
}

/// A lean spec of `operations` operations, each with a bound: about 100 bytes each, so that
/// 200,000 are 20 MB, which the fetch cap (32 MB) admits.
fn many_operations(operations: usize) -> String {
    let mut s = String::from(r#"{"openapi":"3.0.3","info":{"title":"many","version":"1"},"paths":{"#);
    for i in 0..operations {
        if i > 0 {
            s.push(',');
        }
        write!(
            s,
            r#""/r{i}/{{id}}":{{"get":{{"operationId":"op{i}","x-rate-limit":[{{"per":"address","limit":5,"window":"PT1M"}}]}}}}"#
        )
        .unwrap();
    }
    s.push_str("}}");
    s
}

/// Refusals: what a hostile or broken input costs before it is turned away.
fn bench_refusals(c: &mut Criterion) {
    let mut group = c.benchmark_group("refuse");
    group.sample_size(10);
    let deep = nested(100_000);
    // JSON served as YAML (a URL ending in .yaml) goes through the YAML parser.
    for name in ["deep.json", "deep.yaml"] {
        let source = Source::from_text(Path::new(name), deep.clone());
        group.bench_function(BenchmarkId::new("nested 100,000 levels", name), |b| {
            b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap_err())
        });
    }
    let many = many_operations(200_000);
    let name = format!("200,000 in {} MB", many.len() >> 20);
    let source = Source::from_text(Path::new("many.json"), many);
    group.bench_function(BenchmarkId::new("operations", name), |b| {
        b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap_err())
    });
    group.finish();
}

criterion_group!(benches, bench_load, bench_overlay, bench_refusals);
criterion_main!(benches);
